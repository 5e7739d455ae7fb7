"""Which of `refine`'s attempts converted a first-attempt failure, and what a third attempt costs: read from
the runs a coding eval stored, so nothing is run again.

    .venv/bin/python bench/experiments/attempts.py humaneval --skip 40
    .venv/bin/python bench/experiments/attempts.py mbpp --skip 100 --limit 200

For each task of the split whose first attempt failed its visible check, the attempt that ended `refine`'s
run (a revision told how the last attempt failed, or a fresh attempt) and whether its answer passed the score.
`refine` with two attempts is its run cut after the second attempt's verdict: attempts one and two do not
depend on how many follow (the prompt names no count), so the cut is exact for solved and tokens. Reads
bench/results/eval/BENCH/rows.jsonl and the traces.db beside it, which the bench writes when it runs (it is
not committed: run the bench on a fresh checkout first).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # _common, in bench/

from _common import eval_split, open_traces, split_args

from reflexa.eval.stats import mcnemar


def attempts(db: sqlite3.Connection, run_id: str) -> list[tuple[str, int]]:
    """Each attempt of a stored refine run: its kind (first; revision; fresh, a sample or a new start after
    a FAIL) and the run's tokens so far, counted to the end of that attempt's verdict."""
    spent, tried = 0, []
    for kind, output, tokens in db.execute("SELECT kind, output, input_tokens + output_tokens FROM steps "
                                           "WHERE run_id = ? ORDER BY step_id", (run_id,)):
        spent += tokens
        if kind == "attempt":
            attempt = json.loads(output)
            tried.append(["first" if attempt["iteration"] == 1 else "revision" if attempt["revising"] else "fresh",
                          spent])
        elif kind == "verdict" and tried:
            tried[-1][1] = spent
    return [(kind, spent) for kind, spent in tried]


def candidates(db: sqlite3.Connection, run_id: str) -> list[str]:
    """The candidates of a stored refine run's attempts, in order."""
    return [json.loads(output)["candidate"] for (output,) in db.execute(
        "SELECT output FROM steps WHERE run_id = ? AND kind = 'attempt' ORDER BY step_id", (run_id,))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    split_args(parser)
    parser.add_argument("--strategy", default="refine")
    args = parser.parse_args()
    folder, split, rows = eval_split(args)
    split = [task for task in split if (task, args.strategy) in rows]  # the tasks the eval has run so far
    db = open_traces(folder / "traces.db")
    ended_by: Counter[tuple[int, str, str]] = Counter()
    two = {"solved": 0, "tokens": 0, "lost": 0}
    full = {"solved": 0, "tokens": 0}
    for task in split:
        row = rows[(task, args.strategy)]
        full["solved"] += row["passed"]
        full["tokens"] += row["tokens"]
        tried = attempts(db, row["run_ids"][0])
        if len(tried) < 2:  # the first attempt passed its check (or the run stopped before a second)
            two["solved"] += row["passed"]
            two["tokens"] += row["tokens"]
            continue
        ended_by[(len(tried), tried[-1][0], "solved" if row["passed"] else "not solved")] += 1
        cut_solved = row["passed"] and len(tried) == 2
        two["solved"] += cut_solved
        two["lost"] += row["passed"] and not cut_solved
        two["tokens"] += tried[1][1] if len(tried) > 2 else row["tokens"]
    print(f"{args.bench} tasks {args.skip + 1}-{args.skip + len(split)} ({len(split)}), {args.strategy}:")
    for (attempt, kind, result), count in sorted(ended_by.items()):
        print(f"  first attempt failed, run ended on attempt {attempt} ({kind}), {result}: {count}")
    print(f"  {args.strategy}: {full['solved']} solved, {full['tokens'] / len(split):.1f} tokens/task")
    print(f"  cut after two attempts: {two['solved']} solved, {two['tokens'] / len(split):.1f} tokens/task "
          f"({two['tokens'] / full['tokens']:.2f}x); the third attempt solved {two['lost']}, exact McNemar "
          f"p = {mcnemar(0, two['lost']):.3g}")


if __name__ == "__main__":
    main()
