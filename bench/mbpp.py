"""MBPP with hidden tests: the loop sees only the first assert, and is scored on all of them, so a fix that
fits the visible test but not the task shows up.

    .venv/bin/python bench/mbpp.py [--problems 100] [--skip 0] [--model local]
                                   [--strategies single,refine,n1,n2] [--ids A,B] [--name NAME]
    .venv/bin/python bench/mbpp.py --strategies refine --name NAME --merge     # a recheck over the full run

Data: ../shared/data/mbpp/mbpp-py-dev.jsonl (or --data, or $REFLEXA_DATA). Problems 1-100 are the tuning
split (the default), 101-300 the confirming one (--skip 100 --problems 300). The task names the visible
test; the hidden ones are the rest of the problem's asserts. Reports visible pass, hidden pass (all asserts)
and the visible-pass-but-hidden-fail count per strategy. Rows go to bench/results/mbpp/rows.jsonl as they
finish (a rerun resumes), the report to report.json beside them (NAME-... with --name).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from _common import DATA as SHARED
from _common import Problem, coding_args, run_coding

from reflexa import CheckContext, PythonScriptCheck

DATA = SHARED / "mbpp" / "mbpp-py-dev.jsonl"


def asserts(test: str) -> list[str]:
    return [line.strip() for line in test.splitlines() if line.strip().startswith("assert ")]


def checks(row: dict) -> tuple[PythonScriptCheck, PythonScriptCheck, str]:
    entry = row["entry_point"]
    tests = [a.replace("candidate(", f"{entry}(") for a in asserts(row["test"])]
    visible = PythonScriptCheck(tests[0] + "\n", name="visible-test")
    hidden = PythonScriptCheck("\n".join(tests) + "\n", name="all-tests")
    return visible, hidden, tests[0]


def problems(path: Path, n: int) -> list[Problem]:
    if not path.is_file():
        raise SystemExit(f"MBPP data not found: {path} (give --data or set REFLEXA_DATA)")
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
    coding_args(parser, "mbpp", problems=100)
    parser.add_argument("--data", type=Path, default=DATA)
    args = parser.parse_args()
    run_coding(args, lambda: problems(args.data, args.problems), {"bench": "mbpp", "visible_tests": 1})


if __name__ == "__main__":
    main()
