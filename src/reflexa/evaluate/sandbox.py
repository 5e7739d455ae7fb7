"""Run untrusted code (a model's candidate and its tests) in a contained subprocess.

What it stops, where the machine allows (see `Sandbox.isolation` for what is in force here):

- runaway CPU and wall time: RLIMIT_CPU plus a wall-clock timeout, then the whole tree is killed;
- memory, file size and open files: RLIMIT_AS, RLIMIT_FSIZE, RLIMIT_NOFILE;
- fork bombs: a pids cgroup when running as root (root ignores RLIMIT_NPROC), else RLIMIT_NPROC;
- writes outside its scratch directory: a private mount namespace where every mount except the
  scratch directory is remounted read-only, and all capabilities dropped so it cannot remount them;
- network: a fresh network namespace with no interfaces (not even loopback is up);
- processes that outlive the run: a private PID namespace, whose processes the kernel kills when its
  first process exits, plus a sweep of the cgroup and the process group;
- secrets in the environment: the child gets a fresh minimal environment, never the parent's.

What it does not stop: reading files the invoking user can read (the file system is visible, only
read-only), and CPU-cache or timing side channels. Without `unshare` (namespaces) the write, network and
grandchild protections are missing; `isolation` then says so and callers can refuse to run.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from ..errors import SandboxError

CGROUP_PIDS = Path("/sys/fs/cgroup/pids")

# Runs as the first process of the new namespaces: make the mount tree private, keep the scratch dir
# writable, remount everything else read-only, then run the command as a child so that the command is
# not PID 1 (PID 1 ignores default-action signals such as SIGXCPU). When this shell exits, the kernel
# kills whatever the command left behind in the PID namespace.
_SETUP = r"""
set -e
mount --make-rprivate /
mount --bind "$1" "$1"
cd "$1"  # re-enter through the new writable mount
for m in $(awk '{print $5}' /proc/self/mountinfo | sort -ru); do
  [ "$m" = "$1" ] && continue
  mount -o remount,bind,ro "$m" 2>/dev/null || true
done
shift
set +e
"$@"
exit $?
"""


@dataclass(frozen=True, slots=True)
class Limits:
    """Resource limits for one sandboxed run."""

    timeout: float = 10.0
    """Wall-clock seconds before the whole process tree is killed."""
    cpu_seconds: int = 10
    """CPU seconds per process (RLIMIT_CPU)."""
    memory_mb: int = 1024
    """Address space per process (RLIMIT_AS), in MiB."""
    file_size_mb: int = 16
    """Largest file a process may write (RLIMIT_FSIZE), in MiB."""
    open_files: int = 128
    """Open file descriptors per process (RLIMIT_NOFILE)."""
    processes: int = 64
    """Processes and threads in the whole tree (pids cgroup as root, else RLIMIT_NPROC on top of the
    user's current count)."""
    output_chars: int = 20_000
    """Characters of stdout and of stderr kept; the rest is read and dropped."""


@dataclass(slots=True)
class ExecResult:
    """How a sandboxed command ended."""

    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    duration: float
    killed_by: str | None = None
    isolation: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


@cache
def _namespace_prefix() -> tuple[str, ...] | None:
    """The unshare/setpriv command prefix that works on this machine, or None."""
    unshare, setpriv = shutil.which("unshare"), shutil.which("setpriv")
    if not unshare or not setpriv or sys.platform != "linux":
        return None
    user = () if os.geteuid() == 0 else ("--user", "--map-root-user")
    prefix = (unshare, *user, "--mount", "--net", "--pid", "--fork", "--kill-child", "--mount-proc")
    probe = subprocess.run([*prefix, "true"], capture_output=True, timeout=10)
    return prefix if probe.returncode == 0 else None


@cache
def _cgroup_available() -> bool:
    return os.geteuid() == 0 and os.access(CGROUP_PIDS, os.W_OK)


def _count_user_processes() -> int:
    """The user's current tasks (threads included: RLIMIT_NPROC counts threads)."""
    uid, count = os.getuid(), 0
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and entry.stat().st_uid == uid:
                count += sum(1 for _ in (entry / "task").iterdir())
        except OSError:
            continue
    return count


class _Cgroup:
    """A pids cgroup (v1) that caps and later sweeps every process of one run."""

    def __init__(self, max_pids: int) -> None:
        self.path = CGROUP_PIDS / "reflexa" / uuid.uuid4().hex[:12]
        self.path.mkdir(parents=True)
        (self.path / "pids.max").write_text(str(max_pids))

    def join(self) -> None:
        """Called in the child between fork and exec."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def sweep(self) -> None:
        for _ in range(50):
            pids = (self.path / "cgroup.procs").read_text().split()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.01)
        try:
            self.path.rmdir()
        except OSError:
            pass  # a process still dying; the empty directory is harmless


def _reader(stream: object, limit: int, sink: list[bytes]) -> None:
    """Keep the first `limit` bytes, drain the rest so the child never blocks on a full pipe."""
    kept = 0
    while chunk := stream.read(65536):  # type: ignore[attr-defined]
        if kept < limit:
            sink.append(chunk[: limit - kept])
            kept += len(chunk)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class Sandbox:
    """Runs commands in a scratch directory under the limits and isolation described above."""

    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()

    @property
    def isolation(self) -> tuple[str, ...]:
        """The mechanisms in force on this machine."""
        parts = ["rlimits", "scrubbed-env", "process-group-kill"]
        if _namespace_prefix():
            parts += ["read-only-fs", "no-network", "pid-namespace", "no-capabilities"]
        parts.append("pids-cgroup" if _cgroup_available() else "rlimit-nproc")
        return tuple(parts)

    def run(
        self,
        argv: list[str],
        *,
        files: Mapping[str, str] | None = None,
        copy_from: Path | None = None,
        env: Mapping[str, str] | None = None,
        limits: Limits | None = None,
    ) -> ExecResult:
        """Run argv in a fresh scratch directory holding `files` (and a copy of `copy_from`)."""
        limits = limits or self.limits
        scratch = Path(os.path.realpath(tempfile.mkdtemp(prefix="reflexa-sandbox-")))
        try:
            if copy_from is not None:
                shutil.copytree(copy_from, scratch, dirs_exist_ok=True, symlinks=True,
                                ignore=shutil.ignore_patterns(".git", ".venv", "__pycache__", "node_modules"))
            for name, content in (files or {}).items():
                target = (scratch / name).resolve()
                if not target.is_relative_to(scratch):
                    raise SandboxError(f"file {name!r} would land outside the scratch directory")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(content)
            return self._execute(argv, scratch, env or {}, limits)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _execute(self, argv: list[str], scratch: Path, extra_env: Mapping[str, str], limits: Limits) -> ExecResult:
        prefix = _namespace_prefix()
        if prefix:
            setpriv = (shutil.which("setpriv") or "setpriv", "--no-new-privs", "--bounding-set=-all",
                       "--inh-caps=-all", "--")
            command = [*prefix, "/bin/sh", "-c", _SETUP, "sandbox", str(scratch), *setpriv, *argv]
        else:
            command = list(argv)
        env = {
            "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(scratch),
            "TMPDIR": str(scratch),
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            **extra_env,
        }
        try:
            cgroup = _Cgroup(limits.processes) if _cgroup_available() else None
        except OSError as exc:
            raise SandboxError(f"cannot create a pids cgroup: {exc}") from None
        nproc = None if cgroup or os.geteuid() == 0 else _count_user_processes() + limits.processes

        def preexec() -> None:
            os.setsid()
            if cgroup:
                cgroup.join()
            mib = 1024 * 1024
            for name, value in (
                (resource.RLIMIT_CPU, limits.cpu_seconds),
                (resource.RLIMIT_AS, limits.memory_mb * mib),
                (resource.RLIMIT_FSIZE, limits.file_size_mb * mib),
                (resource.RLIMIT_NOFILE, limits.open_files),
                (resource.RLIMIT_CORE, 0),
            ):
                resource.setrlimit(name, (value, value))
            if nproc is not None:
                resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))

        started = time.monotonic()
        out: list[bytes] = []
        err: list[bytes] = []
        try:
            proc = subprocess.Popen(command, cwd=scratch, env=env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=preexec)
        except OSError as exc:
            if cgroup:
                cgroup.sweep()
            raise SandboxError(f"cannot start {argv[0]}: {exc}") from None
        readers = [threading.Thread(target=_reader, args=(s, limits.output_chars, sink), daemon=True)
                   for s, sink in ((proc.stdout, out), (proc.stderr, err))]
        for reader in readers:
            reader.start()
        timed_out = False
        try:
            proc.wait(timeout=limits.timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            # Kill the tree whether or not the main process ended: a grandchild may still run.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            if cgroup:
                cgroup.sweep()
            proc.wait()
        for reader in readers:
            reader.join(timeout=0.5)
        for stream in (proc.stdout, proc.stderr):
            stream.close()  # type: ignore[union-attr]
        code = proc.returncode
        killed_by = None
        if code is not None and code < 0:
            killed_by = _signal_name(-code)
        elif prefix and code is not None and code > 128:
            killed_by = _signal_name(code - 128)  # the setup shell reports a signal death as 128+n
        return ExecResult(
            returncode=None if timed_out else code,
            stdout=b"".join(out).decode(errors="replace"),
            stderr=b"".join(err).decode(errors="replace"),
            timed_out=timed_out,
            duration=time.monotonic() - started,
            killed_by=killed_by,
            isolation=self.isolation,
        )
