"""The SearchBackend seam: a query in, evidence out. Retrieved text is data, never instructions."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Evidence:
    """One retrieved passage."""

    id: str
    source: str
    """Where it came from: a file path with position, or a URL."""
    title: str
    snippet: str
    score: float = 0.0
    retrieved_at: float = field(default_factory=time.time)


@dataclass(slots=True)
class SearchOutcome:
    """The result of running a set of queries. A failed query is named, never silently dropped."""

    status: str  # "success" | "partial" | "failed"
    evidence: list[Evidence] = field(default_factory=list)
    failed_queries: dict[str, str] = field(default_factory=dict)
    """Query -> why it failed."""


class SearchError(Exception):
    """A backend could not answer one query (network, quota, bad key). Becomes a failed query."""


class SearchBackend(Protocol):
    name: str

    def search(self, query: str, k: int) -> list[Evidence]: ...
