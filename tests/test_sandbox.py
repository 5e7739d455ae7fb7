"""Each hostile program is contained, reported within timeout + 1 s, and leaves no process behind."""

import os
import sys
import time
from pathlib import Path

import pytest

from reflexa.evaluate.checks import CheckContext, PythonScriptCheck
from reflexa.evaluate.sandbox import Limits, Sandbox
from reflexa.types import ErrorCode

TIMEOUT = 2.0
SANDBOX = Sandbox(Limits(timeout=TIMEOUT, cpu_seconds=5))
MARKER = "reflexa-sandbox-test-marker"


def run(code: str):
    started = time.monotonic()
    result = SANDBOX.run([sys.executable, "-I", "-c", code])
    assert time.monotonic() - started <= TIMEOUT + 1.0
    return result


def leftover_processes() -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and entry.name != str(os.getpid()):
            try:
                if MARKER.encode() in (entry / "cmdline").read_bytes():
                    found.append(entry.name)
            except OSError:
                continue
    return found


def test_isolation_is_reported():
    assert "rlimits" in SANDBOX.isolation and "scrubbed-env" in SANDBOX.isolation


def test_infinite_loop_is_killed():
    result = run(f"# {MARKER}\nwhile True: pass")
    assert result.timed_out and result.returncode is None
    assert leftover_processes() == []


def test_huge_allocation_fails_inside():
    result = run("x = bytearray(4 * 1024 ** 3)")
    assert not result.ok and "MemoryError" in result.stderr


def test_fork_bomb_is_contained():
    code = f"# {MARKER}\nimport os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    result = run(code)
    assert not result.ok
    time.sleep(0.2)
    assert leftover_processes() == []


def test_writes_outside_the_scratch_dir_are_refused(tmp_path, monkeypatch):
    if "read-only-fs" not in SANDBOX.isolation:
        pytest.skip("no mount namespace on this machine")
    home = Path(os.environ["HOME"])
    target_cwd = Path.cwd() / "sandbox-escape.txt"
    target_home = home / "sandbox-escape.txt"
    code = (
        f"import os\nfor p in ({str(target_cwd)!r}, {str(target_home)!r}, '/tmp/sandbox-escape.txt'):\n"
        "    try:\n        open(p, 'w').write('x'); print('WROTE', p)\n    except OSError as e: print('refused', e)\n"
        "open('inside.txt', 'w').write('ok'); print('inside ok')"
    )
    result = run(code)
    assert "WROTE" not in result.stdout and "inside ok" in result.stdout
    assert not target_cwd.exists() and not target_home.exists() and not Path("/tmp/sandbox-escape.txt").exists()


def test_parent_environment_secrets_are_not_visible(monkeypatch):
    monkeypatch.setenv("REFLEXA_TEST_SECRET", "hunter2")
    result = run("import os; print(os.environ.get('REFLEXA_TEST_SECRET')); print(sorted(os.environ))")
    assert "hunter2" not in result.stdout


def test_grandchild_outliving_its_parent_is_killed():
    code = (
        f"import subprocess\nsubprocess.Popen(['sleep', '30', '{MARKER}'], start_new_session=True)\n"
        "print('parent exits')"
    )
    result = run(code)
    assert result.ok and "parent exits" in result.stdout
    time.sleep(0.2)
    assert leftover_processes() == []


def test_network_is_off():
    if "no-network" not in SANDBOX.isolation:
        pytest.skip("no network namespace on this machine")
    result = run(
        "import socket\ntry:\n    socket.create_connection(('127.0.0.1', 1), timeout=1)\n"
        "except OSError as e:\n    print('refused', e.errno)"
    )
    assert "refused" in result.stdout


def test_output_is_capped():
    sandbox = Sandbox(Limits(timeout=5, output_chars=1000))
    result = sandbox.run([sys.executable, "-c", "print('x' * 1_000_000)"])
    assert result.ok and len(result.stdout) == 1000


def test_signals_name_the_failure():
    check = PythonScriptCheck("assert f() == 2", sandbox=SANDBOX)
    assert check.run("def f():\n    return 2", CheckContext()).ok
    wrong = check.run("def f():\n    return 3", CheckContext())
    assert wrong.code is ErrorCode.TEST_FAILED and wrong.score is None  # ran, but wrong: revise
    broken = check.run("def f(:\n", CheckContext())
    assert broken.score == 0.0 and "SyntaxError" in broken.message  # never ran: restart
    slow = check.run("def f():\n    while True: pass", CheckContext())
    assert slow.code is ErrorCode.TIMEOUT


def test_isolation_names_the_memory_limit_and_its_scope():
    isolation = Sandbox(Limits(memory_mb=300, tree_memory_mb=700)).isolation
    assert "memory-per-process-rlimit:300MiB" in isolation
    tree = [part for part in isolation if part.startswith("memory-per-tree-cgroup")]
    assert tree in ([], ["memory-per-tree-cgroup:700MiB"])
    if "pid-namespace" in isolation:
        assert "ipc-namespace" in isolation and "private-tmp-run-shm-home" in isolation


_REPORTER = """
import json, os
nonce_fd, report_fd = (int(x) for x in os.environ['REFLEXA_REPORT_FDS'].split(','))
nonce = os.read(nonce_fd, 64).decode() if {honest} else 'a guess'
os.write(report_fd, b'{{"nonce": "forged", "ok": true}}\\n')
os.write(report_fd, (json.dumps({{"nonce": nonce, "ok": {honest}}}) + '\\n').encode())
"""


@pytest.mark.parametrize("honest", [True, False])
def test_report_channel_takes_only_a_line_with_the_nonce(honest):
    result = SANDBOX.run([sys.executable, "-I", "-c", _REPORTER.format(honest=honest)], report=True)
    assert result.ok, result.stderr
    if honest:
        assert result.report is not None and result.report["ok"] is True
    else:
        assert result.report is None


def test_without_a_report_channel_there_is_no_report():
    result = SANDBOX.run([sys.executable, "-I", "-c", "import os; print(os.environ.get('REFLEXA_REPORT_FDS'))"])
    assert result.report is None and result.stdout.strip() == "None"


def test_stop_all_kills_every_running_sandbox_at_once():
    """What a process leaving at once on Ctrl-C (os._exit) calls first: the threads that would kill each
    sandbox at its timeout leave with it, and a child in a session of its own outlives them otherwise."""
    import threading

    from reflexa.evaluate import sandbox

    patient = Sandbox(Limits(timeout=60, cpu_seconds=60))
    results = []
    runner = threading.Thread(target=lambda: results.append(patient.run(
        [sys.executable, "-I", "-c", f"# {MARKER}\nimport time\ntime.sleep(60)"])))
    runner.start()
    deadline = time.monotonic() + 10
    while not sandbox._LIVE and time.monotonic() < deadline:
        time.sleep(0.05)
    started = time.monotonic()
    sandbox.stop_all()
    runner.join(10)
    assert results and not results[0].ok and time.monotonic() - started < 10
    assert leftover_processes() == [] and not sandbox._LIVE


def test_running_out_of_cpu_time_is_a_timeout():
    """The CPU limit runs out before the wall clock (a multithreaded candidate, a fractional --timeout): it
    is reported as a timeout, not as a test run that ended without a report."""
    busy = Sandbox(Limits(timeout=30, cpu_seconds=1))
    signal = PythonScriptCheck("assert f()\n", sandbox=busy).run("def f():\n    while True: pass\n", CheckContext())
    assert signal.code is ErrorCode.TIMEOUT and "1s CPU limit" in signal.message, signal


def test_a_file_that_would_replace_a_directory_is_a_clear_sandbox_error(tmp_path):
    from reflexa.errors import SandboxError

    (tmp_path / "solution.py").mkdir()  # the directory copied in holds a folder of the candidate's name
    with pytest.raises(SandboxError, match="a directory has that name"):
        SANDBOX.run([sys.executable, "-c", "pass"], copy_from=tmp_path, files={"solution.py": "x = 1"})


@pytest.fixture()
def no_namespaces(monkeypatch):
    """This machine as one without namespaces or cgroups (a container, Ubuntu 24.04's default for a user):
    only the process group, and the reaper, stand between a detached process and the host."""
    from reflexa.evaluate import sandbox

    monkeypatch.setattr(sandbox, "_namespace_prefix", lambda: None)
    monkeypatch.setattr(sandbox, "_cgroup_parent", lambda controller: None)
    monkeypatch.setattr(sandbox, "_cgroup_available", lambda: False)


DETACH = (f"# {MARKER}\nimport os, subprocess, sys, time\n"
          "daemon = 'import os, time\\nif os.fork(): os._exit(0)\\nos.setsid()\\ntime.sleep(60)  # " + MARKER + "'\n"
          "subprocess.run([sys.executable, '-c', daemon])\n")


def test_without_namespaces_a_process_that_detached_does_not_outlive_the_run(no_namespaces):
    """setsid after a double fork leaves the process group the sandbox kills; the reaper still gets it."""
    assert "orphan-reaper" in SANDBOX.isolation and "pid-namespace" not in SANDBOX.isolation
    result = run(DETACH + "time.sleep(0.5)\nprint('done')")
    assert result.ok and result.stdout.strip() == "done"
    assert leftover_processes() == []


def test_without_namespaces_a_timed_out_run_takes_what_it_detached_with_it(no_namespaces):
    result = run(DETACH + "time.sleep(60)")
    assert result.timed_out
    assert leftover_processes() == []


def test_without_namespaces_exit_codes_and_signal_deaths_come_through(no_namespaces):
    assert run("import sys; sys.exit(3)").returncode == 3
    died = run("import os; os.abort()")
    assert died.killed_by == "SIGABRT" and not died.ok
