"""The first process of a sandboxed command where there are no namespaces, run as
`python -I -S -c <this text> -- COMMAND...`.

Without a PID namespace, a process that leaves its process group (setsid, a double fork: how a daemon
or a test's background server detaches) is out of reach of the sandbox's kill. This process makes itself
a child subreaper (prctl PR_SET_CHILD_SUBREAPER): every orphan of COMMAND's tree becomes its child, however
it detached. When COMMAND exits, or when this process gets SIGTERM (the sandbox's timeout), it kills every
descendant left, then exits with COMMAND's status (128 + n for a death by signal n, as _nsinit.py does).

It stops what detaches, not a program that kills this process first: that needs the PID namespace.
Standalone: it must not import reflexa.
"""

import contextlib
import ctypes
import os
import signal
import sys

PR_SET_CHILD_SUBREAPER = 36
SWEEPS = 1000
"""Kill-and-reap rounds at most: each round kills the children there are, whose own children then become
this process's; a tree is gone in as many rounds as it is deep."""


def children() -> list[int]:
    """This process's live children (zombies left out: they are reaped, not killed), from /proc."""
    me, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:  # gone meanwhile
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if fields and fields[0] != b"Z" and int(fields[1]) == me:
            found.append(int(entry))
    return found


def reap() -> None:
    """Collect every child that has ended."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def kill_descendants() -> None:
    for _ in range(SWEEPS):
        reap()
        left = children()
        if not left:
            return
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        try:
            os.wait()  # one of them, at least, before the next look
        except ChildProcessError:
            return


def main() -> None:
    command = sys.argv[sys.argv.index("--") + 1:]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        os.execvp(command[0], command)  # no subreaper here: run as if this process were not in between
    child: list[int] = []
    stopped: list[int] = []

    def stop(signum: int, frame: object) -> None:
        stopped.append(signum)
        for pid in child:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    signal.signal(signal.SIGTERM, stop)  # before the fork: a timeout that comes at once still sweeps
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        try:
            os.execvp(command[0], command)
        except OSError as exc:
            print(f"reflexa sandbox: cannot run {command[0]}: {exc}", file=sys.stderr)
        os._exit(127)
    child.append(pid)
    if stopped:  # SIGTERM came between the fork and the line above
        stop(signal.SIGTERM, None)
    while True:
        ended, status = os.wait()
        if ended == pid:
            break
    kill_descendants()
    os._exit(128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))


if __name__ == "__main__":
    main()
