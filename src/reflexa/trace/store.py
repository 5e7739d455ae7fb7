"""The Store seam: runs and their steps. Every step is written before the next one starts."""

from __future__ import annotations

import dataclasses
import enum
import json
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..types import Step, Usage


@dataclass(slots=True)
class RunRecord:
    """One stored run: what was asked, how it ended, and its result summary."""

    run_id: str
    loop: str
    task: str
    status: str = "running"
    stop_reason: str | None = None
    started_at: float = 0.0
    ended_at: float | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    result: dict[str, Any] | None = None


class Store(Protocol):
    """Where runs and steps live. SQLite by default; an in-memory store for tests."""

    def start_run(self, record: RunRecord) -> None: ...
    def add_step(self, step: Step) -> None: ...
    def finish_run(self, run_id: str, stop_reason: str, ended_at: float, result: dict[str, Any],
                   status: str = "finished") -> None: ...
    def runs(self, limit: int = 20) -> list[RunRecord]: ...
    def get_run(self, run_id: str) -> RunRecord | None: ...
    def find_runs(self, prefix: str) -> list[RunRecord]: ...
    def steps(self, run_id: str) -> list[Step]: ...
    def close(self) -> None: ...

    # Keyed records shared across runs and processes (experience library, governor, tool effects).
    def get(self, ns: str, key: str) -> dict[str, Any] | None: ...
    def put(self, ns: str, key: str, value: dict[str, Any]) -> None: ...
    def items(self, ns: str) -> list[tuple[str, dict[str, Any]]]: ...
    def delete(self, ns: str, key: str) -> None: ...


def _default(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        # One level at a time (json recurses through this hook): asdict() would deep-copy every leaf.
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if hasattr(value, "model_dump"):
        return value.model_dump()
    return str(value)


def to_json(value: Any) -> str:
    """Serialise step payloads: dataclasses, enums and pydantic models included."""
    return json.dumps(value, default=_default, ensure_ascii=False)


def step_from_row(row: dict[str, Any]) -> Step:
    return Step(
        run_id=row["run_id"],
        step_id=row["step_id"],
        kind=row["kind"],
        role=row["role"],
        input=json.loads(row["input"]),
        output=json.loads(row["output"]),
        usage=Usage(row["input_tokens"], row["output_tokens"], row["calls"]),
        started_at=row["started_at"],
        ended_at=row["ended_at"],
    )


class MemoryStore:
    """A store in a dict, for tests and for runs that should leave no trace on disk."""

    def __init__(self) -> None:
        self._runs: dict[str, RunRecord] = {}
        self._steps: dict[str, list[Step]] = {}
        self._records: dict[tuple[str, str], str] = {}

    def start_run(self, record: RunRecord) -> None:
        self._runs[record.run_id] = record
        self._steps[record.run_id] = []

    def add_step(self, step: Step) -> None:
        # Round-trip through JSON so tests see exactly what SQLite would keep.
        self._steps[step.run_id].append(dataclasses.replace(step, input=json.loads(to_json(step.input)),
                                                            output=json.loads(to_json(step.output))))

    def finish_run(self, run_id: str, stop_reason: str, ended_at: float, result: dict[str, Any],
                   status: str = "finished") -> None:
        record = self._runs[run_id]
        record.status, record.stop_reason, record.ended_at = status, stop_reason, ended_at
        record.result = json.loads(to_json(result))

    def runs(self, limit: int = 20) -> list[RunRecord]:
        return sorted(self._runs.values(), key=lambda r: r.started_at, reverse=True)[:limit]

    def get_run(self, run_id: str) -> RunRecord | None:
        matches = self.find_runs(run_id)
        return matches[0] if len(matches) == 1 else None

    def find_runs(self, prefix: str) -> list[RunRecord]:
        """Up to two runs whose id starts with `prefix`, compared literally."""
        return [r for key, r in self._runs.items() if key.startswith(prefix)][:2]

    def steps(self, run_id: str) -> list[Step]:
        return list(self._steps.get(run_id, []))

    def get(self, ns: str, key: str) -> dict[str, Any] | None:
        value = self._records.get((ns, key))
        return json.loads(value) if value is not None else None

    def put(self, ns: str, key: str, value: dict[str, Any]) -> None:
        self._records[(ns, key)] = to_json(value)

    def items(self, ns: str) -> list[tuple[str, dict[str, Any]]]:
        return sorted((k, json.loads(v)) for (n, k), v in self._records.items() if n == ns)

    def delete(self, ns: str, key: str) -> None:
        self._records.pop((ns, key), None)

    def close(self) -> None:
        pass
