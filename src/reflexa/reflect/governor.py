"""The reflection ROI governor: stop paying for retries that do not convert failures into passes.

Per model and task family it records, in the store, how often a run that failed its first attempt was
turned into a pass by reflected retries, and what those retries cost. Once there are enough samples and
even an optimistic (Wilson upper) bound on the conversion rate is below `min_rate`, it cuts retries to
the cheapest useful setting: a single attempt when nothing ever converted, one retry otherwise. It
keeps probing a small share of runs with full retries, so a better model or prompt wins them back; and
a task that reflection has converted before always keeps its retries.
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import asdict, dataclass

from ..trace.store import Store

NAMESPACE = "governor"
CONVERTED = "governor-converted"


@dataclass(slots=True)
class Stats:
    samples: int = 0
    """Runs that failed their first attempt and then made reflected retries."""
    conversions: int = 0
    """Of those, runs that ended in a pass."""
    retry_tokens: int = 0
    """Tokens spent after the first failed attempt."""


@dataclass(frozen=True, slots=True)
class Plan:
    """What the governor allows one run: its loop bound (attempts or steps), its reflections, and why."""

    bound: int
    reflections: int | None = None
    note: str | None = None
    probe: bool = False


def wilson_upper(successes: int, n: int, z: float = 1.645) -> float:
    """One-sided 95% upper confidence bound on a rate observed as successes/n."""
    if n == 0:
        return 1.0
    p = successes / n
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return min(1.0, (centre + spread) / (1 + z * z / n))


def task_key(model: str, family: str, task: str) -> str:
    return hashlib.sha256(f"{model}|{family}|{task}".encode()).hexdigest()[:24]


class Governor:
    """Decides each run's retry budget from the record of earlier runs in the same store."""

    def __init__(self, store: Store, *, min_samples: int = 10, min_rate: float = 0.1, probe_rate: float = 0.05,
                 rng: random.Random | None = None) -> None:
        self.store = store
        self.min_samples = min_samples
        """Samples needed before the governor may cut anything."""
        self.min_rate = min_rate
        """A conversion rate whose upper bound stays below this does not pay for its retries."""
        self.probe_rate = probe_rate
        """Share of cut runs that still get full retries, to notice when reflection starts paying."""
        self.rng = rng or random.Random()

    def stats(self, model: str, family: str) -> Stats:
        data = self.store.get(NAMESPACE, f"{model}|{family}")
        return Stats(**data) if data else Stats()

    def plan(self, model: str, family: str, task: str, bound: int, reflections: int | None, *,
             cut: str = "retries") -> Plan:
        """The bound and reflections for one run. `cut` says what to trim when reflection does not pay:
        "retries" (attempt loops such as refine: down to one attempt, or two) or "reflections" (step loops
        such as react, whose steps are not retries: down to no reflector call, or one)."""
        keep = Plan(bound, reflections)
        if cut == "retries" and bound <= 1:
            return keep
        stats = self.stats(model, family)
        if stats.samples < self.min_samples:
            return keep
        upper = wilson_upper(stats.conversions, stats.samples)
        if upper >= self.min_rate:
            return keep
        if self.store.get(CONVERTED, task_key(model, family, task)) is not None:
            return Plan(bound, reflections, "governor: kept retries, reflection converted this task before")
        evidence = (f"reflection converted {stats.conversions} of {stats.samples} failing runs of {family} on "
                    f"{model} (95% upper bound {upper:.0%} < {self.min_rate:.0%})")
        if self.rng.random() < self.probe_rate:
            return Plan(bound, reflections, f"governor: probe with full retries; {evidence}", probe=True)
        if cut == "reflections":
            allowed = 0 if stats.conversions == 0 else 1
            return Plan(bound, allowed, f"governor: reflections cut to {allowed}; {evidence}")
        if stats.conversions == 0:
            return Plan(1, 0, f"governor: retries cut to a single attempt; {evidence}")
        return Plan(min(2, bound), reflections, f"governor: retries cut to one; {evidence}")

    def record(self, model: str, family: str, task: str, *, retried: bool, converted: bool, retry_tokens: int) -> None:
        """Count one run: `retried` when it failed its first attempt and made reflected retries."""
        if not retried:
            return
        # Atomic: runs in other processes recording at the same time all count.
        self.store.incr(NAMESPACE, f"{model}|{family}",
                        {"samples": 1, "conversions": int(converted), "retry_tokens": retry_tokens},
                        defaults=asdict(Stats()))
        if converted:
            self.store.put(CONVERTED, task_key(model, family, task), {"converted": True})
