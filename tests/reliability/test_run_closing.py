"""A run's life in the store: always closed, whatever ends it and whenever (a Ctrl-C just after a step's
commit, a tool that calls sys.exit, a checkpoint this version cannot read); its lease kept while it works;
its time budget carried across a resume. Found by a bug hunt; each failed before."""

import functools
import os
import signal
import time

import pytest

from reflexa import (
    Budget,
    ExperienceLibrary,
    Lesson,
    MemoryStore,
    RegexCheck,
    ScriptedModel,
    Session,
    SQLiteStore,
    refine,
)
from reflexa.errors import ConfigError, RunInterrupted
from reflexa.reflect.engine import experience_key
from reflexa.types import ErrorCode, Signal


class InterruptAfterCommit(SQLiteStore):
    """Raises KeyboardInterrupt right after step 3 is committed: where the CLI's Ctrl-C (an exception
    delivered into the run's thread) lands when it arrives while the INSERT runs in C."""

    def add_step(self, step):
        super().add_step(step)
        if step.step_id == 3 and step.kind != "stop":
            raise KeyboardInterrupt


def test_a_ctrl_c_just_after_a_commit_still_closes_the_run(tmp_path):
    store = InterruptAfterCommit(tmp_path / "t.db")
    with pytest.raises(RunInterrupted):
        refine("say GOOD", [RegexCheck("GOOD")], max_attempts=3,
               session=Session(model=ScriptedModel(default="BAD"), store=store))
    (record,) = store.runs(1)
    steps = store.steps(record.run_id)
    assert record.status == "interrupted" and steps[-1].kind == "stop"
    assert [s.step_id for s in steps] == list(range(1, len(steps) + 1))
    assert store.lease(record.run_id) is None


class Exits:
    name, subjective = "exits", False

    def run(self, candidate, context):
        raise SystemExit(2)  # pytest.main()-style code inside a user's check


def test_a_check_that_calls_sys_exit_still_closes_the_run():
    store = MemoryStore()
    with pytest.raises(SystemExit):
        refine("t", [Exits()], session=Session(model=ScriptedModel(default="x"), store=store))
    (record,) = store.runs(1)
    assert record.status == "finished" and record.stop_reason == "ERROR"
    assert store.steps(record.run_id)[-1].kind == "stop" and store.lease(record.run_id) is None


class Terminated:
    name, subjective = "terminated", False

    def run(self, candidate, context):
        os.kill(os.getpid(), signal.SIGTERM)  # Ray stopping its worker mid-task (its driver died)
        time.sleep(5)


def test_a_stopped_ray_worker_leaves_its_run_to_be_resumed_not_ended():
    """Ray's worker turns SIGTERM into SystemExit, which a run takes for a check that called sys.exit; under
    `stoppable` the run lets go of its lease instead, and a resume finishes it."""
    from reflexa.executors.ray import stoppable

    def like_ray(signum, frame):
        raise SystemExit(1)

    store = MemoryStore()
    previous = signal.signal(signal.SIGTERM, like_ray)
    try:
        with pytest.raises(SystemExit):
            stoppable(functools.partial(refine, session=Session(model=ScriptedModel(default="x"), store=store)),
                      "t", [Terminated()])
        assert signal.getsignal(signal.SIGTERM) is like_ray
    finally:
        signal.signal(signal.SIGTERM, previous)
    (record,) = store.runs(1)
    assert record.status == "running" and store.lease(record.run_id) is None
    result = refine("t", [RegexCheck("x")], resume=record.run_id,
                    session=Session(model=ScriptedModel(default="x"), store=store))
    assert result.passed and store.runs(1)[0].status == "finished"


def test_the_lease_is_held_until_the_run_is_closed():
    """Released after the stop step and the result are written, never before: in between, the run would
    look abandoned and a resume elsewhere could take it over."""
    events: list[str] = []

    class Watched(MemoryStore):
        def add_step(self, step):
            events.append(step.kind)
            super().add_step(step)

        def finish_run(self, *args, **kwargs):
            events.append("finish_run")
            super().finish_run(*args, **kwargs)

        def release_lease(self, run_id, owner):
            events.append("release")
            super().release_lease(run_id, owner)

    refine("say GOOD", [RegexCheck("GOOD")], session=Session(model=ScriptedModel(["GOOD"]), store=Watched()))
    assert events[-3:] == ["stop", "finish_run", "release"] and events.count("release") == 1


FAIL = Signal("c", False, ErrorCode.TEST_FAILED, "expected a greeting")


class GreetingCheck:
    name, subjective = "c", False

    def __init__(self, interrupt_on: int | None = None) -> None:
        self.calls, self.interrupt_on = 0, interrupt_on

    def run(self, candidate, context):
        self.calls += 1
        if self.calls == self.interrupt_on:
            raise KeyboardInterrupt
        return FAIL if "hello" not in candidate else Signal("c", True, score=1.0)


def test_an_interrupted_run_does_not_count_against_the_lessons_it_used():
    store = MemoryStore()
    library = ExperienceLibrary(store)
    key = experience_key(FAIL, "greet")
    library.learn(key, Lesson("attempt", "no greeting", "forgot it", "say hello"))
    session = Session(model=ScriptedModel(["hi", "hi there", "hello"]), store=store, experience=library)
    with pytest.raises(RunInterrupted) as stopped:
        refine("greet", [GreetingCheck(interrupt_on=2)], session=session, max_attempts=3)
    entry = store.get("experience", key)
    assert (entry["successes"], entry["failures"]) == (0, 0) and library.lookup(key) is not None
    resumed = refine("greet", [GreetingCheck()], session=session, max_attempts=3, resume=stopped.value.run_id)
    entry = store.get("experience", key)
    assert resumed.passed and (entry["successes"], entry["failures"]) == (1, 0)


def test_a_checkpoint_this_version_cannot_read_is_a_clear_error_and_frees_the_run(tmp_path):
    store = SQLiteStore(tmp_path / "t.db")
    with pytest.raises(RunInterrupted) as stopped:
        refine("greet", [GreetingCheck(interrupt_on=2)], max_attempts=3, budget=Budget(max_reflections=0),
               session=Session(model=ScriptedModel(["hi", "hi there"]), store=store))
    run_id = stopped.value.run_id
    # What a checkpoint of an incompatible version looks like: a field of another type.
    store.db.execute("UPDATE steps SET output = json_set(output, '$.state.attempts', 'two') "
                     "WHERE kind = 'checkpoint'")
    store.db.commit()
    with pytest.raises(ConfigError, match="checkpoint cannot be read"):
        refine("greet", [GreetingCheck()], session=Session(model=ScriptedModel(["hello"]), store=store),
               resume=run_id)
    assert store.lease(run_id) is None


def test_a_working_run_renews_its_lease():
    """Every quarter of the store's lease TTL, at the next step: a lease held from another host is taken
    for abandoned once its TTL passes unrenewed, and a run may work for longer than that."""
    from reflexa import Budget
    from reflexa.runtime import Run, Stop
    from reflexa.types import StopReason

    store = MemoryStore(lease_ttl=0.04)
    run = Run("refine", "t", ScriptedModel([]), budget=Budget(), store=store)
    taken = store.lease(run.run_id).renewed_at
    time.sleep(0.02)
    run.record(Stop(StopReason.PASSED, None))
    assert store.lease(run.run_id).renewed_at > taken


def test_a_resumed_run_s_time_budget_counts_what_its_steps_took_before():
    from reflexa import Budget
    from reflexa.runtime import ModelCall, Run

    store = MemoryStore()
    first = Run("refine", "t", ScriptedModel([]), budget=Budget(max_seconds=60), store=store)
    first.record(ModelCall("slow"), "generator", started_at=time.time() - 45)  # a 45 s call
    store.release_lease(first.run_id, first.owner)  # killed
    resumed = Run("refine", "t", ScriptedModel([]), budget=Budget(max_seconds=60), store=store, resume=first.run_id)
    assert 44 < resumed.meter.elapsed < 50 and resumed.meter.remaining().max_seconds < 16


def test_a_react_run_killed_after_its_accepted_answer_resumes_to_its_end():
    """Its final answer (validated) was stored, its stop step not: the resume ends the run with that answer
    rather than asking the model for more."""
    from reflexa import react, tool

    class Killed(BaseException):
        pass

    class KilledBeforeTheStop(MemoryStore):
        armed = True

        def add_step(self, step):
            if self.armed and step.kind == "stop":
                raise Killed
            super().add_step(step)

    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        return "400 orders"

    def act(name, **args):
        return {"action": {"thought": "t", "tool": name, "args": args, "confidence": 0.9}}

    store = KilledBeforeTheStop()
    validator = lambda answer: None if answer == "400" else "wrong"  # noqa: E731
    with pytest.raises(Killed):
        react("How many orders?", [lookup], validator=validator, session=Session(
            model=ScriptedModel([act("lookup", key="orders"), act("final_answer", answer="400")]), store=store))
    store.armed = False
    (record,) = store.runs(1)
    again = ScriptedModel([act("final_answer", answer="999")])
    result = react("How many orders?", [lookup], validator=validator, resume=record.run_id,
                   session=Session(model=again, store=store))
    assert result.passed and result.output == "400" and again.calls == 0
