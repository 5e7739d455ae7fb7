"""HumanEval through `reflexa eval`: refine against one attempt and against fresh samples at equal cost.

    .venv/bin/python bench/humaneval.py [any `reflexa eval` option]

Runs `reflexa eval humaneval` with the coding strategies (single, resample@3, refine, resample@=refine,
refine:reflect=off), its rows, dataset and traces in bench/results/eval/humaneval/, and prints the report as
Markdown. An option given here replaces the bench's own (`--strategies single,refine`, `--out DIR`); the rest
pass through (`--report-only`: the report of the rows so far). `--split tune` is the tuning split, problems
0-39 (`--limit 40`), `--split confirm` the confirming one, 40-163 (`--skip 40`). HumanEval's own tests are
the check the loop sees and the score; with `--plus`, the score adds HumanEval+'s extra inputs
(bench/data/humanevalplus.jsonl.gz), so a solution that passes only HumanEval's own tests is counted as such.
Rows are written as they finish and the same command resumes from them.
"""

from __future__ import annotations

import sys
from pathlib import Path

from _common import eval_bench

PLUS = Path(__file__).parent / "data" / "humanevalplus.jsonl.gz"

if __name__ == "__main__":
    plus = "--plus" in sys.argv
    eval_bench(f"humaneval+:{PLUS}" if plus else "humaneval", "humanevalplus" if plus else "humaneval",
               [arg for arg in sys.argv[1:] if arg != "--plus"],
               splits={"tune": ("--limit", "40"), "confirm": ("--skip", "40")})
