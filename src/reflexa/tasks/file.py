"""A file of tasks (a batch's tasks, an eval's dataset): JSON Lines, one task spec a line, checked whole before
anything runs.

A line is a `TaskSpec` (docs/tasks.md), with the same field names as the CLI's flags; its `loop` defaults to
the command's. Paths are relative to the tasks file's folder. Unknown fields are errors, so a typo never
passes silently; every error of every line is listed at once, with its line number.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .spec import MAX_ERRORS, TaskSpec


@dataclass(frozen=True, slots=True)
class TaskLine:
    """One line of a tasks file: its spec (paths absolute), its line number and its key in the file."""

    spec: TaskSpec
    line: int
    extra: dict[str, Any] = field(default_factory=dict)
    """The line's fields that are not the spec's, named by `read_tasks(keep=...)` (an eval task's `score`)."""

    @property
    def key(self) -> str:
        """The task's name within its file: its id, else its line number."""
        return self.spec.id if self.spec.id is not None else f"line-{self.line}"


def read_tasks(path: Path, loop: str = "refine", *, defaults: dict[str, Any] | None = None,
               keep: tuple[str, ...] = ()) -> list[TaskLine]:
    """Every task of a tasks file. `loop` is the loop of a line that names none; `defaults` (a model, budget
    fields) fill what a line leaves unset; the fields `keep` names are not the spec's, and go to the task's
    `extra`. Any error in any line is one ConfigError listing them all."""
    from ..files import read_text

    base = path.resolve().parent
    tasks: list[TaskLine] = []
    errors: list[str] = []
    seen: dict[str, int] = {}
    for number, text in enumerate(read_text(path, "tasks file").splitlines(), start=1):
        if not text.strip():
            continue
        try:
            data = _line(text, number)
            extra = {name: data.pop(name) for name in keep if name in data}
            filled = {"loop": loop, **{k: v for k, v in (defaults or {}).items() if v is not None}, **data}
            spec = TaskSpec.parse(filled, where=f"line {number}").resolved(base)
        except ConfigError as exc:
            errors.append(str(exc))
            continue
        errors += [f"line {number}: {problem}" for problem in spec.problems()]
        task = TaskLine(spec, number, extra)
        if task.key in seen:
            errors.append(f"line {number}: id {task.key!r} is already used on line {seen[task.key]}")
        seen[task.key] = number
        tasks.append(task)
    if errors:
        shown = "\n  ".join(errors[:MAX_ERRORS])
        more = f"\n  … and {len(errors) - MAX_ERRORS} more" if len(errors) > MAX_ERRORS else ""
        raise ConfigError(f"{path}: {len(errors)} error(s) in the tasks file:\n  {shown}{more}",
                          hint="one task spec (a JSON object) a line; see docs/tasks.md")
    if not tasks:
        raise ConfigError(f"{path}: no tasks (the file is empty)")
    return tasks


def _line(text: str, number: int) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"line {number}: not JSON: {exc.msg} (column {exc.colno})") from None
    except RecursionError:
        raise ConfigError(f"line {number}: JSON nested too deeply to read") from None
    if not isinstance(data, dict):
        raise ConfigError(f"line {number}: must be a JSON object, got {type(data).__name__}")
    return data
