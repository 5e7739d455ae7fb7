"""`reflexa batch --executor ray` on a local Ray, against PostgreSQL: a killed worker or a killed driver loses
no task and runs none twice."""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from _pg import pg_server  # noqa: F401 - a fixture
from test_batch import GOOD, replies, rows, runs_per_task, write_tasks

from reflexa.batch import run_batch
from reflexa.batch.worker import namespace
from reflexa.trace import open_store

pytest.importorskip("ray", reason="the ray extra is not installed")


@pytest.fixture()
def ray_tmp(monkeypatch):
    # Ray's sockets live in its temp folder, whose path must stay short (AF_UNIX): not pytest's tmp_path.
    folder = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    monkeypatch.setenv("REFLEXA_RAY_TMPDIR", folder)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _tasks(folder, n):
    lines = [{"id": f"t{i}", "task": f"say GOOD {i}", "regex": "GOOD"} for i in range(n)]
    lines[1] = {"id": "slow", "task": "say GOOD slowly", "regex": "GOOD", "check": "sleep 2"}
    return write_tasks(folder, lines)


def test_a_killed_ray_worker_is_resumed_not_rerun(tmp_path, request, ray_tmp):
    trace = request.getfixturevalue("pg_server").database()
    path = _tasks(tmp_path, 6)
    killed: list[str] = []

    def kill_the_slow_task(batch: str) -> None:
        store = open_store(trace)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not killed:
            state = store.get(namespace(batch), "slow") or {}
            if state.get("state") == "running" and len(store.steps(state["run_id"])) >= 2:
                pid = int(state["worker"].rsplit(":", 1)[1])
                os.kill(pid, signal.SIGKILL)  # the Ray worker, mid-run (its check is sleeping)
                killed.append(state["run_id"])
            time.sleep(0.05)
        store.close()

    killer: list[threading.Thread] = []

    def progress(state):
        if not killer:
            killer.append(threading.Thread(target=kill_the_slow_task, args=(state.ident,), daemon=True))
            killer[0].start()

    state = run_batch(path, "refine", store=trace, model=replies(tmp_path, "good.json", [GOOD]), executor="ray",
                      concurrency=2, progress=progress)
    killer[0].join(10)
    assert killed, "the slow task was never seen running"
    assert (state.done, state.passed, state.failed) == (6, 6, 0)
    results = {r["key"]: r for r in rows(tmp_path / "tasks.results.jsonl")}
    assert sorted(results) == sorted(["slow", "t0", *(f"t{i}" for i in range(2, 6))])
    assert results["slow"]["run_id"] == killed[0]  # Ray's retry resumed the killed run
    assert runs_per_task(trace, state.ident) == dict.fromkeys(results, 1)


def test_a_killed_ray_driver_loses_nothing_and_a_rerun_finishes(tmp_path, request, ray_tmp):
    trace = request.getfixturevalue("pg_server").database()
    path = write_tasks(tmp_path, [{"id": f"t{i}", "task": f"say GOOD {i}", "regex": "GOOD", "check": "sleep 0.3"}
                                  for i in range(12)])
    results = tmp_path / "tasks.results.jsonl"
    args = [sys.executable, "-m", "reflexa.cli", "batch", str(path), "-l", "refine", "--executor", "ray", "-c", "2",
            "-m", replies(tmp_path, "good.json", [GOOD]), "--trace", trace, "--json"]
    # Its own session: Ray's helper processes outlive a SIGKILLed driver, and are ended with its group.
    first = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and first.poll() is None:
            if results.exists() and results.read_text().count("\n") >= 2:
                break
            time.sleep(0.05)
        first.kill()
        _, first_stderr = first.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(first.pid, signal.SIGKILL)
    before = len(rows(results))
    # A first driver that ended on its own (it failed to start Ray?) says why here.
    assert 2 <= before < 12, f"exit {first.returncode}, {before} rows: {first_stderr[-2000:]}"
    second = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr
    report = json.loads(second.stdout)
    assert report["done_before"] + report["done"] == 12
    assert sorted(r["key"] for r in rows(results)) == sorted(f"t{i}" for i in range(12))
    assert runs_per_task(trace, report["batch"]) == {f"t{i}": 1 for i in range(12)}


def test_an_eval_runs_its_tasks_as_ray_tasks(tmp_path, ray_tmp):
    # In a process of its own: Ray does not start again in a process where an earlier test shut it down.
    path = write_tasks(tmp_path, [{"id": f"t{i}", "task": f"say GOOD {i}", "regex": "GOOD"} for i in range(3)])
    model = replies(tmp_path, "good.json", [GOOD])
    out = tmp_path / "out"
    result = subprocess.run([sys.executable, "-m", "reflexa.cli", "eval", str(path), "-s", "single,resample@2", "-m",
                             model, "--executor", "ray", "-c", "2", "--trace", str(tmp_path / "t.db"), "-o", str(out),
                             "--json"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["strategies"]["single"]["solved"] == 3
    assert len(rows(out / "rows.jsonl")) == 6


def _in_session(sid: int) -> set[int]:
    """The live processes of session `sid` (a driver started with start_new_session, and all Ray started)."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid and fields[0] != "Z":  # fields[3] is the session id, fields[0] the state
                found.add(int(entry))
    return found


@pytest.mark.parametrize("command", ["batch", "eval"])
def test_a_ray_driver_stopped_by_sigterm_leaves_no_ray_process(tmp_path, ray_tmp, command):
    path = write_tasks(tmp_path, [{"id": f"t{i}", "task": f"say GOOD {i}", "regex": "GOOD"} for i in range(4)])
    slow = tmp_path / "slow.json"
    slow.write_text(json.dumps({"replies": [GOOD] * 8, "delay": 60}))
    extra = ["-s", "single", "-o", str(tmp_path / "out")] if command == "eval" else []
    args = [sys.executable, "-m", "reflexa.cli", command, str(path), "--executor", "ray", "-c", "2", "-m",
            f"scripted:{slow}", "--trace", str(tmp_path / "t.db"), "--json", *extra]
    driver = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and driver.poll() is None:
            with contextlib.suppress(Exception), \
                    contextlib.closing(open_store(str(tmp_path / "t.db"), reader=True)) as store:
                if len(store.runs(10)) >= 2:  # two Ray workers are in their model calls
                    break
            time.sleep(0.5)
        assert driver.poll() is None, driver.communicate()[1][-2000:]
        driver.send_signal(signal.SIGTERM)
        _, err = driver.communicate(timeout=120)
        assert driver.returncode == 143, err[-2000:]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and _in_session(driver.pid):
            time.sleep(0.5)
        assert not _in_session(driver.pid), "Ray processes left after the driver stopped"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(driver.pid, signal.SIGKILL)
