"""`plan`: a goal tree over react units, with the scripted model. Each test scripts the planner (or gives
the tree) and every unit's actions, in the order the plan runs them."""

import json

import pytest

from reflexa import Budget, ConfigError, ErrorCode, MemoryStore, ScriptedModel, Session, StopReason, ToolError, tool
from reflexa.loops import plan
from reflexa.loops.goals import GoalTree, find_cycle, order, parse, problems
from reflexa.loops.plan import PlanMade, Propagated, UnitStatus

WORDS = iter(f"thought {a}{b}" for a in "abcdefghijklmnopqrstuvwxyz" for b in "abcdefghijklmnopqrstuvwxyz")


def act(tool_name, **args):
    return {"action": {"thought": next(WORDS), "tool": tool_name, "args": args, "confidence": 0.9}}


def final(answer):
    return act("final_answer", answer=answer)


def sub(name, task=None, depends_on=(), **extra):
    return {"name": name, "task": task or f"find the {name}", "depends_on": list(depends_on), **extra}


def tree(*subgoals, facts=()):
    return {"goal": "composite", "facts": list(facts), "subgoals": list(subgoals)}


CALLS: list[str] = []


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    CALLS.append(f"lookup:{key}")
    return {"order": "customer 17", "customer": "Lisbon", "city": "3 customers"}.get(key, "nothing")


@tool
def prices(item: str) -> str:
    """The price endpoint."""
    CALLS.append(f"prices:{item}")
    raise ToolError(ErrorCode.TOOL_ERROR, "price endpoint unstable: 503 from upstream")


@tool
def broken(item: str) -> str:
    """A tool that can never work."""
    CALLS.append(f"broken:{item}")
    raise ToolError(ErrorCode.TOOL_ERROR, "broken service decommissioned", fatal=True)


TOOLS = [lookup, prices, broken]


@pytest.fixture(autouse=True)
def _calls():
    CALLS.clear()


def session(*replies, store=None):
    model = ScriptedModel(replies)
    return Session(model=model, store=store or MemoryStore()), model


def statuses(store, run_id):
    return [(p.name, p.status) for p in (s.payload() for s in store.steps(run_id)) if isinstance(p, UnitStatus)]


def test_a_cycle_and_an_unknown_dependency_are_rejected():
    cyclic, _ = parse(tree(sub("a", depends_on=["c"]), sub("b", depends_on=["a"]), sub("c", depends_on=["b"])))
    assert find_cycle(cyclic) == ["a", "c", "b", "a"]
    assert any("cycle" in p for p in problems(cyclic, ["lookup"]))
    unknown, _ = parse(tree(sub("a"), sub("b", depends_on=["nope"]), sub("a", tools=["shovel"])))
    found = problems(unknown, ["lookup"])
    assert "b depends on unknown sub-goal 'nope'" in found
    assert "sub-goal name 'a' is used twice" in found and any("unknown tool 'shovel'" in p for p in found)
    with pytest.raises(ConfigError, match="cycle"):
        plan("goal", TOOLS, tree=tree(sub("a", depends_on=["a2"]), sub("a2", depends_on=["a"])))


def test_the_planner_is_re_asked_once_with_the_errors_then_stops_unrecoverable():
    # What no rule mends (a name used twice) is for the re-ask; a planner that sends it again stops the plan.
    bad = tree(sub("a"), sub("a"))
    s, model = session(bad, tree(sub("b"), sub("b")))
    result = plan("Do two things", TOOLS, session=s)
    assert result.stop_reason is StopReason.UNRECOVERABLE and "sub-goal name 'b' is used twice" in result.error
    assert model.calls == 2 and "sub-goal name 'a' is used twice" in model.prompts[1][-1]["content"]


def test_the_planner_s_fixed_plan_runs_after_the_re_ask():
    s, model = session(tree(sub("a"), sub("a")), tree(sub("a", tools=["lookup"])),
                       act("lookup", key="order"), final("customer 17"))
    result = plan("Who placed the order?", TOOLS, session=s)
    assert result.stop_reason is StopReason.ANSWERED_UNVERIFIED and result.output == "customer 17"
    made = [p for p in (st.payload() for st in s.store.steps(result.run_id)) if isinstance(p, PlanMade)]
    assert made[0].source == "planner re-asked" and "used twice" in made[0].errors[0]


def test_a_planner_s_cycle_and_unknown_tools_are_mended_by_rule_without_a_re_ask():
    s, model = session(tree(sub("a", depends_on=["b"], tools=["shovel"]), sub("b", depends_on=["a"])),
                       act("lookup", key="order"), final("customer 17"), final("Lisbon"))
    result = plan("Who placed the order, and where?", TOOLS, session=s)
    assert result.stop_reason is StopReason.ANSWERED_UNVERIFIED and model.calls == 4
    made = [p for p in (st.payload() for st in s.store.steps(result.run_id)) if isinstance(p, PlanMade)]
    assert made[0].source == "planner, mended by rule"
    assert any("closed the cycle" in e for e in made[0].errors) and any("unknown tools" in e for e in made[0].errors)


def test_units_run_in_dependency_order_and_answers_flow_to_dependents():
    given = tree(sub("city_count", "How many customers live in that city?", ["city"], check={"regex": r"\b3\b"}),
                 sub("city", "Which city does that customer live in?", ["customer"], check={"regex": "Lisbon"}),
                 sub("customer", "Who placed order 5?", check={"regex": "17"}), facts=["budget 5,000 EUR"])
    s, model = session(act("lookup", key="order"), final("customer 17"),
                       act("lookup", key="customer"), final("Lisbon"),
                       act("lookup", key="city"), final("3"))
    result = plan("How many customers share a city with the buyer of order 5?", TOOLS, session=s, tree=given)
    assert result.stop_reason is StopReason.PASSED and result.output == "3" and result.best == "3"
    assert order(GoalTree.model_validate(given)) == ["customer", "city", "city_count"]
    assert [u["name"] for u in result.details["subgoals"]] == ["customer", "city", "city_count"]
    units = [p[-1]["content"] for p in model.prompts]
    assert "budget 5,000 EUR" in units[0] and "customer (Who placed order 5?) = customer 17" in units[2]
    assert "city (Which city does that customer live in?) = Lisbon" in units[4]
    children = [s.store.get_run(u["run_id"]) for u in result.details["subgoals"]]
    assert all(c.meta["parent"] == result.run_id for c in children)
    assert result.total_usage.calls == 6  # every unit's usage is the plan's


def test_a_block_learnt_in_unit_1_is_enforced_in_unit_3():
    reflection = {"failure_step": "step 1", "observed_mismatch": "the price endpoint answers 503 from upstream",
                  "root_cause": "the endpoint is unstable", "correction": "use lookup instead",
                  "control": "block_tool", "control_tool": "prices"}
    given = tree(sub("one", "Price of a kettle?"), sub("two", "What is the order?", ["one"]),
                 sub("three", "Price of a toaster?", ["two"]))
    s, model = session(act("prices", item="kettle"), reflection, act("lookup", key="kettle"), final("39"),
                       final("customer 17"),
                       # unit three: the schema no longer offers prices (a re-ask), the call is refused
                       act("prices", item="toaster"), act("prices", item="toaster"), "(no reflection)", final("29.5"))
    result = plan("Prices", TOOLS, session=s, tree=given)
    assert result.stop_reason is StopReason.ANSWERED_UNVERIFIED and result.output == "29.5"
    # The 503 is retried twice by rule before the reflector is asked; unit three's call never ran the tool.
    assert CALLS == ["prices:kettle"] * 3 + ["lookup:kettle"]
    propagated = [p for p in (st.payload() for st in s.store.steps(result.run_id)) if isinstance(p, Propagated)]
    assert len(propagated) == 1 and propagated[0].origin == "one"
    assert propagated[0].lesson.control.kind == "block_tool" and "503" in propagated[0].lesson.observed_mismatch
    third = next(p for p in model.prompts if p[-1]["content"].startswith("Goal: Price of a toaster?"))
    assert "- prices(" not in third[0]["content"] and "- lookup(" in third[0]["content"]
    assert "use lookup instead" in third[-1]["content"]  # the originating lesson, in a policy slot
    three = s.store.steps(result.details["subgoals"][2]["run_id"])
    acted = [p for p in (st.payload() for st in three) if type(p).__name__ == "Acted"]
    assert acted[0].code is ErrorCode.SCHEMA and "unknown tool" in acted[0].observation


def test_an_unrecoverable_tool_error_blocks_the_tool_and_the_replan_avoids_it():
    given = tree(sub("one", "Look up the order", tools=["broken", "lookup"]), sub("two", "Then the city", ["one"]))
    s, model = session(act("broken", item="order"),
                       {"task": "Look up the order with lookup", "tools": ["lookup"]},
                       act("lookup", key="order"), final("customer 17"),
                       act("lookup", key="customer"), final("Lisbon"))
    result = plan("Where does the buyer live?", TOOLS, session=s, tree=given)
    assert result.stop_reason is StopReason.ANSWERED_UNVERIFIED and result.output == "Lisbon"
    assert CALLS == ["broken:order", "lookup:order", "lookup:customer"]
    assert "Blocked tools (do not use them): broken" in model.prompts[1][-1]["content"]
    assert [u["attempts"] for u in result.details["subgoals"]] == [2, 1]
    assert result.details["lessons"][0]["control"]["kind"] == "block_tool"
    assert "- broken(" not in model.prompts[4][0]["content"]


def test_a_failed_branch_stops_only_its_dependents():
    given = tree(sub("a", "Look up with broken", tools=["broken"]), sub("b", "Then this", ["a"]),
                 sub("c", "Independent", check={"regex": "Lisbon"}), sub("d", "After b", ["b"]))
    s, _ = session(act("broken", item="x"), act("lookup", key="customer"), final("Lisbon"))
    result = plan("Mixed", TOOLS, session=s, tree=given, replan=False)
    assert result.stop_reason is StopReason.UNRECOVERABLE
    assert "sub-goal a failed" in result.error and "skipped: b, d" in result.error
    got = {u["name"]: u["status"] for u in result.details["subgoals"]}
    assert got == {"a": "failed", "b": "skipped", "c": "passed", "d": "skipped"}
    assert result.output == "c: Lisbon"  # the best partial result
    reasons = {u["name"]: u["reason"] for u in result.details["subgoals"]}
    assert reasons["b"] == "dependency a failed (UNRECOVERABLE)"


def test_budget_exhaustion_mid_tree_returns_the_partial_result_with_a_typed_stop():
    given = tree(sub("one", "Who placed order 5?", check={"regex": "17"}), sub("two", "Which city?", ["one"]),
                 sub("three", "How many?", ["two"]))
    s, model = session(act("lookup", key="order"), final("customer 17"), act("lookup", key="customer"),
                       final("Lisbon"))
    result = plan("Three hops", TOOLS, session=s, tree=given, budget=Budget(max_calls=3))
    assert result.stop_reason is StopReason.BUDGET_CALLS and model.calls == 3
    assert result.output == "one: customer 17"
    got = {u["name"]: u["status"] for u in result.details["subgoals"]}
    assert got == {"one": "passed", "two": "failed", "three": "skipped"}
    assert result.total_usage.calls == 3


def test_a_finished_plan_s_tree_is_in_its_trace():
    given = tree(sub("one", check={"regex": "x"}), sub("two", depends_on=["one"], check={"regex": "y"}))
    s, _ = session(final("x"), final("y"))
    result = plan("two steps", TOOLS, session=s, tree=given)
    assert result.passed
    assert statuses(s.store, result.run_id) == [("one", "running"), ("one", "passed"), ("two", "running"),
                                                ("two", "passed")]
    assert json.loads(json.dumps(result.to_dict(), default=str))["details"]["tree"]["goal"] == "composite"


def test_a_refine_unit_is_checked_and_its_task_carries_the_memory():
    given = tree(sub("buyer", "Who placed order 5?"),
                 sub("slogan", "Write a one-word city name", ["buyer"], loop="refine", check={"regex": "^Lisbon$"}))
    s, model = session(final("customer 17"), "```\nLisbon\n```")
    result = plan("Refine after react", TOOLS, session=s, tree=given)
    assert result.stop_reason is StopReason.ANSWERED_UNVERIFIED  # buyer had no check
    assert [u["status"] for u in result.details["subgoals"]] == ["answered", "passed"]
    assert "buyer (Who placed order 5?) = customer 17" in model.prompts[1][-1]["content"]
    assert s.store.get_run(result.details["subgoals"][1]["run_id"]).loop == "refine"


def test_units_that_cannot_run_are_refused_before_any_model_call():
    with pytest.raises(ConfigError) as refused:
        plan("x", TOOLS, tree=tree(sub("a", loop="refine"), sub("b", loop="research"), sub("c", check={})))
    text = str(refused.value)
    assert "a is a refine unit without a check" in text and "no search backend" in text and "c's check is empty" in text
    with pytest.raises(ConfigError, match="needs a database"):
        plan("x", TOOLS, tree=tree(sub("a", check={"sql": "SELECT 1"})))


def test_a_check_runs_as_the_kind_its_key_names(tmp_path):
    """`sql` is never handed to the shell (it does not start with SELECT: before, it ran as a command), and a
    query that opens with a comment still runs as SQL."""
    from reflexa.loops.goals import SubgoalCheck, validator

    db = tmp_path / "t.db"
    import sqlite3
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (n INTEGER)")
        conn.execute("INSERT INTO t VALUES (400)")
    ran = tmp_path / "ran_as_shell"
    with pytest.raises(ConfigError, match="does not run"):
        validator(SubgoalCheck(sql=f"touch {ran}"), db)
    assert not ran.exists()
    query = "-- the count must match\nSELECT 1 FROM t WHERE n = CAST(:answer AS INTEGER)"
    check = validator(SubgoalCheck(sql=query), db)
    assert check is not None and check("400") is None and check("3") is not None
    command = validator(SubgoalCheck(command='test "$REFLEXA_ANSWER" = 400'), db)
    assert command is not None and command("400") is None and command("3") is not None


@pytest.mark.parametrize("reply", [
    "no plan at all", "[" * 100 + "]" * 100, {"goal": "g", "subgoals": "not a list"},
    {"goal": "g", "subgoals": [{"name": "bad name!", "task": "t"}]}, {"goal": "g", "subgoals": []},
    {"goal": "g", "subgoals": [sub(f"s{i}") for i in range(20)]},
    {"goal": "g", "subgoals": [sub("a"), sub("a", depends_on=["a"])]},
])
def test_no_planner_reply_crashes_the_plan(reply):
    s, model = session(reply, reply)
    result = plan("Do it", TOOLS, session=s)
    assert result.stop_reason is StopReason.UNRECOVERABLE and result.error.startswith("the planner's plan cannot run")
    assert model.calls == 2 and s.store.get_run(result.run_id).status == "finished"


def test_a_research_sink_is_held_to_the_plan_s_validator():
    """research takes no validator itself: the plan judges the sink's answer with it, as it does a react or
    refine sink's (a research sink once ended PASSED whatever the validator said)."""
    from reflexa.search import Evidence

    class Fixed:
        name = "fixed"

        def search(self, query, k):
            return [Evidence("e1", "https://docs.example/paris", "Paris facts", "Paris is the capital of France.")]

    def draft(answer, missing=(), queries=()):
        return {"answer": answer, "reflection": {"missing": list(missing), "superfluous": []},
                "search_queries": list(queries)}

    def run(validator):
        model = ScriptedModel([draft("Unknown.", missing=["capital city of France"],
                                     queries=["France capital city population facts"]),
                               draft("The capital is Paris [1].")])
        return plan("What is the capital of France?", TOOLS, tree=tree(sub("cap", loop="research")), replan=False,
                    session=Session(model=model), search=Fixed(), validator=validator)

    rejected = run(lambda answer: "the answer is wrong")
    (unit,) = rejected.details["subgoals"]
    assert not rejected.passed and unit["status"] == "failed" and "failed its check" in (unit["reason"] or "")
    assert run(lambda answer: None if "Paris" in answer else "no Paris").passed


def test_a_resumed_plan_s_time_budget_counts_its_finished_units():
    import time

    class Killed(BaseException):
        """Stands in for the process dying while unit two asks its model."""

    @tool
    def slow(key: str) -> str:
        """A slow lookup."""
        time.sleep(1.0)
        return f"value of {key}"

    class Dying(ScriptedModel):
        def _generate(self, messages, *args, **kwargs):
            if len(self.prompts) == 2:  # the third call: unit two's first step
                raise Killed
            return super()._generate(messages, *args, **kwargs)

    chain = tree(sub("one"), sub("two", depends_on=["one"]), sub("three", depends_on=["two"]))
    replies = [act("slow", key="one"), final("1"), act("slow", key="two"), final("2"), act("slow", key="three"),
               final("3")]
    store = MemoryStore()
    with pytest.raises(Killed):
        plan("g", [slow], tree=chain, session=Session(model=Dying(replies), store=store), replan=False,
             budget=Budget(max_seconds=1.6))
    (killed,) = [r for r in store.runs(10) if r.loop == "plan"]
    resumed = plan("g", [slow], tree=chain, session=Session(model=ScriptedModel(replies[2:]), store=store),
                   replan=False, budget=Budget(max_seconds=1.6), resume=killed.run_id)
    # As without the kill: one takes a second of the 1.6, so two (a second more) runs out of time and three
    # never runs. Had the resume started the clock afresh, two would answer and three would run.
    statuses = [u["status"] for u in resumed.details["subgoals"]]
    assert resumed.stop_reason is StopReason.TIMEOUT and statuses == ["answered", "failed", "skipped"], statuses


def test_one_reflection_budget_covers_every_sub_goal():
    """Budget(max_reflections=1) for the plan is one reflector call over all its units, not one each."""
    from reflexa.budget import Meter
    from reflexa.types import Role, Usage

    meter = Meter(Budget(max_reflections=1, max_calls=10))
    meter.record(Role.GENERATOR, Usage(10, 5, 2))
    assert meter.remaining().max_reflections == 1
    meter.record(Role.REFLECTOR, Usage(10, 5, 1))
    assert meter.remaining().max_reflections == 0 and meter.remaining().max_calls == 7
    assert Meter(Budget()).remaining().max_reflections is None  # no limit stays no limit
