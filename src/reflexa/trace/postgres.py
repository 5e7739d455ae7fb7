"""A store in PostgreSQL, shared by many workers on many machines (`--trace postgresql://…`).

The same tables as the SQLite store, with JSON kept as text (so both stores read back exactly what the
other would). Each write is its own committed transaction, taken from a connection pool that the threads
of one process share; a process makes its own pool (a pool does not survive a fork).

Needs the `postgres` extra: pip install 'reflexa[postgres]'.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ..errors import StoreError
from ..types import Step
from .store import (
    LEASE_TTL,
    Lease,
    RunRecord,
    apply_incr,
    decide_lease,
    record_from_row,
    runs_query,
    step_from_row,
    storable,
    to_json,
)

if TYPE_CHECKING:
    import psycopg

POOL_SIZE = 10
"""Connections one process keeps open at most; threads beyond it wait for a free one (POOL_TIMEOUT)."""
POOL_TIMEOUT = 30.0
"""Seconds to wait for a connection: for the server at start, and for a free pooled one afterwards."""
MIGRATION_LOCK = 0x7265666C  # "refl": one advisory lock id, so that two processes never migrate at once

MIGRATIONS: list[str] = [
    # 1: runs and their steps
    """
    CREATE TABLE runs (
        run_id TEXT PRIMARY KEY, loop TEXT NOT NULL, task TEXT NOT NULL,
        status TEXT NOT NULL, stop_reason TEXT, started_at DOUBLE PRECISION NOT NULL,
        ended_at DOUBLE PRECISION, meta TEXT NOT NULL DEFAULT '{}', result TEXT
    );
    CREATE INDEX runs_started ON runs(started_at);
    CREATE TABLE steps (
        run_id TEXT NOT NULL REFERENCES runs(run_id), step_id INTEGER NOT NULL,
        kind TEXT NOT NULL, role TEXT, input TEXT NOT NULL, output TEXT NOT NULL,
        input_tokens BIGINT NOT NULL, output_tokens BIGINT NOT NULL, calls BIGINT NOT NULL,
        started_at DOUBLE PRECISION NOT NULL, ended_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (run_id, step_id)
    );
    """,
    # 2: keyed records shared across runs: the experience library, governor statistics, tool effects
    """
    CREATE TABLE records (
        ns TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, updated_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (ns, key)
    );
    """,
    # 3: run leases: which process drives a run; a dead holder's lease is taken over
    """
    CREATE TABLE leases (
        run_id TEXT PRIMARY KEY, owner TEXT NOT NULL, pid INTEGER NOT NULL, host TEXT NOT NULL,
        pid_start BIGINT, acquired_at DOUBLE PRECISION NOT NULL, renewed_at DOUBLE PRECISION NOT NULL
    );
    """,
]
"""Append-only, numbered like the SQLite store's: a schema change is a new script at the end. Each runs in
one transaction with its version bump, under an advisory lock, so a crash leaves a whole version."""


def text(value: str) -> str:
    """`storable(value)` without NUL characters, which PostgreSQL text cannot hold (U+FFFD instead). JSON
    payloads need no such care: json.dumps escapes NUL as \\u0000."""
    return storable(value).replace("\x00", "\ufffd")


def is_url(target: object) -> bool:
    """Whether a --trace value names a PostgreSQL server rather than a SQLite file."""
    return isinstance(target, str) and target.startswith(("postgresql://", "postgres://"))


def redact(url: str) -> str:
    """The URL without its password, for messages; by pattern, not by parsing, so that a URL too malformed to
    parse (the error being reported) is still redacted rather than raising. Everything between the user's
    colon and the last @ goes: a password holding an @ is hidden whole."""
    return re.sub(r"^([a-z]+://[^:/@]*):.*@", r"\1:***@", url)


class PostgresStore:
    """Runs, steps, keyed records and leases in PostgreSQL; safe for any number of processes and threads."""

    def __init__(self, url: str, *, pool_size: int = POOL_SIZE, lease_ttl: float = LEASE_TTL,
                 timeout: float = POOL_TIMEOUT) -> None:
        try:
            import psycopg
            from psycopg_pool import ConnectionPool
        except ImportError:
            raise StoreError("a postgresql:// trace store needs psycopg",
                             hint="pip install 'reflexa[postgres]'") from None
        self.url = url
        self.lease_ttl = lease_ttl
        self._errors: tuple[type[Exception], ...] = (psycopg.Error,)
        try:
            # One plain connection first: a wrong URL or a server that is down fails at once with the server's
            # own words, where the pool would retry in the background until its timeout.
            psycopg.connect(url, connect_timeout=max(1, int(timeout))).close()
            self.pool = ConnectionPool(url, min_size=1, max_size=pool_size, timeout=timeout, open=False,
                                       name="reflexa-trace")
            self.pool.open(wait=True, timeout=timeout)
        except Exception as exc:  # noqa: BLE001 - psycopg_pool's PoolTimeout, psycopg's errors, a bad URL
            # psycopg's message may quote the URL, password and all.
            raise StoreError(f"cannot open the trace store at {redact(url)}: {str(exc).replace(url, redact(url))}",
                             hint="is the server running and the URL right? "
                                  "postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE") from None
        try:
            self._migrate()
        except BaseException:
            self.pool.close()
            raise

    @contextmanager
    def _conn(self, what: str) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection in one transaction, committed when the block ends and rolled back on an error."""
        try:
            with self.pool.connection() as conn:
                yield conn
        except self._errors as exc:
            raise StoreError(f"trace store {what} failed: {str(exc).strip()}") from None
        except Exception as exc:  # noqa: BLE001 - psycopg_pool.PoolTimeout: every connection busy or the server gone
            if type(exc).__name__ != "PoolTimeout":
                raise
            raise StoreError(f"trace store {what} failed: no connection to {redact(self.url)}: {exc}") from None

    def _migrate(self) -> None:
        with self._conn("migration") as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            conn.execute("CREATE TABLE IF NOT EXISTS reflexa_schema (version INTEGER NOT NULL)")
            row = conn.execute("SELECT version FROM reflexa_schema").fetchone()
            if row is None:
                conn.execute("INSERT INTO reflexa_schema VALUES (0)")
            version = row[0] if row else 0
            for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
                conn.execute(script.encode())  # bytes: a script of several statements, no parameters
                conn.execute("UPDATE reflexa_schema SET version = %s", (number,))

    @property
    def version(self) -> int:
        """The schema version the database is at."""
        with self._conn("read") as conn:
            row = conn.execute("SELECT version FROM reflexa_schema").fetchone()
        return int(row[0]) if row else 0

    def _write(self, sql: str, params: tuple[Any, ...]) -> None:
        with self._conn("write") as conn:
            conn.execute(sql.encode(), params)

    def _read(self, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        from psycopg.rows import dict_row

        with self._conn("read") as conn, conn.cursor(row_factory=dict_row) as cur:
            return cur.execute(sql.encode(), params).fetchall()

    def start_run(self, record: RunRecord) -> None:
        self._write(
            "INSERT INTO runs (run_id, loop, task, status, started_at, meta) VALUES (%s, %s, %s, %s, %s, %s)",
            (text(record.run_id), text(record.loop), text(record.task), record.status, record.started_at,
             to_json(record.meta)),
        )

    def reopen_run(self, run_id: str) -> None:
        self._write("UPDATE runs SET status='running', stop_reason=NULL, ended_at=NULL WHERE run_id=%s", (run_id,))

    def add_step(self, step: Step) -> None:
        self._write(
            "INSERT INTO steps VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (step.run_id, step.step_id, text(step.kind), text(step.role) if step.role else step.role,
             to_json(step.input), to_json(step.output), step.usage.input_tokens, step.usage.output_tokens,
             step.usage.calls, step.started_at, step.ended_at),
        )

    def finish_run(self, run_id: str, stop_reason: str, ended_at: float, result: dict[str, Any],
                   status: str = "finished") -> None:
        self._write("UPDATE runs SET status=%s, stop_reason=%s, ended_at=%s, result=%s WHERE run_id=%s",
                    (status, stop_reason, ended_at, to_json(result), run_id))

    _record = staticmethod(record_from_row)

    def runs(self, limit: int = 20, *, loop: str | None = None, status: str | None = None,
             since: float | None = None) -> list[RunRecord]:
        sql, params = runs_query(limit, loop, status, since, "%s")
        return [self._record(r) for r in self._read(sql, params)]

    def find_runs(self, prefix: str) -> list[RunRecord]:
        # starts_with, not LIKE: "%" and "_" in a prefix are characters, not wildcards.
        rows = self._read("SELECT * FROM runs WHERE starts_with(run_id, %s) LIMIT 2", (text(prefix),))
        return [self._record(r) for r in rows]

    def get_run(self, run_id: str) -> RunRecord | None:
        """A run by its id or by a unique prefix of it."""
        rows = self._read("SELECT * FROM runs WHERE run_id = %s", (text(run_id),))
        matches = [self._record(rows[0])] if rows else self.find_runs(run_id)
        return matches[0] if len(matches) == 1 else None

    def steps(self, run_id: str) -> list[Step]:
        rows = self._read("SELECT * FROM steps WHERE run_id=%s ORDER BY step_id", (run_id,))
        return [step_from_row(r) for r in rows]

    def get(self, ns: str, key: str) -> dict[str, Any] | None:
        rows = self._read("SELECT value FROM records WHERE ns=%s AND key=%s", (text(ns), text(key)))
        return json.loads(rows[0]["value"]) if rows else None

    def put(self, ns: str, key: str, value: dict[str, Any]) -> None:
        self._write("INSERT INTO records VALUES (%s, %s, %s, %s) ON CONFLICT (ns, key) DO UPDATE "
                    "SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at",
                    (text(ns), text(key), to_json(value), time.time()))

    def items(self, ns: str) -> list[tuple[str, dict[str, Any]]]:
        # COLLATE "C": keys in code-point order, as SQLite and the memory store sort them.
        rows = self._read('SELECT key, value FROM records WHERE ns=%s ORDER BY key COLLATE "C"', (text(ns),))
        return [(r["key"], json.loads(r["value"])) for r in rows]

    def delete(self, ns: str, key: str) -> None:
        self._write("DELETE FROM records WHERE ns=%s AND key=%s", (text(ns), text(key)))

    def incr(self, ns: str, key: str, fields: Mapping[str, int | float],
             defaults: Mapping[str, Any] | None = None, *,
             assign: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        ns, key = text(ns), text(key)
        with self._conn("write") as conn:
            if defaults is not None:
                # The row exists before it is locked, so two first increments cannot both insert it.
                conn.execute("INSERT INTO records VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
                             (ns, key, to_json(dict(defaults)), time.time()))
            row = conn.execute("SELECT value FROM records WHERE ns=%s AND key=%s FOR UPDATE", (ns, key)).fetchone()
            if row is None:
                return None
            value = apply_incr(json.loads(row[0]), fields, assign)
            conn.execute("UPDATE records SET value=%s, updated_at=%s WHERE ns=%s AND key=%s",
                         (to_json(value), time.time(), ns, key))
            return value

    def update(self, ns: str, key: str, change: Callable[[dict[str, Any]], dict[str, Any] | None]
               ) -> dict[str, Any] | None:
        ns, key = text(ns), text(key)
        with self._conn("write") as conn:
            row = conn.execute("SELECT value FROM records WHERE ns=%s AND key=%s FOR UPDATE", (ns, key)).fetchone()
            written = change(json.loads(row[0])) if row is not None else None
            if written is not None:
                conn.execute("UPDATE records SET value=%s, updated_at=%s WHERE ns=%s AND key=%s",
                             (to_json(written), time.time(), ns, key))
            return written

    def acquire_lease(self, run_id: str, owner: str, pid: int) -> None:
        with self._conn("write") as conn:
            # A lock on the run id, held to the commit: the read-decide-write below is one step for everyone.
            conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (text(run_id),))
            row = conn.execute("SELECT run_id, owner, pid, host, pid_start, acquired_at, renewed_at FROM leases "
                               "WHERE run_id=%s", (text(run_id),)).fetchone()
            lease = decide_lease(Lease(*row) if row else None, text(run_id), text(owner), pid, time.time(),
                                 self.lease_ttl)
            conn.execute("INSERT INTO leases VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (run_id) DO UPDATE SET "
                         "owner=EXCLUDED.owner, pid=EXCLUDED.pid, host=EXCLUDED.host, pid_start=EXCLUDED.pid_start, "
                         "acquired_at=EXCLUDED.acquired_at, renewed_at=EXCLUDED.renewed_at",
                         (lease.run_id, lease.owner, lease.pid, lease.host, lease.pid_start, lease.acquired_at,
                          lease.renewed_at))

    def release_lease(self, run_id: str, owner: str) -> None:
        self._write("DELETE FROM leases WHERE run_id=%s AND owner=%s", (text(run_id), text(owner)))

    def lease(self, run_id: str) -> Lease | None:
        rows = self._read("SELECT run_id, owner, pid, host, pid_start, acquired_at, renewed_at FROM leases "
                          "WHERE run_id=%s", (text(run_id),))
        return Lease(**rows[0]) if rows else None

    def close(self) -> None:
        self.pool.close()
