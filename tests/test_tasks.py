"""TaskSpec: a task of any loop as data. It validates whole, goes to a file and back, runs every loop from the
CLI (`reflexa run`), a batch line and a stored run (`reflexa resume`) the same way."""

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from reflexa import ConfigError, ScriptedModel, Session, SQLiteStore
from reflexa.cli.app import app
from reflexa.errors import RunInterrupted
from reflexa.tasks import TaskSpec

runner = CliRunner()
DOCS = Path(__file__).parent / "fixtures" / "docs"
ADD = "```python\ndef add(a, b):\n    return a + b\n```"
SUB = "```python\ndef add(a, b):\n    return a - b\n```"
TEST_ADD = "from solution import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"


def act(tool, **args):
    return {"action": {"thought": f"call {tool} with {sorted(args.items())}", "tool": tool, "args": args}}


def flat(text):
    return " ".join(text.split())


def scripted(path, **scripts):
    path.write_text(json.dumps(scripts))
    return f"scripted:{path}"


# --- the spec as data --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("data", "problem"), [
    ({"task": "t"}, "a refine task needs a check"),
    ({"task": "t", "regex": "x", "db": "shop.sqlite"}, "db: not a field of a refine task"),
    ({"task": "t", "regex": "x", "colour": "red"}, "colour: unknown field"),
    ({"task": "  ", "regex": "x"}, "task: empty"),
    ({"task": "t", "check": "  "}, "check: empty"),
    ({"task": "t", "test_code": "assert ("}, "test_code: not valid Python"),
    ({"task": "t", "regex": "("}, "regex:"),
    ({"task": "t", "regex": "x", "out": "../x.py"}, "out: must be a relative path"),
    ({"loop": "react", "task": "q"}, "a react task needs tools: db (an SQLite file), tools or mcp"),
    ({"loop": "react", "task": "q", "db": "s.sqlite", "tests": "t.py"}, "tests: not a field of a react task"),
    ({"loop": "research", "task": "q"}, "corpus: required"),
    ({"loop": "plan", "task": "q", "db": "s.sqlite", "max_rounds": 2}, "max_rounds: not a field of a plan task"),
    ({"loop": "dance", "task": "q"}, "loop: Input should be"),
    ({"task": "t", "regex": "x", "max_tokens": 0}, "max_tokens: Input should be greater than or equal to 1"),
])
def test_a_spec_is_checked_whole_before_anything_runs(data, problem):
    with pytest.raises(ConfigError) as rejected:
        TaskSpec.parse(data)
    assert problem in str(rejected.value)


def test_the_file_system_problems_are_named_relative_to_the_working_folder(tmp_path):
    (tmp_path / "notdb.sqlite").write_text("hello")
    (tmp_path / "t.py").write_text("def test_x():\n    assert True\n")
    react = TaskSpec.parse({"loop": "react", "task": "q", "db": "notdb.sqlite"}).resolved(tmp_path)
    assert react.problems() == ["db: not an SQLite database: notdb.sqlite"]
    refine = TaskSpec.parse({"task": "t", "tests": "t.py", "json_schema": "missing.json"}).resolved(tmp_path)
    assert refine.problems() == [
        "tests: t.py does not import `solution`, where the candidate is written (give `out` as the file the tests "
        "import, e.g. solution.py)", "json_schema: JSON schema file not found: missing.json"]
    with pytest.raises(ConfigError, match="the refine task cannot run: tests: t.py does not import"):
        refine.checked()


def test_a_spec_file_keeps_its_paths_relative_and_round_trips(tmp_path):
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "test_add.py").write_text(TEST_ADD)
    spec = TaskSpec.parse({"task": "Write add.", "tests": "test_add.py", "max_tokens": 900, "reflect": False,
                           "meta": {"n": 1}}).resolved(tmp_path / "proj")
    spec.to_file(tmp_path / "proj" / "task.json")
    written = json.loads((tmp_path / "proj" / "task.json").read_text())
    assert written == {"loop": "refine", "task": "Write add.", "tests": "test_add.py", "max_tokens": 900,
                       "reflect": False, "meta": {"n": 1}}
    shutil.move(tmp_path / "proj", tmp_path / "moved")  # the file and its inputs move together
    again = TaskSpec.from_file(tmp_path / "moved" / "task.json")
    assert again.checks["tests"] == str(tmp_path / "moved" / "test_add.py") and again.problems() == []
    assert again.budget.max_tokens == 900 and again.budget.max_reflections == 0


# --- every loop from one file --------------------------------------------------------------------------------

def loop_cases(tmp_path, shop):
    """A spec of each loop and the test model's scripts that make it pass."""
    (tmp_path / "test_add.py").write_text(TEST_ADD)
    shutil.copytree(DOCS, tmp_path / "docs")
    (tmp_path / "plan.json").write_text(json.dumps({"goal": "count orders", "subgoals": [
        {"name": "count", "task": "How many orders are there?", "depends_on": []}]}))
    orders = act("query", sql="SELECT count(*) FROM orders")
    validate = "SELECT 1 WHERE CAST(:answer AS INTEGER) = (SELECT count(*) FROM orders)"
    draft = {"answer": "[UNCERTAIN: in France]", "reflection": {"missing": ["city of the Eiffel Tower"],
                                                                 "superfluous": []}, "search_queries": ["Eiffel"]}
    revision = {**draft, "answer": "The Eiffel Tower is in Paris [1].", "evidence_used": [1],
                "quote": "The Eiffel Tower is a wrought-iron lattice tower in Paris"}
    import sqlite3

    with sqlite3.connect(shop) as conn:
        count = str(conn.execute("SELECT count(*) FROM orders").fetchone()[0])
    final = act("final_answer", answer=count)
    return {
        "refine": ({"task": "Write add(a, b).", "tests": "test_add.py"}, {"generator": [ADD]}),
        "react": ({"loop": "react", "task": "How many orders?", "db": str(shop), "validate": validate},
                  {"generator": [orders, final]}),
        "trials": ({"loop": "trials", "task": "How many orders?", "db": str(shop), "validate": validate,
                    "max_steps": 2}, {"generator": [orders, final]}),
        "research": ({"loop": "research", "task": "Where is the Eiffel Tower?", "corpus": "docs"},
                     {"generator": [draft, revision]}),
        "plan": ({"loop": "plan", "task": "How many orders?", "db": str(shop), "plan": "plan.json",
                  "validate": validate}, {"generator": [orders, final]}),
    }


@pytest.mark.parametrize("loop", ["refine", "react", "trials", "research", "plan"])
def test_reflexa_run_runs_a_saved_spec_of_each_loop_and_stores_it(loop, tmp_path, shop, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data, scripts = loop_cases(tmp_path, shop)[loop]
    (tmp_path / "task.json").write_text(json.dumps(data))
    model = scripted(tmp_path / "replies.json", **scripts)
    done = runner.invoke(app, ["run", "task.json", "--model", model, "--json", "--trace", "trace.db"])
    assert done.exit_code == 0, done.output
    result = json.loads(done.output)
    assert result["stop_reason"] == "PASSED"
    stored = SQLiteStore(tmp_path / "trace.db").get_run(result["run_id"])
    assert stored.loop == loop and TaskSpec.from_run(stored).task == data["task"]


def test_save_spec_writes_what_reflexa_run_then_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "test_add.py").write_text(TEST_ADD)
    saved = runner.invoke(app, ["refine", "Write add(a, b).", "--tests", "test_add.py", "--max-attempts", "2",
                                "--no-reflect", "--save-spec", "task.json"])
    assert saved.exit_code == 0 and "reflexa run task.json" in flat(saved.output), saved.output
    assert json.loads((tmp_path / "task.json").read_text()) == {
        "loop": "refine", "task": "Write add(a, b).", "tests": "test_add.py", "max_attempts": 2, "reflect": False}
    model = scripted(tmp_path / "r.json", generator=[SUB, ADD])
    ran = runner.invoke(app, ["run", "task.json", "--model", model, "-q", "--trace", "trace.db"])
    assert ran.exit_code == 0 and ran.output.startswith("PASSED"), ran.output
    assert not list(tmp_path.glob("solution*.py"))  # no --out: nothing written


def test_a_run_stopped_by_its_budget_runs_again_from_its_stored_spec_with_more(tmp_path, monkeypatch):
    """`resume` of a finished run said only "already finished", with no way on."""
    monkeypatch.chdir(tmp_path)
    model = scripted(tmp_path / "r.json", generator=[SUB, ADD, SUB, ADD])
    first = runner.invoke(app, ["refine", "Write add(a, b).", "--test-code", "assert add(2, 3) == 5", "--no-reflect",
                                "--max-calls", "1", "--model", model, "--json", "--trace", "t.db"])
    run_id = json.loads(first.output)["run_id"]
    refused = runner.invoke(app, ["resume", run_id, "--trace", "t.db"])
    assert refused.exit_code == 2 and f"reflexa show {run_id[:12]} --save-spec" in flat(refused.output)
    saved = runner.invoke(app, ["show", run_id[:12], "--save-spec", "again.json", "--trace", "t.db"])
    assert saved.exit_code == 0 and json.loads((tmp_path / "again.json").read_text())["max_calls"] == 1
    again = runner.invoke(app, ["run", "again.json", "--max-calls", "4", "-q", "--trace", "t.db"])
    assert again.exit_code == 0 and again.output.startswith("PASSED"), again.output


def test_batch_reads_the_same_spec_lines_for_any_loop(tmp_path, shop):
    """A batch line is a spec: lines of two loops in one file, each with its own model (the file's field)."""
    cases = loop_cases(tmp_path, shop)
    lines = []
    for loop in ("refine", "react"):
        data, scripts = cases[loop]
        (tmp_path / f"{loop}.json").write_text(json.dumps(scripts))
        lines.append({"id": loop, **data, "model": f"scripted:{loop}.json"})
    (tmp_path / "tasks.jsonl").write_text("\n".join(json.dumps(line) for line in lines))
    result = runner.invoke(app, ["batch", str(tmp_path / "tasks.jsonl"), "--json", "--trace", str(tmp_path / "t.db")])
    report = json.loads(result.output)
    assert result.exit_code == 0 and report["by_stop_reason"] == {"PASSED": 2}, result.output
    rows = {row["key"]: row for row in map(json.loads, (tmp_path / "tasks.results.jsonl").read_text().splitlines())}
    assert {key: row["loop"] for key, row in rows.items()} == {"refine": "refine", "react": "react"}
    assert all(row["passed"] for row in rows.values())


# --- resume rebuilds the stored spec --------------------------------------------------------------------------

@pytest.mark.parametrize("loop", ["refine", "react", "trials", "research", "plan"])
def test_reflexa_resume_rebuilds_an_interrupted_run_of_each_loop_from_its_spec(loop, tmp_path, shop, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data, scripts = loop_cases(tmp_path, shop)[loop]
    store = SQLiteStore(tmp_path / "trace.db")

    def interrupt(call):
        raise KeyboardInterrupt  # Ctrl-C at the first model call

    with pytest.raises(RunInterrupted):
        TaskSpec.parse(data).resolved(tmp_path).run(Session(model=ScriptedModel(function=interrupt), store=store))
    (run,) = [r for r in store.runs(10) if "parent" not in r.meta]
    assert run.status == "interrupted"
    model = scripted(tmp_path / "replies.json", **scripts)
    resumed = runner.invoke(app, ["resume", run.run_id[:10], "--model", model, "--json", "--trace", "trace.db"])
    assert resumed.exit_code == 0 and json.loads(resumed.output)["stop_reason"] == "PASSED", resumed.output
    assert json.loads(resumed.output)["run_id"] == run.run_id


def interrupted_run(spec, tmp_path, calls):
    """Run `spec` on a test model that answers `calls` (a function per call) until a call raises
    KeyboardInterrupt: the run is stored interrupted, with its spec."""
    store = SQLiteStore(tmp_path / "trace.db")
    with pytest.raises(RunInterrupted) as stopped:
        spec.resolved(tmp_path).run(Session(model=ScriptedModel(function=calls), store=store))
    return stopped.value.run_id


def test_a_resumed_react_run_keeps_its_own_step_bound(tmp_path, shop, monkeypatch):
    """`resume` once read the step bound from another field of the run's meta than `react` wrote; now the
    stored spec says it, for every loop alike."""
    monkeypatch.chdir(tmp_path)
    spec = TaskSpec.parse({"loop": "react", "task": "How many orders?", "db": str(shop), "max_steps": 3})

    def calls(call):
        if call.number == 2:
            raise KeyboardInterrupt
        return act("query", sql=f"SELECT {call.number} FROM orders LIMIT 1")

    run_id = interrupted_run(spec, tmp_path, calls)
    more = scripted(tmp_path / "r.json", generator=[act("query", sql=f"SELECT {n} + 10") for n in range(10)])
    resumed = runner.invoke(app, ["resume", run_id[:10], "--model", more, "--json", "--trace", "trace.db"])
    result = json.loads(resumed.output)
    assert result["stop_reason"] == "MAX_ITERATIONS" and result["iterations"] == 3, resumed.output


def test_a_resumed_refine_run_keeps_its_context_and_runs_where_it_started(tmp_path, monkeypatch):
    """A resumed refine once fell back to `context="latest"` (showing the failed code) and moved into the
    run's folder; now it revises as it started (`feedback`: no failed code shown) from wherever it is typed."""
    (tmp_path / "test_add.py").write_text(TEST_ADD)
    spec = TaskSpec.parse({"task": "Write add(a, b).", "tests": "test_add.py", "reflect": False})

    def calls(call):
        if call.number == 2:
            raise KeyboardInterrupt
        return SUB

    run_id = interrupted_run(spec, tmp_path, calls)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    replies = tmp_path / "r.json"
    replies.write_text(json.dumps([ADD]))
    resumed = runner.invoke(app, ["resume", run_id[:10], "--model", f"scripted:{replies}", "-q",
                                  "--trace", str(tmp_path / "trace.db")])
    assert resumed.exit_code == 0 and resumed.output.startswith("PASSED"), resumed.output
    store = SQLiteStore(tmp_path / "trace.db")
    assert store.get_run(run_id).meta["context"] == "feedback"
    revision = [s for s in store.steps(run_id) if s.kind == "model_call"][-1].input["messages"][-1]["content"]
    assert "return a - b" not in revision  # `feedback` tells how the attempt failed, without its code


@pytest.mark.parametrize(("repairs", "third_revises"), [("fixed", False), ("revise", True)])
def test_repairs_revise_revises_where_the_fixed_rule_samples(repairs, third_revises, tmp_path):
    """The fixed rule follows a failed revision with a fresh sample; `repairs: revise` revises again."""
    minus = "```python\ndef add(a, b):\n    return a * b\n```"
    model = ScriptedModel(generator=[SUB, minus, ADD])
    spec = TaskSpec(task="Write add(a, b).", test_code="assert add(2, 3) == 5", workdir=str(tmp_path),
                    reflect=False, repairs=repairs)
    result = spec.run(Session(model=model))
    assert result.passed and result.iterations == 3
    third = model.prompts[-1]
    assert (third != [{"role": "user", "content": spec.task}]) is third_revises


def test_a_run_started_from_python_with_no_spec_is_resumed_from_python(tmp_path):
    from reflexa import RegexCheck, refine

    store = SQLiteStore(tmp_path / "trace.db")

    def calls(call):
        raise KeyboardInterrupt

    with pytest.raises(RunInterrupted) as stopped:
        refine("say GOOD", [RegexCheck("GOOD")], session=Session(model=ScriptedModel(function=calls), store=store))
    refused = runner.invoke(app, ["resume", stopped.value.run_id[:10], "--trace", str(tmp_path / "trace.db")])
    assert refused.exit_code == 2 and "refine(..., resume=" in flat(refused.output)


# --- what reaches the screen ---------------------------------------------------------------------------------

def test_a_batch_counts_every_task_by_how_it_ended_and_its_exit_code_says_not_all_passed(tmp_path):
    """Five tasks, one stopping NO_PROGRESS: the summary once said `4 passed, 0 failed, 0 unfinished` and
    exited 0, the fifth task nowhere."""
    (tmp_path / "good.json").write_text(json.dumps(["GOOD"]))
    (tmp_path / "bad.json").write_text(json.dumps(["BAD"] * 3))  # the same failure three times over
    lines = [{"id": f"t{i}", "task": f"say GOOD {i}", "regex": "GOOD", "model": "scripted:good.json"}
             for i in range(4)]
    lines.append({"id": "stuck", "task": "say GOOD", "regex": "GOOD", "reflect": False, "model": "scripted:bad.json"})
    (tmp_path / "tasks.jsonl").write_text("\n".join(json.dumps(line) for line in lines))
    done = runner.invoke(app, ["batch", str(tmp_path / "tasks.jsonl"), "--trace", str(tmp_path / "t.db"), "-c", "2"])
    assert done.exit_code == 3, done.output
    assert "5 task(s): 4 PASSED, 1 NO_PROGRESS" in flat(done.output)
    again = runner.invoke(app, ["batch", str(tmp_path / "tasks.jsonl"), "--trace", str(tmp_path / "t.db"), "--json"])
    report = json.loads(again.output)  # the re-run counts the tasks done before the same way
    assert again.exit_code == 3 and report["by_stop_reason"] == {"NO_PROGRESS": 1, "PASSED": 4}


def test_a_rejected_plan_ends_with_its_stop_line_and_shows_the_tree(tmp_path, shop):
    """A planner that names one sub-goal twice, twice (no rule mends that): the run printed the usage table and
    no stop line."""
    looped = {"goal": "g", "subgoals": [{"name": "a", "task": "count the orders"}, {"name": "a", "task": "again"}]}
    model = scripted(tmp_path / "r.json", planner=[looped, looped])
    done = runner.invoke(app, ["plan", "How many orders?", "--db", str(shop), "--model", model,
                               "--trace", str(tmp_path / "t.db")])
    out = flat(done.output)
    assert done.exit_code == 3, done.output
    assert "goal tree rejected" in out and "count the orders" in out and "stop: UNRECOVERABLE" in out
    run_id = json.loads(runner.invoke(app, ["runs", "--json", "--trace", str(tmp_path / "t.db")]).output)[0]["run_id"]
    shown = flat(runner.invoke(app, ["show", run_id, "--trace", str(tmp_path / "t.db")]).output)
    assert "goal tree rejected" in shown and "used twice" in shown


def test_show_full_gives_a_failing_check_s_whole_output_and_the_passages_found(tmp_path, shop, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "test_slug.py").write_text(
        "from solution import slug\n\n\ndef test_slug():\n    assert slug('Hello,  World!') == 'hello--world-'\n")
    wrong = "```python\ndef slug(s):\n    return s.lower().replace(' ', '-').replace(',', '')\n```"
    model = scripted(tmp_path / "r.json", generator=[wrong])
    done = runner.invoke(app, ["refine", "Write slug(s).", "--tests", "test_slug.py", "--max-attempts", "1",
                               "--model", model, "--json", "--trace", "t.db"])
    run_id = json.loads(done.output)["run_id"]
    full = runner.invoke(app, ["show", run_id, "--full", "--trace", "t.db"]).output
    assert "assert 'hello--world!' == 'hello--world-'" in full
    _, scripts = loop_cases(tmp_path, shop)["research"]
    model = scripted(tmp_path / "q.json", **scripts)
    done = runner.invoke(app, ["research", "Where is the Eiffel Tower?", "--corpus", "docs", "--model", model,
                               "--json", "--trace", "t.db"])
    run_id = json.loads(done.output)["run_id"]
    full = flat(runner.invoke(app, ["show", run_id, "--full", "--trace", "t.db"]).output)
    assert "Eiffel Tower — " in full and "eiffel.md" in full and "wrought-iron lattice tower in Paris" in full


@pytest.mark.parametrize("command", ["refine", "react", "trials", "research", "plan", "run", "resume", "batch",
                                     "runs", "show", "ui", "models", "index", "experience", None])
def test_help_is_readable_at_80_columns(command, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    shown = runner.invoke(app, [command, "--help"] if command else ["--help"], terminal_width=80)
    assert shown.exit_code == 0
    assert "<bool>" not in shown.output and "…" not in shown.output
    assert max(len(line) for line in shown.output.splitlines()) <= 80
    flags = [line for line in shown.output.splitlines() if line.lstrip().startswith("-")]
    assert not [line for line in flags if "<" in line.split("  ")[1]]  # a named value (FILE, N), not <str>
    listed = shown.output.partition("Commands:")[2].splitlines()
    assert not [line for line in listed if line.endswith("...")]  # each command's line whole, not cut by click


def test_every_run_command_takes_the_same_budget_flags():
    for command in ("refine", "react", "trials", "research", "plan", "run"):
        shown = runner.invoke(app, [command, "--help"], terminal_width=200).output
        for flag in ("--max-tokens", "--max-calls", "--max-seconds", "--max-reflections", "--no-reflect",
                     "--model", "--reflector-model", "--json", "--jsonl", "--quiet", "--trace", "--save-spec"):
            assert flag in shown, (command, flag)
    refine = runner.invoke(app, ["refine", "--help"], terminal_width=200).output
    for flag in ("--tests", "--test-code", "--check", "--regex", "--json-schema", "--judge"):
        assert flag in refine
