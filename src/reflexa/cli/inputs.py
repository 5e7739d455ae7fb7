"""Checking what a user typed before a run starts: files, paths, databases, validators. Each problem is
one ConfigError (one line and a hint, exit 2), never a traceback, and never after tokens were spent."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import ConfigError
from ..files import read_text


def read_task(task: str, *, what: str = "task") -> str:
    """A task given on the command line: the text itself, or a file holding it when a file of that name
    exists. A name that exists but cannot be read (a folder, a FIFO, no permission, binary) is an error,
    not task text; so is a lone word ending in .md, .txt or .py that names no file (a mistyped path)."""
    if not task.strip():
        raise ConfigError(f"the {what} is empty")
    path = Path(task)
    try:
        exists = "\n" not in task and os.path.lexists(path)
    except (OSError, ValueError):  # too long to be a file name, or a NUL in it: it is text
        exists = False
    if exists:
        text = read_text(path, f"{what} file")
        if not text.strip():
            raise ConfigError(f"the {what} file is empty: {path}")
        return text
    if " " not in task.strip() and path.suffix in (".md", ".txt", ".py", ".json"):
        raise ConfigError(f"{what} file not found: {task}", hint="give an existing file, or the text in quotes")
    return task


def check_out(out: Path) -> Path:
    """Where the best candidate goes: never through a symlink, never a directory. Checked before the run,
    so a bad --out costs no tokens."""
    if out.is_dir():
        raise ConfigError(f"--out names a directory: {out}")
    if out.suffix == "":
        raise ConfigError(f"--out needs a file name with a suffix, got {out}")
    if out.is_symlink():
        raise ConfigError(f"--out is a symlink: {out}", hint="give a plain file path")
    if not out.parent.is_dir():
        raise ConfigError(f"--out directory does not exist: {out.parent}")
    resolved = out.resolve()
    best = best_path(resolved)  # where a run that does not pass writes, when --out already holds a file
    if best.is_dir() or best.is_symlink():
        raise ConfigError(f"{best.name}, where a candidate that fails goes beside --out, is a "
                          f"{'directory' if best.is_dir() else 'symlink'}: {best}", hint="move it, or give --out "
                          "another file")
    return resolved


def best_path(out: Path) -> Path:
    """NAME.best.SUFFIX beside --out: where the best candidate of a run that did not pass goes."""
    return out.with_name(f"{out.stem}.best{out.suffix}")


def check_not_an_input(out: Path, *, trace: str | None = None, **inputs: Path | None) -> None:
    """--out must not name a file the run reads (its tests, its task) or the trace store it writes (with its
    -wal and -shm files): the answer would replace it."""
    for flag, given in inputs.items():
        try:
            same = given is not None and given.is_file() and given.resolve() == out
        except (OSError, ValueError):  # a task given as text, too long to be a path
            same = False
        if same:
            raise ConfigError(f"--out would overwrite the --{flag} file: {given}", hint="give --out another file")
    from ..trace.open import trace_files

    if out in trace_files(trace):
        raise ConfigError(f"--out would overwrite the trace store: {out}", hint="give --out another file")


def where_best_goes(out: Path, *, passed: bool, existed: bool) -> Path:
    """Where the best candidate is written: --out itself, unless the run did not pass and --out held a file
    before it, which is kept; the candidate then goes beside it as NAME.best.SUFFIX."""
    return out if passed or not existed else best_path(out)


def write_out(path: Path, text: str) -> None:
    """Write without following a symlink created since the check (O_NOFOLLOW)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text if text.endswith("\n") else text + "\n")
