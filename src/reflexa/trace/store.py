"""The Store seam: runs and their steps. Every step is written before the next one starts.

Besides runs and steps, a store holds keyed records shared across runs and processes (experience
library, governor statistics, tool effects, search cache), updated atomically with `incr`, and run
leases, so that two processes never drive one run at once.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import RunLeased
from ..types import Step, Usage

LEASE_TTL = 3600.0
"""Seconds after which a lease held from another host counts as stale unless its owner renewed it
(`acquire_lease` again). A lease held on this host is stale as soon as its process is gone."""


def trace_env() -> str | None:
    """$REFLEXA_TRACE, or None when it is unset or blank (a blank one named a file called "  ")."""
    return os.environ.get("REFLEXA_TRACE", "").strip() or None


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
    def reopen_run(self, run_id: str) -> None:
        """Mark an unfinished (interrupted or killed) run as running again, for a resume."""
        ...
    def add_step(self, step: Step) -> None: ...
    def finish_run(self, run_id: str, stop_reason: str, ended_at: float, result: dict[str, Any],
                   status: str = "finished") -> None: ...
    def runs(self, limit: int = 20, *, loop: str | None = None, status: str | None = None,
             since: float | None = None) -> list[RunRecord]:
        """Newest first. `status` matches the run's status ("running", "finished") or its stop reason
        ("PASSED", ...); `since` is a start time (epoch seconds)."""
        ...
    def get_run(self, run_id: str) -> RunRecord | None:
        """A run by its id or a unique prefix of it (matched literally); None when unknown or ambiguous."""
        ...
    def find_runs(self, prefix: str) -> list[RunRecord]:
        """Up to two runs whose id starts with `prefix` (literally): none, one, or "ambiguous"."""
        ...
    def steps(self, run_id: str) -> list[Step]: ...
    def close(self) -> None: ...

    # Keyed records shared across runs and processes (experience library, governor, tool effects).
    def get(self, ns: str, key: str) -> dict[str, Any] | None: ...
    def put(self, ns: str, key: str, value: dict[str, Any]) -> None: ...
    def items(self, ns: str) -> list[tuple[str, dict[str, Any]]]: ...
    def delete(self, ns: str, key: str) -> None: ...
    def incr(self, ns: str, key: str, fields: Mapping[str, int | float],
             defaults: Mapping[str, Any] | None = None, *,
             assign: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        """Atomically add `fields` to a record's numeric fields (a missing field counts as 0) and set
        `assign`'s fields; a missing record starts from `defaults`, or stays missing (None) without them.
        Returns the record as written. Concurrent increments from any number of processes all count."""
        ...
    def update(self, ns: str, key: str, change: Callable[[dict[str, Any]], dict[str, Any] | None]
               ) -> dict[str, Any] | None:
        """Atomically replace a record with `change(record)`: read and written in one transaction, so of two
        updates racing from any processes each sees the other's result (compare-and-set). A missing record,
        or `change` returning None, writes nothing. Returns what was written, or None."""
        ...

    # Run leases: one live process drives a run at a time.
    def acquire_lease(self, run_id: str, owner: str, pid: int) -> None:
        """Hold `run_id` for `owner` (process `pid`). Taking it again as the same owner renews it. A lease
        whose process is gone (same host) or that went unrenewed for LEASE_TTL (another host) is taken
        over. Raises RunLeased, naming the holder's pid and start time, when a live holder has it."""
        ...
    def release_lease(self, run_id: str, owner: str) -> None:
        """Give the lease up; a lease held by another owner is left alone."""
        ...
    def lease(self, run_id: str) -> Lease | None:
        """Who holds the run now (live or not), or None."""
        ...


def storable(text: str) -> str:
    """`text` with lone surrogates (e.g. "\\ud800", which no UTF-8 store accepts) replaced by U+FFFD; a
    valid surrogate pair becomes the character it encodes."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


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
    """Serialise step payloads: dataclasses, enums and pydantic models included. Lone surrogates,
    anywhere in keys or values, are replaced (see `storable`): they must not fail a write. A non-finite
    number (a budget of `inf` seconds, a check's NaN score) is stored as null: JSON has no such value, and
    Python's `Infinity` would make the store's own JSON functions (SQLite's, PostgreSQL's) refuse the row."""
    text = json.dumps(value, default=_default, ensure_ascii=False)
    if "Infinity" in text or "NaN" in text:  # rare; a string holding the word only costs a re-parse
        text = json.dumps(json.loads(text, parse_constant=lambda _: None), ensure_ascii=False)
    return storable(text)


def matches_run(record: RunRecord, loop: str | None, status: str | None, since: float | None) -> bool:
    """The `runs()` filters, for stores that filter in Python."""
    return ((loop is None or record.loop == loop)
            and (status is None or status in (record.status, record.stop_reason))
            and (since is None or record.started_at >= since))


# --- leases -----------------------------------------------------------------------------------------------

HOST = socket.gethostname()


def process_start(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (Linux), to tell it from a later process that
    reuses its pid; None where /proc cannot say."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2:].split()
    try:
        return None if fields[0] in (b"Z", b"X") else int(fields[19])
    except (IndexError, ValueError):
        return None


def process_alive(pid: int, start: int | None) -> bool:
    """Whether process `pid` still runs and is the one that started at `start` (when known)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, another user's
    if os.path.exists(f"/proc/{pid}/stat"):
        now = process_start(pid)
        return now is not None and (start is None or now == start)
    return True


@dataclass(slots=True)
class Lease:
    """Who holds a run."""

    run_id: str
    owner: str
    pid: int
    host: str
    pid_start: int | None
    acquired_at: float
    renewed_at: float

    def live(self, now: float, ttl: float = LEASE_TTL) -> bool:
        if self.host == HOST:
            return process_alive(self.pid, self.pid_start)
        return now - self.renewed_at < ttl

    def refusal(self) -> RunLeased:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.acquired_at))
        return RunLeased(f"run {self.run_id} is held by pid {self.pid} on {self.host} (owner {self.owner}), "
                         f"since {since}", run_id=self.run_id, pid=self.pid, host=self.host,
                         since=self.acquired_at)


def shown_status(record: RunRecord, lease: Lease | None, now: float, ttl: float = LEASE_TTL) -> str:
    """A run's status as a reader should see it: "stale" for a run stored as running whose process is gone
    (killed, or the machine restarted) or that no process holds, so it is not taken for one in progress;
    `reflexa resume` continues it. Otherwise the stored status."""
    if record.status == "running" and (lease is None or not lease.live(now, ttl)):
        return "stale"
    return record.status


def decide_lease(current: Lease | None, run_id: str, owner: str, pid: int, now: float,
                 ttl: float = LEASE_TTL) -> Lease:
    """The lease to write for this request, or raise RunLeased when a live holder has it."""
    if current is not None and current.owner != owner and current.live(now, ttl):
        raise current.refusal()
    acquired = current.acquired_at if current is not None and current.owner == owner else now
    return Lease(run_id, owner, pid, HOST, process_start(pid), acquired, now)


def record_from_row(row: Any) -> RunRecord:
    """A run record from a database row by column name (an sqlite3.Row or a PostgreSQL dict row)."""
    return RunRecord(
        run_id=row["run_id"], loop=row["loop"], task=row["task"], status=row["status"],
        stop_reason=row["stop_reason"], started_at=row["started_at"], ended_at=row["ended_at"],
        meta=json.loads(row["meta"]), result=json.loads(row["result"]) if row["result"] else None,
    )


def runs_query(limit: int, loop: str | None, status: str | None, since: float | None,
               mark: str) -> tuple[str, tuple[str | float | int, ...]]:
    """The SQL and parameters of `Store.runs` for a database whose placeholder is `mark` ("?" or "%s")."""
    where: list[str] = ["1 = 1"]
    params: list[str | float | int] = []
    if loop is not None:
        where.append(f"loop = {mark}")
        params.append(loop)
    if status is not None:
        where.append(f"(status = {mark} OR stop_reason = {mark})")
        params += [status, status]
    if since is not None:
        where.append(f"started_at >= {mark}")
        params.append(since)
    return f"SELECT * FROM runs WHERE {' AND '.join(where)} ORDER BY started_at DESC LIMIT {mark}", (*params, limit)


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
    """A store in a dict, for tests and for runs that should leave no trace on disk. Thread-safe."""

    def __init__(self, *, lease_ttl: float = LEASE_TTL) -> None:
        self._runs: dict[str, RunRecord] = {}
        self._steps: dict[str, list[Step]] = {}
        self._records: dict[tuple[str, str], str] = {}
        self._leases: dict[str, Lease] = {}
        self._lock = threading.RLock()
        self.lease_ttl = lease_ttl

    def start_run(self, record: RunRecord) -> None:
        record = dataclasses.replace(record, loop=storable(record.loop), task=storable(record.task),
                                     meta=json.loads(to_json(record.meta)))
        with self._lock:
            self._runs[record.run_id] = record
            self._steps[record.run_id] = []

    def reopen_run(self, run_id: str) -> None:
        with self._lock:
            record = self._runs[run_id]
            record.status, record.stop_reason, record.ended_at = "running", None, None

    def add_step(self, step: Step) -> None:
        # Round-trip through JSON so tests see exactly what SQLite would keep.
        stored = dataclasses.replace(
            step, kind=storable(step.kind), role=storable(step.role) if step.role else step.role,
            input=json.loads(to_json(step.input)), output=json.loads(to_json(step.output)))
        with self._lock:
            self._steps[step.run_id].append(stored)

    def finish_run(self, run_id: str, stop_reason: str, ended_at: float, result: dict[str, Any],
                   status: str = "finished") -> None:
        with self._lock:
            record = self._runs[run_id]
            record.status, record.stop_reason, record.ended_at = status, stop_reason, ended_at
            record.result = json.loads(to_json(result))

    # Reads copy under the lock: another thread's write must not change a dict while it is walked.

    def runs(self, limit: int = 20, *, loop: str | None = None, status: str | None = None,
             since: float | None = None) -> list[RunRecord]:
        with self._lock:
            found = [r for r in self._runs.values() if matches_run(r, loop, status, since)]
        return sorted(found, key=lambda r: r.started_at, reverse=True)[:limit]

    def find_runs(self, prefix: str) -> list[RunRecord]:
        with self._lock:
            return [r for key, r in self._runs.items() if key.startswith(prefix)][:2]

    def get_run(self, run_id: str) -> RunRecord | None:
        with self._lock:
            matches = [self._runs[run_id]] if run_id in self._runs else self.find_runs(run_id)
        return matches[0] if len(matches) == 1 else None

    def steps(self, run_id: str) -> list[Step]:
        with self._lock:
            return list(self._steps.get(run_id, []))

    def get(self, ns: str, key: str) -> dict[str, Any] | None:
        value = self._records.get((storable(ns), storable(key)))
        return json.loads(value) if value is not None else None

    def put(self, ns: str, key: str, value: dict[str, Any]) -> None:
        self._records[(storable(ns), storable(key))] = to_json(value)

    def items(self, ns: str) -> list[tuple[str, dict[str, Any]]]:
        ns = storable(ns)
        with self._lock:
            records = list(self._records.items())
        return sorted((k, json.loads(v)) for (n, k), v in records if n == ns)

    def delete(self, ns: str, key: str) -> None:
        with self._lock:
            self._records.pop((storable(ns), storable(key)), None)

    def incr(self, ns: str, key: str, fields: Mapping[str, int | float],
             defaults: Mapping[str, Any] | None = None, *,
             assign: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        with self._lock:
            value = self.get(ns, key)
            if value is None and defaults is None:
                return None
            value = apply_incr(value if value is not None else dict(defaults or {}), fields, assign)
            self.put(ns, key, value)
            return value

    def update(self, ns: str, key: str, change: Callable[[dict[str, Any]], dict[str, Any] | None]
               ) -> dict[str, Any] | None:
        with self._lock:
            value = self.get(ns, key)
            written = change(value) if value is not None else None
            if written is not None:
                self.put(ns, key, written)
            return written

    def acquire_lease(self, run_id: str, owner: str, pid: int) -> None:
        with self._lock:
            self._leases[run_id] = decide_lease(self._leases.get(run_id), run_id, owner, pid, time.time(),
                                                self.lease_ttl)

    def release_lease(self, run_id: str, owner: str) -> None:
        with self._lock:
            if (lease := self._leases.get(run_id)) is not None and lease.owner == owner:
                del self._leases[run_id]

    def lease(self, run_id: str) -> Lease | None:
        return self._leases.get(run_id)

    def close(self) -> None:
        pass


def apply_incr(value: dict[str, Any], fields: Mapping[str, int | float],
               assign: Mapping[str, Any] | None) -> dict[str, Any]:
    """The record after an `incr`: numeric fields added to (a missing or non-numeric one counts as 0)."""
    for name, delta in fields.items():
        current = value.get(name, 0)
        value[name] = (current if isinstance(current, (int, float)) and not isinstance(current, bool) else 0) + delta
    value.update(assign or {})
    return value


def under_parents(records: list[RunRecord]) -> list[tuple[RunRecord, bool]]:
    """`records` in their order, except that a run whose parent (`meta["parent"]`: a plan's sub-goal, a
    trial) is among them follows that parent, oldest first; each with whether it is such a child."""
    listed = {record.run_id for record in records}
    children: dict[str, list[RunRecord]] = {}
    top = []
    for record in records:
        parent = record.meta.get("parent") if isinstance(record.meta, dict) else None
        if isinstance(parent, str) and parent in listed and parent != record.run_id:
            children.setdefault(parent, []).append(record)
        else:
            top.append(record)
    out: list[tuple[RunRecord, bool]] = []

    def emit(record: RunRecord, child: bool) -> None:
        out.append((record, child))
        for kid in sorted(children.pop(record.run_id, []), key=lambda r: r.started_at):
            emit(kid, True)

    for record in top:
        emit(record, False)
    for kids in list(children.values()):  # a cycle of parents (a hand-edited store): still listed, once each
        for kid in kids:
            if all(kid is not shown for shown, _ in out):
                out.append((kid, True))
    return out
