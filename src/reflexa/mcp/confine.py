"""What keeps `reflexa mcp`'s clients in their place: every path a client names resolves inside the root the
server was started with, and every scratch folder the server makes lives in one folder that is removed when
the server ends, however it ends."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import ConfigError


def contained(root: Path, given: str, what: str) -> Path:
    """The path a client gave, read against `root` and resolved (`..` and symlinks followed), or a
    ConfigError when it leads outside `root`. `~` is no home here: it is a name like any other."""
    if not given.strip():
        raise ConfigError(f"{what}: empty path")
    path = Path(os.path.realpath(root / given.strip()))
    if path != root and not path.is_relative_to(root):
        raise ConfigError(f"{what}: {given.strip()!r} is outside the server's root",
                          hint=f"paths are read inside {root} (reflexa mcp --root)")
    return path


WATCHDOG = """
import shutil, sys, time
sys.stdin.buffer.read()  # returns when the server's end of the pipe closes: at its exit, or its death
for _ in range(20):  # a sandboxed run that was still writing may need a moment to die
    shutil.rmtree(sys.argv[1], ignore_errors=True)
    try:
        open(sys.argv[1])
    except FileNotFoundError:
        break
    except OSError:
        pass
    time.sleep(0.25)
"""


@contextmanager
def scratch_home() -> Iterator[Path]:
    """One folder for every scratch folder the server makes while it serves (tempfile's default meanwhile:
    a call's folder and its sandboxed runs' folders), removed at the end: here when the server exits, and by
    a watchdog process when it is killed (the watchdog waits for the server's end of a pipe to close, which
    happens however the server ends)."""
    home = Path(tempfile.mkdtemp(prefix="reflexa-mcp-"))
    watchdog = subprocess.Popen([sys.executable, "-I", "-S", "-c", WATCHDOG, str(home)], stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)  # a Ctrl-C to the server's group leaves it to clean up
    saved, tempfile.tempdir = tempfile.tempdir, str(home)
    try:
        yield home
    finally:
        tempfile.tempdir = saved
        shutil.rmtree(home, ignore_errors=True)
        assert watchdog.stdin is not None
        watchdog.stdin.close()
        watchdog.wait(10)
