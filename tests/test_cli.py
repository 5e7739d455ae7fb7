import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from reflexa.cli.app import app

EXAMPLE = Path(__file__).parent.parent / "examples" / "is_prime"
WRONG = "Plan: guess\n```python\ndef is_prime(n):\n    return n > 1\n```"
RIGHT = (
    "Plan: trial division\n```python\ndef is_prime(n: int) -> bool:\n    if n < 2:\n        return False\n"
    "    return all(n % d for d in range(2, int(n ** 0.5) + 1))\n```"
)
LESSON = {
    "failure_step": "attempt 1",
    "observed_mismatch": "test_larger_numbers failed",
    "root_cause": "composites are called prime",
    "correction": "try divisors up to sqrt(n)",
}

runner = CliRunner()


def replies(tmp_path: Path, *items) -> str:
    path = tmp_path / "replies.json"
    path.write_text(json.dumps(list(items)))
    return f"scripted:{path}"


def invoke(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def test_refine_with_tests_shows_attempts_and_stores_the_run(tmp_path):
    spec = replies(tmp_path, WRONG, LESSON, RIGHT)
    result = invoke(
        "refine", str(EXAMPLE / "task.md"), "--tests", str(EXAMPLE / "test_solution.py"), "--model", spec
    )
    assert result.exit_code == 0, result.output
    out = result.output
    assert "attempt 1" in out and "NEEDS_IMPROVEMENT" in out and "try divisors" in out
    assert "attempt 2" in out and "PASS" in out and "stop: PASSED" in out
    assert "generator" in out and "reflector" in out
    listing = invoke("runs")
    assert "refine" in listing.output and "PASSED" in listing.output


def test_refine_json_output_and_show(tmp_path):
    spec = replies(tmp_path, RIGHT)
    result = invoke(
        "refine",
        "Write is_prime(n: int) -> bool",
        "--tests",
        str(EXAMPLE / "test_solution.py"),
        "--model",
        spec,
        "--json",
    )
    data = json.loads(result.output)
    assert data["stop_reason"] == "PASSED" and "is_prime" in data["best"]
    assert set(data) >= {"output", "best", "verdict", "stop_reason", "usage", "run_id"}
    shown = invoke("show", data["run_id"][:8])
    assert shown.exit_code == 0 and "attempt 1" in shown.output and "PASS" in shown.output
    as_json = json.loads(invoke("show", data["run_id"], "--json").output)
    assert [s["kind"] for s in as_json["steps"]][-1] == "stop"


def test_refine_with_check_command_writes_out(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "test_solution.py").write_text((EXAMPLE / "test_solution.py").read_text())
    spec = replies(tmp_path, RIGHT)
    result = invoke(
        "refine",
        "Write is_prime(n: int) -> bool",
        "--check",
        f"{sys.executable} -m pytest -q -p no:cacheprovider",
        "--out",
        "solution.py",
        "--model",
        spec,
    )
    assert result.exit_code == 0, result.output
    assert "def is_prime" in (tmp_path / "solution.py").read_text()


def test_unsolved_run_exits_3_with_its_stop_reason(tmp_path):
    spec = replies(tmp_path, WRONG, LESSON, WRONG, WRONG)  # the repeat gets one sampled attempt, which repeats too
    result = invoke("refine", "t", "--tests", str(EXAMPLE / "test_solution.py"), "--model", spec)
    assert result.exit_code == 3 and "NO_PROGRESS" in result.output


@pytest.mark.parametrize(
    "args,message",
    [
        (["missing.md", "--tests", "x.py"], "task file not found"),
        (["t", "--tests", "nope.py"], "tests: file not found: nope.py"),
        (["t"], "a refine task needs a check"),
        (["t", "--judge", "--model", "bogus:thing"], "unknown model spec"),
        (["t", "--judge", "--model", "local:/no/such/model.gguf"], "model file not found"),
        (["t", "--judge", "--model", "scripted:/no/such.json"], "not found"),
        (["t", "--judge", "--context", "weird"], "context: Input should be"),
        (["t", "--judge", "--repairs", "sometimes"], "repairs: Input should be"),
    ],
)
def test_bad_input_is_one_clear_line(args, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["refine", *args])
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output


def test_model_not_installed_gives_the_install_hint(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llama_cpp" else real(name, *a))
    result = runner.invoke(app, ["refine", "t", "--judge", "--model", "local"])
    assert result.exit_code == 2 and "not installed" in result.output and "pip install" in result.output


def test_unreachable_server_is_one_line_and_exit_1():
    # Port 9 on loopback: nothing listens there.
    result = runner.invoke(
        app, ["refine", "t", "--judge", "--model", "openai:http://127.0.0.1:9/v1#m", "--max-seconds", "30"]
    )
    assert result.exit_code == 1
    assert "cannot reach the model server" in result.output and "Traceback" not in result.output


def test_show_unknown_run():
    import os

    from reflexa import SQLiteStore

    for command in (["show", "nope"], ["runs"], ["experience"]):  # a reader never creates the store it reads
        missing = runner.invoke(app, command)
        assert missing.exit_code == 2 and "no trace store at" in missing.output, command
    assert not Path(os.environ["REFLEXA_TRACE"]).exists()
    SQLiteStore(os.environ["REFLEXA_TRACE"]).close()
    result = runner.invoke(app, ["show", "nope"])
    assert result.exit_code == 2 and "no run has an id starting with" in result.output
    assert runner.invoke(app, ["runs"]).output.strip() == "no runs stored yet"


def test_refine_refuses_an_empty_check_an_empty_task_file_and_an_out_over_the_trace(tmp_path, monkeypatch):
    import os

    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty.md").write_text(" \n")
    spec = replies(tmp_path, RIGHT)
    tests = str(EXAMPLE / "test_solution.py")
    for args, message in (
        (["t", "--check", "  ", "--model", spec], "check: empty"),
        (["empty.md", "--tests", tests, "--model", spec], "the task file is empty"),
        (["t", "--tests", tests, "--model", spec, "--out", "trace.db"], "would overwrite the trace store"),
        (["t", "--tests", tests, "--model", spec, "--out", "trace.db-wal"], "would overwrite the trace"),
    ):
        monkeypatch.setenv("REFLEXA_TRACE", str(tmp_path / "trace.db"))
        result = runner.invoke(app, ["refine", *args])
        assert result.exit_code == 2 and message in " ".join(result.output.split()), (args, result.output)
    assert not (tmp_path / "trace.db").exists() or os.path.getsize(tmp_path / "trace.db") > 0


def test_a_best_sibling_that_is_a_directory_is_refused_before_the_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "solution.py").write_text("mine\n")
    (tmp_path / "solution.best.py").mkdir()
    result = runner.invoke(app, ["refine", "t", "--tests", str(EXAMPLE / "test_solution.py"),
                                 "--model", replies(tmp_path, WRONG), "--out", "solution.py"])
    assert result.exit_code == 2 and "is a directory" in " ".join(result.output.split())
    assert (tmp_path / "solution.py").read_text() == "mine\n"


def test_models_lists_every_backend():
    result = invoke("models")
    for backend in ("local", "openai", "anthropic", "scripted"):
        assert backend in result.output


def test_bad_flag_is_a_usage_error_without_traceback():
    proc = subprocess.run([sys.executable, "-m", "reflexa.cli", "refine", "--bogus"], capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "No such option" in proc.stderr


def test_config_file_and_environment_choose_the_model(tmp_path, monkeypatch):
    from reflexa.models.spec import configured_spec

    monkeypatch.chdir(tmp_path)
    assert configured_spec() == "local"
    (tmp_path / "reflexa.toml").write_text('model = "openai:gpt-4o-mini"\n')
    assert configured_spec() == "openai:gpt-4o-mini"
    monkeypatch.setenv("REFLEXA_MODEL", "scripted:x.json")
    assert configured_spec() == "scripted:x.json"
    # Empty counts as unset, wherever it is: the next source is read.
    import os

    user = tmp_path / "home" / "config" / "reflexa"
    user.mkdir(parents=True)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home" / "config"))
    (user / "config.toml").write_text('model = "openai:gpt-4o"\nprompt_cache = "false"\n')
    (tmp_path / "reflexa.toml").write_text('model = ""\n')
    monkeypatch.setenv("REFLEXA_MODEL", "  ")
    assert configured_spec() == "openai:gpt-4o" and os.environ["REFLEXA_MODEL"] == "  "
    from reflexa.errors import ConfigError
    from reflexa.models.config import prompt_cache

    with pytest.raises(ConfigError, match="prompt_cache must be true or false"):  # "false" as text is no false
        prompt_cache()


def test_long_one_line_task_is_text(tmp_path):
    spec = replies(tmp_path, RIGHT)
    task = "Write is_prime(n: int) -> bool. " * 12
    result = runner.invoke(
        app, ["refine", task, "--tests", str(EXAMPLE / "test_solution.py"), "--model", spec]
    )
    assert result.exit_code == 0, result.output


def test_out_outside_the_directory_is_refused_for_check(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(
        app,
        [
            "refine",
            "t",
            "--check",
            "true",
            "--out",
            str(tmp_path / "x" / ".." / "s.py"),
            "--model",
            "scripted:r.json",
        ],
    )
    assert result.exit_code == 2 and "must be a relative path inside" in " ".join(result.output.split())


def test_out_never_replaces_an_input_or_a_file_with_an_answer_that_did_not_pass(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    tests = tmp_path / "test_solution.py"
    tests.write_text((EXAMPLE / "test_solution.py").read_text())
    spec = replies(tmp_path, WRONG, LESSON, WRONG, WRONG)
    refused = runner.invoke(app, ["refine", "t", "--tests", "test_solution.py", "--out", "test_solution.py",
                                  "--model", spec])
    assert refused.exit_code == 2 and "would overwrite the --tests file" in refused.output
    assert tests.read_text() == (EXAMPLE / "test_solution.py").read_text()

    (tmp_path / "solution.py").write_text("# mine\n")
    failed = invoke("refine", "t", "--tests", "test_solution.py", "--out", "solution.py", "--model", spec)
    assert failed.exit_code == 3 and "solution.py is kept as it was" in failed.output
    assert (tmp_path / "solution.py").read_text() == "# mine\n"
    assert "return n > 1" in (tmp_path / "solution.best.py").read_text()

    passed = invoke("refine", "t", "--tests", "test_solution.py", "--out", "solution.py",
                    "--model", replies(tmp_path, RIGHT))
    assert passed.exit_code == 0 and "def is_prime" in (tmp_path / "solution.py").read_text()


def test_a_lone_surrogate_in_model_text_does_not_break_the_output(tmp_path):
    """A JSON reply's "\\ud800" reaches the live view and --jsonl; UTF-8 cannot print it, so a replacement
    character is printed instead of the run failing as an internal error halfway."""
    candidate = "```python\ndef is_prime(n):\n    return n > 1  # \ud800\n```"
    (tmp_path / "r.json").write_text(json.dumps([candidate, LESSON, RIGHT]))
    for mode in ("--jsonl", "-v"):
        done = subprocess.run([sys.executable, "-m", "reflexa.cli", "refine", "t", "--tests",
                               str(EXAMPLE / "test_solution.py"), "--model", f"scripted:{tmp_path / 'r.json'}",
                               "--trace", str(tmp_path / "t.db"), mode], capture_output=True, text=True,
                              errors="replace", timeout=120)
        assert done.returncode == 0 and "internal error" not in done.stderr, done.stderr


@pytest.mark.parametrize("flag", ["--plan", "tasks", "--model"])
def test_json_nested_too_deeply_is_one_clear_line(flag, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000)
    import sqlite3
    sqlite3.connect(tmp_path / "db.sqlite").execute("CREATE TABLE t (x)").connection.close()
    spec = replies(tmp_path, RIGHT)
    args = {"--plan": ["plan", "goal", "--db", "db.sqlite", "--plan", "deep.json", "--model", spec],
            "tasks": ["batch", "deep.json", "--loop", "refine", "--model", spec],
            "--model": ["refine", "t", "--check", "true", "--model", "scripted:deep.json"]}[flag]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "nested too deeply" in result.output, result.output


def test_a_jsonl_reader_that_closes_the_pipe_early_stops_the_lines_not_the_run(tmp_path):
    """`reflexa refine ... --jsonl | head -1`, for the run's id: the run still ends and is stored as it ended.
    Before, the BrokenPipeError ended the process and left the run stored as running."""
    import os
    import sqlite3

    spec = tmp_path / "slow.json"
    spec.write_text(json.dumps({"replies": [WRONG, LESSON, RIGHT], "delay": 0.5}))
    env = {**os.environ, "REFLEXA_TRACE": str(tmp_path / "trace.db")}
    command = [sys.executable, "-m", "reflexa.cli", "refine", str(EXAMPLE / "task.md"), "--tests",
               str(EXAMPLE / "test_solution.py"), "--model", f"scripted:{spec}", "--jsonl"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tmp_path) as proc:
        first = json.loads(proc.stdout.readline())
        proc.stdout.close()  # the reader goes away after the first line
        assert proc.wait(timeout=60) == 0, proc.stderr.read()
    with sqlite3.connect(tmp_path / "trace.db") as conn:
        status, reason = conn.execute("SELECT status, stop_reason FROM runs WHERE run_id = ?",
                                      (first["run_id"],)).fetchone()
    assert (status, reason) == ("finished", "PASSED")


def test_a_blank_reflexa_trace_is_unset_not_a_file_named_blank(tmp_path, monkeypatch):
    import os

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("REFLEXA_TRACE", "  ")
    result = runner.invoke(app, ["refine", "t", "--tests", str(EXAMPLE / "test_solution.py"), "-q",
                                 "--model", replies(tmp_path, RIGHT)])
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "  ").exists()
    assert (Path(os.environ["XDG_DATA_HOME"]) / "reflexa" / "trace.db").is_file()


def test_reflector_model_flag_environment_and_resume(tmp_path, monkeypatch):
    """--reflector-model sends the reflector's calls to their own model (the generator's replies hold no
    lesson, so a reflector call that reached it would fail the run); '' overrides a configured reflector;
    a resumed run gets the reflector it started with."""
    from reflexa import Budget, SQLiteStore, resolve_model
    from reflexa.runtime import Run

    def spec(name, *items):
        (tmp_path / name).write_text(json.dumps(list(items)))
        return f"scripted:{tmp_path / name}"

    tests = str(EXAMPLE / "test_solution.py")
    done = invoke("refine", str(EXAMPLE / "task.md"), "--tests", tests, "--json",
                  "--model", spec("gen.json", WRONG, RIGHT), "--reflector-model", spec("ref.json", LESSON))
    data = json.loads(done.output)
    assert data["stop_reason"] == "PASSED" and data["usage"]["reflector"]["calls"] == 1, done.output
    shown = json.loads(invoke("show", data["run_id"], "--json").output)
    assert shown["run"]["meta"]["reflector_model_spec"] == f"scripted:{tmp_path / 'ref.json'}"

    monkeypatch.setenv("REFLEXA_REFLECTOR_MODEL", spec("unused.json"))  # an empty queue: a call to it fails
    own = invoke("refine", str(EXAMPLE / "task.md"), "--tests", tests, "-q",
                 "--model", spec("all.json", WRONG, LESSON, RIGHT), "--reflector-model", "")
    assert own.exit_code == 0 and "PASSED" in own.output, own.output
    monkeypatch.delenv("REFLEXA_REFLECTOR_MODEL")

    trace = tmp_path / "resume.db"
    store = SQLiteStore(trace)
    generator, reflector = spec("gen2.json", WRONG, RIGHT), spec("ref2.json", LESSON)
    run = Run("refine", (EXAMPLE / "task.md").read_text(), resolve_model(generator),
              budget=Budget(), store=store, reflector_model=resolve_model(reflector),
              meta={"spec": {"loop": "refine", "task": (EXAMPLE / "task.md").read_text(), "tests": tests,
                             "model": generator, "reflector_model": reflector}})
    store.release_lease(run.run_id, run.owner)  # the process that started it is gone
    resumed = invoke("resume", run.run_id[:10], "--trace", str(trace), "--json")
    assert resumed.exit_code == 0 and json.loads(resumed.output)["stop_reason"] == "PASSED", resumed.output
    served = [s.payload().model for s in store.steps(run.run_id) if s.role == "reflector" and s.kind == "model_call"]
    assert served == ["scripted"]  # a model of its own served it (the run's own model's steps name none)
