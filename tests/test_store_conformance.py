"""One suite for every persistent store: SQLite and PostgreSQL must behave alike (append-only migrations,
concurrent writers, resume, keyed records, leases)."""

import multiprocessing
import os
import signal
import time

import pytest
from _pg import pg_server  # noqa: F401 - a fixture

from reflexa import Budget, ScriptedModel, Session, refine
from reflexa.errors import RunInterrupted, RunLeased, StoreError
from reflexa.evaluate.checks import RegexCheck
from reflexa.trace import open_store
from reflexa.trace.store import RunRecord
from reflexa.types import Step, Usage


@pytest.fixture(params=["sqlite", "postgres"])
def target(request, tmp_path):
    """Where a fresh store lives: a SQLite file, or a new database on the test's PostgreSQL server."""
    if request.param == "sqlite":
        return str(tmp_path / "trace.db")
    return request.getfixturevalue("pg_server").database()


@pytest.fixture()
def store(target):
    store = open_store(target)
    yield store
    store.close()


def _migrations(target):
    if target.startswith("postgresql://"):
        from reflexa.trace import postgres

        return postgres
    from reflexa.trace import sqlite

    return sqlite


def _version(store) -> int:
    if hasattr(store, "version"):
        return store.version
    return store.db.execute("PRAGMA user_version").fetchone()[0]


def test_runs_and_steps_round_trip(store):
    store.start_run(RunRecord("r1", "refine", "the task", started_at=1.5, meta={"model": "m", "n": [1, 2]}))
    store.add_step(Step("r1", 1, "model_call", "generator", {"messages": [{"role": "user", "content": "hi"}]},
                        {"text": "ok"}, Usage(3, 4, 1), 1.5, 1.75))
    store.add_step(Step("r1", 2, "stop", None, None, {"stop_reason": "PASSED"}, Usage(), 2.0, 2.0))
    store.finish_run("r1", "PASSED", 3.0, {"output": "ok", "total_usage": {"input_tokens": 3}})
    run = store.get_run("r1")
    assert (run.status, run.stop_reason, run.ended_at) == ("finished", "PASSED", 3.0)
    assert run.meta == {"model": "m", "n": [1, 2]}
    assert run.result["output"] == "ok"
    first, second = store.steps("r1")
    assert first.input["messages"][0]["content"] == "hi" and first.usage == Usage(3, 4, 1)
    assert (first.started_at, first.ended_at, second.role, second.input) == (1.5, 1.75, None, None)
    store.reopen_run("r1")
    assert store.get_run("r1").status == "running" and store.get_run("r1").stop_reason is None


def test_runs_filters_and_literal_prefixes(store):
    for run_id, loop, started in (("ab_1", "refine", 1.0), ("ab%2", "react", 2.0), ("abc3", "refine", 3.0)):
        store.start_run(RunRecord(run_id, loop, "t", started_at=started))
    store.finish_run("ab_1", "PASSED", 4.0, {})
    assert [r.run_id for r in store.runs(loop="refine")] == ["abc3", "ab_1"]
    assert [r.run_id for r in store.runs(status="PASSED")] == ["ab_1"]
    assert [r.run_id for r in store.runs(since=2.0)] == ["abc3", "ab%2"]
    assert [r.run_id for r in store.runs(1)] == ["abc3"]
    assert store.get_run("%") is None and store.find_runs("a_") == [] and store.get_run("ab%").run_id == "ab%2"
    assert len(store.find_runs("ab")) == 2 and store.get_run("ab") is None


def test_strange_text_does_not_fail_a_write(store):
    bad = "a\ud800b\x00c"
    store.start_run(RunRecord("r1", "refine", f"task {bad}", started_at=1.0, meta={bad: bad}))
    store.add_step(Step("r1", 1, "model", "generator", {"prompt": bad}, f"out {bad}"))
    store.put("ns", "key", {"v": bad})
    (step,) = store.steps("r1")
    # JSON keeps a NUL exactly (it is escaped); a plain text column may replace it, never fail.
    assert step.input["prompt"] == "a\ufffdb\x00c" and store.get("ns", "key") == {"v": "a\ufffdb\x00c"}
    assert store.get_run("r1").task in ("task a\ufffdb\x00c", "task a\ufffdb\ufffdc")


def test_numbers_json_cannot_hold_are_stored_as_null(store):
    """An `inf` budget or a NaN score must not fail a write (PostgreSQL refuses them) or leave a row that
    the store's JSON functions refuse later (SQLite's, behind the viewer's run search)."""
    inf = float("inf")
    store.start_run(RunRecord("r1", "refine", "t", started_at=1.0, meta={"budget": {"max_seconds": inf}}))
    store.add_step(Step("r1", 1, "verdict", None, {"score": float("nan")}, {"text": "NaN and Infinity, as words"}))
    store.finish_run("r1", "PASSED", 2.0, {"output": "x", "score": -inf})
    record, (step,) = store.get_run("r1"), store.steps("r1")
    assert record.meta == {"budget": {"max_seconds": None}} and record.result["score"] is None
    assert step.input == {"score": None} and step.output == {"text": "NaN and Infinity, as words"}


def test_a_key_with_a_lone_surrogate_is_found_again(store):
    """Stored under the same replaced key it was written with (a tool argument from a model's reply)."""
    store.put("ns", "name \ud800", {"v": 1})
    assert store.get("ns", "name \ud800") == {"v": 1} and store.items("ns") == [("name \ufffd", {"v": 1})]
    store.delete("ns", "name \ud800")
    assert store.get("ns", "name \ud800") is None


def test_keyed_records(store):
    assert store.get("ns", "k") is None and store.items("ns") == []
    store.put("ns", "b", {"v": 1})
    store.put("ns", "a", {"v": 2})
    store.put("ns", "B", {"v": 3})
    store.put("other", "a", {"v": 4})
    store.put("ns", "a", {"v": 5})  # replaces
    assert store.items("ns") == [("B", {"v": 3}), ("a", {"v": 5}), ("b", {"v": 1})]
    store.delete("ns", "a")
    store.delete("ns", "missing")
    assert [k for k, _ in store.items("ns")] == ["B", "b"] and store.get("other", "a") == {"v": 4}
    assert store.incr("ns", "n", {"hits": 1}) is None and store.get("ns", "n") is None
    assert store.incr("ns", "n", {"hits": 2}, {"hits": 0, "name": "x"}) == {"hits": 2, "name": "x"}
    assert store.incr("ns", "n", {"hits": 1, "cost": 0.5}, assign={"last": 7}) == \
        {"hits": 3, "name": "x", "cost": 0.5, "last": 7} == store.get("ns", "n")
    assert store.update("ns", "missing", lambda d: {"v": 9}) is None and store.get("ns", "missing") is None
    assert store.update("ns", "b", lambda d: None) is None and store.get("ns", "b") == {"v": 1}
    assert store.update("ns", "b", lambda d: {"v": d["v"] + 1}) == {"v": 2} == store.get("ns", "b")


def test_migrations_are_append_only_and_run_once(target, monkeypatch):
    module = _migrations(target)
    first = open_store(target)
    assert _version(first) == len(module.MIGRATIONS)
    first.put("ns", "k", {"v": 1})
    first.close()
    again = open_store(target)  # nothing new: nothing runs again (a CREATE TABLE would fail)
    assert _version(again) == len(module.MIGRATIONS)
    again.close()
    monkeypatch.setattr(module, "MIGRATIONS", [*module.MIGRATIONS, "CREATE TABLE extra (x INTEGER)"])
    upgraded = open_store(target)
    assert _version(upgraded) == len(module.MIGRATIONS) and upgraded.get("ns", "k") == {"v": 1}
    upgraded.close()


def _hammer(target: str, worker: int, rounds: int) -> None:
    store = open_store(target)
    for i in range(rounds):
        store.incr("counts", "shared", {"n": 1}, {"n": 0})
        run_id = f"w{worker}-{i}"
        store.start_run(RunRecord(run_id, "refine", "t", started_at=time.time()))
        store.add_step(Step(run_id, 1, "stop", None, None, {"i": i}))
        store.finish_run(run_id, "PASSED", time.time(), {})
        store.put("seen", run_id, {"worker": worker})
        store.update("cas", "log", lambda d, at=run_id: {"ids": [*d["ids"], at]})
        # The first worker to claim wins; a later claim sees it and writes nothing.
        if store.update("cas", f"claim{i}", lambda d, me=worker: {"owner": me} if d["owner"] is None else None):
            store.put("won", f"{i}:{worker}", {})
    store.close()


def test_concurrent_writers_lose_nothing(target):
    workers, rounds = 4, 25
    ctx = multiprocessing.get_context("spawn")
    seed = open_store(target)
    seed.put("cas", "log", {"ids": []})
    for i in range(rounds):
        seed.put("cas", f"claim{i}", {"owner": None})
    seed.close()
    procs = [ctx.Process(target=_hammer, args=(target, w, rounds)) for w in range(workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * workers
    store = open_store(target)
    assert store.get("counts", "shared") == {"n": workers * rounds}
    assert len(store.items("seen")) == workers * rounds
    assert len(store.runs(1000, status="PASSED")) == workers * rounds
    assert sorted(store.get("cas", "log")["ids"]) == sorted(f"w{w}-{i}" for w in range(workers) for i in range(rounds))
    # Exactly one claim succeeded for each key, the one whose owner is stored.
    won = sorted(tuple(map(int, key.split(":"))) for key, _ in store.items("won"))
    assert won == [(i, store.get("cas", f"claim{i}")["owner"]) for i in range(rounds)]
    store.close()


class _Interrupting(ScriptedModel):
    def __init__(self, replies, after: int) -> None:
        super().__init__(replies)
        self.after = after

    def _generate(self, messages, json_schema, max_tokens, temperature, **kw):
        if self.calls == self.after:
            raise KeyboardInterrupt
        return super()._generate(messages, json_schema, max_tokens, temperature, **kw)


def test_a_run_interrupted_in_one_process_resumes_from_the_store(target):
    lesson = {"failure_step": "a", "observed_mismatch": "b", "root_cause": "c", "correction": "d"}
    check = RegexCheck(r"GOOD")
    store = open_store(target)
    with pytest.raises(RunInterrupted) as stopped:
        refine("say GOOD", [check], session=Session(_Interrupting(["bad", lesson], after=2), store),
               budget=Budget(), max_attempts=3)
    store.close()
    run_id = stopped.value.run_id
    reopened = open_store(target)
    assert reopened.get_run(run_id).status == "interrupted"
    result = refine("say GOOD", [check], session=Session(ScriptedModel(["GOOD"]), reopened), resume=run_id)
    assert result.passed and result.run_id == run_id and result.iterations == 2
    assert reopened.get_run(run_id).stop_reason == "PASSED"
    reopened.close()


def _hold(target: str, ready) -> None:
    open_store(target).acquire_lease("run-1", f"holder-{os.getpid()}", os.getpid())
    ready.set()
    time.sleep(60)


def test_leases_are_exclusive_and_a_killed_holders_is_taken_over(store, target):
    store.acquire_lease("r", "me", os.getpid())
    store.acquire_lease("r", "me", os.getpid())  # renewed
    held = store.lease("r")
    assert (held.owner, held.pid) == ("me", os.getpid()) and store.lease("other") is None
    store.release_lease("r", "me")
    assert store.lease("r") is None
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    holder = ctx.Process(target=_hold, args=(target, ready))
    holder.start()
    try:
        assert ready.wait(60)
        with pytest.raises(RunLeased, match=f"pid {holder.pid}"):
            store.acquire_lease("run-1", "second", os.getpid())
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.join()
    store.acquire_lease("run-1", "second", os.getpid())


def test_an_unreachable_server_is_a_store_error():
    with pytest.raises(StoreError) as failed:
        open_store("postgresql://nobody:secret@127.0.0.1:1/none?connect_timeout=2")
    assert "secret" not in str(failed.value) and failed.value.hint
