"""HumanEval through `reflexa eval`: refine against one attempt and against fresh samples at equal cost.

    .venv/bin/python bench/humaneval.py [any `reflexa eval` option]

Runs `reflexa eval humaneval` with the coding strategies (single, resample@3, refine, resample@=refine,
refine:reflect=off), its rows, dataset and traces in bench/results/eval/humaneval/, and prints the report as
Markdown. An option given here replaces the bench's own (`--strategies single,refine`, `--out DIR`); the rest
pass through (`--limit 40` is the tuning split, `--skip 40` the confirming one, `--report-only` the report of
the rows so far). HumanEval's own tests are the check the loop sees and the score. Rows are written as they
finish and the same command resumes from them.
"""

from __future__ import annotations

import sys

from _common import eval_bench

if __name__ == "__main__":
    eval_bench("humaneval", "humaneval", sys.argv[1:])
