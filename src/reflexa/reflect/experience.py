"""The experience library: repairs learned from failures, shared across runs and processes via the store.

A failure's fingerprint (tool, error code, normalised message) maps to the lesson that repaired it; a
rejected answer's key also holds its task (`engine.experience_key`). It is looked up before the reflector;
a hit costs no model call. Each entry keeps hits, successes and failures; a repair whose failures outnumber
its successes by DEMOTE_MARGIN is demoted (no longer served). The library has a capacity (the least
valuable entry is evicted) and an expiry.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from ..trace.store import Store
from ..types import Lesson

NAMESPACE = "experience"
CAPACITY = 256
"""Entries kept at most; past it the least valuable (then least recently used) is evicted."""
DEMOTE_MARGIN = 2
"""Failures more than successes that demote an entry. Two, not one: a lesson's outcome is whether the model's
next steps came clean, and one miss may be the model's rather than the lesson's (a greedy model given the
same lesson on the same failure repeats itself). Served again after one miss, it costs nothing the
reflector would not have cost; a second miss demotes it."""
TTL_SECONDS = 30 * 24 * 3600.0
"""An entry unused for this long expires."""


@dataclass(slots=True)
class Entry:
    fingerprint: str
    lesson: dict[str, Any]
    hits: int = 0
    successes: int = 0
    failures: int = 0
    created_at: float = 0.0
    last_used: float = 0.0

    @property
    def value(self) -> float:
        """Laplace-smoothed success rate: an untried entry starts at 0.5."""
        return (self.successes + 1) / (self.successes + self.failures + 2)

    @property
    def demoted(self) -> bool:
        return self.failures >= self.successes + DEMOTE_MARGIN


class ExperienceLibrary:
    """Repairs by failure fingerprint, in a Store's keyed records."""

    def __init__(self, store: Store, *, capacity: int = CAPACITY, ttl: float = TTL_SECONDS,
                 clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.capacity = capacity
        self.ttl = ttl
        self.clock = clock

    def _get(self, fingerprint: str) -> Entry | None:
        data = self.store.get(NAMESPACE, fingerprint)
        return Entry(**data) if data else None

    def _put(self, entry: Entry) -> None:
        self.store.put(NAMESPACE, entry.fingerprint, asdict(entry))

    def lookup(self, fingerprint: str) -> Lesson | None:
        """The stored repair for this failure, unless it expired or was demoted."""
        entry = self._get(fingerprint)
        if entry is None or entry.demoted:
            return None
        now = self.clock()
        if now - entry.last_used > self.ttl:
            self.store.delete(NAMESPACE, fingerprint)
            return None
        # Atomic: processes sharing the store never lose each other's hits.
        updated = self.store.incr(NAMESPACE, fingerprint, {"hits": 1}, assign={"last_used": now})
        return Lesson.from_dict(updated["lesson"]) if updated else None

    def learn(self, fingerprint: str, lesson: Lesson) -> None:
        now = self.clock()
        self._put(Entry(fingerprint, asdict(lesson), created_at=now, last_used=now))
        entries = [e for e in self.entries() if e.fingerprint != fingerprint]  # never the lesson just learnt
        if entries and len(entries) >= self.capacity:
            worst = min(entries, key=lambda e: (e.value, e.last_used))
            self.store.delete(NAMESPACE, worst.fingerprint)

    def outcome(self, fingerprint: str, success: bool) -> None:
        """Whether the repair worked: a failing one is demoted once its failures outnumber its successes by
        DEMOTE_MARGIN."""
        self.store.incr(NAMESPACE, fingerprint, {"successes" if success else "failures": 1})

    def entries(self) -> list[Entry]:
        return [Entry(**data) for _, data in self.store.items(NAMESPACE)]
