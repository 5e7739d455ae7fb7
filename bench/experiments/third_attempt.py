"""`refine`'s third attempt: a fresh sample (the fixed rule) against a second revision (`refine:repairs=revise`),
on the tasks where the two differ.

    REFLEXA_THREADS=1 .venv/bin/python bench/experiments/third_attempt.py humaneval --skip 40 -c 2
    REFLEXA_THREADS=1 .venv/bin/python bench/experiments/third_attempt.py mbpp --skip 100 --limit 200 -c 2

Both are greedy and alike up to the second attempt's verdict, so they differ only on the tasks where `refine`'s
stored run went on to a third attempt after a failed revision. The script runs `refine:repairs=revise` on those
tasks alone, as an eval of its own (bench/results/experiments/third_attempt/BENCH/, resumable; other options
pass through to the bench), checks that its first two attempts are `refine`'s, and compares the two on those
tasks: solved, tokens, and the exact McNemar p-value. Where the first two attempts match on every task, the
whole split's figure for `refine:repairs=revise` is `refine`'s with those tasks' results swapped. Reads
bench/results/eval/BENCH/rows.jsonl and its traces.db (not committed: run the bench first).
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # _common, in bench/

from _common import RESULTS, eval_split, open_traces, read_rows, run_subset, split_args
from attempts import attempts, candidates

from reflexa.eval.stats import mcnemar

ABLATION = "refine:repairs=revise"


def differing(db: sqlite3.Connection, split: list[str], rows: dict[tuple[str, str], dict[str, Any]]) -> list[str]:
    """The tasks whose stored refine run went on to a third attempt after a failed revision."""
    return [task for task in split
            if [kind for kind, _ in attempts(db, rows[(task, "refine")]["run_ids"][0])][1:3] == ["revision", "fresh"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    split_args(parser)
    parser.add_argument("--ablation-out", type=Path, help="the ablation's eval folder "
                        "(default: bench/results/experiments/third_attempt/BENCH)")
    args, passed_on = parser.parse_known_args()
    folder, split, rows = eval_split(args)
    split = [task for task in split if (task, "refine") in rows]  # the tasks the eval has run so far
    db = open_traces(folder / "traces.db")
    differ = differing(db, split, rows)
    if not differ:
        sys.exit(f"{args.bench}: no task of the split went on to a third attempt after a failed revision")
    out = args.ablation_out or RESULTS / "experiments" / "third_attempt" / args.bench
    run_subset(args.bench, ABLATION, differ, out, passed_on)
    ablated = {r["task"]: r for r in read_rows(out / "rows.jsonl") if r["strategy"] == ABLATION}
    ablation_db = open_traces(out / "traces.db")
    same_start = sum(candidates(db, rows[(t, "refine")]["run_ids"][0])[:2]
                     == candidates(ablation_db, ablated[t]["run_ids"][0])[:2] for t in differ)
    sample = {t for t in differ if rows[(t, "refine")]["passed"]}
    revise = {t for t in differ if ablated[t]["passed"]}
    tokens = sum(rows[(t, "refine")]["tokens"] for t in differ), sum(ablated[t]["tokens"] for t in differ)
    solved = sum(rows[(t, "refine")]["passed"] for t in split)
    print(f"{args.bench} tasks {args.skip + 1}-{args.skip + len(split)} ({len(split)}): refine went on to a third "
          f"attempt after a failed revision on {len(differ)}; the first two attempts are the same in both runs on "
          f"{same_start}")
    print(f"  refine (a fresh sample third): {len(sample)} solved, {tokens[0]} tokens")
    print(f"  {ABLATION} (a second revision third): {len(revise)} solved, {tokens[1]} tokens "
          f"({tokens[1] / max(tokens[0], 1):.2f}x)")
    print(f"  only the sample: {len(sample - revise)}, only the revision: {len(revise - sample)}, exact McNemar "
          f"p = {mcnemar(len(sample - revise), len(revise - sample)):.3g}")
    print(f"  the whole split: refine {solved} solved, {ABLATION} {solved - len(sample) + len(revise)}")


if __name__ == "__main__":
    main()
