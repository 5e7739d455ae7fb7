"""MBPP with hidden tests through `reflexa eval`: the loop sees the first assert, all of them score.

    .venv/bin/python bench/mbpp.py [any `reflexa eval` option]

Runs `reflexa eval mbpp:../shared/data/mbpp/mbpp-py-dev.jsonl` (or $REFLEXA_DATA/mbpp/...), dev 1-300, with
the coding strategies (single, resample@3, refine, resample@=refine, refine:reflect=off), its rows, dataset
and traces in bench/results/eval/mbpp/, and prints the report as Markdown. An option given here replaces the
bench's own, the rest pass through; `--split tune` is the tuning split, dev 1-100 (`--limit 100`), and
`--split confirm` the confirming one, 101-300 (`--skip 100 --limit 200`). A fix that fits the visible assert
and fails the others counts under "visible only". Rows are written as they finish and the same command
resumes from them.
"""

from __future__ import annotations

import sys

from _common import MBPP, eval_bench

if __name__ == "__main__":
    eval_bench(f"mbpp:{MBPP}", "mbpp", sys.argv[1:],
               splits={"tune": ("--limit", "100"), "confirm": ("--skip", "100", "--limit", "200")})
