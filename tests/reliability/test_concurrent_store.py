"""Many processes write one SQLite store at once: every step and every increment is kept, and none of
them sees "database is locked"."""

import multiprocessing
import os
import traceback

import pytest

from reflexa import ExperienceLibrary, Governor, SQLiteStore
from reflexa.trace.store import RunRecord
from reflexa.types import Lesson, Step

PROCESSES = 32
INCREMENTS = 100
STEPS = 20
OUTCOMES = 25


def _worker(path: str, barrier, errors) -> None:
    try:
        store = SQLiteStore(path)  # on a cold file, every worker races to create and migrate it
        barrier.wait(30)
        run_id = f"run-{os.getpid()}"
        store.start_run(RunRecord(run_id, "refine", "t", started_at=0.0))
        library, governor = ExperienceLibrary(store), Governor(store)
        for i in range(INCREMENTS):
            store.incr("counters", "shared", {"n": 1, "cost": 0.5}, {"n": 0, "cost": 0.0})
            if i < STEPS:
                store.add_step(Step(run_id, i + 1, "model", "generator", {"i": i}, "x" * 200))
            if i < OUTCOMES:
                library.outcome("fp", success=i % 2 == 0)
                library.lookup("fp")
                governor.record("model", "family", "task", retried=True, converted=i % 5 == 0, retry_tokens=10)
        store.close()
    except BaseException:
        errors.put(traceback.format_exc())
        raise


@pytest.mark.parametrize("cold", [False, True], ids=["warm-file", "cold-file"])
def test_processes_writing_at_once_lose_nothing(tmp_path, cold):
    """32 processes x (100 raw increments, 20 steps, 25 experience outcomes and lookups, 25 governor
    records), released together. Cold: they also race to create and migrate the file."""
    path = str(tmp_path / "trace.db")
    if not cold:
        seed = SQLiteStore(path)
        ExperienceLibrary(seed).learn("fp", Lesson("step", "seen", "cause", "fix"))
        seed.close()
    ctx = multiprocessing.get_context("fork")  # spawn re-imports pytest in every child: seconds on 2 cores
    barrier, errors = ctx.Barrier(PROCESSES), ctx.Queue()
    workers = [ctx.Process(target=_worker, args=(path, barrier, errors)) for _ in range(PROCESSES)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    failures = []
    while not errors.empty():
        failures.append(errors.get())
    assert not failures, failures[0]  # "database is locked" would land here
    assert [w.exitcode for w in workers] == [0] * PROCESSES
    store = SQLiteStore(path)
    assert store.get("counters", "shared") == {"n": PROCESSES * INCREMENTS, "cost": PROCESSES * INCREMENTS * 0.5}
    runs = store.runs(limit=1000)
    assert len(runs) == PROCESSES and sum(len(store.steps(r.run_id)) for r in runs) == PROCESSES * STEPS
    stats = Governor(store).stats("model", "family")
    assert (stats.samples, stats.conversions, stats.retry_tokens) == (
        PROCESSES * OUTCOMES,
        PROCESSES * 5,
        PROCESSES * OUTCOMES * 10,
    )
    if not cold:
        (entry,) = ExperienceLibrary(store).entries()
        assert (entry.successes, entry.failures, entry.hits) == (PROCESSES * 13, PROCESSES * 12, PROCESSES * OUTCOMES)
