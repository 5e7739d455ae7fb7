"""Human approval of side-effecting calls: defer stops the run, a decision resumes it, a denial is a signal."""

import json

import pytest
from typer.testing import CliRunner

from reflexa import ApprovalRequest, ConfigError, Decision, ScriptedModel, Session, SQLiteStore, StopReason, TaskSpec
from reflexa.cli.app import app
from reflexa.loops import react
from reflexa.tools import tool
from reflexa.tools.approval import decide, defer, waiting

WORDS = iter(f"thought {n}" for n in range(10_000))
runner = CliRunner()
LESSON = {"failure_step": "1", "observed_mismatch": "denied", "root_cause": "policy", "correction": "do not pay"}


def act(tool_name, **args):
    return {"action": {"thought": next(WORDS), "tool": tool_name, "args": args, "confidence": 0.9}}


def make_tools(effects):
    @tool(side_effect=True)
    def pay(order_id: int) -> str:
        """Pay an order."""
        effects.append(order_id)
        return f"paid order {order_id}"

    @tool
    def status(order_id: int) -> str:
        """An order's status."""
        return "open"

    return [pay, status]


def test_defer_stops_before_the_effect_and_an_approval_runs_it_once_on_resume(tmp_path):
    effects: list[int] = []
    store = SQLiteStore(tmp_path / "t.db")
    first = react("Pay order 7", make_tools(effects), session=Session(
        model=ScriptedModel([act("status", order_id=7), act("pay", order_id=7)]), store=store, approver=defer))
    assert first.stop_reason is StopReason.AWAITING_APPROVAL and effects == []
    assert store.get_run(first.run_id).status == "awaiting"
    [call] = waiting(store, first.run_id)
    assert (call.tool, call.args) == ("pay", {"order_id": 7})

    # Resumed before any decision: still waiting, and still nothing ran.
    again = react("Pay order 7", make_tools(effects), session=Session(
        model=ScriptedModel([]), store=store, approver=defer), resume=first.run_id)
    assert again.stop_reason is StopReason.AWAITING_APPROVAL and effects == []

    decide(store, call, Decision.approve())
    done = react("Pay order 7", make_tools(effects), session=Session(
        model=ScriptedModel([act("final_answer", answer="paid")]), store=store, approver=defer), resume=first.run_id)
    assert done.stop_reason is StopReason.ANSWERED_UNVERIFIED and effects == [7]
    assert waiting(store, first.run_id) == []
    with pytest.raises(ConfigError, match="approved and the run has carried that out"):
        decide(store, call, Decision.deny("too late"), change=True)


def test_a_second_decision_is_refused_and_a_change_corrects_until_the_run_resumes(tmp_path):
    effects: list[int] = []
    store = SQLiteStore(tmp_path / "t.db")
    first = react("Pay order 7", make_tools(effects), session=Session(
        model=ScriptedModel([act("pay", order_id=7)]), store=store, approver=defer))
    [call] = waiting(store, first.run_id)
    decide(store, call, Decision.approve())
    with pytest.raises(ConfigError, match="approved already"):
        decide(store, call, Decision.deny("no"))
    assert waiting(store, first.run_id, decided=True)[0].status == "approved"
    corrected = decide(store, call, Decision.deny("over the limit"), change=True)
    assert corrected.status == "denied" and corrected.reason == "over the limit"
    done = react("Pay order 7", make_tools(effects), session=Session(
        model=ScriptedModel(generator=[act("final_answer", answer="not paid")], default=LESSON), store=store,
        approver=defer), resume=first.run_id)
    assert effects == [] and done.stop_reason is StopReason.ANSWERED_UNVERIFIED
    assert waiting(store, first.run_id, decided=True) == []  # taken by the run: no longer correctable
    with pytest.raises(ConfigError, match="carried that out"):
        decide(store, call, Decision.approve(), change=True)


def test_edited_arguments_that_do_not_fit_the_schema_are_refused_before_anything_is_written(tmp_path):
    store = SQLiteStore(tmp_path / "t.db")
    first = react("Pay order 7", make_tools([]), session=Session(
        model=ScriptedModel([act("pay", order_id=7)]), store=store, approver=defer))
    [call] = waiting(store, first.run_id)
    assert call.schema["properties"]["order_id"]["type"] == "integer"
    for bad, why in (({"order_id": "seven"}, "order_id: 'seven' is not of type 'integer'"),
                     ({}, "'order_id' is a required property")):
        with pytest.raises(ConfigError, match=why):
            decide(store, call, Decision.approve(bad))
    assert waiting(store, first.run_id)[0].status == "pending"


def test_a_denial_reaches_the_next_step_and_blocks_the_tool_for_the_run(tmp_path):
    effects: list[int] = []
    model = ScriptedModel(generator=[act("pay", order_id=3), act("final_answer", answer="not paid: a human refused")],
                          default=LESSON)
    result = react("Pay order 3", make_tools(effects), session=Session(
        model=model, approver=lambda request: Decision.deny("orders over 100 EUR need a manager")))
    assert effects == []
    assert result.stop_reason is StopReason.ANSWERED_UNVERIFIED  # the agent went on: a denial is no dead end
    prompts = [" ".join(m["content"] for m in messages) for messages in model.prompts
               if "You reach a goal" in messages[0]["content"]]
    assert "PERMISSION" in prompts[1] and "orders over 100 EUR need a manager" in prompts[1]
    offered = [[branch["properties"]["tool"]["const"] for branch in schema["properties"]["action"]["anyOf"]]
               for schema in model.schemas if schema and "action" in schema.get("properties", {})]
    assert "pay" in offered[0] and "pay" not in offered[1]  # blocked for the run: no longer a choice


def test_an_approver_may_edit_the_arguments(tmp_path):
    effects: list[int] = []
    asked: list[ApprovalRequest] = []

    def approver(request):
        asked.append(request)
        return Decision.approve({"order_id": 8})

    react("Pay order 7", make_tools(effects), session=Session(
        model=ScriptedModel([act("pay", order_id=7), act("final_answer", answer="paid")]), approver=approver))
    assert effects == [8] and [(r.tool, r.args) for r in asked] == [("pay", {"order_id": 7})]


def test_read_only_calls_are_never_asked_about():
    asked: list[ApprovalRequest] = []
    react("Status of order 1", make_tools([]), session=Session(
        model=ScriptedModel([act("status", order_id=1), act("final_answer", answer="open")]),
        approver=lambda r: asked.append(r) or Decision.approve()))
    assert asked == []


def test_a_spec_that_asks_needs_an_approver_outside_the_terminal(tmp_path):
    tools = tmp_path / "tools.py"
    tools.write_text("from reflexa import tool\n\n@tool(side_effect=True)\ndef pay(order_id: int) -> str:\n"
                     "    '''Pay.'''\n    return 'paid'\n")
    spec = TaskSpec.parse({"loop": "react", "task": "Pay order 1", "tools": [str(tools)], "approve": "ask"})
    with pytest.raises(ConfigError, match="ask"):
        spec.run(Session(model=ScriptedModel([])))


def test_cli_defer_then_approve_then_resume(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pay_tools.py").write_text(
        "from pathlib import Path\nfrom reflexa import tool\n\n@tool(side_effect=True)\n"
        "def pay(order_id: int) -> str:\n    '''Pay an order.'''\n"
        "    with open('effects.log', 'a') as f:\n        f.write(f'{order_id}\\n')\n    return 'paid'\n")
    first = tmp_path / "first.json"
    first.write_text(json.dumps([act("pay", order_id=5)]))
    trace = str(tmp_path / "t.db")
    stopped = runner.invoke(app, ["react", "Pay order 5", "--tools", "pay_tools.py", "--approve", "defer",
                                  "--model", f"scripted:{first}", "--trace", trace])
    assert stopped.exit_code == 5, stopped.output
    assert "AWAITING_APPROVAL" in stopped.output and not (tmp_path / "effects.log").exists()
    run_id = SQLiteStore(trace).runs(1)[0].run_id
    shown = runner.invoke(app, ["show", run_id[:8], "--trace", trace])
    assert "waiting for approval: step 1 calls pay" in shown.output and "reflexa approve" in shown.output
    listed = runner.invoke(app, ["runs", "--status", "awaiting", "--trace", trace])
    assert run_id[:12] in listed.output, listed.output

    denied_first = runner.invoke(app, ["approve", run_id[:8], "--deny", "x", "--args", "{}", "--trace", trace])
    assert denied_first.exit_code == 2 and "exclude" in denied_first.output
    approved = runner.invoke(app, ["approve", run_id[:8], "--trace", trace])
    assert approved.exit_code == 0 and "approved: pay" in approved.output and "reflexa resume" in approved.output
    again = runner.invoke(app, ["approve", run_id[:8], "--deny", "no", "--trace", trace])
    assert again.exit_code == 2 and "approved already" in again.output and "--change" in again.output
    badly = runner.invoke(app, ["approve", run_id[:8], "--change", "--args", '{"order_id": "five"}',
                                "--trace", trace])
    assert badly.exit_code == 2
    assert "do not fit pay: order_id: 'five' is not of type 'integer'" in " ".join(badly.output.split())
    changed = runner.invoke(app, ["approve", run_id[:8], "--change", "--args", '{"order_id": 6}', "--trace", trace])
    assert changed.exit_code == 0 and 'approved: pay({"order_id": 6})' in changed.output, changed.output

    second = tmp_path / "second.json"
    second.write_text(json.dumps([act("final_answer", answer="paid")]))
    resumed = runner.invoke(app, ["resume", run_id[:8], "--model", f"scripted:{second}", "--trace", trace])
    assert resumed.exit_code == 4, resumed.output
    assert (tmp_path / "effects.log").read_text() == "6\n"
    late = runner.invoke(app, ["approve", run_id[:8], "--change", "--deny", "late", "--trace", trace])
    assert late.exit_code == 2 and "no call waiting" in late.output  # the run is over: nothing to decide


def test_cli_racing_decisions_one_wins_and_the_other_is_refused(tmp_path):
    """Two people decide on the same call at once (separate processes): exactly one decision is stored and
    reported, and the other is refused; a denial is never silently overridden."""
    import subprocess
    import sys

    store = SQLiteStore(tmp_path / "t.db")
    runs = [react("Pay order 7", make_tools([]), session=Session(
        model=ScriptedModel([act("pay", order_id=7)]), store=store, approver=defer)).run_id for _ in range(12)]
    cli = [sys.executable, "-m", "reflexa.cli", "approve"]
    for run_id in runs:
        racers = [subprocess.Popen([*cli, run_id, *extra, "--trace", str(tmp_path / "t.db")],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
                  for extra in ([], ["--deny", "no"])]
        said = [(p.wait(60), p.stdout.read()) for p in racers]  # type: ignore[union-attr]
        assert sorted(code for code, _ in said) == [0, 2], said
        winner = "approved" if said[0][0] == 0 else "denied"
        assert said[[0, 1][winner == "denied"]][1].startswith(f"{winner}: pay")
        assert "already" in said[[1, 0][winner == "denied"]][1]
        [stored] = waiting(store, run_id, decided=True)
        assert stored.status == winner


def test_cli_ask_reads_the_decision_from_the_terminal(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pay_tools.py").write_text(
        "from reflexa import tool\n\n@tool(side_effect=True)\ndef pay(order_id: int) -> str:\n"
        "    '''Pay an order.'''\n    return f'paid {order_id}'\n")
    script = tmp_path / "s.json"
    script.write_text(json.dumps([act("pay", order_id=5), act("final_answer", answer="done")]))
    result = runner.invoke(app, ["react", "Pay order 5", "--tools", "pay_tools.py", "--approve", "ask",
                                 "--model", f"scripted:{script}", "--trace", str(tmp_path / "t.db")],
                           input="e\n{\"order_id\": \"six\"}\ne\n[6]\ne\n{\"order_id\": 6}\n")
    assert result.exit_code == 4, result.output
    assert "approval needed" in result.output and "paid 6" in result.output
    assert "do not fit pay: order_id: 'six' is not of type 'integer'" in result.output  # asked again
    assert "must be a JSON object" in result.output


def test_a_plan_waits_on_its_sub_goal_s_call_and_resumes_it(tmp_path):
    from reflexa.loops import plan

    effects: list[int] = []
    store = SQLiteStore(tmp_path / "t.db")
    given = {"goal": "pay", "subgoals": [{"name": "look", "task": "Status of order 4"},
                                         {"name": "pay", "task": "Pay order 4", "depends_on": ["look"]}]}
    first = plan("Pay order 4", make_tools(effects), tree=given, replan=False, session=Session(
        model=ScriptedModel([act("status", order_id=4), act("final_answer", answer="open"), act("pay", order_id=4)]),
        store=store, approver=defer))
    assert first.stop_reason is StopReason.AWAITING_APPROVAL and effects == []
    assert first.run_id[:12] in first.error and "sub-goal pay" in first.error
    [call] = waiting(store, first.run_id)  # the plan's id finds its sub-goal's call
    decide(store, call, Decision.approve())
    done = plan("Pay order 4", make_tools(effects), tree=given, replan=False, resume=first.run_id, session=Session(
        model=ScriptedModel([act("final_answer", answer="paid")]), store=store, approver=defer))
    assert done.stop_reason is StopReason.ANSWERED_UNVERIFIED and effects == [4]


def test_trials_wait_and_resume_their_trial(tmp_path):
    effects: list[int] = []
    store = SQLiteStore(tmp_path / "t.db")
    spec_tools = tmp_path / "pay_tools.py"
    spec_tools.write_text("from reflexa import tool\nPAID = []\n\n@tool(side_effect=True)\n"
                          "def pay(order_id: int) -> str:\n    '''Pay.'''\n"
                          f"    open({str(tmp_path / 'effects.log')!r}, 'a').write(str(order_id))\n"
                          "    return 'paid'\n")
    spec = TaskSpec.parse({"loop": "trials", "task": "Pay order 2", "tools": [str(spec_tools)], "approve": "defer"})
    first = spec.run(Session(model=ScriptedModel([act("pay", order_id=2)]), store=store))
    assert first.stop_reason is StopReason.AWAITING_APPROVAL and store.get_run(first.run_id).status == "awaiting"
    [call] = waiting(store, first.run_id)
    decide(store, call, Decision.approve())
    done = spec.run(Session(model=ScriptedModel([act("final_answer", answer="paid")]), store=store),
                    resume=first.run_id)
    assert done.stop_reason is StopReason.ANSWERED_UNVERIFIED
    assert (tmp_path / "effects.log").read_text() == "2" and effects == []


def test_a_batch_task_that_waits_is_not_done_and_a_rerun_after_approval_resumes_it(tmp_path):
    from reflexa.batch import run_batch

    (tmp_path / "pay_tools.py").write_text(
        "from reflexa import tool\n\n@tool(side_effect=True)\ndef pay(order_id: int) -> str:\n"
        f"    '''Pay an order.'''\n    open({str(tmp_path / 'effects.log')!r}, 'a').write(str(order_id))\n"
        "    return 'paid'\n")
    (tmp_path / "tasks.jsonl").write_text(json.dumps(
        {"id": "pay", "loop": "react", "task": "Pay order 3", "tools": ["pay_tools.py"], "approve": "defer"}) + "\n")
    script, trace = tmp_path / "s.json", str(tmp_path / "t.db")
    script.write_text(json.dumps([act("pay", order_id=3)]))
    first = run_batch(tmp_path / "tasks.jsonl", "react", store=trace, model=f"scripted:{script}")
    assert (first.done, first.remaining) == (0, 1) and "reflexa approve" in first.errors[0]
    from reflexa.cli.batch import batch_exit_code

    assert batch_exit_code(first) == 5
    store = SQLiteStore(trace)
    run_id = next(r.run_id for r in store.runs(5) if r.meta.get("batch_task") == "pay")
    approved = runner.invoke(app, ["approve", run_id[:8], "--trace", trace])
    assert approved.exit_code == 0 and "run the batch again" in approved.output
    script.write_text(json.dumps([act("final_answer", answer="paid")]))  # the same batch: the same model spec
    second = run_batch(tmp_path / "tasks.jsonl", "react", store=trace, model=f"scripted:{script}")
    assert (second.ident, second.done, second.remaining) == (first.ident, 1, 0)
    assert (tmp_path / "effects.log").read_text() == "3"
