"""The search cache, in the store: keyed by backend and normalised query, with a TTL that depends on how
time-sensitive the query is. Failed and partial results are never cached."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import asdict

from ..trace.store import Store
from .base import Evidence

NAMESPACE = "search-cache"
SHORT_TTL = 3600.0
"""Seconds a time-sensitive query (a year, a quarter, "latest", "today") stays cached."""
LONG_TTL = 7 * 24 * 3600.0
"""Seconds any other query stays cached."""

_TIME_SENSITIVE = re.compile(r"\b(19|20)\d{2}\b|\bq[1-4]\b|\bquarter\b|\blatest\b|\btoday\b|\bcurrent\b|\bnow\b",
                             re.IGNORECASE)


_EDGE_PUNCTUATION = "\"'.,;:!?()[]{}"


def normalise_query(query: str) -> str:
    """A query as the cache and the run's "already run" list compare it: case, spacing and the punctuation
    around words do not matter, symbols inside a word do ("C++" and "C#" are different queries)."""
    words = (word.strip(_EDGE_PUNCTUATION) for word in query.lower().split())
    return " ".join(word for word in words if word)


class SearchCache:
    """Search results kept in `store`, keyed by backend and normalised query, for `short_ttl` seconds when
    the query is time-sensitive and `long_ttl` otherwise; failed and partial results are never kept."""

    def __init__(self, store: Store, *, short_ttl: float = SHORT_TTL, long_ttl: float = LONG_TTL,
                 clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.short_ttl = short_ttl
        self.long_ttl = long_ttl
        self.clock = clock
        self.hits = 0
        self.misses = 0

    def ttl(self, query: str) -> float:
        return self.short_ttl if _TIME_SENSITIVE.search(query) else self.long_ttl

    def _key(self, backend: str, query: str) -> str:
        return f"{backend}|{normalise_query(query)}"

    def get(self, backend: str, query: str) -> list[Evidence] | None:
        entry = self.store.get(NAMESPACE, self._key(backend, query))
        if entry is None or self.clock() - entry["stored_at"] > self.ttl(query):
            self.misses += 1
            return None
        self.hits += 1
        return [Evidence(**e) for e in entry["evidence"]]

    def put(self, backend: str, query: str, evidence: list[Evidence]) -> None:
        """Cache a successful result. Callers never pass failed or partial ones."""
        self.store.put(NAMESPACE, self._key(backend, query),
                       {"stored_at": self.clock(), "evidence": [asdict(e) for e in evidence]})
