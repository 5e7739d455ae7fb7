"""Browsing runs from the terminal: `runs` with filters and --json, `show` with times, the answer and how
to go on, a run whose process died shown as stale, and the small flags (`--version`, `experience --json`)."""

import json
import os
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from reflexa.cli.app import app
from reflexa.cli.browse import parse_since, parse_status, runs_table
from reflexa.errors import ConfigError
from reflexa.trace.sqlite import SQLiteStore
from reflexa.trace.store import RunRecord

runner = CliRunner()
RIGHT = "```python\ndef add(a, b):\n    return a + b\n```"
TESTS = "from solution import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"


def invoke(*args: str):
    return runner.invoke(app, list(args))


@pytest.fixture()
def store(tmp_path, monkeypatch):
    """A trace with one finished refine run (made through the CLI) in the working directory."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "test_add.py").write_text(TESTS)
    (tmp_path / "r.json").write_text(json.dumps([RIGHT]))
    assert invoke("refine", "Write add(a, b)\nwith a docstring", "--tests", "test_add.py", "-q",
                  "--model", f"scripted:{tmp_path / 'r.json'}").exit_code == 0
    return SQLiteStore(os.environ["REFLEXA_TRACE"])


def dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def test_a_run_whose_process_died_is_stale_not_running(store):
    store.start_run(RunRecord("deadbeef" * 4, "react", "killed midway", started_at=time.time(),
                              meta={"model": "scripted", "spec": {"loop": "react", "task": "killed midway",
                                                                  "db": "shop.sqlite"}}))  # as the CLI starts it
    store.acquire_lease("deadbeef" * 4, "gone", dead_pid())
    rows = json.loads(invoke("runs", "--json").output)
    assert {r["run_id"][:8]: r["status"] for r in rows} == {"deadbeef": "stale", rows[1]["run_id"][:8]: "finished"}
    assert json.loads(invoke("runs", "--status", "running", "--json").output) == []
    assert [r["loop"] for r in json.loads(invoke("runs", "--status", "stale", "--json").output)] == ["react"]
    shown = invoke("show", "deadbeef")
    assert "no live process holds it" in shown.output and "reflexa resume deadbeef" in shown.output
    # What `reflexa resume` cannot rebuild (no spec stored) gets the Python call, never a command that refuses it.
    store.start_run(RunRecord("feedbead" * 4, "trials", "t", started_at=time.time(), meta={"model": "scripted"}))
    store.acquire_lease("feedbead" * 4, "gone", dead_pid())
    hint = " ".join(invoke("show", "feedbead").output.split())
    assert "trials(..., resume='feedbeadfeed')" in hint and "reflexa resume feedbead" not in hint
    resumed = invoke("resume", "feedbead")
    assert resumed.exit_code == 2 and "started from Python" in resumed.output
    # A trial of a trials run is resumed through its parent.
    store.start_run(RunRecord("cafecafe" * 4, "react", "t", started_at=time.time(),
                              meta={"model": "scripted", "parent": "feedbead" * 4, "trial": 1}))
    store.acquire_lease("cafecafe" * 4, "gone", dead_pid())
    assert "reflexa resume feedbeadfeed" in " ".join(invoke("show", "cafecafe").output.split())
    refused = invoke("resume", "cafecafe")
    assert refused.exit_code == 2 and "reflexa resume feedbeadfeed" in " ".join(refused.output.split())


def test_runs_filters_and_json_fields(store):
    rows = json.loads(invoke("runs", "--json", "--loop", "refine", "--status", "passed", "--since", "1h").output)
    assert len(rows) == 1
    row = rows[0]
    assert row["status"] == "finished" and row["stop_reason"] == "PASSED" and row["model"] == "scripted"
    assert row["duration_seconds"] >= 0 and row["calls"] == 1 and row["task"].startswith("Write add")
    assert json.loads(invoke("runs", "--json", "--loop", "react").output) == []
    assert json.loads(invoke("runs", "--json", "--since", "2999-01-01").output) == []
    assert invoke("runs", "--loop", "react").output.strip() == "no runs match"
    for bad, message in (("--since", "yesterday"), ("--status", "bogus")):
        result = invoke("runs", bad, message)
        assert result.exit_code == 2 and ("--since must be" in result.output or "unknown status" in result.output)


def test_parse_since_and_status():
    assert parse_since("2h", now=10_000.0) == 10_000.0 - 7200
    assert parse_since("1.5d", now=200_000.0) == 200_000.0 - 1.5 * 86400
    assert parse_since("2026-11-30") > 0
    with pytest.raises(ConfigError):
        parse_since("soon")
    assert parse_status("Stale") == "stale" and parse_status("no_progress") == "NO_PROGRESS"


def test_the_runs_table_never_wraps_a_row():
    from rich.console import Console

    records = [(RunRecord("a" * 32, "research", "a long task " * 20, status="finished", stop_reason=reason,
                          started_at=1_700_000_000.0, ended_at=1_700_000_100.0,
                          meta={"model": "openai:http://127.0.0.1:8000/v1#some-long-model-name"}), "finished")
               for reason in ("ANSWERED_UNVERIFIED", "PASSED")]
    for width in (80, 100, 160):
        console = Console(width=width, record=True, file=open(os.devnull, "w"))  # noqa: SIM115 - a sink
        console.print(runs_table(records, width))
        lines = console.export_text().splitlines()
        assert len(lines) == 4 and all(len(line) <= width for line in lines)  # header, rule, two rows
        assert "UNVERIFIED" in lines[2] and "aaaaaaaaaaaa" in lines[2] and "1m40s" in lines[2]
        assert "a long task a" in lines[2] and lines[2].endswith("…")
        assert ("model" in lines[0]) == (width == 160)  # left out where the task would keep too little room


def test_show_has_times_status_and_distinct_errors(store):
    run_id = store.runs()[0].run_id
    shown = invoke("show", run_id[:6])
    assert shown.exit_code == 0
    assert "refine · model scripted · PASSED" in shown.output and "started " in shown.output
    assert "took" in shown.output and "verdict: PASS" in shown.output
    unknown, empty = invoke("show", "zzzz"), invoke("show", "")
    assert unknown.exit_code == 2 and "no run has an id starting with 'zzzz'" in unknown.output
    assert empty.exit_code == 2 and "no run id given" in empty.output


def test_show_names_a_reflector_on_a_model_of_its_own(store):
    without = store.runs()[0].run_id  # the fixture's run reflected on its own model
    store.start_run(RunRecord("beadbead" * 4, "refine", "t", started_at=time.time(),
                              meta={"model": "local:qwen", "reflector_model": "local:qwen1.5b"}))
    assert "refine · model local:qwen · reflector local:qwen1.5b · " in invoke("show", "beadbead").output
    assert "reflector" not in invoke("show", without).output.splitlines()[1]


def test_show_prints_a_research_answer_with_its_references(store):
    answer = "Paris is the capital [1].\n\nReferences:\n[1] docs/france.md: Paris is the capital of France."
    store.start_run(RunRecord("feedface" * 4, "research", "capital of France?", started_at=time.time(),
                              meta={"model": "scripted"}))
    store.finish_run("feedface" * 4, "PASSED", time.time(), {"output": answer, "usage": {}, "notes": [],
                                                             "counters": {}})
    shown = invoke("show", "feedface")
    assert "Paris is the capital [1]." in shown.output and "[1] docs/france.md" in shown.output


def test_version_help_and_experience_json(tmp_path):
    from reflexa import __version__

    assert invoke("--version").output.strip() == f"reflexa {__version__}"
    assert "[n]" in invoke("research", "--help").output and "[n]" in invoke("--help").output
    assert "reflexa[postgres]" in invoke("runs", "--help").output


def test_an_internal_error_prints_its_message_as_typed(monkeypatch, capsys):
    """The last-resort handler prints a message holding rich markup (a path with brackets) as it is."""
    import reflexa.cli.app as cli

    def broken() -> None:
        raise OSError("cannot open [/b]/x")

    monkeypatch.setattr(cli, "app", broken)
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    assert exit_.value.code == 1 and "OSError: cannot open [/b]/x" in capsys.readouterr().err
    SQLiteStore(os.environ["REFLEXA_TRACE"]).close()
    assert json.loads(invoke("experience", "--json").output) == []


def _as_a_user_who_cannot_write() -> list[str]:
    """A command prefix under which file permissions bind: root without the capabilities that override
    them (setpriv), or nothing for another user. Skips where neither is possible."""
    import shutil

    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: file permissions cannot be made to bind")
    caps = "-dac_override,-dac_read_search"
    return ["setpriv", f"--bounding-set={caps}", f"--inh-caps={caps}"]


def _reader(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*_as_a_user_who_cannot_write(), sys.executable, "-m", "reflexa.cli", *args],
                          capture_output=True, text=True, timeout=60)


def _shared_trace(tmp_path) -> tuple:
    """A trace with one finished run, in a folder of its own, and the writer that made it (still open)."""
    trace = tmp_path / "shared" / "trace.db"
    trace.parent.mkdir()
    from reflexa import RegexCheck, ScriptedModel, Session, refine

    writer = SQLiteStore(trace)
    refine("Write add(a, b)", [RegexCheck(r"return a \+ b")],
           session=Session(model=ScriptedModel([RIGHT]), store=writer))
    return trace, writer


def test_runs_show_and_experience_read_a_trace_in_a_directory_they_may_not_write(tmp_path):
    """Another user's trace, a read-only mount: the reading commands open it read-only instead of failing
    to open it for writing, and change nothing."""
    trace, writer = _shared_trace(tmp_path)
    writer.close()  # the last connection checkpoints the WAL into the file and removes it
    before = trace.read_bytes()
    trace.chmod(0o444)
    trace.parent.chmod(0o555)
    try:
        listed = _reader("runs", "--json", "--trace", str(trace))
        assert listed.returncode == 0, listed.stderr
        (run,) = json.loads(listed.stdout)
        shown = _reader("show", run["run_id"][:8], "--trace", str(trace))
        assert shown.returncode == 0 and "Write add(a, b)" in shown.stdout, shown.stderr
        assert _reader("experience", "--json", "--trace", str(trace)).returncode == 0
    finally:
        trace.parent.chmod(0o755)
    assert trace.read_bytes() == before and [p.name for p in trace.parent.iterdir()] == ["trace.db"]


def test_a_read_only_copy_whose_wal_holds_steps_is_refused_not_read_partly(tmp_path):
    """trace.db and its -wal copied where the reader may not write (no -shm beside them): SQLite could only
    read the main file, without the WAL's steps, so the command says so instead of showing part of it."""
    import shutil

    trace, writer = _shared_trace(tmp_path)
    copy = tmp_path / "copy" / "trace.db"
    copy.parent.mkdir()
    for suffix in ("", "-wal"):
        shutil.copy(f"{trace}{suffix}", f"{copy}{suffix}")
    writer.close()
    copy.parent.chmod(0o555)
    try:
        done = _reader("runs", "--trace", str(copy))
    finally:
        copy.parent.chmod(0o755)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "holds steps not yet in the main file" in " ".join(done.stderr.split())


def test_a_batch_task_s_run_is_resumed_by_its_batch_and_show_says_so(store):
    """A batch react run has no `write` in its meta: `resume` used to crash on it (KeyError), after `show`
    had told the user to run exactly that."""
    store.start_run(RunRecord("beadbead" * 4, "react", "How many orders?", started_at=time.time(),
                              meta={"model": "scripted", "toolset": "sql", "db": "shop.sqlite", "batch": "b1",
                                    "batch_task": "q"}))
    store.acquire_lease("beadbead" * 4, "gone", dead_pid())
    shown = " ".join(invoke("show", "beadbead").output.split())
    assert "run the same `reflexa batch` command again" in shown and "reflexa resume beadbead" not in shown
    resumed = invoke("resume", "beadbead")
    assert resumed.exit_code == 2 and "is task q of a batch" in resumed.output
    assert "Traceback" not in resumed.output and "internal error" not in resumed.output


def test_a_plan_s_sub_goal_runs_are_listed_under_it_with_the_plan_s_own_tokens(shop, tmp_path):
    """`reflexa runs` and the viewer list a plan's sub-goal runs under the plan, and show the same tokens."""
    from reflexa import ScriptedModel, Session, plan, sql_tools

    def act(tool, **args):
        return {"action": {"thought": f"call {tool}", "tool": tool, "args": args}}

    trace = SQLiteStore(tmp_path / "plan.db")
    model = ScriptedModel(planner=[{"goal": "city of the buyer of order 5", "subgoals": [
        {"name": "buyer", "task": "Which customer id placed order 5?"},
        {"name": "city", "task": "Which city does that customer live in?", "depends_on": ["buyer"]}]}],
        generator=[act("query", sql="SELECT customer_id FROM orders WHERE id = 5"), act("final_answer", answer="4"),
                   act("query", sql="SELECT city FROM customers WHERE id = 4"), act("final_answer", answer="Osaka")])
    result = plan("Which city does the buyer of order 5 live in?", sql_tools(shop), session=Session(model=model,
                                                                                                     store=trace))
    trace.close()
    listed = json.loads(invoke("runs", "--json", "--limit", "1", "--trace", str(tmp_path / "plan.db")).output)
    assert [run["run_id"] for run in listed][0] == result.run_id  # the limit counts the plan, not its children
    assert len(listed) == 3 and all(run["parent"] == result.run_id for run in listed[1:])
    table = invoke("runs", "--trace", str(tmp_path / "plan.db")).output
    assert table.count("└ ") == 2
    cli_tokens = listed[0]["input_tokens"] + listed[0]["output_tokens"]
    assert cli_tokens == result.total_usage.total_tokens > 0

    pytest.importorskip("fastapi")
    from reflexa.ui.store import ReadOnlyStore

    rows = ReadOnlyStore(tmp_path / "plan.db").search_runs()
    assert [(row.record.run_id, row.child) for row in rows][0] == (result.run_id, False)
    assert [row.child for row in rows] == [False, True, True]
    assert rows[0].tokens == cli_tokens  # the viewer shows the plan's own total, children included


def test_show_fits_80_columns_with_its_timestamps(tmp_path):
    """A step's time was printed before its rule, which then ran 9 columns past the width."""
    from rich.console import Console

    from reflexa import ScriptedModel, Session, refine
    from reflexa.cli.browse import show_run

    store = SQLiteStore(tmp_path / "t.db")
    wrong = "```python\ndef add(a, b):\n    return a - b\n```"
    model = ScriptedModel(generator=[wrong, RIGHT], reflector=["not a lesson: it is discarded, at length " * 3])
    result = refine("Write add(a, b).", lambda c: "a + b" in c, session=Session(model=model, store=store))
    console = Console(width=80, record=True, file=open(os.devnull, "w"))  # noqa: SIM115 - a sink
    show_run(console, store, store.get_run(result.run_id), full=False)
    lines = console.export_text().splitlines()
    assert any("attempt 2" in line for line in lines) and max(len(line) for line in lines) <= 80
