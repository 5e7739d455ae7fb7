"""Checking what a user typed before a run starts: files, paths, databases, validators. Each problem is
one ConfigError (one line and a hint, exit 2), never a traceback, and never after tokens were spent."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from ..errors import ConfigError


def path_arg(value: str | Path) -> Path:
    """A path typed on the command line (typer's `parser=`), refused when empty: pathlib reads "" as ".", so
    `reflexa index ""` or `--db ""` would otherwise name the current folder."""
    if isinstance(value, Path):
        return value
    if not value.strip():
        raise ValueError("is empty; give a path")
    return Path(value)


def read_text_file(path: Path, what: str) -> str:
    """A UTF-8 text file's content, or one clear error (missing, a directory, binary, not UTF-8)."""
    if path.is_dir():
        raise ConfigError(f"{what} is a directory, not a file: {path}")
    if not path.is_file():
        raise ConfigError(f"{what} not found: {path}")
    data = path.read_bytes()
    if b"\x00" in data[:4096]:
        raise ConfigError(f"{what} is a binary file, not text: {path}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} is not UTF-8 text: {path} (byte {exc.start})") from None


def read_task(task: str) -> str:
    """--task is a file when such a file exists, else the task text itself. A lone word ending in .md, .txt
    or .py that names no file is taken for a mistyped path; a directory is an error."""
    try:
        path = Path(task)
        if path.is_file() or path.is_dir():
            text = read_text_file(path, "task file")
            if not text.strip():
                raise ConfigError(f"the task file is empty: {path}")
            return text
    except (OSError, ValueError):  # e.g. a long one-line task: too long to be a file name, so it is text
        return task
    if " " not in task.strip() and path.suffix in (".md", ".txt", ".py"):
        raise ConfigError(f"task file not found: {task}", hint="give an existing file or the task text in quotes")
    if not task.strip():
        raise ConfigError("the task is empty")
    return task


def check_out(out: Path, *, force: bool) -> Path:
    """Where the best candidate goes: inside the working directory unless `force`, never through a
    symlink, never a directory. Checked before the run, so a bad --out costs no tokens."""
    if out.is_dir():
        raise ConfigError(f"--out names a directory: {out}")
    if out.suffix == "":
        raise ConfigError(f"--out needs a file name with a suffix, got {out}")
    if out.is_symlink():
        raise ConfigError(f"--out is a symlink: {out}", hint="give a plain file path")
    if not out.parent.is_dir():
        raise ConfigError(f"--out directory does not exist: {out.parent}")
    resolved = out.resolve()
    if not force and not resolved.is_relative_to(Path.cwd().resolve()):
        raise ConfigError(f"--out must stay inside the working directory, got {out}",
                          hint="pass --force-out to write elsewhere")
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


def sql_validator(db: Path, validate: str) -> Callable[[str], str | None]:
    """--validate: an SQL query (SELECT/WITH) that must return a row, with the answer bound to :answer,
    or a shell command that must exit 0, with the answer in $REFLEXA_ANSWER."""
    from ..evaluate.answer import answer_validator

    if not validate.strip():
        raise ConfigError("--validate is empty")
    return answer_validator(validate, db)


def check_database(db: Path) -> None:
    """--db must be an SQLite file: say so before the run, not as a strange tool failure during it."""
    if db.is_dir() or not db.is_file():
        raise ConfigError(f"database not found: {db}", hint="give an existing SQLite file with --db")
    from ..tools.sql import is_sqlite  # here, not at import: `reflexa --help` loads no tools

    if not is_sqlite(db):
        raise ConfigError(f"not an SQLite database: {db}")
