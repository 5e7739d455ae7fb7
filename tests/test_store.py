import multiprocessing
import sqlite3

from reflexa import Budget, ScriptedModel, Session, SQLiteStore, refine
from reflexa.trace.sqlite import MIGRATIONS
from reflexa.trace.store import RunRecord
from reflexa.types import Signal, Step, Usage


def test_sqlite_store_uses_wal_and_migrates(tmp_path):
    store = SQLiteStore(tmp_path / "t.db")
    assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store.db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    store.close()
    SQLiteStore(tmp_path / "t.db").close()  # reopening does not re-run migrations


def test_runs_and_steps_round_trip(tmp_path):
    store = SQLiteStore(tmp_path / "t.db")
    store.start_run(RunRecord("abc123", "refine", "task", started_at=1.0, meta={"model": "m"}))
    store.add_step(Step("abc123", 1, "verdict", "evaluator", {"x": 1}, Signal("s", True), Usage(3, 4, 1), 1.0, 2.0))
    store.finish_run("abc123", "PASSED", 3.0, {"ok": True})
    assert store.get_run("abc").stop_reason == "PASSED"
    (step,) = store.steps("abc123")
    assert step.output["source"] == "s" and step.usage.total_tokens == 7


def _write_steps(path: str, run_id: str) -> None:
    store = SQLiteStore(path)
    for i in range(1, 51):
        store.add_step(Step(run_id, i, "k", None, None, None))


def test_two_processes_write_at_once(tmp_path):
    path = str(tmp_path / "t.db")
    store = SQLiteStore(path)
    for run_id in ("a", "b"):
        store.start_run(RunRecord(run_id, "refine", "t", started_at=0))
    procs = [multiprocessing.get_context("spawn").Process(target=_write_steps, args=(path, r)) for r in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    assert len(store.steps("a")) == len(store.steps("b")) == 50


def test_each_step_is_committed_before_the_next_starts(tmp_path):
    path = tmp_path / "t.db"
    seen = []

    def observer(event, data):
        if event == "step":
            # A second connection sees the step at once: it is committed, not buffered.
            other = sqlite3.connect(path)
            seen.append(other.execute("SELECT count(*) FROM steps").fetchone()[0])
            other.close()

    model = ScriptedModel(["```\nok\n```"])

    class Always:
        name, subjective = "always", False

        def run(self, candidate, context):
            return Signal("always", True, score=1.0)

    refine(
        "task", [Always()], budget=Budget(), session=Session(model=model, store=SQLiteStore(path), observer=observer)
    )
    assert seen == list(range(1, len(seen) + 1))


def test_unwritable_store_is_a_store_error(tmp_path):
    from reflexa.errors import StoreError

    blocker = tmp_path / "file"
    blocker.write_text("x")
    try:
        SQLiteStore(blocker / "sub" / "t.db")
    except StoreError as exc:
        assert exc.hint
    else:
        raise AssertionError("expected StoreError")
