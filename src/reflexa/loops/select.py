"""Selection by behaviour, refine's `select=K`: of K candidates that pass the visible check, keep the one whose
behaviour most candidates share.

A visible check (one example, a few asserts) passes programs that are wrong elsewhere; independent samples
that are right agree with each other on inputs the check never tried, while wrong ones tend to be wrong in
different ways (CodeT, MBR-exec, AlphaCode's clustering). So the model writes a few calls of the task's
function, every passing candidate runs them in the sandbox (evaluate/behaviour.py), candidates with the
same outputs form a cluster, and the largest cluster's earliest candidate is chosen (the greedy one first).
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from ..evaluate.behaviour import behaviour
from ..runtime import Run
from ..types import Role, fence_untrusted

PROBE_CALLS = 6
"""Calls the model is asked to write for the task's function."""
CALL_CHARS = 300
"""A longer call is dropped: literal arguments of a test case fit in far less."""


class Probe(BaseModel):
    """The model's calls of the task's function, as Python expressions."""

    model_config = ConfigDict(extra="ignore")
    calls: list[str] = Field(max_length=2 * PROBE_CALLS)


def entry_name(task: str, candidates: Sequence[str]) -> str | None:
    """The function the task asks for: the top-level function most candidates define that the task names,
    else the one most candidates define last."""
    named: Counter[str] = Counter()
    last: Counter[str] = Counter()
    for code in candidates:
        try:
            tree = ast.parse(code)
        except (SyntaxError, ValueError):
            continue
        defined = [node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]
        named.update(name for name in set(defined) if name in task)
        if defined:
            last[defined[-1]] += 1
    found = named or last
    return found.most_common(1)[0][0] if found else None


def probe_calls(run: Run, task: str, name: str) -> list[str]:
    """Calls of `name` the model writes for the task (one model call): ordinary cases and edge cases, each
    a single call with literal arguments. Empty when the model's reply holds none."""
    prompt = (f"Task:\n<<<\n{fence_untrusted(task)}\n>>>\n\nWrite {PROBE_CALLS} different calls of the function "
              f"`{name}` as Python expressions, each one call with literal arguments, e.g. {name}(...). Cover "
              "ordinary cases and the edge cases the task allows (empty, zero, one element, negative, large). "
              'Reply with JSON: {"calls": [...]}.')
    reply = run.call(Role.GENERATOR, [{"role": "user", "content": prompt}], schema=Probe, max_tokens=400)
    if reply is None or reply.value is None:
        return []
    calls = [c.strip() for c in reply.value.calls if c.strip().startswith(f"{name}(") and len(c) <= CALL_CHARS]
    return list(dict.fromkeys(calls))[:PROBE_CALLS]


def choose(codes: Sequence[str], calls: list[str]) -> tuple[int, list[int]]:
    """(the chosen candidate's index, the cluster sizes largest first): the largest cluster of candidates
    with the same outputs on `calls`, its earliest member. A candidate that does not load joins no cluster;
    with none loading, the first is chosen."""
    outputs = [behaviour(code, calls) for code in codes]
    clusters: dict[tuple[str, ...], list[int]] = {}
    for index, found in enumerate(outputs):
        if found is not None:
            clusters.setdefault(found, []).append(index)
    if not clusters:
        return 0, []
    ranked = sorted(clusters.values(), key=lambda members: (-len(members), members[0]))
    return ranked[0][0], [len(members) for members in ranked]
