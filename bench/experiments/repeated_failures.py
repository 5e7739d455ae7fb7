"""Runs in a trace store where the same action failed the same way several times in a row, and how they
ended: what the engine's REPEATED_FAILURES stop (reflect/progress.py) would have cut, read with no model call.

    .venv/bin/python bench/experiments/repeated_failures.py bench/results/faults/gen1.5b-traces.db

Reads the engine's decisions (`engine` steps) of every run; a clean step between two failures ends a streak,
as in the engine. Failures a rule repaired (a retry) are left out, as the stop leaves them out.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # _common, in bench/

from _common import trace_db


def longest_streak(db: sqlite3.Connection, run_id: str) -> int:
    """The most times in a row one action failed the same way in the run, among failures not repaired by
    rule."""
    longest, streak, last = 0, 0, None
    for kind, output in db.execute("SELECT kind, output FROM steps WHERE run_id = ? ORDER BY step_id", (run_id,)):
        data = json.loads(output) if output else {}
        if kind == "engine" and data.get("decision") != "repair":
            failure = (data["action"], data["signal"]["code"], data["signal"]["message"])
            streak = streak + 1 if failure == last else 1
            last, longest = failure, max(longest, streak)
        elif kind == "react" and data.get("ok"):  # a clean step
            streak, last = 0, None
    return longest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("db", type=Path, help="a SQLite trace store (or its .db.xz)")
    parser.add_argument("--times", type=int, default=3, help="a streak this long or longer counts (default 3)")
    args = parser.parse_args()
    with trace_db(args.db) as path:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        runs = db.execute("SELECT run_id, loop, stop_reason FROM runs").fetchall()
        hit = [(run_id, loop, stop) for run_id, loop, stop in runs if longest_streak(db, run_id) >= args.times]
    print(f"{len(runs)} runs; {len(hit)} with one action failing the same way {args.times} or more times in a row")
    for run_id, loop, stop in hit:
        print(f"  {run_id} {loop}: stopped {stop}")


if __name__ == "__main__":
    main()
