import multiprocessing
import os
import signal
import sqlite3
import time

import pytest

from reflexa import Budget, MemoryStore, ScriptedModel, Session, SQLiteStore, refine
from reflexa.errors import RunLeased
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


def test_another_program_s_database_is_refused_and_left_as_it_was(tmp_path):
    from reflexa.errors import StoreError

    path = tmp_path / "shop.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE orders (id INTEGER)")
    db.execute("PRAGMA user_version=1")
    db.commit()
    db.close()
    before = path.read_bytes()
    with pytest.raises(StoreError, match="not a reflexa trace store"):
        SQLiteStore(path)
    assert path.read_bytes() == before and not (tmp_path / "shop.sqlite-wal").exists()


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


# --- text that is storable, literal prefixes, filters --------------------------------------------------


@pytest.fixture(params=["memory", "sqlite"])
def store(request, tmp_path):
    store = MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "t.db")
    yield store
    store.close()


def test_lone_surrogates_do_not_fail_a_write(store):
    bad = "a\ud800b"
    store.start_run(RunRecord("r1", "refine", f"task {bad}", started_at=1.0, meta={bad: bad}))
    store.add_step(Step("r1", 1, "model", "generator", {"prompt": bad, bad: [bad]}, f"out {bad}\udfff"))
    store.put("ns", f"key{bad}", {"v": bad})
    (step,) = store.steps("r1")
    assert step.input["prompt"] == "a\ufffdb" and step.output == "out a\ufffdb\ufffd"
    assert store.get_run("r1").task == "task a\ufffdb"
    assert store.get("ns", "key" + "a\ufffdb") == {"v": "a\ufffdb"}
    store.add_step(Step("r1", 2, "model", None, "\ud83d\ude00", None))  # a valid pair is kept as its character
    assert store.steps("r1")[1].input == "\U0001F600"


def test_id_prefixes_match_literally(store):
    for run_id in ("ab_1", "ab%2", "abc3"):
        store.start_run(RunRecord(run_id, "refine", "t", started_at=1.0))
    assert store.get_run("%") is None and store.get_run("_") is None and store.get_run("a_") is None
    assert store.find_runs("%") == [] and store.find_runs("a%") == []
    assert store.get_run("ab_").run_id == "ab_1" and store.get_run("ab%").run_id == "ab%2"
    assert len(store.find_runs("ab")) == 2 and store.get_run("ab") is None  # ambiguous
    assert [r.run_id for r in store.find_runs("abc")] == ["abc3"]


def test_runs_filters(store):
    store.start_run(RunRecord("a", "refine", "t", started_at=1.0))
    store.start_run(RunRecord("b", "react", "t", started_at=2.0))
    store.start_run(RunRecord("c", "refine", "t", started_at=3.0))
    store.finish_run("a", "PASSED", 4.0, {})
    assert [r.run_id for r in store.runs(loop="refine")] == ["c", "a"]
    assert [r.run_id for r in store.runs(status="PASSED")] == ["a"]
    assert [r.run_id for r in store.runs(status="running")] == ["c", "b"]
    assert [r.run_id for r in store.runs(since=2.0)] == ["c", "b"]
    assert [r.run_id for r in store.runs(1, loop="refine", status="running")] == ["c"]


def test_incr(store):
    assert store.incr("ns", "k", {"hits": 1}) is None and store.get("ns", "k") is None  # no defaults: stays missing
    assert store.incr("ns", "k", {"hits": 2}, {"hits": 0, "name": "x"}) == {"hits": 2, "name": "x"}
    value = store.incr("ns", "k", {"hits": 1, "cost": 0.5}, assign={"last": 7})
    assert value == {"hits": 3, "name": "x", "cost": 0.5, "last": 7} == store.get("ns", "k")


# --- leases ----------------------------------------------------------------------------------------------

def test_lease_is_exclusive_renewable_and_released(store):
    store.acquire_lease("r", "me", os.getpid())
    store.acquire_lease("r", "me", os.getpid())  # the same owner renews
    sleeper = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(30,))
    sleeper.start()
    try:
        with pytest.raises(RunLeased):
            store.acquire_lease("r", "other", sleeper.pid)  # I am alive, so "other" may not take it
        store.release_lease("r", "other")  # not its lease: nothing happens
        with pytest.raises(RunLeased) as refused:
            store.acquire_lease("r", "other", sleeper.pid)
        assert str(os.getpid()) in str(refused.value) and refused.value.pid == os.getpid()
        store.release_lease("r", "me")
        store.acquire_lease("r", "other", sleeper.pid)
    finally:
        sleeper.kill()
        sleeper.join()


def _hold(path: str, ready) -> None:
    SQLiteStore(path).acquire_lease("run-1", f"holder-{os.getpid()}", os.getpid())
    ready.set()
    time.sleep(60)


def test_a_second_process_is_refused_and_a_killed_holders_lease_is_taken_over(tmp_path):
    path = str(tmp_path / "t.db")
    store = SQLiteStore(path)
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    holder = ctx.Process(target=_hold, args=(path, ready))
    holder.start()
    try:
        assert ready.wait(30)
        with pytest.raises(RunLeased) as refused:
            store.acquire_lease("run-1", "second", os.getpid())
        message = str(refused.value)
        assert f"pid {holder.pid}" in message and "since" in message and refused.value.hint
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.join()
    store.acquire_lease("run-1", "second", os.getpid())  # the holder is gone: its lease is stale
    row = store.db.execute("SELECT owner, pid FROM leases WHERE run_id='run-1'").fetchone()
    assert tuple(row) == ("second", os.getpid())


def test_a_lease_from_another_host_is_stale_only_after_the_ttl(tmp_path):
    store = SQLiteStore(tmp_path / "t.db", lease_ttl=60)
    now = time.time()
    store.db.execute("INSERT INTO leases VALUES ('r', 'far', 1, 'elsewhere', NULL, ?, ?)", (now, now - 10))
    with pytest.raises(RunLeased, match="elsewhere"):
        store.acquire_lease("r", "me", os.getpid())
    store.db.execute("UPDATE leases SET renewed_at = ?", (now - 61,))
    store.acquire_lease("r", "me", os.getpid())


def test_a_reused_pid_does_not_keep_a_lease(tmp_path):
    store = SQLiteStore(tmp_path / "t.db")
    from reflexa.trace.store import HOST

    # Our own pid, but a start time that is not ours: the process that took the lease is gone.
    store.db.execute("INSERT INTO leases VALUES ('r', 'old', ?, ?, 1, 0, 0)", (os.getpid(), HOST))
    store.acquire_lease("r", "me", os.getpid())


def test_opening_a_new_file_waits_out_a_reader_that_blocks_the_wal_switch(tmp_path, monkeypatch):
    import threading

    import reflexa.trace.sqlite as sqlite_module

    monkeypatch.setattr(sqlite_module, "BUSY_TIMEOUT_MS", 100)
    path = tmp_path / "t.db"
    reader = sqlite3.connect(path, isolation_level=None, check_same_thread=False)  # rollback-journal mode
    reader.execute("PRAGMA user_version=0")  # the file exists, still without a table: a store being made
    reader.execute("BEGIN")
    reader.execute("SELECT * FROM sqlite_master").fetchall()  # holds a shared lock: no WAL switch until it ends
    threading.Timer(0.4, lambda: reader.execute("COMMIT")).start()
    store = SQLiteStore(path)  # one busy timeout would fail ("database is locked"); the retries succeed
    assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_malformed_postgres_url_is_one_error_with_its_password_hidden():
    """urllib could not parse it, so redacting it for the message raised; psycopg's own message quotes it."""
    from reflexa.errors import StoreError
    from reflexa.trace.open import open_store
    from reflexa.trace.postgres import redact

    assert redact("postgresql://me:p@ss@host:5/db") == "postgresql://me:***@host:5/db"
    assert redact("postgresql://host/db") == "postgresql://host/db"
    with pytest.raises(StoreError) as refused:
        open_store("postgresql://me:hunter2@[::1/db")
    assert "hunter2" not in str(refused.value) and "me:***@" in str(refused.value)
