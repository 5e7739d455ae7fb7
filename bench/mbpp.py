"""MBPP with hidden tests: the loop sees only the first assert, and is scored on all of them, so a fix that
fits the visible test but not the task shows up.

    .venv/bin/python bench/mbpp.py [--problems 100] [--model local] [--strategies single,refine,n1,n2] [--ids A,B]

Data: ../shared/data/mbpp/mbpp-py-dev.jsonl (or --data). The task names the visible test; the hidden ones
are the rest of the problem's asserts. Reports visible pass, hidden pass (all asserts) and the
visible-pass-but-hidden-fail count per strategy. Rows resume from bench/results/mbpp-rows.jsonl.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from coding import Problem, bench

from reflexa import CheckContext, PythonScriptCheck, resolve_model

RESULTS = Path(__file__).parent / "results"
DATA = Path(__file__).parent.parent.parent / "shared" / "data" / "mbpp" / "mbpp-py-dev.jsonl"


def asserts(test: str) -> list[str]:
    return [line.strip() for line in test.splitlines() if line.strip().startswith("assert ")]


def checks(row: dict) -> tuple[PythonScriptCheck, PythonScriptCheck, str]:
    entry = row["entry_point"]
    tests = [a.replace("candidate(", f"{entry}(") for a in asserts(row["test"])]
    visible = PythonScriptCheck(tests[0] + "\n", name="visible-test")
    hidden = PythonScriptCheck("\n".join(tests) + "\n", name="all-tests")
    return visible, hidden, tests[0]


def problems(path: Path, n: int) -> list[Problem]:
    out = []
    for line in path.read_text().splitlines()[:n]:
        row = json.loads(line)
        visible, hidden, example = checks(row)
        imports = "\n".join(x for x in row["prompt"].splitlines() if x.startswith(("import ", "from ")))
        task = (
            f"Complete this Python function. Give the whole function.\n```python\n{row['prompt']}```\n"
            f"It must pass this test:\n```python\n{example}\n```"
        )
        prefix = imports + "\n" if imports else ""

        def complete(candidate: str, prefix: str = prefix) -> str:
            return prefix + candidate

        out.append(
            Problem(
                row["name"],
                task,
                Prefixed(visible, complete),
                lambda c, hidden=hidden, complete=complete: hidden.run(complete(c), CheckContext()).ok,
            )
        )
    return out


class Prefixed:
    """A check that adds the prompt's imports to the candidate first, as the harness does for HumanEval."""

    subjective = False

    def __init__(self, inner: PythonScriptCheck, complete) -> None:
        self.inner, self.complete, self.name = inner, complete, inner.name

    def run(self, candidate: str, context: CheckContext):
        return self.inner.run(self.complete(candidate), context)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=100)
    parser.add_argument("--model", default="local")
    parser.add_argument("--reflector-model", default=None, help="the reflector's own model, for refine-reflector")
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--strategies", default="single,refine,n1,n2")
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--ids", default="", help="only these task ids, comma-separated (a recheck subset)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="folder for the rows and the report")
    parser.add_argument("--name", default="mbpp", help="file stem under bench/results/")
    parser.add_argument("--skip", type=int, default=0, help="start after this many problems (a second process "
                        "on the other core can take the later ones; both append to the same rows file)")
    args = parser.parse_args()
    if not args.data.is_file():
        raise SystemExit(f"MBPP data not found: {args.data} (give --data)")
    model = resolve_model(args.model)
    reflector = resolve_model(args.reflector_model) if args.reflector_model else None
    report = bench(
        [p for p in problems(args.data, args.problems)[args.skip:] if not args.ids or p.id in args.ids.split(",")],
        model,
        args.strategies.split(","),
        args.results / f"{args.name}-rows.jsonl",
        args.results / f"{args.name}.json",
        args.max_tokens,
        {"model": model.name, "bench": "mbpp", "visible_tests": 1,
         **({"reflector_model": reflector.name} if reflector else {})},
        reflector,
    )
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
