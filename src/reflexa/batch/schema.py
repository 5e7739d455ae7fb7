"""The tasks file of `reflexa batch`: JSON Lines, one task a line, checked whole before anything runs.

A line is a JSON object. Every loop reads:

    task            the task text, question or goal (required, non-empty)
    id              a name for the task, unique in the file (default: "line-N")
    model           a model spec for this task alone (default: --model)
    max_iterations  the loop's own bound: refine's attempts, react's steps, research's rounds
    meta            any JSON object, copied into the task's result row

refine needs at least one check:

    tests           a pytest file that imports the candidate from module `solution`
    test_code       Python run after the candidate in one interpreter (e.g. HumanEval's check(...))
    check           a shell command run in a scratch copy of the tasks file's folder, with the candidate
                    written to `out` (default solution.py); exit 0 passes
    regex           a regular expression the candidate must match
    json_schema     a JSON schema the candidate (JSON) must follow
    timeout         seconds each check may run (default 10)

react:    db (an SQLite file, required), validate (SQL or shell, as `react --validate`), write (bool)
research: corpus (a folder, required for search "local"), search (local, tavily, ddgs or wikipedia)

Paths are relative to the tasks file's folder. Unknown fields are errors, so a typo never passes silently.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import ConfigError
from ..evaluate.answer import answer_validator
from ..tools.sql import is_sqlite

Loop = Literal["refine", "react", "research"]
LOOPS: tuple[str, ...] = ("refine", "react", "research")
MAX_ERRORS = 20
"""Errors listed at most when a tasks file is rejected; the rest are counted."""
REFINE_CHECKS = ("tests", "test_code", "check", "regex", "json_schema")


class TaskLine(BaseModel):
    """One line of a tasks file, after validation (paths made absolute)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task: str = Field(min_length=1)
    id: str | None = Field(default=None, min_length=1, max_length=200)
    model: str | None = None
    max_iterations: int | None = Field(default=None, ge=1, le=1000)
    meta: dict[str, Any] = Field(default_factory=dict)
    # refine
    tests: str | None = None
    test_code: str | None = None
    check: str | None = None
    out: str = "solution.py"
    regex: str | None = None
    json_schema: dict[str, Any] | None = None
    timeout: float = Field(default=10.0, gt=0, le=3600)
    # react
    db: str | None = None
    validate_: str | None = Field(default=None, alias="validate")
    write: bool = False
    # research
    corpus: str | None = None
    search: Literal["local", "tavily", "ddgs", "wikipedia"] = "local"
    # set by the reader, not by the file
    line: int = 0
    workdir: str = ""

    @property
    def key(self) -> str:
        """The task's name within its batch: its id, else its line number."""
        return self.id if self.id is not None else f"line-{self.line}"


def _loop_errors(loop: str, task: TaskLine, base: Path) -> list[str]:
    """What a line lacks or gets wrong for `loop` (beyond the field types pydantic checks)."""
    problems: list[str] = []
    given = task.model_fields_set
    foreign = {"refine": ("db", "validate_", "write", "corpus", "search"),
               "react": (*REFINE_CHECKS, "corpus", "search"),
               "research": (*REFINE_CHECKS, "db", "validate_", "write")}[loop]
    for name in foreign:
        if name in given:
            problems.append(f"{name.rstrip('_')}: not a field of a {loop} task")
    if not task.task.strip():
        problems.append("task: empty")
    if loop == "refine":
        if not any(getattr(task, name) for name in REFINE_CHECKS):
            problems.append(f"a refine task needs a check: one of {', '.join(REFINE_CHECKS)}")
        for name in ("check", "test_code"):  # `sh -c "  "` exits 0: a blank check would pass any answer
            if getattr(task, name) is not None and not getattr(task, name).strip():
                problems.append(f"{name}: empty")
        if task.test_code and task.test_code.strip():
            try:
                ast.parse(task.test_code)
            except SyntaxError as exc:  # else every attempt fails on it, blamed on the candidate
                problems.append(f"test_code: not valid Python: {exc.msg} (line {exc.lineno})")
        if task.tests and not (base / task.tests).is_file():
            problems.append(f"tests: file not found: {task.tests}")
        elif task.tests and (problem := _tests_problem(base / task.tests)):
            problems.append(f"tests: {task.tests} {problem}")  # else every run of it would stop the batch
        if task.regex is not None:
            try:
                re.compile(task.regex)
            except re.error as exc:
                problems.append(f"regex: {exc}")
        if task.json_schema is not None:
            import jsonschema

            try:
                jsonschema.Draft202012Validator.check_schema(task.json_schema)
            except jsonschema.SchemaError as exc:
                problems.append(f"json_schema: not a valid JSON schema: {exc.message}")
        out = Path(task.out)
        if out.is_absolute() or ".." in out.parts:
            problems.append(f"out: must be a relative path inside the folder, got {task.out}")
        elif not out.suffix or task.out.endswith("/") or (base / out).is_dir():
            problems.append(f"out: must name a file (e.g. solution.py), got {task.out}")
    elif loop == "react":
        if not task.db:
            problems.append("db: required for a react task (an SQLite file)")
        elif not (base / task.db).is_file():
            problems.append(f"db: file not found: {task.db}")
        elif not is_sqlite(base / task.db):
            problems.append(f"db: not an SQLite database: {task.db}")
        if task.validate_ is not None and not task.validate_.strip():
            problems.append("validate: empty")
        elif task.validate_ is not None and task.db and (base / task.db).is_file() and is_sqlite(base / task.db):
            try:  # a query that cannot run is found here, not by the worker midway through the batch
                answer_validator(task.validate_, base / task.db)
            except ConfigError as exc:
                problems.append(f"validate: {exc}")
    elif task.search == "local":
        if not task.corpus:
            problems.append("corpus: required for research with search 'local' (a folder of documents)")
        elif not (base / task.corpus).is_dir():
            problems.append(f"corpus: not a folder: {task.corpus}")
    return problems


def _tests_problem(path: Path) -> str | None:
    from ..evaluate.checks import test_file_problem

    try:
        return test_file_problem(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        return f"cannot be read: {exc}"


def _absolute(task: TaskLine, base: Path, line: int) -> TaskLine:
    """Paths made absolute, so a worker anywhere (another process, a Ray worker) finds the same files."""
    update: dict[str, Any] = {"line": line, "workdir": str(base)}
    for name in ("tests", "db", "corpus"):
        if (value := getattr(task, name)) is not None:
            update[name] = str((base / value).resolve())
    return task.model_copy(update=update)


def _field_errors(exc: ValidationError) -> list[str]:
    out = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"]) or "line"
        message = error["msg"]
        if error["type"] == "extra_forbidden":
            message = "unknown field"
        out.append(f"{where}: {message}")
    return out


def read_tasks(path: Path, loop: str) -> list[TaskLine]:
    """Every task in a tasks file, validated for `loop`. Any error in any line is a ConfigError that lists
    the errors with their line numbers; blank lines are skipped."""
    if loop not in LOOPS:
        raise ConfigError(f"unknown loop {loop!r}", hint=f"use one of: {', '.join(LOOPS)}")
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"tasks file not found: {path}") from None
    except IsADirectoryError:
        raise ConfigError(f"the tasks file is a directory: {path}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read the tasks file {path}: {exc.strerror or exc}") from None
    try:
        content = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"the tasks file is not UTF-8 text: {path} (byte {exc.start})") from None
    base = path.resolve().parent
    tasks: list[TaskLine] = []
    errors: list[str] = []
    seen: dict[str, int] = {}
    for number, text in enumerate(content.splitlines(), start=1):
        if not text.strip():
            continue
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            errors.append(f"line {number}: not JSON: {exc.msg} (column {exc.colno})")
            continue
        except RecursionError:
            errors.append(f"line {number}: JSON nested too deeply to read")
            continue
        if not isinstance(data, dict):
            errors.append(f"line {number}: must be a JSON object, got {type(data).__name__}")
            continue
        if "line" in data or "workdir" in data:
            errors.append(f"line {number}: {'line' if 'line' in data else 'workdir'}: unknown field")
            continue
        try:
            task = TaskLine.model_validate(data)
        except ValidationError as exc:
            errors += [f"line {number}: {e}" for e in _field_errors(exc)]
            continue
        problems = _loop_errors(loop, task, base)
        errors += [f"line {number}: {p}" for p in problems]
        task = _absolute(task, base, number)
        if task.key in seen:
            errors.append(f"line {number}: id {task.key!r} is already used on line {seen[task.key]}")
        seen[task.key] = number
        tasks.append(task)
    if errors:
        shown = "\n  ".join(errors[:MAX_ERRORS])
        more = f"\n  … and {len(errors) - MAX_ERRORS} more" if len(errors) > MAX_ERRORS else ""
        raise ConfigError(f"{path}: {len(errors)} error(s) in the tasks file:\n  {shown}{more}",
                          hint="one JSON object a line; see `reflexa batch --help` or the README's task-line "
                               "schema")
    if not tasks:
        raise ConfigError(f"{path}: no tasks (the file is empty)")
    return tasks
