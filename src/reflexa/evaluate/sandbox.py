"""Run untrusted code (a model's candidate and its tests) in a contained subprocess.

What it stops, where the machine allows (see `Sandbox.isolation` for what is in force here):

- runaway CPU and wall time: RLIMIT_CPU plus a wall-clock timeout, then the whole tree is killed;
- memory: a memory cgroup capping the whole process tree where one can be created (root, cgroup v1 or
  v2), on top of RLIMIT_AS per process; file size and open files: RLIMIT_FSIZE, RLIMIT_NOFILE;
- fork bombs: a pids cgroup when running as root (root ignores RLIMIT_NPROC), else RLIMIT_NPROC;
- writes outside its scratch directory: a private mount namespace where every mount except the
  scratch directory is remounted read-only, and all capabilities dropped so it cannot remount them;
- host sockets and shared memory: /tmp, /var/tmp, /run, /dev/shm and the home directories are replaced
  by empty private tmpfs mounts (the scratch directory and the interpreter are bound back in; see
  _nsinit.py), so a Unix socket there cannot be reached, and every other socket path /proc/net/unix
  lists is covered by /dev/null; a private IPC namespace, so SysV shared memory, message queues and
  semaphores neither reach the host's nor outlive the run;
- the folder a run copies from (`copy_from`): hidden like /tmp, so the command reads the scratch copy
  (without dotfiles) and never the original;
- network: a fresh network namespace with no interfaces (not even loopback is up), which also hides
  abstract Unix sockets;
- processes that outlive the run: a private PID namespace, whose processes the kernel kills when its
  first process exits, plus a sweep of the cgroup and the process group;
- secrets in the environment: the child gets a fresh minimal environment, never the parent's.

What it does not stop: reading files the invoking user can read outside the hidden directories (the
file system is visible, only read-only), connecting to a Unix socket bound after the run started or in
another network namespace (a container's) outside the hidden directories, and CPU-cache or timing side
channels. Without `unshare` (namespaces) the write, socket, IPC and
network protections are missing, and a process that detached from the run (setsid) is killed only by the
orphan reaper (_reaper.py), which a program that kills the reaper first escapes; `isolation` then says so
and callers can refuse to run.

A harness that must report an outcome asks for a report channel (`run(..., report=True)`): the sandbox
hands the child a random nonce through a pipe that the harness reads and closes before it runs anything
else, and a Unix socket to write its report on (a socket, unlike a pipe, cannot be reopened through
/proc/self/fd). It accepts the report only when the channel carried exactly one line, that line carries
the nonce, and the process exited on its own: a second line (someone else wrote to the channel) marks the
report tampered, and a harness that was killed has no report. `run(..., wires=...)` hands the child other
descriptors (a script check's judge and candidate talk on one), which it owns from then on.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pwd
import resource
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from functools import cache
from pathlib import Path
from typing import Any

from ..errors import SandboxError

CGROUP_ROOT = Path("/sys/fs/cgroup")
REPORT_FDS_ENV = "REFLEXA_REPORT_FDS"
"""Environment variable naming the harness's two fds: `<nonce pipe>,<report socket>`. The numbers are no
secret; the nonce that comes through the pipe is."""
REPORT_BYTES = 256 * 1024
"""Report channel bytes kept; a child that floods the channel only loses its own report."""
HIDDEN_DIRS = ("/tmp", "/var/tmp", "/run", "/var/run", "/dev/shm")
"""Replaced by empty private tmpfs mounts in the sandbox, with the home directories: where host sockets,
shared memory and other users' scratch files live."""

@dataclass(frozen=True, slots=True)
class Limits:
    """Resource limits for one sandboxed run."""

    timeout: float = 10.0
    """Wall-clock seconds before the whole process tree is killed."""
    cpu_seconds: int = 10
    """CPU seconds per process (RLIMIT_CPU): SIGXCPU then, SIGKILL a second later."""
    memory_mb: int = 1024
    """Address space per process (RLIMIT_AS), in MiB."""
    tree_memory_mb: int = 1024
    """Memory of the whole process tree, page cache included (memory cgroup where one can be created;
    otherwise only the per-process `memory_mb` applies), in MiB."""
    file_size_mb: int = 16
    """Largest file a process may write (RLIMIT_FSIZE), in MiB."""
    open_files: int = 128
    """Open file descriptors per process (RLIMIT_NOFILE)."""
    processes: int = 64
    """Processes and threads in the whole tree (pids cgroup as root, else RLIMIT_NPROC on top of the
    user's current count)."""
    output_chars: int = 20_000
    """Characters of stdout and of stderr kept; the rest is read and dropped."""

    @classmethod
    def within(cls, timeout: float) -> Limits:
        """The default limits with `timeout` wall seconds, and as many CPU seconds (rounded up), so a check
        that spins is stopped by whichever comes first rather than by a CPU allowance set elsewhere."""
        return cls(timeout=timeout, cpu_seconds=math.ceil(timeout))


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
    memory_exceeded: bool = False
    """The tree hit its memory cgroup limit and the kernel killed a process of it."""
    report: dict[str, Any] | None = None
    """The harness's report, present only when it carried this run's nonce (`run(..., report=True)`)."""

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
    prefix = (unshare, *user, "--mount", "--net", "--pid", "--ipc", "--fork", "--kill-child", "--mount-proc")
    probe_mount = "mount -t tmpfs reflexa-probe /mnt 2>/dev/null || mount -t tmpfs reflexa-probe /tmp"
    probe = subprocess.run([*prefix, "/bin/sh", "-c", probe_mount], capture_output=True, timeout=10, check=False)
    return prefix if probe.returncode == 0 else None


# --- cgroups: pids and memory for the whole tree -----------------------------------------------------

def _own_cgroups() -> dict[str, str]:
    """This process's cgroup path per v1 controller, and under "" its v2 path."""
    paths: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return paths
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            paths[controller] = path
    return paths


@cache
def _cgroup_parent(controller: str) -> tuple[Path, int] | None:
    """(directory, version) where this process may create a child cgroup with `controller`, or None.

    The child goes under this process's own cgroup, so whatever limits the caller already runs under
    still bind the sandbox."""
    if os.geteuid() != 0 or sys.platform != "linux":
        return None
    own = _own_cgroups()
    v1 = CGROUP_ROOT / controller
    if controller in own and (v1 / "cgroup.procs").exists():
        parent = v1 / own[controller].lstrip("/")
        return (parent, 1) if os.access(parent, os.W_OK) else None
    if "" in own and (CGROUP_ROOT / "cgroup.controllers").exists():
        parent = CGROUP_ROOT / own[""].lstrip("/")
        try:
            enabled = (parent / "cgroup.subtree_control").read_text().split()
        except OSError:
            return None
        return (parent, 2) if controller in enabled and os.access(parent, os.W_OK) else None
    return None


def _cgroup_available() -> bool:
    return _cgroup_parent("pids") is not None


class _Cgroups:
    """A pids and a memory cgroup (v1: one directory per controller; v2: one for both) that cap and later
    sweep every process of one run."""

    def __init__(self, limits: Limits) -> None:
        name = f"reflexa-{uuid.uuid4().hex[:12]}"
        plan: dict[tuple[Path, int], list[str]] = {}
        for controller in ("pids", "memory"):
            if (found := _cgroup_parent(controller)) is not None:
                plan.setdefault(found, []).append(controller)
        self.dirs: list[Path] = []
        self.memory: tuple[Path, int] | None = None
        self.oom = False
        try:
            for (parent, version), controllers in plan.items():
                path = parent / name
                path.mkdir()
                self.dirs.append(path)
                if "pids" in controllers:
                    (path / "pids.max").write_text(str(limits.processes))
                if "memory" in controllers:
                    self._limit_memory(path, version, limits.tree_memory_mb * 1024 * 1024)
                    self.memory = (path, version)
        except OSError:
            self.sweep()
            raise

    @staticmethod
    def _limit_memory(path: Path, version: int, limit: int) -> None:
        if version == 1:
            (path / "memory.limit_in_bytes").write_text(str(limit))
            swap = path / "memory.memsw.limit_in_bytes"  # memory + swap; must not be below the first
        else:
            (path / "memory.max").write_text(str(limit))
            swap, limit = path / "memory.swap.max", 0
        if swap.exists():
            with contextlib.suppress(OSError):  # swap accounting off: memory alone is capped
                swap.write_text(str(limit))

    def join(self) -> None:
        """Called in the child between fork and exec."""
        for path in self.dirs:
            (path / "cgroup.procs").write_text(str(os.getpid()))

    def _oom_killed(self) -> bool:
        """Whether the kernel killed a process of the tree for exceeding the memory limit."""
        if self.memory is None:
            return False
        path, version = self.memory
        try:
            text = (path / ("memory.oom_control" if version == 1 else "memory.events")).read_text()
        except OSError:
            return False
        counts = dict(line.split() for line in text.splitlines() if len(line.split()) == 2)
        return int(counts.get("oom_kill", "0")) > 0

    def sweep(self) -> None:
        for path in self.dirs:
            for _ in range(50):
                try:
                    pids = (path / "cgroup.procs").read_text().split()
                except OSError:
                    break
                if not pids:
                    break
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)
                time.sleep(0.01)
        self.oom = self.oom or self._oom_killed()
        for path in self.dirs:
            for _ in range(20):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)  # a process still dying; an empty directory left behind is harmless


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


# --- the mount namespace: hide /tmp & co., bind back what the run needs ---------------------------

def _under(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


_HIDDEN_IN_EVERY_RUN: list[Path] = []


def hide_in_every_run(*folders: Path) -> None:
    """Hide `folders` (as /tmp is hidden) from every sandboxed run this process starts from now on, and redact
    the secrets their .env files assign from every check's output: what a server keeps from its clients'
    checks (its own folder, its root). Needs the mount namespace (`Sandbox.isolation` names it)."""
    for folder in folders:
        path = Path(os.path.realpath(folder))
        if path not in _HIDDEN_IN_EVERY_RUN:
            _HIDDEN_IN_EVERY_RUN.append(path)


def hidden_in_every_run() -> tuple[Path, ...]:
    """The folders `hide_in_every_run` hides."""
    return tuple(_HIDDEN_IN_EVERY_RUN)


def _hidden_dirs(also: tuple[Path, ...] = ()) -> list[Path]:
    """Existing directories to replace with empty tmpfs mounts (HIDDEN_DIRS, the home directories, those
    hidden in every run and `also`), outermost only."""
    candidates = [*HIDDEN_DIRS, os.environ.get("HOME", ""), *map(str, (*_HIDDEN_IN_EVERY_RUN, *also))]
    with contextlib.suppress(KeyError):
        candidates.append(pwd.getpwuid(os.getuid()).pw_dir)
    found: list[Path] = []
    for raw in candidates:
        if not raw:
            continue
        path = Path(os.path.realpath(raw))
        if path != Path("/") and path.is_dir() and path not in found:
            found.append(path)
    return [p for p in found if not any(q != p and _under(p, q) for q in found)]


@cache
def _interpreter_paths() -> tuple[Path, ...]:
    """What a Python child needs to start: the interpreter, its prefixes and the import path it builds
    for itself (asked once, with an environment as scrubbed as the sandbox's)."""
    raw = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
           os.path.dirname(os.path.realpath(sys.executable)), os.path.dirname(sys.executable)]
    try:
        probe = subprocess.run([sys.executable, "-c", "import json, sys; print(json.dumps(sys.path[1:]))"],
                               capture_output=True, text=True, timeout=30, cwd="/", check=False,
                               env={"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/")})
        raw += json.loads(probe.stdout)
    except (OSError, ValueError, subprocess.SubprocessError):
        raw += [p for p in sys.path if p]
    paths: list[Path] = []
    for item in raw:
        path = Path(os.path.realpath(item))
        if path.is_dir() and path not in paths:
            paths.append(path)
    return tuple(p for p in paths if not any(q != p and _under(p, q) for q in paths))


def _host_sockets(hidden: list[Path]) -> list[str]:
    """Paths of the Unix sockets bound in this network namespace that the hidden directories do not
    already cover (a database's socket under /var/lib, say), read from /proc/net/unix."""
    try:
        lines = Path("/proc/net/unix").read_text(errors="replace").splitlines()[1:]
    except OSError:
        return []
    found: set[str] = set()
    for line in lines:
        fields = line.split(maxsplit=7)
        if len(fields) == 8 and fields[7].startswith("/"):  # a path, not an abstract or unnamed socket
            path = fields[7]
            with contextlib.suppress(OSError, ValueError):
                if stat.S_ISSOCK(os.stat(path).st_mode) and not any(_under(Path(path), d) for d in hidden):
                    found.add(path)
    return sorted(found)


def _mount_plan(scratch: Path, also_hide: tuple[Path, ...] = ()) -> dict[str, Any]:
    """What _nsinit.py does to the mount namespace: which directories to hide behind an empty tmpfs (the
    usual ones and `also_hide`), what to bind back into each (the scratch dir, writable; the interpreter's
    paths, read-only), and which host sockets elsewhere to mask with /dev/null.

    Each tmpfs is staged inside the scratch dir, then moved over its target; the target that contains
    the scratch dir moves last, since until then the staging dirs must stay reachable by their path."""
    keep = _interpreter_paths()
    stage = scratch / ".reflexa-mounts"
    hidden = _hidden_dirs(also_hide)
    targets = sorted(hidden, key=lambda t: _under(scratch, t))
    hide = []
    for i, target in enumerate(targets):
        tmp = stage / str(i)
        binds = [[str(p), str(tmp / p.relative_to(target)), True]
                 for p in keep if _under(p, target) and not _under(scratch, p)]
        if _under(scratch, target) and not any(_under(scratch, p) for p in keep):
            # Not recursive: the staging mounts live inside the scratch dir.
            binds.append([str(scratch), str(tmp / scratch.relative_to(target)), False])
        hide.append([str(tmp), str(target), binds])
    return {"scratch": str(scratch), "stage": str(stage), "hide": hide, "mask": _host_sockets(hidden)}


@cache
def _nsinit_source() -> str:
    return (Path(__file__).parent / "_nsinit.py").read_text()


def _reaper_source() -> str:
    return (Path(__file__).parent / "_reaper.py").read_text()


REAPER_GRACE = 2.0
"""Seconds a timed-out run's reaper (_reaper.py) gets to kill what its command left, before the process
group is killed outright."""


def _sweep_through_reaper(proc: subprocess.Popen[bytes]) -> None:
    """A timed-out run without namespaces: SIGTERM asks the reaper to kill the command and every process it
    detached (killing the reaper itself would orphan those to init, out of reach)."""
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=REAPER_GRACE)


# --- copying a working directory into the scratch dir -----------------------------------------------

SKIPPED_NAMES = ("__pycache__", "node_modules")
"""Never copied, besides dotfiles, dot-directories and what .gitignore names."""


class _Ignore:
    """The subset of .gitignore that matters for a scratch copy: `#` comments, `!` negation, a trailing
    `/` for directories, a `/` inside a pattern anchoring it to the .gitignore's directory, `*`, `?`,
    `[...]` and `**`. The last matching pattern wins, as in git."""

    def __init__(self) -> None:
        self.rules: list[tuple[str, str, bool, bool, bool]] = []  # (base, pattern, negate, dir_only, anchored)

    def read(self, directory: str, base: str) -> None:
        """Add the patterns of `directory`/.gitignore; `base` is that directory relative to the root."""
        try:
            text = Path(directory, ".gitignore").read_text(errors="replace")
        except OSError:
            return
        for line in text.splitlines():
            line = line.rstrip()
            if not line or line.startswith("#"):
                continue
            negate = line.startswith("!")
            line = line[1:] if negate else line
            dir_only = line.endswith("/")
            line = line.rstrip("/")
            anchored = "/" in line
            if line:
                self.rules.append((base, line.lstrip("/"), negate, dir_only, anchored))

    def ignored(self, rel: str, is_dir: bool) -> bool:
        verdict = False
        for base, pattern, negate, dir_only, anchored in self.rules:
            if dir_only and not is_dir:
                continue
            if base and not rel.startswith(base + "/"):
                continue
            local = rel[len(base) + 1:] if base else rel
            if anchored:
                hit = fnmatchcase(local, pattern) or (pattern.startswith("**/") and fnmatchcase(local, pattern[3:]))
            else:
                hit = fnmatchcase(local.rsplit("/", 1)[-1], pattern)
            if hit:
                verdict = not negate
        return verdict


def copy_tree(source: Path, target: Path) -> None:
    """Copy a working directory for a check, without what a check must not see or follow: dotfiles and
    dot-directories (.env, .git, .venv), what .gitignore names, __pycache__ and node_modules, symlinks
    that lead out of the tree, and anything that is not a regular file, a directory or a symlink (a FIFO
    would block the copy)."""
    root = Path(os.path.realpath(source))
    ignore = _Ignore()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        rel_dir = os.path.relpath(dirpath, root)
        rel_dir = "" if rel_dir == "." else rel_dir
        ignore.read(dirpath, rel_dir)
        (target / rel_dir).mkdir(parents=True, exist_ok=True)
        kept_dirs = []
        for name in sorted(dirnames):
            rel = f"{rel_dir}/{name}" if rel_dir else name
            full = os.path.join(dirpath, name)
            if name.startswith(".") or name in SKIPPED_NAMES or ignore.ignored(rel, True):
                continue
            if os.path.islink(full):
                _copy_link(full, root, target / rel)
                continue
            kept_dirs.append(name)
        dirnames[:] = kept_dirs
        for name in sorted(filenames):
            rel = f"{rel_dir}/{name}" if rel_dir else name
            full = os.path.join(dirpath, name)
            if name.startswith(".") or ignore.ignored(rel, False):
                continue
            mode = os.lstat(full).st_mode
            if stat.S_ISLNK(mode):
                _copy_link(full, root, target / rel)
            elif stat.S_ISREG(mode):
                shutil.copy2(full, target / rel, follow_symlinks=False)


def _copy_link(link: str, root: Path, dest: Path) -> None:
    """Recreate a symlink whose target stays inside the tree, as a relative link; drop any other."""
    resolved = Path(os.path.realpath(link))
    if not _under(resolved, root) or resolved == root:
        return
    os.symlink(os.path.relpath(resolved, os.path.realpath(os.path.dirname(link))), dest)


# --- running ----------------------------------------------------------------------------------------

def _reader(stream: Any, limit: int, sink: list[bytes]) -> None:
    """Keep the first `limit` bytes, drain the rest so the child never blocks on a full pipe."""
    kept = 0
    while chunk := stream.read(65536):
        if kept < limit:
            sink.append(chunk[: limit - kept])
            kept += len(chunk)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _verified_report(raw: bytes, nonce: str, exited: bool) -> dict[str, Any] | None:
    """The harness's report: the line of the channel that is a JSON object carrying the nonce, once the
    process exited on its own (not killed). Tamper notes the harness's guard wrote are added to it; a second
    report, or any line without the nonce, means something besides the harness wrote to the channel, and
    marks the report tampered too."""
    lines = [line for line in raw.splitlines() if line.strip()]
    reports, notes, strangers = [], [], 0
    for line in lines:
        data = _stamped(line, nonce)
        if data is None:
            strangers += 1
        elif "tamper" in data:
            notes.append(str(data["tamper"])[:300])
        else:
            reports.append(data)
    if not reports or not exited:
        return None
    found, notes = reports[0], list(dict.fromkeys(notes))[:5]  # a hook in a loop writes the same note often
    if strangers or len(reports) > 1:
        notes.append(f"the report channel carried {len(reports)} report(s) and {strangers} other line(s): "
                     "something besides the harness wrote to it")
    if notes:
        found = {**found, "tampered": [*[str(t) for t in found.get("tampered") or []], *notes]}
    return found


def _stamped(line: bytes, nonce: str) -> dict[str, Any] | None:
    """A channel line as JSON, when it is an object that carries this run's nonce."""
    if nonce.encode() not in line or len(line) > REPORT_BYTES:
        return None
    try:
        data = json.loads(line)
    except (ValueError, RecursionError):
        return None
    ok = isinstance(data, dict) and secrets.compare_digest(str(data.get("nonce", "")), nonce)
    return data if ok else None


_LIVE: set[int] = set()
"""The process groups of the sandboxes running now in this process (each child leads a session of its own)."""
_LIVE_LOCK = threading.Lock()


def stop_all() -> None:
    """Kill every sandbox this process is running. For a process about to leave at once (os._exit on
    Ctrl-C): the thread that would have killed each at its timeout is gone with it, and nothing else
    would stop a child in a session of its own."""
    with _LIVE_LOCK:
        running = list(_LIVE)
    for pid in running:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


class Sandbox:
    """Runs commands in a scratch directory under the limits and isolation described above."""

    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()

    @property
    def isolation(self) -> tuple[str, ...]:
        """The mechanisms in force on this machine, the memory limits with their scope included."""
        parts = ["rlimits", "scrubbed-env", "process-group-kill"]
        if _namespace_prefix():
            parts += ["read-only-fs", "private-tmp-run-shm-home", "no-network", "pid-namespace",
                      "ipc-namespace", "no-capabilities"]
        else:
            parts.append("orphan-reaper")
        if _cgroup_available():
            parts.append("pids-cgroup")
        elif os.geteuid() != 0:  # RLIMIT_NPROC does not bind root (_preexec sets none for it)
            parts.append("rlimit-nproc")
        parts.append(f"memory-per-process-rlimit:{self.limits.memory_mb}MiB")
        if _cgroup_parent("memory") is not None:
            parts.append(f"memory-per-tree-cgroup:{self.limits.tree_memory_mb}MiB")
        return tuple(parts)

    def run(
        self,
        argv: list[str],
        *,
        files: Mapping[str, str] | None = None,
        copy_from: Path | None = None,
        env: Mapping[str, str] | None = None,
        limits: Limits | None = None,
        report: bool = False,
        wires: Mapping[str, int] | None = None,
    ) -> ExecResult:
        """Run argv in a fresh scratch directory holding `files` (and a copy of `copy_from`, see
        `copy_tree`; the original is hidden from the command). With `report`, the child gets a report
        channel (module docstring). `wires` maps an environment variable to a descriptor the child inherits
        under that name; they are closed here once the child has them (or could not start)."""
        limits = limits or self.limits
        scratch = Path(os.path.realpath(tempfile.mkdtemp(prefix="reflexa-sandbox-")))
        try:
            if copy_from is not None:
                copy_tree(copy_from, scratch)
            for name, content in (files or {}).items():
                target = (scratch / name).resolve()
                if not target.is_relative_to(scratch):
                    raise SandboxError(f"file {name!r} would land outside the scratch directory")
                if target.is_dir():  # e.g. an out of "." or a folder named solution.py in the copied directory
                    raise SandboxError(f"cannot write the file {name!r}: a directory has that name in the scratch "
                                       "copy", hint="name a file for the candidate (--out, or a task's out)")
                target.parent.mkdir(parents=True, exist_ok=True)
                # A model's text may hold a lone surrogate, which UTF-8 cannot encode: "?" in its place,
                # so the check judges the code rather than the write failing the run.
                target.write_text(content, encoding="utf-8", errors="replace")
            # The folder copied from stays out of sight: the command sees its scratch copy only.
            hide = (Path(os.path.realpath(copy_from)),) if copy_from is not None else ()
            return self._execute(argv, scratch, env or {}, limits, _Handed(report, wires or {}), hide)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _execute(self, argv: list[str], scratch: Path, extra_env: Mapping[str, str], limits: Limits,
                 channel: _Handed, hide: tuple[Path, ...]) -> ExecResult:
        command, namespaced = _command(argv, scratch, hide)
        env = {**_environment(scratch, extra_env), **channel.env}
        try:
            cgroups = _Cgroups(limits) if _cgroup_parent("pids") or _cgroup_parent("memory") else None
        except OSError as exc:
            channel.close()
            raise SandboxError(f"cannot create the run's cgroups: {exc}") from None
        started = time.monotonic()
        proc = _start(command, argv[0], scratch, env, channel, cgroups, _preexec(limits, cgroups))
        captured = _Captured(proc, limits, channel)
        timed_out = _wait(proc, limits, namespaced, cgroups)
        out, err, raw = captured.collect()
        code = proc.returncode
        killed_by = None
        if code is not None and code < 0:
            killed_by = _signal_name(-code)
        elif code is not None and code > 128:
            killed_by = _signal_name(code - 128)  # _nsinit.py and _reaper.py report a signal death as 128+n
        return ExecResult(
            returncode=None if timed_out else code, stdout=out, stderr=err, timed_out=timed_out,
            duration=time.monotonic() - started, killed_by=killed_by, isolation=self.isolation,
            memory_exceeded=bool(cgroups and cgroups.oom),
            report=_verified_report(raw, channel.nonce, killed_by is None and not timed_out) if channel.nonce
            else None,
        )


def _command(argv: list[str], scratch: Path, hide: tuple[Path, ...] = ()) -> tuple[list[str], bool]:
    """The command line that runs `argv` in the sandbox (with `hide` hidden too), and whether it runs in
    namespaces of its own."""
    prefix = _namespace_prefix()
    if not prefix:
        return [sys.executable, "-I", "-S", "-c", _reaper_source(), "--", *argv], False
    setpriv = (shutil.which("setpriv") or "setpriv", "--no-new-privs", "--bounding-set=-all", "--inh-caps=-all", "--")
    init = [sys.executable, "-I", "-S", "-c", _nsinit_source(), json.dumps(_mount_plan(scratch, hide)), "--"]
    return [*prefix, *init, *setpriv, *argv], True


def _environment(scratch: Path, extra_env: Mapping[str, str]) -> dict[str, str]:
    """The whole environment of a sandboxed run: nothing of the parent's but what is named here."""
    return {"PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin", "HOME": str(scratch),
            "TMPDIR": str(scratch), "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", **extra_env}


class _Handed:
    """The descriptors a child gets besides its stdio, and the environment that names them: the report
    channel when asked for (a nonce it must echo, read from a pipe, and a socket it writes its report to)
    and any wires. The parent's copies of the child's ends are closed once the child has its own."""

    def __init__(self, report: bool, wires: Mapping[str, int]) -> None:
        self.env = {name: str(fd) for name, fd in wires.items()}
        self.child_fds: tuple[int, ...] = tuple(wires.values())
        self.nonce, self.read_fd = "", -1
        if report:
            self.nonce = secrets.token_hex(16)
            nonce_read, nonce_write = os.pipe()
            os.write(nonce_write, self.nonce.encode())
            os.close(nonce_write)
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            self.read_fd, report_write = ours.detach(), theirs.detach()
            self.child_fds += (nonce_read, report_write)
            self.env[REPORT_FDS_ENV] = f"{nonce_read},{report_write}"

    def close_child_ends(self) -> None:
        """The parent's copies of the child's ends: kept open, they would keep the channel open."""
        for fd in self.child_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.child_fds = ()

    def close(self) -> None:
        self.close_child_ends()
        if self.read_fd >= 0:
            os.close(self.read_fd)
            self.read_fd = -1


def _preexec(limits: Limits, cgroups: _Cgroups | None) -> Callable[[], None]:
    """What the child runs before it executes the command: its own session, its cgroups, its rlimits."""
    nproc = None if _cgroup_available() or os.geteuid() == 0 else _count_user_processes() + limits.processes

    def preexec() -> None:
        os.setsid()
        if cgroups:
            cgroups.join()
        mib = 1024 * 1024
        # CPU: the soft limit sends SIGXCPU (reported as a timeout); the hard one, a second later, SIGKILL
        # for a program that catches it. Equal limits would send SIGKILL alone, which reads as a crash.
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds + 1))
        for name, value in (
            (resource.RLIMIT_AS, limits.memory_mb * mib),
            (resource.RLIMIT_FSIZE, limits.file_size_mb * mib),
            (resource.RLIMIT_NOFILE, limits.open_files),
            (resource.RLIMIT_CORE, 0),
        ):
            resource.setrlimit(name, (value, value))
        if nproc is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))

    return preexec


def _start(command: list[str], name: str, scratch: Path, env: dict[str, str], channel: _Handed,
           cgroups: _Cgroups | None, preexec: Callable[[], None]) -> subprocess.Popen[bytes]:
    """The sandboxed process, started and registered for stop_all."""
    try:
        proc = subprocess.Popen(command, cwd=scratch, env=env, stdin=subprocess.DEVNULL,
                                pass_fds=channel.child_fds, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, preexec_fn=preexec)
    except BaseException as exc:  # a Ctrl-C landing here too: the cgroups and the pipe are not left behind
        if cgroups:
            cgroups.sweep()
        channel.close()
        if isinstance(exc, (OSError, subprocess.SubprocessError)):  # the latter: a limit not set
            raise SandboxError(f"cannot start {name}: {exc}") from None
        raise
    channel.close_child_ends()  # the child holds its copies
    with _LIVE_LOCK:
        _LIVE.add(proc.pid)
    return proc


class _Captured:
    """The process's stdout, stderr and report channel, each read to its cap by a thread of its own."""

    def __init__(self, proc: subprocess.Popen[bytes], limits: Limits, channel: _Handed) -> None:
        self.out: list[bytes] = []
        self.err: list[bytes] = []
        self.channel: list[bytes] = []
        self.streams: list[tuple[Any, int, list[bytes]]] = [(proc.stdout, limits.output_chars, self.out),
                                                             (proc.stderr, limits.output_chars, self.err)]
        if channel.read_fd >= 0:
            self.streams.append((os.fdopen(channel.read_fd, "rb", buffering=0), REPORT_BYTES, self.channel))
            channel.read_fd = -1  # the stream owns it now
        self.readers = [threading.Thread(target=_reader, args=s, daemon=True) for s in self.streams]
        for reader in self.readers:
            reader.start()

    def collect(self) -> tuple[str, str, bytes]:
        """stdout and stderr as text, and the raw report, once the process is gone."""
        for reader in self.readers:
            reader.join(timeout=0.5)
        for stream, _, _ in self.streams:
            if stream is not None:  # never None (both are pipes), but Popen types them optional
                stream.close()
        return (b"".join(self.out).decode(errors="replace"), b"".join(self.err).decode(errors="replace"),
                b"".join(self.channel))


def _wait(proc: subprocess.Popen[bytes], limits: Limits, namespaced: bool, cgroups: _Cgroups | None) -> bool:
    """Wait for the process up to its timeout, then kill its whole tree; True when it timed out."""
    timed_out = False
    try:
        proc.wait(timeout=limits.timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        if timed_out and not namespaced:
            _sweep_through_reaper(proc)
        # Kill the tree whether or not the main process ended: a grandchild may still run.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with _LIVE_LOCK:
            _LIVE.discard(proc.pid)
        if cgroups:
            cgroups.sweep()
        proc.wait()
    return timed_out
