"""Budget enforcement and per-role usage accounting."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from .types import Budget, Role, StopReason, Usage


class Meter:
    """Tracks what a run has spent against its Budget.

    `check()` runs before each model call: it returns the StopReason of the first exhausted limit, or
    None. `allowance()` caps the next call's max_tokens to what is left, so a run overshoots its token
    limit by at most that call's input tokens.
    """

    def __init__(self, budget: Budget, clock: Callable[[], float] = time.monotonic) -> None:
        self.budget = budget
        self.clock = clock
        self.started = clock()
        self.by_role: dict[str, Usage] = {}

    @property
    def total(self) -> Usage:
        return Usage.total(self.by_role.values())

    @property
    def elapsed(self) -> float:
        return self.clock() - self.started

    def record(self, role: Role | str, usage: Usage) -> None:
        self.by_role.setdefault(str(role), Usage()).add(usage)

    def check(self) -> StopReason | None:
        b, total = self.budget, self.total
        if b.max_seconds is not None and self.elapsed >= b.max_seconds:
            return StopReason.TIMEOUT
        if b.max_calls is not None and total.calls >= b.max_calls:
            return StopReason.BUDGET_CALLS
        if b.max_tokens is not None and total.total_tokens >= b.max_tokens:
            return StopReason.BUDGET_TOKENS
        return None

    def time_left(self) -> float | None:
        """Seconds the time budget has left (None: no time budget): how long the next call may take."""
        if self.budget.max_seconds is None:
            return None
        return max(0.0, self.budget.max_seconds - self.elapsed)

    def allowance(self, max_tokens: int) -> int:
        """The max_tokens to ask for: the caller's wish, cut to the tokens left in the budget."""
        if self.budget.max_tokens is None:
            return max_tokens
        return max(1, min(max_tokens, self.budget.max_tokens - self.total.total_tokens))

    def remaining(self) -> Budget:
        """The budget left: what an inner run (a trial, a plan's sub-goal) may still spend of this run's
        limits, reflections included (the reflector's calls so far, re-asks counted)."""
        b, total = self.budget, self.total
        reflected = self.by_role.get(str(Role.REFLECTOR), Usage()).calls
        return replace(
            b,
            max_tokens=None if b.max_tokens is None else max(0, b.max_tokens - total.total_tokens),
            max_calls=None if b.max_calls is None else max(0, b.max_calls - total.calls),
            max_seconds=None if b.max_seconds is None else max(0.0, b.max_seconds - self.elapsed),
            max_reflections=None if b.max_reflections is None else max(0, b.max_reflections - reflected),
        )
