"""The first process of a sandbox's namespaces, run as `python -I -S -c <this text> PLAN -- COMMAND...`.

It prepares the private mount namespace, then runs COMMAND as its child and exits with its status
(128 + n for a death by signal n). COMMAND must not be PID 1: PID 1 ignores default-action signals such
as SIGXCPU. When this process exits, the kernel kills whatever COMMAND left in the PID namespace.

The mount namespace, in order:
1. every mount private, so nothing below propagates to the host;
2. the scratch dir bound onto itself (its own mount, kept writable);
3. each hidden directory (/tmp, /run, /dev/shm, home, ...) replaced by an empty tmpfs holding only what
   must stay reachable: the scratch dir (writable) and the interpreter's paths. Each tmpfs is built at a
   staging dir inside the scratch dir while the originals are still visible, then moved over its target;
   the target that contains the scratch dir moves last (the plan orders them);
4. each host Unix socket outside those directories (the plan lists what /proc/net/unix showed) covered
   by a bind mount of /dev/null, so connecting to it is refused;
5. every other mount remounted read-only, keeping its nosuid/nodev/noexec flags (a user namespace
   forbids dropping them). The command then runs without capabilities (setpriv), so it cannot undo this.

One process with mount(2) instead of a shell running `mount` forty times: this runs before every
sandboxed command (about 20 ms against 170). Standalone: it must not import reflexa.
"""

import contextlib
import ctypes
import json
import os
import re
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_MOVE, MS_REC = 32, 1024, 2048, 4096, 8192, 16384
MS_PRIVATE, MS_RELATIME, MS_STRICTATIME = 1 << 18, 1 << 21, 1 << 24
KEPT_FLAGS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": MS_NOATIME,
              "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME, "strictatime": MS_STRICTATIME}
TMPFS_OPTIONS = "size=64k,nr_inodes=512,mode=755"

libc = ctypes.CDLL(None, use_errno=True)


def _encode(s: str | None) -> bytes | None:
    return s.encode() if s is not None else None


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    encode = _encode
    if libc.mount(encode(source), encode(target), encode(fstype), ctypes.c_ulong(flags), encode(data)) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount {target}: {os.strerror(errno)}")


def mountpoints() -> list[tuple[str, str]]:
    """(mount point, options) of every mount, deepest first; mountinfo escapes spaces and the like."""
    found = {}
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            fields = line.split()
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
            found[point] = fields[5]
    return sorted(found.items(), reverse=True)


def prepare(plan: dict) -> None:
    scratch, stage = plan["scratch"], plan["stage"]
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    mount(scratch, scratch, None, MS_BIND)
    for tmp, _target, binds in plan["hide"]:
        os.makedirs(tmp)
        mount("reflexa-empty", tmp, "tmpfs", MS_NOSUID | MS_NODEV, TMPFS_OPTIONS)
        for source, inner, recursive in binds:
            os.makedirs(inner)
            mount(source, inner, None, MS_BIND | (MS_REC if recursive else 0))
    for tmp, target, _binds in plan["hide"]:
        mount(tmp, target, None, MS_MOVE)
    for tmp, _target, _binds in plan["hide"]:
        os.rmdir(tmp)
    if plan["hide"]:
        os.rmdir(stage)
    for socket_path in plan["mask"]:
        with contextlib.suppress(OSError):  # gone since the plan was made, or on a mount it may not touch
            mount("/dev/null", socket_path, None, MS_BIND)
    os.chdir(scratch)  # re-enter through the writable mount
    for point, options in mountpoints():
        if point == scratch:
            continue
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY
        for option in options.split(","):
            flags |= KEPT_FLAGS.get(option, 0)
        with contextlib.suppress(OSError):  # e.g. a mount this namespace may not touch; it stays as it was
            mount(None, point, None, flags)


def main() -> None:
    plan = json.loads(sys.argv[1])
    command = sys.argv[sys.argv.index("--") + 1:]
    try:
        prepare(plan)
    except OSError as exc:
        print(f"reflexa sandbox: cannot set up the mount namespace: {exc}", file=sys.stderr)
        os._exit(125)
    pid = os.fork()
    if pid == 0:
        try:
            os.execvp(command[0], command)
        except OSError as exc:
            print(f"reflexa sandbox: cannot run {command[0]}: {exc}", file=sys.stderr)
        os._exit(127)
    _, status = os.waitpid(pid, 0)
    os._exit(128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))


if __name__ == "__main__":
    main()
