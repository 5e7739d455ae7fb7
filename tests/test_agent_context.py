"""What an agent is told up front and how its tools' failures are read: the tools' context (a database's schema,
an API's description, an MCP server's instructions), transient failures known by type and status, a plan
whose slips a rule mends, and a validator run in the task's folder."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from reflexa import MemoryStore, ScriptedModel, Session, StopReason, TaskSpec, ToolRegistry, plan, react, tool
from reflexa.loops import goals
from reflexa.tools import sql_tools
from reflexa.tools.load import load_tools

FIXTURES = Path(__file__).parent / "fixtures"


def act(tool_name, thought="a step", **args):
    return {"action": {"thought": thought, "tool": tool_name, "args": args, "confidence": 0.9}}


def final(answer):
    return act("final_answer", "the answer", answer=answer)


def test_the_sql_tools_show_the_schema_and_a_column_s_values_before_the_first_step(shop):
    model = ScriptedModel([final("400")])
    react("How many orders?", sql_tools(shop), validator=lambda a: None, session=Session(model=model))
    system = model.prompts[0][0]["content"]
    assert "What the tools work on:" in system
    assert "- orders: id INTEGER, customer_id INTEGER" in system
    # The values a filter compares with: 'cancelled' is a stored status, not a guess.
    assert "status TEXT (one of 'delivered', 'shipped', 'cancelled')" in system
    assert system.count("Tables of the database") == 1  # one context for the three tools


def test_a_large_schema_is_cut_to_its_bound(tmp_path):
    import sqlite3

    db = tmp_path / "wide.sqlite"
    with sqlite3.connect(db) as conn:
        for n in range(60):
            conn.execute(f"CREATE TABLE t{n} (" + ", ".join(f"column_{i} TEXT" for i in range(12)) + ")")
    conn.close()
    context = ToolRegistry(sql_tools(db)).context()
    assert len(context) <= 2400 and "describe_table shows a table's columns" in context


def test_a_tools_file_s_docstring_is_its_tools_context(tmp_path):
    (tmp_path / "api.py").write_text(textwrap.dedent('''
        """The fleet API: vessels have IMO numbers; look one up by name first."""
        from reflexa import tool

        @tool
        def vessel(name: str) -> str:
            """A vessel by name."""
            return "IMO 9321483"
    '''))
    tools = load_tools(["api.py"], tmp_path)
    assert ToolRegistry(tools).context() == "The fleet API: vessels have IMO numbers; look one up by name first."


def test_an_mcp_server_s_instructions_are_its_tools_context_fenced_as_data():
    pytest.importorskip("mcp")
    from reflexa import MCPClient

    with MCPClient([sys.executable, str(FIXTURES / "mcp" / "server.py")]) as server:
        registry = ToolRegistry(server.tools())
    assert server.instructions and registry.context().startswith("<<<") and server.instructions[:20] in \
        registry.context()


@pytest.mark.parametrize("error", [ConnectionResetError(104, "Connection reset by peer"),
                                   TimeoutError("read timed out")])
def test_a_dropped_connection_is_retried_by_rule_whatever_its_words(error):
    calls = []

    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        calls.append(key)
        if len(calls) == 1:
            raise error
        return "42"

    model = ScriptedModel([act("lookup", key="k"), final("42")])
    store = MemoryStore()
    result = react("q", [lookup], validator=lambda a: None, session=Session(model=model, store=store))
    assert result.passed and calls == ["k", "k"] and model.calls == 2
    assert result.counters["rule_repairs"] == 1 and result.counters["reflector_calls"] == 0
    decisions = [s.payload().reason for s in store.steps(result.run_id) if s.kind == "engine"]
    assert decisions[0] in ("a transient failure: retry after a pause", "first timeout: retry once after a pause")


def test_an_http_error_s_status_says_whether_to_retry_and_its_retry_after_how_long():
    class Throttled(Exception):
        status_code = 429
        headers = {"Retry-After": "0.01"}

    class Missing(Exception):
        status_code = 404

    calls = []

    @tool
    def quota(key: str) -> str:
        """Read a quota."""
        calls.append(key)
        if key == "gone":
            raise Missing("no such key")
        if len(calls) == 1:
            raise Throttled("slow down")
        return "7"

    model = ScriptedModel([act("quota", key="k"), final("7")])
    result = react("q", [quota], validator=lambda a: None, session=Session(model=model))
    assert result.passed and result.counters["rule_repairs"] == 1
    model = ScriptedModel([act("quota", key="gone"), {"failure_step": "s", "observed_mismatch": "no such key",
                                                      "root_cause": "gone", "correction": "use key k"},
                           final("7")])
    result = react("q", [quota], validator=lambda a: None, session=Session(model=model))
    assert result.counters["rule_repairs"] == 0  # a 404 is no transient failure


def test_the_type_of_a_tool_s_error_is_named_in_what_the_model_sees():
    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        raise KeyError(key)

    model = ScriptedModel([act("lookup", key="zz"), final("none")])
    store = MemoryStore()
    react("q", [lookup], session=Session(model=model, store=store), max_steps=2)
    acted = [s.payload() for s in MemoryStore.steps(store, store.runs(1)[0].run_id) if s.kind == "react"]
    assert acted[0].observation == "ERROR NOT_FOUND: KeyError: 'zz'"


# --- plan: a planner's slips mended by rule ------------------------------------------------------------------

def _tree(*subgoals):
    return goals.GoalTree.model_validate({"goal": "g", "subgoals": list(subgoals)})


def test_mend_drops_a_self_dependency_an_unknown_one_and_unknown_tools():
    tree = _tree({"name": "a", "task": "t", "depends_on": ["a", "ghost"]},
                 {"name": "b", "task": "t", "depends_on": ["a", "a"], "tools": ["nope"]})
    mended, fixed = goals.mend(tree, ["query"])
    assert [s.depends_on for s in mended.subgoals] == [[], ["a"]] and mended.subgoals[1].tools is None
    assert len(fixed) == 3 and not goals.problems(mended, ["query"])


def test_mend_breaks_a_cycle_at_its_edge_that_points_furthest_forward():
    tree = _tree({"name": "a", "task": "t", "depends_on": ["c"]}, {"name": "b", "task": "t", "depends_on": ["a"]},
                 {"name": "c", "task": "t", "depends_on": ["b"]})
    mended, fixed = goals.mend(tree, [])
    assert [s.depends_on for s in mended.subgoals] == [[], ["a"], ["b"]]
    assert goals.order(mended) == ["a", "b", "c"] and "closed the cycle" in fixed[0]


def test_a_planner_tree_that_depends_on_itself_runs_after_the_rule_mends_it(shop):
    tree = {"goal": "city", "facts": [], "subgoals": [
        {"name": "buyer", "task": "Who bought order 5?", "depends_on": ["buyer"]},
        {"name": "city", "task": "Which city does that customer live in?", "depends_on": ["buyer", "city"]}]}
    model = ScriptedModel(planner=[tree], generator=[final("customer 17"), final("Lisbon")])
    store = MemoryStore()
    result = plan("Which city does the buyer of order 5 live in?", sql_tools(shop),
                  session=Session(model=model, store=store))
    assert result.stop_reason is StopReason.ANSWERED_UNVERIFIED and result.output == "Lisbon"
    assert model.calls == 3  # no re-ask: the rule mended the tree
    made = [s.payload() for s in store.steps(result.run_id) if s.kind == "plan_tree"]
    assert made[0].source == "planner, mended by rule" and any("dropped dependencies" in e for e in made[0].errors)


# --- a validator runs in the task's folder ---------------------------------------------------------------

def test_a_command_validator_runs_in_the_task_s_folder(tmp_path, shop):
    (tmp_path / "answers.json").write_text(json.dumps({"q": "400"}))
    check = ("python3 -c \"import json,os,sys; "
             "sys.exit(json.load(open('answers.json'))['q'] != os.environ['REFLEXA_ANSWER'])\"")
    spec = TaskSpec.parse({"loop": "react", "task": "How many orders?", "db": str(shop), "validate": check,
                           "workdir": str(tmp_path)})
    model = ScriptedModel([final("400")])
    assert spec.run(Session(model=model)).stop_reason is StopReason.PASSED
