"""How `refine` converts an MBPP failure: each attempt (fresh or revising), its verdict and the engine's decision.

    .venv/bin/python bench/trace_conversions.py mbpp_420_cube_Sum,mbpp_555_difference [--db traces.db]

Runs `refine` (the attempts bench/mbpp.py gives it) on the given problems with a SQLite trace and prints
each run's steps: whether the attempt that passed was a revision with a lesson or a sampled fresh one.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import mbpp
from coding import ATTEMPTS

from reflexa import Session, SQLiteStore, refine, resolve_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ids", help="MBPP problem names, comma-separated")
    parser.add_argument("--model", default="local")
    parser.add_argument("--db", help="keep the traces in this SQLite file (default: a temporary one)")
    args = parser.parse_args()
    ids = set(args.ids.split(","))
    chosen = [p for p in mbpp.problems(mbpp.DATA, sys.maxsize) if p.id in ids]
    if unknown := ids - {p.id for p in chosen}:
        raise SystemExit(f"no such MBPP problem: {', '.join(sorted(unknown))} (names as in {mbpp.DATA.name})")
    db = args.db or str(Path(tempfile.mkdtemp()) / "traces.db")
    model, store = resolve_model(args.model), SQLiteStore(db)
    for p in chosen:
        result = refine(p.task, [p.check], session=Session(model=model, store=store), max_attempts=ATTEMPTS,
                        family="coding")
        print(f"== {p.id} {result.stop_reason} hidden tests pass: {p.score(result.best or '')}")
        for step in store.steps(result.run_id):
            data = step.payload()
            if step.kind == "attempt":
                print(f"  attempt {data.iteration}", "revising" if data.revising else "fresh")
            elif step.kind == "verdict":
                message = data.verdict.failing[0].message[:120] if data.verdict.failing else ""
                print(f"  verdict {data.verdict.status} {message}")
            elif step.kind == "engine":
                print(f"  engine {data.decision}: {data.reason[:100]}")
            elif step.kind in ("flag", "no_progress"):
                print(f"  {step.kind}: {data.why[:150]}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
