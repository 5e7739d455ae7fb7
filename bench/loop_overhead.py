"""Per-iteration overhead of `refine` with a zero-latency scripted model, and the cost of `import reflexa`.

    .venv/bin/python bench/loop_overhead.py [--iterations 2000] [--repeats 5]

Side by side on the same machine: the bare-Python reference loop from FACTS.md (one SQLite commit per
step under synchronous=FULL), so the figures can be read as ratios. Targets: <= 350 µs per iteration with
the SQLite store on; `import reflexa` <= 150 ms.
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import statistics
import string
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from reflexa import Budget, MemoryStore, ScriptedModel, Session, Signal, SQLiteStore, refine
from reflexa.types import ErrorCode


def word(rng: random.Random) -> str:
    # Letters only: fingerprints fold digits, and each failure must look new or the loop stops early.
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(12))


class NeverPasses:
    """Fails every candidate with a fresh message, so the loop runs to max_iterations. The messages are
    made before the clock starts, so the benchmark times the loop, not itself."""

    name, subjective = "bench", False

    def __init__(self, iterations: int) -> None:
        rng = random.Random(1)
        self.signals = iter(
            [Signal("bench", False, ErrorCode.TEST_FAILED, f"miss {word(rng)}", score=0.5) for _ in range(iterations)]
        )

    def run(self, candidate: str, context: object) -> Signal:
        return next(self.signals)


def time_refine(iterations: int, store_kind: str, explain: bool) -> float:
    rng = random.Random(0)
    replies: list = []
    for _ in range(iterations):
        replies.append(f"Plan: go\n```\n{word(rng)}\n```")
        if explain:
            replies.append(
                {
                    "failure_step": "attempt",
                    "observed_mismatch": f"miss {word(rng)}",
                    "root_cause": word(rng),
                    "correction": word(rng),
                }
            )
    model = ScriptedModel(replies)
    with tempfile.TemporaryDirectory() as tmp:
        store = {"sqlite": lambda: SQLiteStore(Path(tmp) / "b.db"), "memory": MemoryStore}[store_kind]()
        check = NeverPasses(iterations)
        started = time.perf_counter()
        result = refine(
            "bench task",
            [check],
            explain=explain,
            budget=Budget(max_reflections=iterations if explain else 0),
            session=Session(model=model, store=store),
            max_attempts=iterations,
        )
        elapsed = time.perf_counter() - started
    assert result.iterations == iterations, result.stop_reason
    return elapsed / iterations * 1e6


def time_reference(iterations: int, steps_per_iteration: int) -> float:
    """FACTS.md's reference: a plain loop with one fully-synced SQLite commit per step."""
    with tempfile.TemporaryDirectory() as tmp:
        db = sqlite3.connect(Path(tmp) / "r.db", isolation_level=None)
        db.execute("PRAGMA synchronous=FULL")
        db.execute("CREATE TABLE s (i INTEGER, payload TEXT)")
        started = time.perf_counter()
        for i in range(iterations):
            for _ in range(steps_per_iteration):
                db.execute("INSERT INTO s VALUES (?, ?)", (i, "x" * 200))
        return (time.perf_counter() - started) / iterations * 1e6


def import_ms(repeats: int) -> float:
    times = []
    for _ in range(repeats):
        out = subprocess.run(
            [
                sys.executable,
                "-c",
                "import time; t = time.perf_counter(); import reflexa; print((time.perf_counter() - t) * 1000)",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        times.append(float(out.stdout))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rows = []
    for store in ("sqlite", "memory"):
        for explain in (False, True):
            runs = [time_refine(args.iterations, store, explain) for _ in range(args.repeats)]
            rows.append((f"refine, {store} store, explain={explain}", statistics.median(runs)))
    rows.append(
        (
            "reference (FACTS.md): bare loop, one FULL-synced commit per step",
            statistics.median(time_reference(args.iterations, 1) for _ in range(args.repeats)),
        )
    )
    print(f"{'case':60s} {'µs/iteration':>14s}")
    for name, micros in rows:
        print(f"{name:60s} {micros:14.0f}")
    print(
        f"{'import reflexa (median of ' + str(args.repeats * 2) + ' fresh processes), ms':60s} "
        f"{import_ms(args.repeats * 2):14.1f}"
    )


if __name__ == "__main__":
    main()
