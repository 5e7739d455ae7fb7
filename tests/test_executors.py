"""The executor seam that `reflexa batch` and `reflexa eval` share: a stopped driver leaves no worker running.

Each test starts the real CLI on a model whose calls take 60 s (a scripted model with a delay), in worker
processes, stops the driver once its workers are decoding, and looks for them in /proc afterwards."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reflexa.executors import Interrupted, Progress, ThreadExecutor, drive, pick

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads workers from /proc (Linux)")

SLOW = 60.0
"""Seconds each model call takes: far longer than a test waits, so a worker found afterwards is one left over."""


def _descendants(pid: int) -> set[int]:
    """Every process below `pid`, read from /proc (each thread's `children`)."""
    found: set[int] = set()
    todo = [pid]
    while todo:
        current = todo.pop()
        try:
            tasks = list(Path(f"/proc/{current}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                kids = {int(k) for k in (task / "children").read_text().split()}
            except OSError:
                continue
            todo += sorted(kids - found)
            found |= kids
    return found


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting to be reaped."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _slow_model(folder: Path) -> str:
    path = folder / "slow.json"
    path.write_text(json.dumps({"replies": ["```\nGOOD\n```"] * 20, "delay": SLOW}))
    return f"scripted:{path}"


def _tasks(folder: Path, n: int = 4) -> Path:
    path = folder / "tasks.jsonl"
    path.write_text("".join(json.dumps({"id": f"t{i}", "task": f"say GOOD {i}", "regex": "GOOD"}) + "\n"
                            for i in range(n)))
    return path


def _start(command: str, folder: Path, *extra: str) -> subprocess.Popen:
    args = [sys.executable, "-m", "reflexa.cli", command, str(_tasks(folder)), "-m", _slow_model(folder),
            "--executor", "processes", "-c", "2", "--trace", str(folder / "trace.db"), "--json", *extra]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=folder)


def _workers_decoding(proc: subprocess.Popen, folder: Path) -> set[int]:
    """The driver's descendants, once two worker processes have each opened a run (its call is under way)."""
    import sqlite3

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with sqlite3.connect(folder / "trace.db") as db:
                opened = db.execute("SELECT count(*) FROM runs").fetchone()[0]
        except sqlite3.Error:
            opened = 0
        kids = _descendants(proc.pid)
        if opened >= 2 and len(kids) >= 2:
            return kids
        time.sleep(0.2)
    out, err = proc.communicate(timeout=30) if proc.poll() is not None else ("", "")
    pytest.fail(f"no two workers decoding within 120 s (exit {proc.returncode}): {err[-2000:]}")


def _left(pids: set[int], wait: float = 20.0) -> set[int]:
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if not (alive := {pid for pid in pids if _alive(pid)}):
            return set()
        time.sleep(0.2)
    return alive


@pytest.mark.parametrize("command", ["batch", "eval"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stopped_driver_leaves_no_worker_running(tmp_path, command, sig):
    extra = ("-s", "single", "--out", str(tmp_path / "eval-out")) if command == "eval" else ()
    proc = _start(command, tmp_path, *extra)
    workers = _workers_decoding(proc, tmp_path)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err
    assert "interrupted" in err and "Traceback" not in err
    assert not _left(workers), f"workers still running after the driver stopped: {workers}"


def test_a_killed_driver_leaves_no_worker_running(tmp_path):
    """SIGKILL gives the driver no chance to end its workers: the kernel tells them (PR_SET_PDEATHSIG)."""
    proc = _start("batch", tmp_path)
    workers = _workers_decoding(proc, tmp_path)
    proc.kill()
    proc.communicate(timeout=60)
    assert not _left(workers), f"workers still running after the driver was killed: {workers}"


def test_a_stopped_batch_resumes_where_it_stopped(tmp_path):
    """The workers it ended left their runs unfinished: the same command resumes them and finishes every task."""
    proc = _start("batch", tmp_path)
    _workers_decoding(proc, tmp_path)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    fast = tmp_path / "slow.json"
    fast.write_text(json.dumps({"replies": ["```\nGOOD\n```"] * 20}))
    again = subprocess.run([sys.executable, "-m", "reflexa.cli", "batch", str(tmp_path / "tasks.jsonl"), "-m",
                            f"scripted:{fast}", "--executor", "processes", "-c", "2", "--trace",
                            str(tmp_path / "trace.db"), "--json"], capture_output=True, text=True, cwd=tmp_path,
                           timeout=300)
    # The model spec is part of the batch's identity, and it did not change: the same file, now fast.
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert report["passed"] == 4 and report["unfinished"] == 0


# --- the seam itself, in process -------------------------------------------------------------------------

def test_drive_collects_every_item_and_closes_its_executor():
    seen: list[int] = []
    state = Progress("x", 5)
    pool = ThreadExecutor(lambda n: n * n, 2)
    drive(range(5), pool, 2, args=lambda n: (n,), collect=lambda n, future: seen.append(future.result()),
          state=state)
    assert sorted(seen) == [0, 1, 4, 9, 16] and state.running == 0


def test_drive_turns_ctrl_c_into_interrupted_and_cancels_the_executor():
    cancelled: list[bool] = []

    class Stopping(ThreadExecutor):
        def cancel(self) -> None:
            cancelled.append(True)
            super().cancel()

    def collect(n, future):
        raise KeyboardInterrupt

    with pytest.raises(Interrupted) as stop:
        drive(range(3), Stopping(lambda n: n, 1), 1, args=lambda n: (n,), collect=collect, state=Progress("x", 3))
    assert cancelled and stop.value.exit_code == 130


def test_local_means_processes_for_the_embedded_model_and_threads_otherwise():
    assert pick("local", "local:qwen") == "processes" and pick("local", "scripted:x.json") == "threads"
    assert pick("ray", None) == "ray"
    with pytest.raises(Exception, match="unknown executor"):
        pick("fibers", None)


def test_the_test_reads_workers_from_proc():
    """The helper that finds workers sees a real child: the tests above cannot pass by seeing nothing."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid in _descendants(os.getpid()) and _alive(child.pid)
    finally:
        child.kill()
        child.wait()
    assert not _alive(child.pid)
