import json
import os
import time
from dataclasses import replace

import pytest

from reflexa import Budget, MemoryStore, ScriptedModel, Session, StopReason
from reflexa.loops import react, refine, trials
from reflexa.loops import react_prompts as prompts
from reflexa.reflect import ExperienceLibrary
from reflexa.tools import ToolError, ToolRegistry, ToolSession, sql_tools, tool
from reflexa.types import ErrorCode, Signal

WORDS = iter(f"thought {a}{b}" for a in "abcdefghijklmnopqrstuvwxyz" for b in "abcdefghijklmnopqrstuvwxyz")


def act(tool_name, thought=None, confidence=0.9, **args):
    # Distinct thoughts by default: a repeated thought is itself a failure signal.
    return {"action": {"thought": thought or next(WORDS), "tool": tool_name, "args": args, "confidence": confidence}}


def final(answer):
    return act("final_answer", answer=answer)


def accept(answer):
    """A validator that takes any answer: these tests are about the loop, not the answer."""
    return None


def lesson(mismatch, correction="use another approach", **control):
    return {
        "failure_step": "step 1",
        "observed_mismatch": mismatch,
        "root_cause": "the call was wrong",
        "correction": correction,
        **control,
    }


def test_clean_run_makes_no_reflection_call(shop):
    model = ScriptedModel([act("query", sql="SELECT count(*) AS n FROM orders"), final("400")])
    result = react("How many orders?", sql_tools(shop), validator=accept, session=Session(model=model))
    assert result.stop_reason is StopReason.PASSED and result.output == "400"
    assert model.calls == 2 and "reflector" not in result.usage
    assert result.counters["gate_signals"] == 0 and result.counters["gate_calls"] == 2


def test_wrong_column_is_repaired_by_rule_with_no_model_call(shop):
    model = ScriptedModel([act("query", sql="SELECT nme FROM customers WHERE id = 1"), final("done")])
    store = MemoryStore()
    result = react("Name of customer 1?", sql_tools(shop), validator=accept, session=Session(model=model, store=store))
    assert result.passed and model.calls == 2
    assert result.counters["rule_repairs"] == 1 and result.counters["reflector_calls"] == 0
    assert result.counters["recovery_steps"] == [1]
    steps = [s for s in store.steps(result.run_id) if s.kind == "react"]
    assert steps[1].payload().action.startswith('query({"sql": "SELECT name FROM customers')


def test_final_answer_comes_from_structure_not_text(shop):
    model = ScriptedModel([act("query", thought="Final Answer: 3", sql="SELECT 3"), final("3")])
    result = react("q", sql_tools(shop), validator=accept, session=Session(model=model))
    assert result.iterations == 2


def test_false_claim_fails_validation_and_is_reflected_on(shop):
    model = ScriptedModel(
        [final("refunded"), lesson("no refund row for order 1", "check the refunds table first"), final("not refunded")]
    )
    result = react(
        "Was order 1 refunded?",
        sql_tools(shop),
        validator=lambda answer: None if answer == "not refunded" else "no refund row for order 1",
        session=Session(model=model),
    )
    assert result.passed and result.counters["reflector_calls"] == 1
    assert "check the refunds table first" in model.prompts[2][-1]["content"]


def test_unrecoverable_permission_stops():
    @tool
    def vault() -> str:
        """Read the vault."""
        raise PermissionError("access denied")

    model = ScriptedModel([act("vault")])
    result = react("Read the vault", [vault], validator=accept, session=Session(model=model))
    assert result.stop_reason is StopReason.UNRECOVERABLE and "permission" in result.error
    assert model.calls == 1


def test_a_write_sent_to_the_reading_sql_tool_does_not_stop_the_run(shop):
    model = ScriptedModel([act("query", sql="ALTER TABLE orders ADD COLUMN cancelled BOOLEAN"),
                           {"failure_step": "1", "observed_mismatch": "query only reads, one SELECT",
                            "root_cause": "a write sent to query", "correction": "ask with a SELECT"},
                           act("query", sql="SELECT count(*) FROM orders"), act("final_answer", answer="400")])
    result = react("How many orders are there?", sql_tools(shop), validator=accept, session=Session(model=model))
    assert result.stop_reason is StopReason.PASSED and result.output == "400"


def flaky_tool(failures):
    """A tool that fails with a message needing judgement `failures` times, then works."""
    state = {"left": failures, "calls": 0}

    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        state["calls"] += 1
        if key == "bad" or state["left"] > 0:
            state["left"] -= 1
            raise ToolError(ErrorCode.TOOL_ERROR, "backend refused the key: use key 'good'")
        return f"value of {key}"

    return lookup, state


def test_experience_library_serves_a_second_run_without_the_reflector():
    store = MemoryStore()
    library = ExperienceLibrary(store)
    lookup, _ = flaky_tool(0)
    first = ScriptedModel(
        [
            act("lookup", key="bad"),
            lesson("backend refused key bad", "use key good"),
            act("lookup", key="good"),
            final("value of good"),
        ]
    )
    r1 = react("find it", [lookup], validator=accept, session=Session(model=first, store=store, experience=library))
    assert r1.passed and r1.counters["reflector_calls"] == 1 and r1.counters["experience_misses"] == 1
    second = ScriptedModel([act("lookup", key="bad"), act("lookup", key="good"), final("value of good")])
    r2 = react("find it", [lookup], validator=accept, session=Session(model=second, store=store, experience=library))
    assert r2.passed and r2.counters["experience_hits"] == 1 and r2.counters["reflector_calls"] == 0
    assert "reflector" not in r2.usage
    assert "use key good" in second.prompts[1][-1]["content"]
    (entry,) = library.entries()
    assert entry.hits == 1 and entry.successes == 2


def test_only_a_tool_s_own_failures_share_a_repair_across_goals():
    """A tool's error is repaired alike whatever the goal; a repeated thought, low confidence or an empty
    final answer reads the same for every goal, so its repair is kept to its own goal."""
    from reflexa.reflect.engine import experience_key

    def keys(signal):
        return {experience_key(signal, goal) for goal in ("How many orders?", "Refund order 17")}

    assert len(keys(Signal("tool:query", False, ErrorCode.NOT_FOUND, "no such table: ordrs"))) == 1
    for signal in (Signal("tool:final_answer", False, ErrorCode.EMPTY, "the final answer is empty"),
                   Signal("tool:lookup", False, ErrorCode.REPEATED, "repeated thought"),
                   Signal("tool:lookup", False, ErrorCode.LOW_CONFIDENCE, "confidence 0.1"),
                   Signal("trial", False, ErrorCode.TEST_FAILED, "trial ended max_iterations")):
        assert len(keys(signal)) == 2, signal


def test_a_full_library_keeps_the_lesson_it_just_learnt():
    """The newest entry has no successes yet, so it ranks lowest: eviction must pick among the others."""
    from reflexa import Lesson

    library = ExperienceLibrary(MemoryStore(), capacity=3)
    for name in ("a", "b", "c"):
        library.learn(name, Lesson("step", "m", "c", f"repair {name}"))
        library.outcome(name, True)
    library.learn("new", Lesson("step", "m", "c", "repair new"))
    assert len(library.entries()) == 3 and library.lookup("new") is not None


def test_a_rejected_answer_s_lesson_is_served_to_its_own_goal_only():
    # The validator's message is the same for every question; the repair learnt on one is not another's.
    library = ExperienceLibrary(MemoryStore())

    def only(right):
        return lambda answer: None if answer == right else "the answer does not match the database"

    def run(goal, right, replies):
        model = ScriptedModel(replies)
        return react(goal, [], validator=only(right), session=Session(model=model, experience=library)), model

    learnt, _ = run("How many orders?", "400",
                    [final("40"), lesson("the answer 40 does not match", "count every order: 400"), final("400")])
    assert learnt.passed and learnt.counters["reflector_calls"] == 1
    other, _ = run("What does the tent cost?", "210",
                   [final("12"), lesson("the answer 12 does not match", "read the price: 210"), final("210")])
    assert other.counters["experience_hits"] == 0 and other.counters["reflector_calls"] == 1
    again, model = run("How many  orders?", "400", [final("40"), final("400")])
    assert again.passed and again.counters["experience_hits"] == 1 and again.counters["reflector_calls"] == 0
    assert "count every order: 400" in model.prompts[1][-1]["content"]
    assert len(library.entries()) == 2


def test_failing_repair_is_demoted_at_its_second_miss():
    store = MemoryStore()
    library = ExperienceLibrary(store)
    library.learn("fp", __import__("reflexa").Lesson("s", "m", "c", "fix"))
    library.outcome("fp", False)
    assert library.lookup("fp") is not None  # one miss may be the model's: a second try
    library.outcome("fp", False)
    assert library.lookup("fp") is None
    library.learn("ok", __import__("reflexa").Lesson("s", "m", "c", "fix"))
    for success in (True, False, False):
        library.outcome("ok", success)
    assert library.lookup("ok") is not None  # 1 success, 2 failures: one short of the margin
    library.outcome("ok", False)
    assert library.lookup("ok") is None


def test_same_error_after_reflection_stops_with_no_progress():
    lookup, _ = flaky_tool(10)
    model = ScriptedModel(
        [
            act("lookup", key="a"),
            lesson("backend refused key a", "use key good"),
            act("lookup", key="b", thought="other"),
        ]
    )
    result = react("find it", [lookup], validator=accept, session=Session(model=model))
    assert result.stop_reason is StopReason.NO_PROGRESS and model.calls == 3


def test_the_same_call_failing_the_same_way_three_times_stops_when_no_reflection_is_left():
    lookup, state = flaky_tool(10)
    model = ScriptedModel([act("lookup", key="a") for _ in range(8)])
    result = react("find it", [lookup], budget=Budget(max_reflections=0), validator=accept,
                   session=Session(model=model))
    assert result.stop_reason is StopReason.NO_PROGRESS and state["calls"] == 3
    assert "3 times in a row" in result.error


def test_a_discarded_lesson_does_not_let_the_same_failing_call_spin():
    lookup, state = flaky_tool(10)
    model = ScriptedModel(generator=[act("lookup", key="a") for _ in range(8)],
                          reflector=['{"insufficient_evidence": true}'] * 8)
    result = react("find it", [lookup], validator=accept, session=Session(model=model))
    assert result.stop_reason is StopReason.NO_PROGRESS and state["calls"] == 3


def test_a_failing_call_retried_with_other_arguments_is_progress():
    lookup, state = flaky_tool(3)
    model = ScriptedModel([act("lookup", key="a"), act("lookup", key="a"), act("lookup", key="b"),
                           act("lookup", key="a"), final("value of a")])
    result = react("find it", [lookup], budget=Budget(max_reflections=0), validator=accept,
                   session=Session(model=model))
    assert result.stop_reason is StopReason.PASSED and state["calls"] == 4


def test_correction_equal_to_the_failing_action_stops():
    lookup, _ = flaky_tool(10)
    model = ScriptedModel([act("lookup", key="a"), lesson("backend refused key a", 'lookup({"key": "a"})')])
    result = react("find it", [lookup], validator=accept, session=Session(model=model))
    assert result.stop_reason is StopReason.NO_PROGRESS


def test_blocked_tool_stays_blocked():
    """A lesson's block: the tool is left out of every later step's action schema, and a call of it that
    arrives anyway (a loose reply the registry parses) is refused without running."""
    lookup, state = flaky_tool(1)

    @tool
    def other() -> str:
        return "other value"

    model = ScriptedModel(
        [
            act("lookup", key="a"),
            lesson("backend refused key a", "stop using lookup", control="block_tool", control_tool="lookup"),
            act("other", thought="fine"),
            final("other value"),
        ]
    )
    result = react("find it", [lookup, other], budget=Budget(max_reflections=1), validator=accept,
                   session=Session(model=model), max_steps=8)
    assert result.passed and state["calls"] == 1
    offered = [[branch["properties"]["tool"]["const"] for branch in schema["properties"]["action"]["anyOf"]]
               for schema in model.schemas if schema and "action" in schema.get("properties", {})]
    assert "lookup" in offered[0] and all("lookup" not in tools for tools in offered[1:])
    session = ToolSession(ToolRegistry([lookup, other]))
    session.blocks.tools.add("lookup")
    refused = session.call("lookup", {"key": "good"})
    assert refused.code is ErrorCode.BLOCKED and state["calls"] == 1


def test_reflection_quota():
    calls = {"n": 0}

    @tool
    def fragile(key: str) -> str:
        calls["n"] += 1
        raise ToolError(ErrorCode.TOOL_ERROR, f"failure number {'abc'[calls['n'] % 3]}{key}")

    model = ScriptedModel(
        [
            act("fragile", key="x"),
            lesson("failure number", "try y"),
            act("fragile", key="y", thought="t2"),
            lesson("failure number", "try z"),
            act("fragile", key="z", thought="t3"),
            act("fragile", key="w", thought="t4"),
        ]
    )
    result = react(
        "q", [fragile], budget=Budget(max_reflections=2), validator=accept, session=Session(model=model), max_steps=4
    )
    assert result.counters["reflector_calls"] == 2 and result.counters["quota_skips"] >= 1


def test_a_repeated_read_only_call_is_pointed_out_by_rule_and_any_tool_may_follow():
    """The repeat's result is in the facts: the next prompt says so, and the model may answer or call another
    tool (a different tool is never refused, as the answer-only schema once refused it)."""
    lookup, _ = flaky_tool(0)

    @tool
    def other(key: str) -> str:
        """Another lookup."""
        return f"other {key}"

    model = ScriptedModel([act("lookup", key="good"), act("lookup", key="good"), act("other", key="good"),
                           final("value of good")])
    store = MemoryStore()
    result = react("find it", [lookup, other], validator=accept, session=Session(model=model, store=store))
    assert result.passed and result.counters["gate_signals"] == 1
    assert result.counters["rule_repairs"] == 1 and result.counters["reflector_calls"] == 0
    pointed = [s for s in store.steps(result.run_id) if s.kind == "model_call"][2]
    assert "repeated an earlier one" in pointed.input["messages"][-1]["content"]
    acted = [s.payload() for s in store.steps(result.run_id) if s.kind == "react"]
    assert acted[2].action == 'other({"key": "good"})' and acted[2].ok


def test_circling_back_to_a_call_already_pointed_out_gets_one_answer_step_then_stops():
    """The step after a repeat may not call that tool (its schema leaves it out); the same call after that
    gets one step that may only answer from the facts; an answer the validator refuses, and the same call
    once more, stop the run."""
    lookup, _ = flaky_tool(0)

    @tool
    def other(key: str) -> str:
        """Another lookup."""
        return f"other {key}"

    replies = iter([act("lookup", key="good"), act("lookup", key="good"), act("other", key="x"),
                    act("lookup", key="good"), final("not it"), act("lookup", key="good")])
    schemas, notes = [], []

    def reply(call):
        if call.role == "reflector":
            return {"failure_step": "5", "observed_mismatch": "refused", "root_cause": "wrong value",
                    "correction": "use the lookup"}
        schemas.append(json.dumps(call.schema))
        notes.append(call.messages[-1]["content"])
        return next(replies)

    model = ScriptedModel(function=reply)
    refuse = lambda answer: "not the answer"  # noqa: E731
    result = react("find it", [lookup, other], validator=refuse, session=Session(model=model), max_steps=8)
    assert '"lookup"' not in schemas[2] and '"other"' in schemas[2] and '"lookup"' in schemas[3]
    assert '"lookup"' not in schemas[4] and '"other"' not in schemas[4]  # answer only
    assert notes[4].endswith(prompts.ANSWER_NOW)
    assert result.stop_reason is StopReason.NO_PROGRESS


def test_the_answer_step_after_circling_can_pass():
    lookup, _ = flaky_tool(0)
    model = ScriptedModel([act("lookup", key="good"), act("lookup", key="good"), act("lookup", key="good"),
                           final("value of good")])
    result = react("find it", [lookup], validator=accept, session=Session(model=model), max_steps=8)
    assert result.passed and result.output == "value of good"


def test_low_confidence_is_a_signal():
    lookup, _ = flaky_tool(0)
    model = ScriptedModel([act("lookup", key="good", confidence=0.1), lesson("lookup", "be sure"), final("x")])
    result = react("find it", [lookup], validator=accept, session=Session(model=model))
    assert result.counters["gate_signals"] == 1


def test_timeout_is_retried_once_by_rule():
    state = {"n": 0}

    @tool(timeout=0.2)
    def slow() -> str:
        state["n"] += 1
        if state["n"] == 1:
            import time

            time.sleep(1)
        return "answer"

    model = ScriptedModel([act("slow"), final("answer")])
    result = react("q", [slow], validator=accept, session=Session(model=model))
    assert result.passed and result.counters["rule_repairs"] == 1 and model.calls == 2


def test_truncated_observation_is_paged_by_rule():
    @tool(max_chars=50)
    def dump() -> str:
        return "".join(f"row{i};" for i in range(30))

    model = ScriptedModel([act("dump"), final("done")])
    store = MemoryStore()
    result = react("q", [dump], validator=accept, session=Session(model=model, store=store))
    assert result.passed and result.counters["rule_repairs"] == 1 and model.calls == 2
    actions = [s.payload().action for s in store.steps(result.run_id) if s.kind == "react"]
    assert actions[1] == "page 1 of dump"


def test_a_truncated_call_repeated_after_its_page_is_asked_for_the_answer_not_paged_again():
    @tool(max_chars=50)
    def dump() -> str:
        return "x" * 100 + "total=7"

    model = ScriptedModel([act("dump"), act("dump"), final("7")])
    store = MemoryStore()
    result = react("q", [dump], validator=accept, session=Session(model=model, store=store))
    assert result.passed and result.counters["rule_repairs"] == 2
    steps = [s.payload() for s in store.steps(result.run_id) if s.kind == "react"]
    assert [p.action for p in steps][:3] == ["dump({})", "page 1 of dump", "dump({})"]
    assert "total=7" in steps[0].observation  # the first view keeps the end, where the result is
    decisions = [s.payload().reason for s in store.steps(result.run_id) if s.kind == "engine"]
    assert decisions == ["truncated observation: show the next page",
                         "a repeated read-only call: its result is in the facts"]


def test_a_truncated_output_s_ends_stay_in_facts_after_its_page():
    """The step that cut a long output raised a signal, but what it returned is still data: its ends (where
    the result often is) become a fact, so the page that follows cannot push the result out of view."""
    @tool(max_chars=50)
    def dump() -> str:
        return "-- noise " + "x" * 100 + " total=7"

    model = ScriptedModel([act("dump"), final("7")])
    react("q", [dump], validator=accept, session=Session(model=model))
    facts = model.prompts[1][-1]["content"].split("Recent steps:")[0]  # the prompt after the page
    assert "Facts:" in facts and "total=7" in facts


def test_a_transient_error_is_retried_by_rule_and_the_retries_notes_are_no_repeated_thought(monkeypatch):
    import importlib

    monkeypatch.setattr(importlib.import_module("reflexa.reflect.classify"), "TIMEOUT_BACKOFF", 0.0)
    calls = []

    @tool
    def stock() -> str:
        calls.append(1)
        if len(calls) <= 2:
            raise ToolError(ErrorCode.TOOL_ERROR, "database is busy (lock held by a backup); call again")
        return "stock=5"

    model = ScriptedModel([act("stock"), final("5")])
    store = MemoryStore()
    result = react("How many in stock?", [stock], validator=accept, session=Session(model=model, store=store))
    # Two retries by rule and no model call for them; the third call's result is a clean step (the two
    # identical "(rule: retry after a pause)" notes are not a repeated thought) and becomes a fact.
    assert result.passed and len(calls) == 3 and model.calls == 2
    assert result.counters["rule_repairs"] == 2 and result.counters["gate_signals"] == 2
    assert result.counters["reflector_calls"] == 0
    assert "stock=5" in model.prompts[-1][-1]["content"]
    assert "busy" not in model.prompts[-1][-1]["content"]  # the fixed failures left the window


def test_a_repaired_value_replaces_its_failure_in_the_window():
    @tool
    def city_count(city: str) -> str:
        if city != "Lisbon":
            raise ToolError(ErrorCode.NOT_FOUND, f"no city {city!r}", suggestion={"city": "Lisbon"})
        return "count=3"

    model = ScriptedModel([act("city_count", city="Lisboa"), final("3")])
    result = react("How many in Lisbon?", [city_count], validator=accept, session=Session(model=model))
    prompt = model.prompts[-1][-1]["content"]
    assert result.passed and result.counters["rule_repairs"] == 1 and model.calls == 2
    assert "count=3" in prompt and "Lisboa" not in prompt


def test_the_last_step_may_only_answer_once_facts_are_known():
    """A tool called on the last step could never be read: with facts in hand, the model is asked for the
    answer instead. With nothing known yet, it is asked as on any step."""
    lookup, _ = flaky_tool(0)
    model = ScriptedModel([act("lookup", key="good"), final("value of good")])
    result = react("find it", [lookup], validator=accept, session=Session(model=model), max_steps=2)
    assert result.passed and model.prompts[1][-1]["content"].endswith(prompts.LAST_STEP)
    assert model.schemas[1] == prompts.answer_schema() and model.schemas[0] != prompts.answer_schema()
    alone = ScriptedModel([act("lookup", key="good")])
    react("find it", [lookup], validator=accept, session=Session(model=alone), max_steps=1)
    assert alone.schemas[0] != prompts.answer_schema()


def test_a_repair_queued_for_the_last_step_gives_way_to_the_answer():
    """A page (or a retry) on the last step would be read by no one: with the cut output's ends already a
    fact, the model is asked for the answer instead."""
    @tool(max_chars=50)
    def dump() -> str:
        return "-- noise " + "x" * 100 + " total=7"

    model = ScriptedModel([act("dump"), final("7")])
    store = MemoryStore()
    result = react("q", [dump], validator=accept, session=Session(model=model, store=store), max_steps=2)
    actions = [s.payload().action for s in store.steps(result.run_id) if s.kind == "react"]
    assert result.passed and actions == ["dump({})", 'final_answer({"answer": "7"})']
    assert model.prompts[1][-1]["content"].endswith(prompts.LAST_STEP)


class Crash(BaseException):
    """Stands in for the process being killed."""


def test_killed_run_resumes_without_repeating_a_side_effect(tmp_path):
    from reflexa import SQLiteStore

    charges = []

    @tool(side_effect=True)
    def charge(amount: int) -> str:
        """Charge the customer."""
        charges.append(amount)
        return f"charged {amount}"

    path = tmp_path / "trace.db"

    def killer(event, data):
        if event == "step" and data.kind == "react":
            raise Crash()

    model = ScriptedModel([act("charge", amount=5)])
    with pytest.raises(Crash):
        react(
            "charge 5",
            [charge],
            validator=accept,
            session=Session(model=model, store=SQLiteStore(path), observer=killer),
        )
    run_id = SQLiteStore(path).runs()[0].run_id
    # The kill came after the charge and its step were stored; the resumed run must go on from there.
    resumed = ScriptedModel([final("charged 5")])
    result = react(
        "charge 5", [charge], resume=run_id, validator=accept, session=Session(model=resumed, store=SQLiteStore(path))
    )
    assert result.passed and charges == [5] and result.run_id == run_id
    assert "charged 5" in resumed.prompts[0][-1]["content"]


def test_a_side_effect_that_overruns_its_timeout_is_not_repeated():
    """Given up on at its timeout, the call may still land: a retry could pay twice, so the run stops."""
    import threading

    done = threading.Event()
    payments = []

    @tool(side_effect=True, timeout=0.1)
    def pay(amount: int) -> str:
        """Pay an invoice."""
        done.wait(5)  # a slow payment gateway, still working after the loop gave up on it
        payments.append(amount)
        return "paid"

    model = ScriptedModel([act("pay", amount=100), act("pay", amount=100)], default=final("paid"))
    result = react("pay invoice 7 once", [pay], session=Session(model=model))
    done.set()
    assert result.stop_reason is StopReason.UNRECOVERABLE and "not repeated" in (result.error or "")
    time.sleep(0.2)
    assert payments == [100]


def test_crash_during_an_effect_is_not_repeated_on_resume(tmp_path):
    """The process dies inside a side-effecting call (its outcome unknown): the resumed run does not call it
    again, and says why."""
    import subprocess
    import sys
    import textwrap

    from reflexa import SQLiteStore

    (tmp_path / "charge_tools.py").write_text(textwrap.dedent("""
        import os
        from pathlib import Path
        from reflexa import tool

        @tool(side_effect=True)
        def charge(amount: int) -> str:
            log = Path(__file__).with_name("charges.log")
            with log.open("a") as f:
                f.write(f"{amount}\\n")
            if os.environ.get("DIE_IN_CALL"):
                os._exit(137)  # killed inside the call
            return f"charged {amount}"
    """))
    path = tmp_path / "trace.db"
    script = ("import sys; sys.path.insert(0, '.'); from charge_tools import charge\n"
              "from reflexa import ScriptedModel, Session, SQLiteStore, react\n"
              "react('charge', [charge], validator=lambda a: None, session=Session(model=ScriptedModel("
              "[{'action': {'thought': 't', 'tool': 'charge', 'args': {'amount': 5}, 'confidence': 0.9}}]), "
              "store=SQLiteStore('trace.db')))\n")
    died = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env={**os.environ, "DIE_IN_CALL": "1"},
                          capture_output=True, text=True, timeout=120)
    assert died.returncode == 137, died.stderr
    sys.path.insert(0, str(tmp_path))
    try:
        from charge_tools import charge  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(tmp_path))
    run_id = SQLiteStore(path).runs()[0].run_id
    result = react("charge", [charge], resume=run_id, validator=accept,
                   session=Session(model=ScriptedModel([act("charge", amount=5)]), store=SQLiteStore(path)))
    assert (tmp_path / "charges.log").read_text() == "5\n"
    assert result.stop_reason is StopReason.UNRECOVERABLE and "interrupted" in result.error


def test_trial_lesson_reaches_the_next_trial(shop):
    store = MemoryStore()
    inner = ScriptedModel([final("wrong"), final("right")])
    outer = ScriptedModel([lesson("trial ended", "answer right, not wrong")])

    def attempt(t):
        return react(
            "q",
            sql_tools(shop),
            lessons=t.lessons,
            budget=t.budget,
            validator=lambda a: None if a == "right" else f"{a} is not the answer",
            session=Session(model=inner, store=store),
            max_steps=1,
        )

    result = trials("q", attempt, session=Session(model=outer, store=store))
    assert result.passed and result.iterations == 2
    assert "answer right, not wrong" in inner.prompts[1][-1]["content"]
    trial_steps = [s for s in store.steps(result.run_id) if s.kind == "trial"]
    assert len(trial_steps) == 2 and trial_steps[1].payload().lessons[0].correction == "answer right, not wrong"


def test_a_trial_whose_lesson_is_discarded_still_tells_the_next_how_it_ended_and_is_sampled(shop):
    """The reflector gives nothing worth keeping; the next trial still starts from what ended the last (its
    rejected answer), and it is sampled: greedy decoding of a prompt that changed little would repeat it."""
    inner = ScriptedModel([final("wrong"), final("right")])
    outer = ScriptedModel([{"failure_step": "s", "observed_mismatch": "insufficient evidence",
                            "root_cause": "insufficient evidence", "correction": "try again"}])
    handed = []

    def attempt(t):
        handed.append((t.temperature, t.seed))
        return react("q", sql_tools(shop), lessons=t.lessons, budget=t.budget, temperature=t.temperature,
                     seed=t.seed, validator=lambda a: None if a == "right" else "does not match",
                     session=Session(model=inner), max_steps=1)

    result = trials("q", attempt, session=Session(model=outer))
    assert result.passed and handed == [(0.0, 1), (0.7, 2)]
    told = inner.prompts[1][-1]["content"]
    assert "trial 1 ended" in told and "'wrong', which was not accepted" in told


def test_a_final_answer_rejected_once_is_refused_as_a_repeat_without_the_validator():
    lookup, _ = flaky_tool(0)
    asked = []

    def check(answer):
        asked.append(answer)
        return None if answer == "value of good" else "does not match"

    model = ScriptedModel([final("7"), lesson("does not match 7", "look the value up"), final(" 7 "),
                           act("lookup", key="good"), final("value of good")])
    store = MemoryStore()
    result = react("find it", [lookup], validator=check, session=Session(model=model, store=store), max_steps=5)
    assert result.passed and asked == ["7", "value of good"]
    acted = [s.payload() for s in store.steps(result.run_id) if s.kind == "react"]
    assert "rejected before" in acted[1].observation


def test_a_tool_that_fails_the_same_way_after_a_lesson_is_blocked_when_others_are_open():
    """A raw error that lists nothing ("no such column: origin"), a lesson that guesses again, the same error:
    with another tool open, the failing one is blocked and the run goes on; with none, it stops."""
    @tool
    def rows_where(where: str) -> str:
        """Count rows matching a condition."""
        raise RuntimeError("OperationalError: no such column: origin")

    @tool
    def services_from(code: str) -> str:
        """Services from a station."""
        return "2R01, 2R02 (2 services)"

    script = [act("rows_where", where="origin = 'BRK'"), lesson("no such column: origin", "use column origin"),
              act("rows_where", where="origin = 'BRK' "), act("services_from", code="BRK"), final("2")]
    store = MemoryStore()
    result = react("q", [rows_where, services_from], validator=accept,
                   session=Session(model=ScriptedModel(script), store=store), max_steps=5)
    assert result.passed and result.counters["reflector_calls"] == 1
    decisions = [s.payload() for s in store.steps(result.run_id) if s.kind == "engine"]
    assert "the tool is blocked" in decisions[-1].reason and decisions[-1].lesson.control.tool == "rows_where"
    alone = react("q", [rows_where], validator=accept, session=Session(model=ScriptedModel(script[:3])),
                  max_steps=5)
    assert alone.stop_reason is StopReason.NO_PROGRESS


def test_trials_with_refine():
    class Expect:
        name, subjective = "expect", False

        def run(self, candidate, context):
            ok = candidate.strip() == "good"
            return Signal("expect", ok, None if ok else ErrorCode.TEST_FAILED, f"got {candidate.strip()}", score=0.0)

    inner = ScriptedModel(["```\nbad\n```", "```\ngood\n```"])
    outer = ScriptedModel([lesson("got bad", "write good")])
    result = trials(
        "t",
        lambda t: refine(
            "t", [Expect()], lessons=t.lessons, budget=t.budget, session=Session(model=inner), max_attempts=1
        ),
        session=Session(model=outer),
    )
    assert result.passed and "write good" in inner.prompts[1][-1]["content"]


def test_similar_thoughts_count_as_repeats_by_embedding():
    lookup, _ = flaky_tool(0)
    close = lambda a, b: 0.9  # noqa: E731 - every pair of thoughts looks alike to this stand-in
    model = ScriptedModel(
        [
            act("lookup", "first look", key="one"),
            act("lookup", "a second look", key="two"),
            lesson("lookup", "answer now"),
            final("x"),
        ]
    )
    result = react("find it", [lookup], similarity=close, validator=accept, session=Session(model=model))
    assert result.counters["gate_signals"] == 1


def test_real_embedding_similarity_when_installed():
    from reflexa.reflect import embeddings

    if not embeddings.available():
        pytest.skip("embeddings extra not installed (pip install 'reflexa[embeddings]')")
    assert embeddings.cosine("I should count the orders", "Let me count the orders") >= 0.85
    assert embeddings.cosine("I should count the orders", "The tent costs 210") < 0.85


def test_resume_after_a_reflection_keeps_the_lesson_and_the_quota(tmp_path):
    from reflexa import SQLiteStore

    lookup, _ = flaky_tool(0)
    path = tmp_path / "trace.db"

    def killer(event, data):
        if event == "step" and data.kind == "checkpoint":
            raise Crash()

    model = ScriptedModel([act("lookup", key="bad"), lesson("backend refused the key", "use key good")])
    with pytest.raises(Crash):
        react(
            "find it",
            [lookup],
            budget=Budget(max_reflections=1),
            validator=accept,
            session=Session(model=model, store=SQLiteStore(path), observer=killer),
        )
    run_id = SQLiteStore(path).runs()[0].run_id
    resumed = ScriptedModel([act("lookup", key="bad"), act("lookup", key="good"), final("value of good")])
    result = react(
        "find it",
        [lookup],
        resume=run_id,
        budget=Budget(max_reflections=1),
        validator=accept,
        session=Session(model=resumed, store=SQLiteStore(path)),
    )
    assert "use key good" in resumed.prompts[0][-1]["content"]  # the lesson survived the crash
    # The same error after the reflection stops the run: the error_handled marks survived too.
    assert result.stop_reason is StopReason.NO_PROGRESS and result.counters["reflector_calls"] == 1


@pytest.mark.parametrize("killed_at", ["react", "engine"])
def test_a_rule_repair_decided_before_a_kill_is_carried_out_on_resume(tmp_path, killed_at):
    """Killed after the failing step was stored (and, at "engine", after the decision too) but before the
    decision was carried out: the resumed run retries by rule first, with no model call for that step."""
    from reflexa import SQLiteStore

    calls = []

    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        calls.append(key)
        if len(calls) == 1:
            raise ToolError(ErrorCode.TOOL_ERROR, "database is locked, try again")
        return f"value of {key}"

    path = tmp_path / "trace.db"

    def killer(event, data):
        if event == "step" and data.kind == killed_at:
            raise Crash()

    with pytest.raises(Crash):
        react("find it", [lookup], validator=accept,
              session=Session(model=ScriptedModel([act("lookup", key="a")]), store=SQLiteStore(path), observer=killer))
    run_id = SQLiteStore(path).runs()[0].run_id
    resumed = ScriptedModel([final("value of a")])
    result = react("find it", [lookup], resume=run_id, validator=accept,
                   session=Session(model=resumed, store=SQLiteStore(path)))
    assert result.passed and calls == ["a", "a"] and resumed.calls == 1
    assert "value of a" in resumed.prompts[0][-1]["content"]
    assert result.counters["rule_repairs"] == 1


def test_a_stop_decided_before_a_kill_still_stops_the_resumed_run(tmp_path):
    from reflexa import SQLiteStore

    @tool
    def read_secret() -> str:
        """Read the secret."""
        raise ToolError(ErrorCode.PERMISSION, "access denied")

    path = tmp_path / "trace.db"

    def killer(event, data):
        if event == "step" and data.kind == "react":
            raise Crash()

    with pytest.raises(Crash):
        react("read it", [read_secret], validator=accept,
              session=Session(model=ScriptedModel([act("read_secret")]), store=SQLiteStore(path), observer=killer))
    run_id = SQLiteStore(path).runs()[0].run_id
    resumed = ScriptedModel([final("the secret")])
    result = react("read it", [read_secret], resume=run_id, validator=accept,
                   session=Session(model=resumed, store=SQLiteStore(path)))
    assert result.stop_reason is StopReason.UNRECOVERABLE and resumed.calls == 0


def test_tool_module_with_postponed_annotations(tmp_path):
    import importlib.util

    source = tmp_path / "tools_mod.py"
    source.write_text(
        "from __future__ import annotations\nfrom pydantic import BaseModel\nfrom reflexa import tool\n\n"
        "class Req(BaseModel):\n    x: int\n\n@tool\ndef double(req: Req) -> int:\n    return req.x * 2\n\n"
        "@tool\ndef add(a: int, b: int = 1) -> int:\n    return a + b\n"
    )
    spec = importlib.util.spec_from_file_location("tools_mod", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    registry = ToolSession(ToolRegistry([module.double, module.add]))
    assert registry.call("double", {"x": 4}).output == "8" and registry.call("add", {"a": 1}).output == "2"


def test_a_resumed_step_with_other_arguments_is_a_new_call(tmp_path):
    from reflexa import SQLiteStore

    charges = []

    @tool(side_effect=True)
    def charge(amount: int) -> str:
        """Charge the customer."""
        charges.append(amount)
        return f"charged {amount}"

    path = tmp_path / "trace.db"

    def killer(event, data):
        if event == "step" and data.kind == "react":
            raise Crash()

    with pytest.raises(Crash):
        react("charge", [charge], session=Session(model=ScriptedModel([act("charge", amount=5)]),
                                                  store=SQLiteStore(path), observer=killer), max_steps=3)
    store = SQLiteStore(path)
    run_id = store.runs()[0].run_id
    # Roll the run back to before its first step, as if the kill had come between the effect and the step,
    # and the model call too (a stored one is read back on resume, and would choose the same arguments).
    store.db.execute("DELETE FROM steps WHERE run_id = ? AND kind IN ('react', 'model_call')", (run_id,))
    resumed = ScriptedModel([act("charge", amount=6), final("charged 6")])
    result = react("charge", [charge], resume=run_id, validator=accept,
                   session=Session(model=resumed, store=SQLiteStore(path)), max_steps=3)
    assert charges == [5, 6] and result.passed
    first = next(s for s in SQLiteStore(path).steps(run_id) if s.kind == "react").payload()
    assert first.superseded and not first.replayed and "charged 6" in first.observation


def test_a_resumed_trials_run_still_counts_what_its_earlier_trials_spent():
    from reflexa import RegexCheck
    from reflexa.errors import RunInterrupted

    store, model, handed = MemoryStore(), ScriptedModel(default="BAD"), []

    def attempt(t):
        handed.append(t.budget)
        if len(handed) == 2:
            raise KeyboardInterrupt  # Ctrl-C as the second trial starts
        return refine("say GOOD", [RegexCheck("GOOD")], session=Session(model=model, store=store),
                      budget=replace(t.budget, max_reflections=0), lessons=t.lessons, meta=t.meta, resume=t.resume,
                      max_attempts=3)

    def run(**resume):
        return trials("say GOOD", attempt, session=Session(model=model, store=store), budget=Budget(max_calls=10),
                      max_trials=2, **resume)

    with pytest.raises(RunInterrupted) as stopped:
        run()
    first = sum(s.usage.calls for s in store.steps(stopped.value.run_id))  # trial 1, and the reflection on it
    result = run(resume=stopped.value.run_id)
    assert first >= 3 and handed[2].max_calls == 10 - first  # the resumed trial gets only what is left
    assert set(result.usage) == {"generator", "reflector"} and result.total_usage.calls <= 10


def test_a_resumed_run_keeps_counting_the_same_failing_call(tmp_path):
    from reflexa import SQLiteStore

    lookup, state = flaky_tool(10)
    path = tmp_path / "trace.db"
    checkpoints = []

    def killer(event, data):
        if event == "step" and data.kind == "checkpoint":
            checkpoints.append(data)
            if len(checkpoints) == 2:
                raise Crash()

    def run(model, observer=None, resume=None):
        return react("find it", [lookup], budget=Budget(max_reflections=0), validator=accept, resume=resume,
                     session=Session(model=model, store=SQLiteStore(path), observer=observer))

    with pytest.raises(Crash):
        run(ScriptedModel([act("lookup", key="a") for _ in range(8)]), killer)
    assert state["calls"] == 2
    result = run(ScriptedModel([act("lookup", key="a") for _ in range(8)]), resume=SQLiteStore(path).runs()[0].run_id)
    assert result.stop_reason is StopReason.NO_PROGRESS and state["calls"] == 3


def test_an_argument_value_nothing_read_holds_is_shown_as_a_guess_until_a_tool_shows_it():
    """The model calls harvests_of_bed('B-07') before any tool named a bed: the next prompt says B-07 is a
    guess. Once beds_growing lists B-07, it is no longer one."""
    @tool
    def beds_growing(crop: str) -> str:
        """Beds growing a crop."""
        return "B-07 (zone north), B-11 (zone south)"

    @tool
    def harvests_of_bed(bed_ref: str) -> str:
        """Harvests of a bed."""
        return "week 32: 3.1 kg"

    model = ScriptedModel([act("harvests_of_bed", bed_ref="B-07"), act("beds_growing", crop="strawberry"),
                           act("harvests_of_bed", bed_ref="B-11"), final("2")])
    react("How many harvests did the beds growing strawberry give?", [beds_growing, harvests_of_bed],
          session=Session(model=model), max_steps=5)
    shown = [messages[-1]["content"] for messages in model.prompts]
    assert "guesses" not in shown[0]
    assert "(guesses, until a tool shows them): B-07" in shown[1]
    assert "guesses" not in shown[2] and "guesses" not in shown[3]  # read since, and B-11 was read first
