"""Scores the answers an eval stored against another dataset's score, with no model call: how many of a run's
solutions hold on stricter tests (HumanEval+), and how many passed only the check the loop saw.

    .venv/bin/python bench/rescore.py ROWS DATASET OUT

ROWS is an eval's rows.jsonl; DATASET any `reflexa eval` dataset with the same task ids (e.g.
humaneval+:bench/data/humanevalplus.jsonl.gz); OUT a JSON Lines file of each row's new verdict, written as
they finish and resumed from. Prints a Markdown table by strategy: solved on the recorded score, on the new
one, and visible-only (passed the loop's visible check, fails the new score).
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from reflexa.eval.dataset import read_dataset  # noqa: E402
from reflexa.eval.score import scored  # noqa: E402


def main(rows_path: Path, dataset: str, out: Path) -> None:
    rows = [json.loads(line) for line in rows_path.read_text().splitlines() if line.strip()]
    with tempfile.TemporaryDirectory() as scratch:
        tasks = {task.id: task for task in read_dataset(dataset, Path(scratch))}
        done = {v["key"]: v for v in map(json.loads, out.read_text().splitlines())} if out.exists() else {}
        with out.open("a") as sink:
            for row in rows:
                if row["key"] in done or row["task"] not in tasks:
                    continue
                verdict = {"key": row["key"], "task": row["task"], "strategy": row["strategy"],
                           "visible": row["visible"], "passed": row["passed"],
                           "rescored": scored(tasks[row["task"]], row["answer"], row["visible"])}
                sink.write(json.dumps(verdict) + "\n")
                sink.flush()
                done[row["key"]] = verdict
    by: dict[str, list[dict[str, bool]]] = defaultdict(list)
    for verdict in done.values():
        by[verdict["strategy"]].append(verdict)
    print("| strategy | tasks | solved (recorded score) | solved (new score) | visible-only (new score) |")
    print("| --- | --- | --- | --- | --- |")
    for strategy, verdicts in by.items():
        print(f"| {strategy} | {len(verdicts)} | {sum(v['passed'] for v in verdicts)} | "
              f"{sum(v['rescored'] for v in verdicts)} | {sum(v['visible'] and not v['rescored'] for v in verdicts)} |")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]))
