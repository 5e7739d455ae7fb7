"""Reading the files a user names (tasks, tests, specs, scripts): each way one can fail is one ConfigError
that says why, never a traceback."""

from __future__ import annotations

import json
import stat
import urllib.parse
from pathlib import Path
from typing import Any

from .errors import ConfigError


def file_problem(path: Path, what: str) -> str | None:
    """Why `path` is no readable regular file (missing, a folder, a FIFO or socket, unreadable), or None."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return f"{what} not found: {path}"
    except OSError as exc:
        return f"cannot read the {what} {path}: {exc.strerror or exc}"
    if stat.S_ISDIR(mode):
        return f"the {what} is a directory, not a file: {path}"
    if not stat.S_ISREG(mode):
        return f"the {what} is not a regular file (a FIFO, socket or device): {path}"
    try:
        with path.open("rb"):
            pass
    except OSError as exc:
        return f"cannot read the {what} {path}: {exc.strerror or exc}"
    return None


MAX_INPUT_BYTES = 64 * 1024 * 1024
"""The largest file a user names that is read (a task, tests, a spec): a bigger one is refused, not loaded."""


def read_text(path: Path, what: str) -> str:
    """A UTF-8 text file's content, or one ConfigError (missing, a folder, not a regular file, unreadable
    (a kernel file such as /proc/self/mem fails the read itself), larger than MAX_INPUT_BYTES, binary, not
    UTF-8)."""
    if (problem := file_problem(path, what)) is not None:
        raise ConfigError(problem)
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_INPUT_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read the {what} {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_INPUT_BYTES:
        raise ConfigError(f"the {what} is larger than {MAX_INPUT_BYTES // 2**20} MiB: {path}")
    if b"\x00" in data[:4096]:
        raise ConfigError(f"the {what} is a binary file, not text: {path}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"the {what} is not UTF-8 text: {path} (byte {exc.start})") from None


def read_json(path: Path, what: str) -> Any:
    """A JSON file's content, or one ConfigError that says why it cannot be read."""
    text = read_text(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"the {what} is not JSON: {path}: {exc.msg} (line {exc.lineno})") from None
    except RecursionError:
        raise ConfigError(f"the {what} is JSON nested too deeply to read: {path}") from None


def file_uri(path: Path, mode: str) -> str:
    """A `file:` URI for an SQLite path opened in `mode` (ro, rw): `#`, `?` and `%` in the path are quoted,
    not read as the URI's parts."""
    return f"file:{urllib.parse.quote(str(path.resolve()))}?mode={mode}"


def is_sqlite(path: Path) -> bool:
    """Whether the file at `path` starts as an SQLite database does."""
    with path.open("rb") as handle:
        return handle.read(16) == b"SQLite format 3\x00"
