"""The goal tree `plan` runs: its schema, its validation in code, and its dependency order.

    {"goal": "plan_europe_trip", "facts": ["budget 5,000 EUR"],
     "subgoals": [{"name": "book_flight", "task": "...", "depends_on": []},
                  {"name": "book_hotel", "task": "...", "depends_on": ["book_flight"]}]}

A tree from the planner or from a file is valid only when its names are unique, every dependency names
another sub-goal, there is no cycle, every tool named is known, and every check can be built.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import ConfigError
from ..evaluate.answer import Validator, all_of, answer_validator, regex_validator

MAX_SUBGOALS = 8
"""Sub-goals a tree may have by default: a tree is a handful of units, not a program."""
NAME = r"^[A-Za-z][A-Za-z0-9_-]{0,39}$"
TASK_CHARS = 500
FACT_CHARS = 200


class SubgoalCheck(BaseModel):
    """An objective check of a sub-goal's answer; every part given must hold."""

    model_config = ConfigDict(extra="forbid")

    sql: str | None = None
    """A SELECT (or WITH) query on the database that must return a row; the answer is bound to :answer."""
    command: str | None = None
    """A shell command that must exit 0; the answer is in $REFLEXA_ANSWER."""
    regex: str | None = None
    """A regular expression the answer must contain a match for."""


class PlannedSubgoal(BaseModel):
    """A sub-goal as the planner writes it."""

    name: str = Field(pattern=NAME)
    task: str = Field(min_length=1, max_length=TASK_CHARS)
    depends_on: list[str] = Field(default_factory=list, max_length=MAX_SUBGOALS)
    tools: list[str] | None = None
    """The tools this sub-goal may use; None means every tool."""


class Subgoal(PlannedSubgoal):
    """A sub-goal of a tree: what the planner writes, plus what only a person sets (in a plan file)."""

    model_config = ConfigDict(extra="forbid")

    check: SubgoalCheck | None = None
    """Without a check, the unit's answer ends ANSWERED_UNVERIFIED, never PASSED."""
    loop: Literal["react", "refine", "research"] = "react"


class Planned(BaseModel):
    """The planner's reply. It has no checks: a check the model wrote for itself would prove nothing."""

    goal: str = Field(min_length=1, max_length=200)
    facts: list[str] = Field(default_factory=list, max_length=5)
    """Constraints stated in the request ("budget 5,000 EUR"): global memory for every unit."""
    subgoals: list[PlannedSubgoal] = Field(min_length=1, max_length=MAX_SUBGOALS)


class GoalTree(BaseModel):
    """A validated goal tree: what `plan` runs."""

    model_config = ConfigDict(extra="forbid")

    goal: str = Field(min_length=1, max_length=200)
    facts: list[str] = Field(default_factory=list, max_length=20)
    subgoals: list[Subgoal] = Field(min_length=1)

    def get(self, name: str) -> Subgoal:
        return next(s for s in self.subgoals if s.name == name)

    def sinks(self) -> list[str]:
        """Sub-goals no other depends on: their answers are the plan's answer."""
        needed = {d for s in self.subgoals for d in s.depends_on}
        return [s.name for s in self.subgoals if s.name not in needed]

    def dependents(self, name: str) -> list[str]:
        """Every sub-goal that needs `name`, directly or not."""
        found: list[str] = []
        frontier = [name]
        while frontier:
            current = frontier.pop()
            for s in self.subgoals:
                if current in s.depends_on and s.name not in found:
                    found.append(s.name)
                    frontier.append(s.name)
        return found


def parse(data: Any, *, planned: bool = False) -> tuple[GoalTree | None, list[str]]:
    """A tree from plain data (a file's or the planner's), or its schema errors, one line each."""
    try:
        if planned:
            reply = data if isinstance(data, Planned) else Planned.model_validate(data)
            return GoalTree.model_validate(reply.model_dump()), []
        return (data if isinstance(data, GoalTree) else GoalTree.model_validate(data)), []
    except ValidationError as exc:
        return None, [f"{'.'.join(str(p) for p in e['loc']) or 'plan'}: {e['msg']}" for e in exc.errors()[:8]]


def problems(tree: GoalTree, tools: Collection[str], *, max_subgoals: int = MAX_SUBGOALS, db: Path | None = None,
             search: bool = False) -> list[str]:
    """Everything wrong with a tree, one line each; empty when it can run."""
    found: list[str] = []
    names = [s.name for s in tree.subgoals]
    if len(names) > max_subgoals:
        found.append(f"{len(names)} sub-goals; at most {max_subgoals}")
    found += [f"sub-goal name {n!r} is used twice" for n in sorted({n for n in names if names.count(n) > 1})]
    for s in tree.subgoals:
        found += [f"{s.name} depends on unknown sub-goal {d!r}" for d in s.depends_on if d not in names]
        found += [f"{s.name} depends on itself" for d in s.depends_on if d == s.name]
        found += [f"{s.name} names unknown tool {t!r}; tools: {', '.join(sorted(tools))}"
                  for t in s.tools or [] if t not in tools]
        if s.loop == "refine" and s.check is None:
            found.append(f"{s.name} is a refine unit without a check")
        if s.loop == "research" and not search:
            found.append(f"{s.name} is a research unit but no search backend was given")
        if s.loop == "research" and s.check is not None:
            found.append(f"{s.name} is a research unit: its citation audit is its check, it takes no other")
        if s.check is not None and not (s.check.sql or s.check.command or s.check.regex):
            found.append(f"{s.name}'s check is empty: give sql, command or regex")
        elif s.check is not None:
            try:
                validator(s.check, db)
            except ConfigError as exc:
                found.append(f"{s.name}'s check: {exc}")
    if cycle := find_cycle(tree):
        found.append("dependency cycle: " + " -> ".join(cycle))
    return found


def mend(tree: GoalTree, tools: Collection[str]) -> tuple[GoalTree, list[str]]:
    """The planner's tree with the mistakes a rule can undo undone, and what was undone, one line each: a
    sub-goal that depends on itself or on one that does not exist, or twice on one; a dependency cycle, broken
    at the edge that points furthest forward in the order written (a sub-goal may build on what comes before
    it); a tool list naming a tool that does not exist (the sub-goal keeps every tool). A small planner makes
    these slips and, re-asked, often sends the same tree again; what is left (a duplicate name, too many
    sub-goals) is for the re-ask. A tree from a file is never mended: its errors are the user's to see."""
    names = [sub.name for sub in tree.subgoals]
    fixed: list[str] = []
    subgoals = []
    for sub in tree.subgoals:
        kept = list(dict.fromkeys(d for d in sub.depends_on if d != sub.name and d in names))
        if kept != sub.depends_on:
            dropped = sorted(set(sub.depends_on) - set(kept)) or ["a repeat"]
            fixed.append(f"{sub.name}: dropped dependencies {', '.join(dropped)} (itself, unknown or repeated)")
        update: dict[str, Any] = {"depends_on": kept}
        if sub.tools is not None and any(t not in tools for t in sub.tools):
            update["tools"] = None
            fixed.append(f"{sub.name}: named unknown tools, so it may use every tool")
        subgoals.append(sub.model_copy(update=update))
    mended = tree.model_copy(update={"subgoals": subgoals})
    while cycle := find_cycle(mended):
        edges = list(zip(cycle, cycle[1:], strict=False))  # (sub-goal, what it depends on)
        src, dst = max(edges, key=lambda edge: names.index(edge[1]) - names.index(edge[0]))
        sub = mended.get(src)
        mended.subgoals[names.index(src)] = sub.model_copy(update={"depends_on": [d for d in sub.depends_on
                                                                                  if d != dst]})
        fixed.append(f"{src}: dropped dependency {dst}, which closed the cycle {' -> '.join(cycle)}")
    return mended, fixed


def find_cycle(tree: GoalTree) -> list[str]:
    """One dependency cycle as a path (first name repeated at the end), or [] when there is none."""
    deps = {s.name: [d for d in s.depends_on if d != s.name] for s in tree.subgoals}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(name: str, path: list[str]) -> list[str]:
        state[name] = 1
        for dep in deps.get(name, []):
            if state.get(dep) == 1:  # on the current path: the path from it back to it is the cycle
                return [*path[path.index(dep):], dep]
            if dep in deps and dep not in state and (cycle := visit(dep, [*path, dep])):
                return cycle
        state[name] = 2
        return []

    for name in deps:
        if name not in state and (cycle := visit(name, [name])):
            return cycle
    return []


def order(tree: GoalTree) -> list[str]:
    """The sub-goals in dependency order: each after what it depends on, ties in the order written."""
    done: list[str] = []
    left = list(tree.subgoals)
    while left:
        ready = next(s for s in left if all(d in done for d in s.depends_on))
        done.append(ready.name)
        left.remove(ready)
    return done


def validator(check: SubgoalCheck, db: Path | None) -> Validator | None:
    """The check as one answer validator (None when the check is empty)."""
    parts = []
    if check.sql is not None:
        parts.append(answer_validator(check.sql, db, kind="sql"))
    if check.command is not None:
        parts.append(answer_validator(check.command, db, kind="command"))
    if check.regex is not None:
        parts.append(regex_validator(check.regex))
    return all_of(parts)


def load(source: GoalTree | Mapping[str, Any] | Path, tools: Collection[str], **limits: Any) -> GoalTree:
    """A tree given by the caller (a GoalTree, plain data or a JSON file), checked before any model call;
    anything wrong with it is one ConfigError naming every problem."""
    data: Any = source
    if isinstance(source, Path):
        try:
            data = json.loads(source.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"plan file not found: {source}") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigError(f"plan file {source} is not readable JSON: {exc}") from None
        except RecursionError:
            raise ConfigError(f"plan file {source} is JSON nested too deeply to read") from None
    tree, errors = parse(data)
    if tree is not None:
        errors = problems(tree, tools, **limits)
    if tree is None or errors:
        raise ConfigError("invalid plan: " + "; ".join(errors), hint="fix the plan's sub-goals")
    return tree
