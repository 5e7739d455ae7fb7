"""HumanEval through `reflexa eval`: refine against one attempt and against fresh samples at equal cost.

    .venv/bin/python bench/humaneval.py [any `reflexa eval` option]

Runs `reflexa eval humaneval` with the coding strategies (single, resample@3, refine, resample@=refine,
refine:reflect=off), its rows, dataset and traces in bench/results/eval/humaneval/, and prints the report as
Markdown. An option given here replaces the bench's own (`--strategies single,refine`, `--out DIR`); the rest
pass through (`--report-only`: the report of the rows so far). `--split tune` is the tuning split, problems
0-39 (`--limit 40`), `--split confirm` the confirming one, 40-163 (`--skip 40`). HumanEval's own tests are
the check the loop sees and the score. Rows are written as they finish and the same command resumes from
them.
"""

from __future__ import annotations

import sys

from _common import eval_bench

if __name__ == "__main__":
    eval_bench("humaneval", "humaneval", sys.argv[1:],
               splits={"tune": ("--limit", "40"), "confirm": ("--skip", "40")})
