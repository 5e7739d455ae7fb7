"""A soak of `reflexa batch`: many scripted-model tasks, every result present once, no lock errors.

    .venv/bin/python bench/soak/batch_soak.py [--tasks 10000] [--executor ray|local] [--store postgres|sqlite]
                                              [--concurrency 4] [--out bench/results/soak/batch_soak.jsonl]

Each task is a `refine` run with a scripted model that passes at once (one call, a regex check), so the
figures measure the batch machinery and the store, not a model. PostgreSQL is a throwaway server of its
own (Debian's postgresql package, fsync on). Reported: wall time, tasks and store rows per second, and the
checks: one result line per task, one finished run per task, no task failed (a lock error would fail one).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from reflexa.batch import run_batch
from reflexa.trace import open_store


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--executor", choices=["ray", "local"], default="ray")
    parser.add_argument("--store", choices=["postgres", "sqlite"], default="postgres")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--out", type=Path, default=None, help="append the report (JSON) to this file")
    args = parser.parse_args()

    pg = None
    with tempfile.TemporaryDirectory(prefix="reflexa-soak-") as tmp:
        folder = Path(tmp)
        (folder / "replies.json").write_text(json.dumps(["```\nGOOD\n```"]))
        tasks = folder / "tasks.jsonl"
        tasks.write_text("".join(json.dumps({"id": f"t{i}", "task": f"say GOOD {i}", "regex": "GOOD"}) + "\n"
                                 for i in range(args.tasks)))
        if args.store == "postgres":
            from reflexa.trace.pgtemp import TempPostgres

            pg = TempPostgres(durable=True)
            pg.start()
            store = pg.database()
        else:
            store = str(folder / "trace.db")
        try:
            started = time.perf_counter()
            state = run_batch(tasks, "refine", store=store, model=f"scripted:{folder / 'replies.json'}",
                              concurrency=args.concurrency, executor=args.executor if args.executor == "ray"
                              else "threads")
            seconds = time.perf_counter() - started
            results = [json.loads(line) for line in (folder / "tasks.results.jsonl").read_text().splitlines()]
            opened = open_store(store)
            runs = [r for r in opened.runs(args.tasks * 2) if r.meta.get("batch") == state.ident]
            steps = sum(len(opened.steps(r.run_id)) for r in runs[:200]) / max(1, min(200, len(runs)))
            opened.close()
        finally:
            if pg:
                pg.stop()
    keys = [r["key"] for r in results]
    # Rows written per task: the run, its steps, its lease taken and released, its batch record twice.
    rows_per_task = 1 + steps + 2 + 2
    report = {
        "tasks": args.tasks, "executor": args.executor, "store": args.store, "concurrency": args.concurrency,
        "seconds": round(seconds, 2), "tasks_per_second": round(args.tasks / seconds, 1),
        "store_rows_per_second": round(args.tasks * rows_per_task / seconds, 1),
        "results": len(results), "unique_results": len(set(keys)), "finished_runs": len(runs),
        "passed": state.passed, "failed": state.failed, "errors": state.errors[:5],
        "every_result_once": sorted(keys) == sorted(f"t{i}" for i in range(args.tasks)) and len(runs) == args.tasks,
    }
    print(json.dumps(report, indent=2))
    if args.out:
        with args.out.open("a") as fh:
            fh.write(json.dumps(report) + "\n")


if __name__ == "__main__":
    main()
