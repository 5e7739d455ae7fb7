"""The live CLI as a user meets it: a slow run shows something new at least every 2 s in a terminal,
Ctrl-C stops it within about a second with the run stored as interrupted and the resume command printed,
and `reflexa resume` finishes it. Runs a real `reflexa` process on the scripted model (slowed down with
its `delay`), in a pseudo-terminal where a terminal matters."""

import fcntl
import json
import os
import pty
import re
import select
import signal
import sqlite3
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

from typer.testing import CliRunner

from reflexa.cli.app import app
from reflexa.cli.render import LiveView

runner = CliRunner()

WRONG = "```python\ndef add(a, b):\n    # a first try that is wrong\n    return a - b\n```"
RIGHT = "```python\ndef add(a, b):\n    return a + b\n```"
LESSON = {"failure_step": "attempt 1", "observed_mismatch": "add(2, 3) gave -1", "root_cause": "it subtracts",
          "correction": "return a + b"}
TESTS = "from solution import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
MAX_GAP = 2.0
"""The longest a user may look at an unchanged terminal during a run (the issue's bound)."""


def scripted(path: Path, *replies, delay: float = 0.0) -> str:
    path.write_text(json.dumps({"replies": list(replies), "delay": delay}))
    return f"scripted:{path}"


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "reflexa.cli", *args]


def in_terminal(args: list[str], env: dict[str, str], cwd: Path,
                timeout: float = 120) -> tuple[int, list[tuple[float, bytes]]]:
    """Run `args` with a pseudo-terminal (100 columns) as stdin, stdout and stderr; every read of output
    with the time it arrived, in seconds from the start."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
    proc = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=cwd, start_new_session=True)
    os.close(slave)
    start = time.monotonic()
    reads: list[tuple[float, bytes]] = []
    try:
        while time.monotonic() - start < timeout:
            ready, _, _ = select.select([master], [], [], 0.05)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not data:
                    break
                reads.append((time.monotonic() - start, data))
            elif proc.poll() is not None:
                break
        return proc.wait(timeout=10), reads
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        os.close(master)


def test_a_slow_refine_shows_something_new_at_least_every_two_seconds(tmp_path):
    (tmp_path / "test_add.py").write_text(TESTS)
    # Three model calls of 1.5 s each and two pytest runs: about 8 s of run.
    spec = scripted(tmp_path / "slow.json", WRONG, LESSON, RIGHT, delay=1.5)
    env = {**os.environ, "REFLEXA_TRACE": str(tmp_path / "trace.db"), "TERM": "xterm-256color"}
    code, reads = in_terminal(cli("refine", "Write add(a, b)", "--tests", "test_add.py", "--model", spec),
                              env, tmp_path, timeout=30)
    text = ANSI.sub("", b"".join(data for _, data in reads).decode(errors="replace"))
    assert code == 0, text
    changes = [t for i, (t, data) in enumerate(reads) if i == 0 or data != reads[i - 1][1]]
    gaps = [b - a for a, b in zip(changes, changes[1:], strict=False)]
    print(f"first output after {changes[0]:.2f}s; {len(changes)} changes over {changes[-1]:.1f}s; "
          f"longest gap {max(gaps):.2f}s")
    assert changes[-1] - changes[0] > 5  # the run was slow enough to matter
    assert max(gaps) <= MAX_GAP
    # What the live line said while the run went on: the streamed code, counts, speed, the checks.
    assert "generator is writing" in text and "tok/s" in text and "a first try" in text
    assert "running checks" in text and "stop: PASSED" in text


def _wait_for(trace: Path, sql: str, deadline: float = 60) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        try:
            with sqlite3.connect(trace) as db:
                if db.execute(sql).fetchone()[0]:
                    return
        except sqlite3.Error:
            pass  # not created yet
        time.sleep(0.05)
    raise AssertionError(f"never true: {sql}")


def _interrupt(proc: subprocess.Popen) -> tuple[float, str, str]:
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    return time.monotonic() - sent, out, err


def _run(trace: Path) -> tuple[str, str, str]:
    with sqlite3.connect(trace) as db:
        return db.execute("SELECT run_id, status, stop_reason FROM runs").fetchone()


SLOW_SQL = ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < (SELECT n FROM slow)) "
            "SELECT count(*) FROM c")
"""As slow as the table `slow` says: fast again before a resume, which runs the tool call in flight again."""


def slowed(shop, n):
    with sqlite3.connect(shop) as db:
        db.execute("CREATE TABLE IF NOT EXISTS slow (n INTEGER)")
        db.execute("DELETE FROM slow")
        db.execute("INSERT INTO slow VALUES (?)", (n,))


def act(tool, thought, **args):
    return {"action": {"thought": thought, "tool": tool, "args": args, "confidence": 0.9}}


def test_ctrl_c_in_react_stores_the_run_as_interrupted_and_resume_finishes_it(tmp_path, shop):
    trace = tmp_path / "trace.db"
    env = {**os.environ, "REFLEXA_TRACE": str(trace)}
    slowed(shop, 300_000_000)
    first = scripted(tmp_path / "first.json", act("query", "count", sql="SELECT count(*) FROM orders"),
                     act("query", "a slow check", sql=SLOW_SQL))
    proc = subprocess.Popen(cli("react", "--db", str(shop), "How many orders?", "--model", first), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(trace, "SELECT count(*) FROM steps WHERE kind = 'react'")
    time.sleep(0.5)  # into the slow query of step 2 (not a timing assertion: it only places the Ctrl-C)
    took, out, err = _interrupt(proc)
    print(f"Ctrl-C during a tool call: exit {proc.returncode} {took:.2f}s after SIGINT")
    run_id, status, reason = _run(trace)
    assert proc.returncode == 130 and took < 3, err
    assert (status, reason) == ("interrupted", "INTERRUPTED")
    assert f"reflexa resume {run_id[:12]}" in err and "Traceback" not in err

    slowed(shop, 10)  # the query in flight at Ctrl-C runs again; its model call, stored, is read back
    second = scripted(tmp_path / "second.json", act("final_answer", "done", answer="400"))
    resumed = subprocess.run(cli("resume", run_id[:12], "--model", second), env=env, capture_output=True, text=True,
                             timeout=120)
    assert resumed.returncode == 4, resumed.stdout + resumed.stderr  # answered; nothing validated it
    assert _run(trace)[1:] == ("finished", "ANSWERED_UNVERIFIED")


def test_ctrl_c_while_the_model_is_stuck_in_a_long_call_still_stops_within_a_second(tmp_path):
    """A model call that does not return to Python (llama.cpp reading a long prompt; here one scripted
    reply slept in one piece) cannot take the interrupt: the CLI stores the run as interrupted itself."""
    (tmp_path / "test_add.py").write_text(TESTS)
    trace = tmp_path / "trace.db"
    env = {**os.environ, "REFLEXA_TRACE": str(trace)}
    stuck = scripted(tmp_path / "stuck.json", "abc", delay=120)
    proc = subprocess.Popen(cli("refine", "Write add(a, b)", "--tests", "test_add.py", "--model", stuck,
                                "--json"), env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    _wait_for(trace, "SELECT count(*) FROM runs")
    time.sleep(0.5)  # inside the model call
    took, out, err = _interrupt(proc)
    print(f"Ctrl-C during a call stuck in C: exit {proc.returncode} {took:.2f}s after SIGINT")
    run_id, status, reason = _run(trace)
    assert proc.returncode == 130 and took < 3, err
    assert (status, reason) == ("interrupted", "INTERRUPTED")
    assert f"reflexa resume {run_id[:12]}" in err
    assert json.loads(out)["stop_reason"] == "INTERRUPTED"  # --json still prints one document

    fast = scripted(tmp_path / "fast.json", RIGHT)
    resumed = subprocess.run(cli("resume", run_id[:12], "--model", fast, "-q"), env=env, cwd=tmp_path,
                             capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert resumed.stdout.startswith("PASSED: run ") and _run(trace)[1:] == ("finished", "PASSED")


def test_jsonl_streams_one_object_per_step_then_the_result(tmp_path):
    (tmp_path / "test_add.py").write_text(TESTS)
    spec = scripted(tmp_path / "r.json", RIGHT)
    os.chdir(tmp_path)
    result = runner.invoke(app, ["refine", "Write add", "--tests", "test_add.py", "--model", spec, "--jsonl"])
    lines = [json.loads(line) for line in result.output.splitlines()]
    assert result.exit_code == 0 and lines[0]["event"] == "run" and lines[-1]["event"] == "result"
    steps = [line for line in lines if line["event"] == "step"]
    assert [s["step_id"] for s in steps] == list(range(1, len(steps) + 1)) and steps[-1]["kind"] == "stop"
    assert lines[-1]["stop_reason"] == "PASSED" and lines[-1]["run_id"] == lines[0]["run_id"]
    both = runner.invoke(app, ["refine", "t", "--tests", "test_add.py", "--model", spec, "--json", "--jsonl"])
    assert both.exit_code == 2 and "exclude each other" in both.output


def test_quiet_prints_one_summary_line(tmp_path):
    (tmp_path / "test_add.py").write_text(TESTS)
    os.chdir(tmp_path)
    result = runner.invoke(app, ["refine", "Write add", "--tests", "test_add.py", "-q",
                                 "--model", scripted(tmp_path / "r.json", RIGHT)])
    assert result.exit_code == 0 and len(result.output.splitlines()) == 1
    assert result.output.startswith("PASSED: run ") and "reflexa show" in result.output


def test_live_line_shows_role_elapsed_tokens_speed_and_the_streamed_tail():
    from rich.console import Console

    now = [100.0]
    view = LiveView(Console(file=open(os.devnull, "w")), clock=lambda: now[0])  # noqa: SIM115 - a sink
    view("run", "0123456789abcdef")
    view("call", "generator")
    now[0] += 2.0
    assert "reading the prompt" in view.line().plain
    for piece in ["def add", "(a, b):\n", "    return a + b"]:
        view("token", piece)
    now[0] += 1.0
    line = view.line().plain
    assert "generator is writing" in line and "3.0s" in line and "3 tok" in line and "1.0 tok/s" in line
    assert "return a + b" in line and "0123456789ab" in line
    view("status", "running checks")
    now[0] += 1.5
    line = view.line().plain
    assert "running checks" in line and "1.5s" in line and "tok" not in line
    view("an event from a newer observer", None)  # ignored
    view.close()
