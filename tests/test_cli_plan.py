"""`reflexa plan` through the CLI, with the scripted model: the tree as it runs, --json, bad plans, `show`."""

import json

from typer.testing import CliRunner

from reflexa import Budget, ScriptedModel
from reflexa.cli.app import app
from reflexa.runtime import Run
from reflexa.trace.sqlite import SQLiteStore

runner = CliRunner()


def act(tool, thought, **args):
    return {"action": {"thought": thought, "tool": tool, "args": args, "confidence": 0.9}}


PLAN = {
    "goal": "city of the buyer of order 5",
    "facts": ["answer with the city's name only"],
    "subgoals": [
        {"name": "buyer", "task": "Which customer id placed order 5?", "depends_on": [],
         "check": {"sql": "SELECT 1 FROM orders WHERE id = 5 AND customer_id = CAST(:answer AS INTEGER)"}},
        {"name": "city", "task": "Which city does that customer live in?", "depends_on": ["buyer"],
         "check": {"regex": "^[A-Z][a-z]+$"}},
    ],
}


def flat(text):
    """Output with the console's line wrapping undone."""
    return " ".join(text.split())


def truth(shop):
    import sqlite3

    with sqlite3.connect(shop) as conn:
        return conn.execute("SELECT c.id, c.city FROM orders o JOIN customers c ON c.id = o.customer_id "
                            "WHERE o.id = 5").fetchone()


def files(tmp_path, shop, plan=PLAN):
    customer, city = truth(shop)
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    (tmp_path / "r.json").write_text(json.dumps([
        act("query", "who placed it", sql="SELECT customer_id FROM orders WHERE id = 5"),
        act("final_answer", "found", answer=str(customer)),
        act("query", "where", sql=f"SELECT city FROM customers WHERE id = {customer}"),
        act("final_answer", "found", answer=city),
    ]))
    return ["--plan", str(tmp_path / "plan.json"), "--model", f"scripted:{tmp_path / 'r.json'}",
            "--trace", str(tmp_path / "trace.db")], city


def test_plan_prints_the_tree_with_statuses_and_passes(tmp_path, shop):
    args, city = files(tmp_path, shop)
    result = runner.invoke(app, ["plan", "Which city does the buyer of order 5 live in?", "--db", str(shop), *args])
    assert result.exit_code == 0, result.output
    assert "goal tree (given)" in result.output and "▶ buyer running" in result.output
    assert "✓ city passed" in result.output and city in result.output and "PASSED" in result.output


def test_plan_json_is_one_document(tmp_path, shop):
    args, city = files(tmp_path, shop)
    result = runner.invoke(app, ["plan", "Which city?", "--db", str(shop), *args, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["stop_reason"] == "PASSED" and data["output"] == city
    assert [u["status"] for u in data["details"]["subgoals"]] == ["passed", "passed"]


def test_show_prints_the_tree_and_a_child_run_points_to_its_plan(tmp_path, shop):
    args, city = files(tmp_path, shop)
    runner.invoke(app, ["plan", "Which city?", "--db", str(shop), *args])
    store = SQLiteStore(tmp_path / "trace.db")
    parent = store.runs(loop="plan")[0]
    shown = runner.invoke(app, ["show", parent.run_id[:12], "--trace", str(tmp_path / "trace.db")])
    assert shown.exit_code == 0 and "city of the buyer of order 5" in shown.output and f"→ {city}" in shown.output
    child = store.runs(loop="react")[0]
    shown = runner.invoke(app, ["show", child.run_id[:12], "--trace", str(tmp_path / "trace.db")])
    assert f"sub-goal city of plan run {parent.run_id[:12]}" in shown.output
    killed = Run("react", "t", ScriptedModel([]), budget=Budget(), store=store,
                 meta={"parent": parent.run_id, "subgoal": "city"})
    store.release_lease(killed.run_id, killed.owner)  # as if its process had died
    resumed = runner.invoke(app, ["resume", killed.run_id[:12], "--trace", str(tmp_path / "trace.db")])
    assert resumed.exit_code == 2 and f"reflexa resume {parent.run_id[:12]}" in resumed.output


def test_a_bad_plan_file_is_one_line_and_no_tokens(tmp_path, shop):
    cyclic = {**PLAN, "subgoals": [{**PLAN["subgoals"][0], "depends_on": ["city"]}, PLAN["subgoals"][1]]}
    args, _ = files(tmp_path, shop, cyclic)
    result = runner.invoke(app, ["plan", "Which city?", "--db", str(shop), *args])
    assert result.exit_code == 2 and "dependency cycle: buyer -> city -> buyer" in flat(result.output)
    assert "Traceback" not in result.output
    (tmp_path / "plan.json").write_text("{not json")
    result = runner.invoke(app, ["plan", "Which city?", "--db", str(shop), *args])
    assert result.exit_code == 2 and "is not readable JSON" in flat(result.output)
    (tmp_path / "plan.json").write_text(json.dumps({**PLAN, "subgoals": [{"name": "x", "tsk": "typo"}]}))
    result = runner.invoke(app, ["plan", "Which city?", "--db", str(shop), *args])
    assert result.exit_code == 2 and "subgoals.0.task: Field required" in flat(result.output)
