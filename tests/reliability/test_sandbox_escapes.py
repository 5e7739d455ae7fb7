"""The escape set: each way out of the sandbox that it claims to close, tried for real.

Unix sockets in the host's /tmp and /dev/shm, elsewhere in the file system and abstract ones, SysV IPC in
both directions, a process tree that together goes over its memory cap, writes outside the scratch dir,
the network, a fork bomb, files in the home directory, and the working folder a `--check` copies from.
"""

import ast
import ctypes
import os
import pwd
import socket
import sys
import threading
import time
from pathlib import Path

import pytest
from test_sandbox import MARKER, leftover_processes

from reflexa.evaluate.checks import CheckContext, CommandCheck
from reflexa.evaluate.sandbox import Limits, Sandbox, _hidden_dirs

SANDBOX = Sandbox(Limits(timeout=5, cpu_seconds=5))
NAMESPACES = "pid-namespace" in SANDBOX.isolation
needs_namespaces = pytest.mark.skipif(not NAMESPACES, reason="no unshare on this machine: no namespaces to test")


def run(code: str, sandbox: Sandbox = SANDBOX):
    return sandbox.run([sys.executable, "-I", "-c", code])


@pytest.fixture()
def unix_listener(tmp_path):
    """Listening Unix sockets in the host's /tmp (pytest's tmp_path), in /dev/shm and in the abstract
    namespace; yields their addresses and the connections they accepted."""
    accepted: list[str] = []
    servers, addresses = [], []
    candidates = [str(tmp_path / "host.sock"), f"\0reflexa-test-{os.getpid()}"]
    if os.access("/dev/shm", os.W_OK):
        candidates.append(f"/dev/shm/reflexa-test-{os.getpid()}.sock")
    for address in candidates:
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(address)
        server.listen()
        server.settimeout(0.2)
        servers.append(server)
        addresses.append(address)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            for server in servers:
                try:
                    conn, _ = server.accept()
                    accepted.append(str(server.getsockname()))
                    conn.close()
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield addresses, accepted
    stop.set()
    thread.join(2)
    for server in servers:
        server.close()
    for address in addresses:
        if not address.startswith("\0") and os.path.exists(address):
            os.unlink(address)


@needs_namespaces
def test_host_unix_sockets_are_unreachable(unix_listener):
    addresses, accepted = unix_listener
    probe = socket.socket(socket.AF_UNIX)
    probe.connect(addresses[0])  # reachable from outside: the test is live
    probe.close()
    time.sleep(0.3)
    accepted.clear()
    code = (
        "import socket\n"
        f"for address in {addresses!r}:\n"
        "    s = socket.socket(socket.AF_UNIX)\n"
        "    try:\n        s.connect(address); print('CONNECTED', repr(address))\n"
        "    except OSError as e: print('refused', repr(address), e.errno)\n"
        "import os; print('tmp holds', os.listdir('/tmp'))"
    )
    result = run(code)
    assert result.ok, result.stderr
    assert "CONNECTED" not in result.stdout and result.stdout.count("refused") == len(addresses)
    assert accepted == []
    listing = ast.literal_eval(result.stdout.split("tmp holds", 1)[1].strip())
    # Only the scratch dir, and the interpreter's own directory when it lives under /tmp (it is bound back in).
    venv = Path(sys.prefix).resolve().parts
    bound_back = {venv[2]} if venv[:2] == ("/", "tmp") and len(venv) > 2 else set()
    scratch = [name for name in listing if name.startswith("reflexa-sandbox-")]
    assert len(scratch) == 1 and set(listing) - set(scratch) <= bound_back, listing


@pytest.fixture()
def unhidden_dir():
    """A fresh directory outside every directory the sandbox hides (/tmp, home, ...): the working
    folder, or /var/lib or /dev where the tests run inside a hidden one. Removed afterwards."""
    import shutil
    import tempfile

    hidden = _hidden_dirs()
    for base in (Path.cwd(), Path("/var/lib"), Path("/dev")):
        base = base.resolve()
        if os.access(base, os.W_OK) and not any(base.is_relative_to(h) for h in hidden):
            made = Path(tempfile.mkdtemp(prefix="rx-", dir=base))
            yield made
            shutil.rmtree(made, ignore_errors=True)
            return
    pytest.skip("no writable directory outside the hidden ones")


@needs_namespaces
def test_a_host_unix_socket_outside_the_hidden_directories_is_masked(unhidden_dir):
    address = str(unhidden_dir / "db.sock")
    server = socket.socket(socket.AF_UNIX)
    server.bind(address)
    server.listen()
    server.settimeout(3)
    try:
        socket.socket(socket.AF_UNIX).connect(address)  # reachable from outside: the test is live
        server.accept()[0].close()
        code = ("import socket\ns = socket.socket(socket.AF_UNIX)\n"
                f"try:\n    s.connect({address!r}); print('CONNECTED')\nexcept OSError as e: print('refused', e)")
        result = run(code)
        assert result.ok, result.stderr
        assert "refused" in result.stdout and "CONNECTED" not in result.stdout
        server.settimeout(0.3)
        with pytest.raises(TimeoutError):
            server.accept()
    finally:
        server.close()


@needs_namespaces
def test_a_check_command_cannot_read_the_folder_it_was_copied_from(unhidden_dir):
    secrets = {".npmrc": "//registry/:_authToken=npm-secret-1", ".git/config": "url = https://u:git-secret-2@h/r",
               ".aws/credentials": "aws_secret_access_key = aws-secret-3", "settings.py": "visible = 1"}
    for name, text in secrets.items():
        (unhidden_dir / name).parent.mkdir(exist_ok=True)
        (unhidden_dir / name).write_text(text)
    reads = "; ".join(f"cat {unhidden_dir / name}" for name in secrets)
    check = CommandCheck(f"{reads}; cat settings.py; exit 1", out="answer.py", workdir=unhidden_dir)
    evidence = check.run("print(1)", CheckContext()).evidence
    assert not any(word in evidence for word in ("npm-secret", "git-secret", "aws-secret"))
    assert evidence.count("visible = 1") == 1  # the scratch copy's, not the original's
    assert (unhidden_dir / "settings.py").exists()  # the original is untouched


_IPC = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
IPC_CREAT = 0o1000
key = {key}
print('shm', libc.shmget(key, 4096, IPC_CREAT | 0o600))
print('msg', libc.msgget(key, IPC_CREAT | 0o600))
print('sem', libc.semget(key, 1, IPC_CREAT | 0o600))
print('host shm visible', libc.shmget({host_key}, 0, 0) != -1)
for kind in ('shm', 'msg', 'sem'):
    print('inside', kind, any(line.split()[0] == str(key) for line in open('/proc/sysvipc/' + kind).readlines()[1:]))
"""


def _host_keys(kind: str) -> set[str]:
    return {line.split()[0] for line in Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[1:]}


@needs_namespaces
def test_sysv_ipc_neither_reaches_the_host_nor_outlives_the_run():
    key, host_key = 0x5EF1A000 + os.getpid() % 4096, 0x5EF1B000 + os.getpid() % 4096
    libc = ctypes.CDLL(None, use_errno=True)
    host_shm = libc.shmget(host_key, 4096, 0o1000 | 0o600)
    assert host_shm != -1
    try:
        before = {kind: _host_keys(kind) for kind in ("shm", "msg", "sem")}
        result = run(_IPC.format(key=key, host_key=host_key))
        assert result.ok, result.stderr
        lines = result.stdout.splitlines()
        assert all(int(line.split()[1]) >= 0 for line in lines[:3]), result.stdout  # created inside
        assert "host shm visible False" in result.stdout
        assert all(line.endswith("True") for line in lines if line.startswith("inside"))
        for kind in ("shm", "msg", "sem"):
            after = _host_keys(kind)
            assert str(key) not in after and after - before[kind] == set(), kind
    finally:
        libc.shmctl(host_shm, 0, None)  # IPC_RMID


def test_memory_cap_holds_for_the_whole_tree():
    limited = Sandbox(Limits(timeout=8, cpu_seconds=8, memory_mb=1024, tree_memory_mb=512))
    if not any(part.startswith("memory-per-tree-cgroup") for part in limited.isolation):
        pytest.skip(
            "no memory cgroup can be created here (needs root and a memory controller): "
            "only the per-process RLIMIT_AS applies"
        )
    code = (
        "import os, time\nkids = []\nfor i in range(4):\n    pid = os.fork()\n    if pid == 0:\n"
        "        block = b'x' * (200 * 1024 * 1024)\n        print('held', i, flush=True)\n        time.sleep(3)\n"
        "        os._exit(0)\n    kids.append(pid)\n"
        "codes = [os.waitpid(k, 0)[1] for k in kids]\nprint('statuses', codes)"
    )
    result = run(code, limited)
    assert result.memory_exceeded, (result.stdout, result.stderr)
    # 4 x 200 MB cannot live in 512 MB at once: the OOM killer ends some children. Which ones is its choice
    # (it picks by size), so a child may print "held" before it is the one killed: count the kills.
    _, reported, tail = result.stdout.rpartition("statuses [")
    statuses = [int(s) for s in tail.partition("]")[0].split(",")] if reported else []
    assert not reported or 9 in statuses, result.stdout  # 9: a child ended by SIGKILL (no report: the parent)
    assert "memory-per-tree-cgroup:512MiB" in result.isolation


@needs_namespaces
def test_writes_outside_scratch_fail_everywhere(tmp_path):
    targets = [
        str(Path.cwd() / "escape.txt"),
        str(tmp_path / "escape.txt"),
        "/tmp/escape.txt",
        "/dev/shm/escape.txt",
        "/run/escape.txt",
        str(Path(pwd.getpwuid(os.getuid()).pw_dir) / "escape.txt"),
        os.path.join(sys.prefix, "escape.txt"),
    ]
    code = (
        f"for p in {targets!r}:\n    try:\n        open(p, 'w').write('x'); print('WROTE', p)\n"
        "    except OSError as e:\n        print('refused', p)\nopen('inside.txt', 'w').write('ok'); print('inside ok')"
    )
    result = run(code)
    assert "WROTE" not in result.stdout and "inside ok" in result.stdout
    assert not any(os.path.exists(t) for t in targets)


@needs_namespaces
def test_home_directory_files_are_hidden(tmp_path):
    home = Path(pwd.getpwuid(os.getuid()).pw_dir)
    visible_inside = run(f"import os\nprint(sorted(os.listdir({str(home)!r})))").stdout
    interpreter = Path(os.path.realpath(sys.executable))
    allowed = {
        p.relative_to(home).parts[0] for p in (interpreter, Path(sys.base_prefix).resolve()) if p.is_relative_to(home)
    }
    entries = eval(visible_inside)  # a list of names printed by the sandbox
    assert set(entries) <= allowed, entries
    secret = Path(os.environ["HOME"]) / "secret.txt"  # the test's $HOME (conftest: a temporary dir)
    secret.write_text("hunter2")
    result = run(f"print(open({str(secret)!r}).read())")
    assert "hunter2" not in result.stdout


@needs_namespaces
def test_host_loopback_server_is_unreachable():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    try:
        result = run(
            f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=1)\n"
            "    print('CONNECTED')\nexcept OSError as e:\n    print('refused', e.errno)"
        )
        assert "refused" in result.stdout and "CONNECTED" not in result.stdout
    finally:
        server.close()


def test_fork_bomb_is_contained():
    code = f"# {MARKER}\nimport os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    started = time.monotonic()
    result = run(code, Sandbox(Limits(timeout=2, cpu_seconds=5)))
    assert not result.ok and time.monotonic() - started < 4
    time.sleep(0.2)
    assert leftover_processes() == []
