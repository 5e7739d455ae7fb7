"""Validators for a final answer: checks against the world that say None when the answer holds, else what
is wrong. `react --validate` and `plan`'s sub-goal checks build theirs here."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

from ..errors import ConfigError
from ..files import file_uri
from ..types import ErrorCode, Signal
from .checks import CheckContext, CheckLike, FunctionCheck, as_check, said_signal
from .patterns import PatternTimeout, compile_pattern, search

Validator = Callable[[str], str | None]
"""Checks a final answer against the world: None when it holds, else what is wrong."""

COMMAND_TIMEOUT = 30
"""Seconds a validation command may run."""


def is_sql(validate: str) -> bool:
    """Whether --validate text is an SQL query (it starts with SELECT or WITH) rather than a shell command."""
    return validate.lstrip().split(None, 1)[0].upper() in ("SELECT", "WITH") if validate.strip() else False


def answer_validator(validate: str, db: Path | None = None, *, kind: Literal["sql", "command"] | None = None,
                     cwd: Path | None = None) -> Validator:
    """An SQL query that must return a row on `db`, opened read-only, with the answer bound to :answer; or
    a shell command that must exit 0, with the answer in $REFLEXA_ANSWER, run in `cwd` (the task's folder;
    None: this process's). `kind` says which; None guesses from the text (SQL when it starts with SELECT or
    WITH), for a --validate flag that takes both. A text named SQL is never run by the shell, whatever it
    starts with."""
    if not validate.strip():
        raise ConfigError("the validation is empty")
    sql = is_sql(validate) if kind is None else kind == "sql"
    if sql and db is None:
        raise ConfigError("an SQL validation needs a database", hint="give --db")
    path = Path(db).resolve() if db is not None else None
    if sql and path is not None and path.is_file():
        _compiles(validate, path)

    uri = file_uri(path, "ro") if path is not None else ""  # an SQL validation always has its database

    def check_sql(answer: str) -> str | None:
        try:
            with sqlite3.connect(uri, uri=True) as conn:
                params = {"answer": answer} if ":answer" in validate else {}
                row = conn.execute(validate, params).fetchone()
        except (sqlite3.Error, ValueError) as exc:  # ValueError: an answer holding a lone surrogate
            return f"the validation query failed: {exc}"
        return None if row is not None else "the validation query returned no row for this answer"

    def check_command(answer: str) -> str | None:
        if "\x00" in answer:
            return "the answer holds a NUL character, which no command can be given"
        # A session of its own, so a timeout kills the command's children too, not just its shell.
        with subprocess.Popen(validate, shell=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              errors="replace", start_new_session=True, cwd=cwd,
                              env={**os.environ, "REFLEXA_ANSWER": answer.encode("utf-8", "replace").decode()}) as proc:
            try:
                stdout, stderr = proc.communicate(timeout=COMMAND_TIMEOUT)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
                return f"the validation command timed out after {COMMAND_TIMEOUT} s"
        if proc.returncode == 0:
            return None
        return f"the validation command exited {proc.returncode}: {(stderr or stdout).strip()[-200:]}"

    return check_sql if sql else check_command


_READS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}


def _compiles(query: str, db: Path) -> None:
    """A query that cannot run (a syntax error, an unknown table, a write such as `WITH … DELETE`, which the
    read-only database would refuse) is a ConfigError before the run, not a failure blamed on every answer
    the model gives."""
    writes: list[int] = []

    def reads_only(action: int, *_: object) -> int:  # SQLite asks this while it compiles the query
        if action in _READS:
            return sqlite3.SQLITE_OK
        writes.append(action)
        return sqlite3.SQLITE_DENY

    try:
        with sqlite3.connect(file_uri(db, "ro"), uri=True) as conn:
            conn.set_authorizer(reads_only)
            conn.execute(f"EXPLAIN {query}", {"answer": ""} if ":answer" in query else {})  # compiled, not run
    except sqlite3.Error as exc:
        if writes:
            raise ConfigError("the validation query would change the database; it must only read",
                              hint="a SELECT (or WITH … SELECT) that returns a row when the answer is right"
                              ) from None
        raise ConfigError(f"the validation query does not run on {db.name}: {exc}",
                          hint="try it with sqlite3 first, with a sample answer for :answer") from None


def regex_validator(pattern: str) -> Validator:
    """The answer must contain a match for `pattern`, found within the search's time limit
    (evaluate/patterns.py). A bad pattern is a ConfigError."""
    try:
        compiled = compile_pattern(pattern)
    except ValueError as exc:
        raise ConfigError(f"bad regex {pattern!r}: {exc}") from None

    def validate(answer: str) -> str | None:
        try:
            return None if search(compiled, answer) else f"the answer does not match /{pattern}/"
        except PatternTimeout as exc:
            return str(exc)
    return validate


def as_validator(given: Validator | CheckLike | None, task: str = "") -> Validator | None:
    """A final answer's check as a caller may give it: a function of the answer (None or True when it holds,
    else False or what is wrong: a string or a Signal, whose message is what the loop sees), or an
    objective `Check`, run with `task` in its context. An exception the function raises is not the answer's
    fault and ends the run ERROR, as it always has; a subjective check (an LLM judge) is refused: it could
    not make an answer PASSED. None stays None: no validator."""
    if given is None:
        return None
    check = as_check(given)
    if getattr(check, "subjective", False):
        raise ConfigError(f"the validator {check.name} is subjective",
                          hint="a final answer's validator must be an objective check")
    if isinstance(check, FunctionCheck):
        function, name = check.function, check.name
        return lambda answer: _problem(said_signal(name, function(answer)))
    context = CheckContext(task=task)
    return lambda answer: _problem(check.run(answer, context))


def _problem(signal: Signal) -> str | None:
    return None if signal.ok else signal.message or f"{signal.source} failed"


def all_of(validators: Sequence[Validator]) -> Validator | None:
    """One validator that holds when every one of `validators` holds (None when there are none)."""
    if not validators:
        return None
    return lambda answer: next((p for v in validators if (p := v(answer)) is not None), None)


class ValidatorCheck:
    """A validator as a refine Check: the candidate is the answer."""

    subjective = False

    def __init__(self, validator: Validator, name: str = "validate") -> None:
        self.validator = validator
        self.name = name

    def run(self, candidate: str, context: CheckContext) -> Signal:
        problem = self.validator(candidate)
        if problem is None:
            return Signal(self.name, True, message="the answer holds", score=1.0)
        return Signal(self.name, False, ErrorCode.VALIDATION_FAILED, problem)
