"""How long the trace viewer takes to render its pages on a large store (in-process, FastAPI's test client).

    .venv/bin/python bench/speed/ui_pages.py [--runs 1000] [--steps 2000] [--repeats 5]

Builds a store with `--runs` small finished refine runs and one refine run of `--steps` steps (attempts
with 20-line candidates, so every attempt has a diff, and verdicts), then times each page: the median of
`--repeats` requests. Figures from a loaded machine are not comparable: run it alone.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from fastapi.testclient import TestClient

from reflexa import ScriptedModel, Signal, SQLiteStore
from reflexa.loops.refine import Attempt, Checked
from reflexa.runtime import Run
from reflexa.types import Budget, ErrorCode, Role, Status, StopReason, Verdict
from reflexa.ui.app import create_app


def build(path: Path, runs: int, steps: int) -> str:
    store = SQLiteStore(path)
    for i in range(runs):
        run = Run("refine", f"task {i}", ScriptedModel(), budget=Budget(), store=store)
        run.record(Attempt(1, False, "Plan", f"def f():\n    return {i}"), Role.GENERATOR)
        run.finish(StopReason.PASSED, output="x", best="x", verdict=None, iterations=1)
    big = Run("refine", "the big one", ScriptedModel(), budget=Budget(), store=store)
    failing = Verdict(Status.NEEDS_IMPROVEMENT, (Signal("tests", False, ErrorCode.TEST_FAILED, "wrong"),))
    for n in range(steps // 2):
        code = "\n".join(f"    line_{k} = {n if k == n % 20 else k}" for k in range(20))
        big.record(Attempt(n + 1, n > 0, "Plan", f"def f():\n{code}"), Role.GENERATOR)
        big.record(Checked(failing), Role.EVALUATOR)
    big.finish(StopReason.MAX_ITERATIONS, output="x", best="x", verdict=None, iterations=steps // 2)
    store.close()
    return big.run_id


def timed(client: TestClient, url: str, repeats: int) -> tuple[float, int]:
    times, size = [], 0
    for _ in range(repeats):
        start = time.perf_counter()
        response = client.get(url)
        times.append(time.perf_counter() - start)
        assert response.status_code == 200, response.text[:300]
        size = len(response.content)
    return statistics.median(times), size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trace.db"
        started = time.perf_counter()
        big = build(path, args.runs, args.steps)
        print(f"store: {args.runs} runs + one of {args.steps} steps, built in {time.perf_counter() - started:.1f} s")
        client = TestClient(create_app(path))
        pages = [("runs list (200 newest)", "/"), ("runs list sorted by tokens", "/?sort=tokens"),
                 ("runs list, text filter", "/?q=task%2042"), (f"run page, {args.steps} steps", f"/runs/{big}"),
                 ("experience", "/experience"), ("governor", "/governor")]
        for label, url in pages:
            seconds, size = timed(client, url, args.repeats)
            print(f"{label:32} {seconds * 1000:8.1f} ms  {size / 1024:8.0f} KiB")


if __name__ == "__main__":
    main()
