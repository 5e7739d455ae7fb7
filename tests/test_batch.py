"""`reflexa batch`: the tasks file, resuming a batch, results written whole, workers sharing what they learn."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from _pg import pg_server  # noqa: F401 - a fixture
from typer.testing import CliRunner

from reflexa.batch import run_batch
from reflexa.cli.app import app
from reflexa.errors import ConfigError
from reflexa.executors.rows import ResultsFile
from reflexa.models.base import Generation, Model
from reflexa.models.limit import LimitedModel
from reflexa.tasks import read_tasks
from reflexa.trace import open_store

GOOD = "```\nGOOD\n```"
BAD = "```\nbad\n```"
LESSON = {"failure_step": "the answer", "observed_mismatch": "bad does not match", "root_cause": "forgot it",
          "correction": "write GOOD"}


def write_tasks(folder: Path, lines) -> Path:
    path = folder / "tasks.jsonl"
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def replies(folder: Path, name: str, items) -> str:
    (folder / name).write_text(json.dumps(items))
    return f"scripted:{folder / name}"


def rows(path: Path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def runs_per_task(target: str, batch: str) -> dict[str, int]:
    """How many runs with at least one step each task of the batch has in the store."""
    store = open_store(target)
    counts: dict[str, int] = {}
    for record in store.runs(100_000):
        if record.meta.get("batch") == batch and store.steps(record.run_id):
            counts[record.meta["batch_task"]] = counts.get(record.meta["batch_task"], 0) + 1
    store.close()
    return counts


# --- the tasks file ---------------------------------------------------------------------------------------

def test_a_bad_tasks_file_is_rejected_whole_with_line_numbers(tmp_path):
    (tmp_path / "t.py").write_text("from solution import f\n\n\ndef test_x():\n    assert f\n")
    (tmp_path / "empty_test.py").write_text("from solution import f\n")
    path = write_tasks(tmp_path, [
        {"task": "ok", "regex": "x"},
        "{not json",
        {"task": "no check"},
        "",
        {"task": "typo", "regx": "x"},
        {"id": "a", "task": "t", "tests": "t.py"},
        {"id": "a", "task": "t", "tests": "missing.py"},
        [1, 2],
        {"task": "", "regex": "("},
        {"task": "x", "db": "shop.sqlite", "regex": "x"},
        {"task": "x", "json_schema": {"type": "nonsense"}},
        {"task": "x", "tests": "empty_test.py"},
        {"task": "x", "regex": "x", "out": "."},
    ])
    with pytest.raises(ConfigError) as rejected:
        read_tasks(path, "refine")
    message = str(rejected.value)
    for expected in ("line 2: not JSON", "line 3: a refine task needs a check", "line 5: regx: unknown field",
                     "line 7: tests: file not found: missing.py", "line 7: id 'a' is already used on line 6",
                     "line 8: must be a JSON object", "line 9: task:", "line 10: db: not a field of a refine task",
                     "line 11: json_schema: not a valid JSON schema", "line 12: tests: empty_test.py defines no test",
                     "line 13: out: must name a file"):
        assert expected in message
    assert "line 1:" not in message and "line 6:" not in message


def test_blank_checks_broken_test_code_and_a_query_that_cannot_run_are_rejected_up_front(tmp_path):
    """Each would otherwise show up only when its task ran: a blank check passing any answer, test code that
    fails every attempt as if the candidate were wrong, a validation query that stops the batch midway."""
    import sqlite3

    with sqlite3.connect(tmp_path / "shop.sqlite") as conn:
        conn.execute("CREATE TABLE orders (id INTEGER)")
    refine_path = write_tasks(tmp_path, [{"task": "x", "check": "   "}, {"task": "x", "test_code": "assert ("},
                                         {"task": "x", "regex": "x"}])
    with pytest.raises(ConfigError) as rejected:
        read_tasks(refine_path, "refine")
    message = str(rejected.value)
    assert "line 1: check: empty" in message and "line 2: test_code: not valid Python" in message
    react_path = write_tasks(tmp_path, [{"task": "How many?", "db": "shop.sqlite"},
                                        {"task": "How?", "db": "shop.sqlite", "validate": "SELECT 1 FROM nothing"}])
    with pytest.raises(ConfigError, match="line 2: validate: the validation query does not run"):
        read_tasks(react_path, "react")


def test_the_results_file_may_not_be_a_file_the_batch_reads_or_its_store(tmp_path):
    (tmp_path / "test_add.py").write_text("from solution import add\n\ndef test_add():\n    assert add(2, 3) == 5\n")
    before = (tmp_path / "test_add.py").read_text()
    path = write_tasks(tmp_path, [{"id": "a", "task": "Write add.", "tests": "test_add.py"}])
    spec = replies(tmp_path, "r.json", [GOOD])
    for out in ("test_add.py", "trace.db", "trace.db-wal"):
        with pytest.raises(ConfigError, match="--out names a file the batch reads or writes"):
            run_batch(path, "refine", store=str(tmp_path / "trace.db"), model=spec, out=tmp_path / out)
    assert (tmp_path / "test_add.py").read_text() == before


def test_a_task_s_missing_model_file_is_found_before_any_task_runs(tmp_path):
    spec = replies(tmp_path, "r.json", [GOOD])
    path = write_tasks(tmp_path, [{"id": "a", "task": "say GOOD", "regex": "GOOD"},
                                  {"id": "b", "task": "say GOOD", "regex": "GOOD", "model": "scripted:missing.json"}])
    with pytest.raises(ConfigError, match="model file not found: missing.json"):
        run_batch(path, "refine", store=str(tmp_path / "trace.db"), model=spec)
    assert not (tmp_path / "tasks.results.jsonl").exists()


def test_a_react_task_s_db_must_be_an_sqlite_file(tmp_path):
    (tmp_path / "r.json").write_text("{}")
    path = write_tasks(tmp_path, [{"task": "How many?", "db": "r.json"}])
    with pytest.raises(ConfigError, match="line 1: db: not an SQLite database: r.json"):
        read_tasks(path, "react")


def test_the_cli_says_what_is_wrong_without_a_traceback(tmp_path):
    path = write_tasks(tmp_path, [{"task": "goal"}])
    result = CliRunner().invoke(app, ["batch", str(path), "--loop", "react", "--trace", str(tmp_path / "t.db")])
    assert result.exit_code == 2 and "line 1: a react task needs tools" in result.output
    assert "Traceback" not in result.output
    result = CliRunner().invoke(app, ["batch", str(path), "--loop", "nope"])
    assert result.exit_code == 2 and "--loop must be one of" in result.output
    result = CliRunner().invoke(app, ["batch", str(tmp_path / "none.jsonl"), "--loop", "refine"])
    assert result.exit_code == 2 and "tasks file not found" in result.output


def test_paths_are_relative_to_the_tasks_file(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "test_it.py").write_text("from solution import f\n\n\ndef test_x():\n    assert f\n")
    (task,) = read_tasks(write_tasks(tmp_path / "sub", [{"task": "t", "tests": "test_it.py"}]), "refine")
    assert task.spec.checks["tests"] == str((tmp_path / "sub" / "test_it.py").resolve()) and task.key == "line-1"
    assert task.spec.workdir == str((tmp_path / "sub").resolve())


# --- running and re-running -------------------------------------------------------------------------------

def test_a_batch_runs_every_task_once_and_a_rerun_skips_them(tmp_path):
    model = replies(tmp_path, "good.json", [GOOD])
    path = write_tasks(tmp_path, [{"id": f"t{i}", "task": f"say GOOD {i}", "regex": "GOOD", "meta": {"n": i}}
                                  for i in range(12)])
    trace = str(tmp_path / "trace.db")
    seen = []
    state = run_batch(path, "refine", store=trace, model=model, concurrency=4, progress=lambda s: seen.append(s.done))
    assert (state.done, state.passed, state.failed, state.remaining) == (12, 12, 0, 0) and seen[-1] == 12
    out = rows(tmp_path / "tasks.results.jsonl")
    assert sorted(r["key"] for r in out) == sorted(f"t{i}" for i in range(12))
    assert all(r["passed"] and r["batch"] == state.ident and r["meta"]["n"] == int(r["key"][1:]) for r in out)
    again = run_batch(path, "refine", store=trace, model=model, concurrency=4)
    assert (again.ident, again.skipped, again.done) == (state.ident, 12, 0)
    assert len(rows(tmp_path / "tasks.results.jsonl")) == 12
    assert runs_per_task(trace, state.ident) == {f"t{i}": 1 for i in range(12)}
    other = run_batch(path, "refine", store=trace, model=model, budget={"max_calls": 5})  # other options: a new batch
    assert other.ident != state.ident and other.done == 12


def test_a_run_that_fails_is_a_result_and_the_exit_code_says_so(tmp_path):
    model = replies(tmp_path, "bad.json", [BAD] * 10)
    path = write_tasks(tmp_path, [{"task": "say GOOD", "regex": "GOOD", "max_attempts": 1}])
    result = CliRunner().invoke(app, ["batch", str(path), "-l", "refine", "-m", model, "--json",
                                      "--trace", str(tmp_path / "t.db")])
    assert result.exit_code == 3, result.output  # a task stopped without passing: not all passed
    report = json.loads(result.output)
    assert (report["done"], report["passed"], report["failed"]) == (1, 0, 0)
    assert report["by_stop_reason"] == {"MAX_ITERATIONS": 1} and report["exit_code"] == 3
    (row,) = rows(tmp_path / "tasks.results.jsonl")
    assert row["stop_reason"] == "MAX_ITERATIONS" and not row["passed"]
    crash = write_tasks(tmp_path, [{"task": "t", "regex": "GOOD"}])
    empty = replies(tmp_path, "none.json", [])  # no replies: the model fails, the run ends in ERROR
    result = CliRunner().invoke(app, ["batch", str(crash), "-l", "refine", "-m", empty, "--json",
                                      "--trace", str(tmp_path / "t.db"), "-o", str(tmp_path / "r.jsonl")])
    assert result.exit_code == 1 and json.loads(result.output)["failed"] == 1
    again = CliRunner().invoke(app, ["batch", str(crash), "-l", "refine", "-m", empty, "--json",
                                     "--trace", str(tmp_path / "t.db"), "-o", str(tmp_path / "r.jsonl")])
    report = json.loads(again.output)  # nothing runs again, and the batch still failed
    assert again.exit_code == 1 and (report["done_before"], report["done"], report["failed"]) == (1, 0, 1)


def test_results_never_go_into_a_file_that_is_not_a_results_file(tmp_path):
    model = replies(tmp_path, "good.json", [GOOD])
    path = write_tasks(tmp_path, [{"task": "say GOOD", "regex": "GOOD"}])
    tasks = path.read_text()
    refused = CliRunner().invoke(app, ["batch", str(path), "-l", "refine", "-m", model, "-o", str(path)])
    assert refused.exit_code == 2 and "tasks file itself" in refused.output and path.read_text() == tasks
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\nmy last line, without a newline")
    refused = CliRunner().invoke(app, ["batch", str(path), "-l", "refine", "-m", model, "-o", str(notes)])
    assert refused.exit_code == 2 and "not a results file" in refused.output
    assert notes.read_text() == "my notes\nmy last line, without a newline"


def test_a_partial_last_line_is_cut_before_appending(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"batch": "b", "key": "a"}) + "\n" + json.dumps({"batch": "x", "key": "b"}) + "\n"
                    + '{"batch": "b", "key": "c", "outp')
    results = ResultsFile(path, "b")
    assert results.keys == {"a"}
    assert results.append({"batch": "b", "key": "c"}) and not results.append({"batch": "b", "key": "a"})
    results.close()
    assert [json.loads(line)["key"] for line in path.read_text().splitlines()] == ["a", "b", "c"]


def test_a_second_driver_of_the_same_batch_is_refused(tmp_path):
    model = replies(tmp_path, "good.json", [GOOD])
    path = write_tasks(tmp_path, [{"task": "t", "regex": "GOOD"}])
    from reflexa.batch.runner import batch_id
    from reflexa.batch.worker import namespace

    trace = str(tmp_path / "t.db")
    ident = batch_id(path.read_bytes(), "refine", {"model": model, "budget": {}, "experience": True,
                                                   "governor": False})
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        open_store(trace).acquire_lease(namespace(ident), "other-driver", sleeper.pid)
        with pytest.raises(ConfigError, match=f"already running: pid {sleeper.pid}"):
            run_batch(path, "refine", store=trace, model=model)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert run_batch(path, "refine", store=trace, model=model).done == 1  # its holder is gone


# --- workers share the experience library -----------------------------------------------------------------

def test_a_repair_learnt_by_one_worker_process_is_used_by_another(tmp_path):
    learns = replies(tmp_path, "a.json", [BAD, LESSON, GOOD])
    reuses = replies(tmp_path, "b.json", [BAD, GOOD])  # no lesson in its script: it must come from A
    path = write_tasks(tmp_path, [{"id": "a", "task": "say GOOD", "regex": "GOOD", "model": learns},
                                  {"id": "b", "task": "say GOOD", "regex": "GOOD", "model": reuses}])
    # One task at a time, each in a fresh worker process: A has finished (and learnt) before B starts.
    state = run_batch(path, "refine", store=str(tmp_path / "t.db"), concurrency=1, executor="processes",
                      max_tasks_per_worker=1)
    assert state.passed == 2
    a, b = sorted(rows(tmp_path / "tasks.results.jsonl"), key=lambda r: r["key"])
    assert a["worker"] != b["worker"] and a["worker"].split(":")[1] != str(os.getpid())
    assert a["counters"]["reflector_calls"] == 1 and a["counters"]["experience_hits"] == 0
    assert b["counters"]["experience_hits"] == 1 and b["counters"]["reflector_calls"] == 0


# --- the connection limit ---------------------------------------------------------------------------------

class Gate(Model):
    """Holds every call until released; counts the calls in flight."""

    name = "gate"
    base_url = "http://127.0.0.1:1/v1"

    def __init__(self):
        self.inflight = 0
        self.peak = 0
        self.lock = threading.Lock()
        self.release = threading.Event()
        self.entered = threading.Semaphore(0)

    def _generate(self, messages, json_schema, max_tokens, temperature):
        with self.lock:
            self.inflight += 1
            self.peak = max(self.peak, self.inflight)
        self.entered.release()
        self.release.wait(30)
        with self.lock:
            self.inflight -= 1
        return Generation("ok", 1, 1)


def test_the_connection_limit_holds_across_models_of_one_backend():
    gate = Gate()
    models = [LimitedModel(gate, 3), LimitedModel(gate, 3)]  # two sessions' models, one server
    threads = [threading.Thread(target=models[i % 2].complete, args=([{"role": "user", "content": "x"}],))
               for i in range(8)]
    for t in threads:
        t.start()
    for _ in range(3):
        assert gate.entered.acquire(timeout=30)
    assert not gate.entered.acquire(timeout=0.2)  # the fourth waits for a slot
    gate.release.set()
    for t in threads:
        t.join(30)
    assert gate.peak == 3 and gate.inflight == 0


# --- killed drivers ---------------------------------------------------------------------------------------

def _cli(*args, env=None):
    return subprocess.Popen([sys.executable, "-m", "reflexa.cli", "batch", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _slow_tasks(folder: Path, n: int):
    # A check that takes a moment, so that the driver is killed with tasks in flight.
    return write_tasks(folder, [{"id": f"t{i}", "task": f"say GOOD {i}", "regex": "GOOD", "check": "sleep 0.3"}
                                for i in range(n)])


def _kill_when(proc, results: Path, lines: int, sig=signal.SIGKILL) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if results.exists() and results.read_text().count("\n") >= lines:
            proc.send_signal(sig)
            break
        time.sleep(0.05)
    proc.communicate(timeout=120)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_killed_driver_loses_nothing_and_a_rerun_runs_each_task_once(tmp_path, kind, request):
    trace = str(tmp_path / "t.db") if kind == "sqlite" else request.getfixturevalue("pg_server").database()
    model = replies(tmp_path, "good.json", [GOOD])
    path = _slow_tasks(tmp_path, 16)
    results = tmp_path / "tasks.results.jsonl"
    args = [str(path), "-l", "refine", "-m", model, "--trace", trace, "-c", "4", "--json"]
    first = _cli(*args)
    _kill_when(first, results, 3)
    assert first.returncode == -signal.SIGKILL
    before = len(rows(results))
    assert 3 <= before < 16
    second = _cli(*args)
    out, err = second.communicate(timeout=300)
    assert second.returncode == 0, err
    report = json.loads(out)
    assert report["done_before"] >= before and report["done_before"] + report["done"] == 16
    keys = [r["key"] for r in rows(results)]
    assert sorted(keys) == sorted(f"t{i}" for i in range(16))  # every result once
    assert runs_per_task(trace, report["batch"]) == {f"t{i}": 1 for i in range(16)}  # no task run twice


@pytest.mark.parametrize("executor", ["local", "async"])
def test_ctrl_c_leaves_whole_results_and_a_rerun_finishes(tmp_path, executor):
    trace = str(tmp_path / "t.db")
    model = replies(tmp_path, "good.json", [GOOD])
    path = _slow_tasks(tmp_path, 12)
    results = tmp_path / "tasks.results.jsonl"
    args = [str(path), "-l", "refine", "-m", model, "--trace", trace, "-c", "3", "--json", "--executor", executor]
    first = _cli(*args)
    _kill_when(first, results, 2, signal.SIGINT)
    assert first.returncode == 130
    assert results.read_text().endswith("\n") and all(r["key"] for r in rows(results))
    second = _cli(*args)
    out, err = second.communicate(timeout=300)
    assert second.returncode == 0, err
    assert sorted(r["key"] for r in rows(results)) == sorted(f"t{i}" for i in range(12))
    assert runs_per_task(trace, json.loads(out)["batch"]) == {f"t{i}": 1 for i in range(12)}


@pytest.mark.parametrize("executor", ["local", "processes", "async"])
def test_every_task_of_a_batch_reflects_on_the_reflector_model(tmp_path, executor):
    """--reflector-model reaches every worker, whichever executor runs it (threads, worker processes that
    rebuild the session from plain data, coroutines): the tasks' own replies hold no lesson, so a reflector
    call that went to them would fail the task. An unknown reflector backend is refused before any task runs."""
    model = replies(tmp_path, "gen.json", [BAD, GOOD])
    reflector = replies(tmp_path, "ref.json", [LESSON])
    path = write_tasks(tmp_path, [{"id": f"t{i}", "task": f"say GOOD {i}", "regex": "GOOD"} for i in range(2)])
    trace = str(tmp_path / "trace.db")
    if executor == "local":  # through the CLI flag
        result = CliRunner().invoke(app, ["batch", str(path), "-l", "refine", "-m", model, "--reflector-model",
                                          reflector, "--no-experience", "--json", "--trace", trace])
        assert result.exit_code == 0 and json.loads(result.output)["passed"] == 2, result.output
    else:
        state = run_batch(path, "refine", store=trace, model=model, reflector_model=reflector, experience=False,
                          executor=executor, concurrency=2)
        assert state.passed == 2
    store = open_store(trace)
    runs = [r for r in store.runs(100) if r.meta.get("batch")]
    assert len(runs) == 2 and all(r.meta["reflector_model_spec"] == reflector for r in runs)
    assert all(r.result["usage"]["reflector"]["calls"] == 1 for r in runs)
    store.close()
    with pytest.raises(ConfigError, match="no backend 'nosuch'"):
        run_batch(path, "refine", store=trace, model=model, reflector_model="nosuch:x")



def test_a_named_model_is_no_file_and_a_reflector_equal_to_the_model_is_none(tmp_path):
    from reflexa.executors.worker import check_model_spec

    check_model_spec("local:qwen1.5b")  # its name has a "suffix", but it is a named model, not a path
    with pytest.raises(ConfigError, match="model file not found"):
        check_model_spec("local:missing.gguf")
    model = replies(tmp_path, "gen.json", [BAD, LESSON, GOOD])
    path = write_tasks(tmp_path, [{"task": "say GOOD", "regex": "GOOD"}])
    trace = str(tmp_path / "trace.db")
    # The run's own model, or blank: no reflector of its own, so the same batch as with no flag at all.
    states = [run_batch(path, "refine", store=trace, model=model, reflector_model=given, experience=False)
              for given in (model, " ", None)]
    assert states[0].done == states[0].passed == 1
    assert {s.ident for s in states} == {states[0].ident} and states[1].skipped == states[2].skipped == 1
    store = open_store(trace)
    assert [r.meta.get("reflector_model_spec") for r in store.runs(10) if r.meta.get("batch")] == [None]
    store.close()
