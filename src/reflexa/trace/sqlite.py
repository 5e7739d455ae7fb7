"""The default store: one SQLite file in WAL mode.

Durability: WAL with synchronous=NORMAL. Each step is its own committed transaction, so a killed
process (the failure a resumable run must survive) loses nothing that was committed; only a power
cut or OS crash can lose the last few commits. FULL would add an fsync per step (measured here: 140-200 µs
a commit) to guard against that too, which the trace does not need.
"""

from __future__ import annotations

import json
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import StoreError
from ..files import file_uri
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
    trace_env,
)

BUSY_TIMEOUT_MS = 30_000
"""How long a writer waits for another process's lock before failing. SQLite's busy handler polls with
growing sleeps, so under contention a writer can lose the lock to others for seconds: with 5 s, one of 32
processes writing at once on two cores failed "database is locked" in a clean-clone CI run
(tests/reliability/test_concurrent_store.py). A run waiting is better than a run lost."""
OPEN_ATTEMPTS = 4
"""Opening (WAL switch, migrations) is retried this many times when the file stays locked."""


MIGRATIONS: list[str] = [
    # 1: runs and their steps
    """
    CREATE TABLE runs (
        run_id TEXT PRIMARY KEY, loop TEXT NOT NULL, task TEXT NOT NULL,
        status TEXT NOT NULL, stop_reason TEXT, started_at REAL NOT NULL, ended_at REAL,
        meta TEXT NOT NULL DEFAULT '{}', result TEXT
    );
    CREATE INDEX runs_started ON runs(started_at);
    CREATE TABLE steps (
        run_id TEXT NOT NULL REFERENCES runs(run_id), step_id INTEGER NOT NULL,
        kind TEXT NOT NULL, role TEXT, input TEXT NOT NULL, output TEXT NOT NULL,
        input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL, calls INTEGER NOT NULL,
        started_at REAL NOT NULL, ended_at REAL NOT NULL,
        PRIMARY KEY (run_id, step_id)
    );
    """,
    # 2: keyed records shared across runs: the experience library, governor statistics, tool effects
    """
    CREATE TABLE records (
        ns TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, updated_at REAL NOT NULL,
        PRIMARY KEY (ns, key)
    );
    """,
    # 3: run leases: which process drives a run; a dead holder's lease is taken over
    """
    CREATE TABLE leases (
        run_id TEXT PRIMARY KEY, owner TEXT NOT NULL, pid INTEGER NOT NULL, host TEXT NOT NULL,
        pid_start INTEGER, acquired_at REAL NOT NULL, renewed_at REAL NOT NULL
    );
    """,
]
"""Append-only: a schema change is a new script at the end, never an edit to an old one. Each runs in
one transaction together with its version bump, so a crash leaves the schema at a whole version."""


def default_path() -> Path:
    """$REFLEXA_TRACE, else trace.db in the user's data directory."""
    if env := trace_env():
        return Path(env)
    from platformdirs import user_data_dir

    return Path(user_data_dir("reflexa")) / "trace.db"


def store_files(path: Path) -> set[Path]:
    """The files a SQLite store at `path` is made of, resolved: the database and its WAL side files."""
    path = path.resolve()
    return {path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")}


class SQLiteStore:
    """Runs and steps in SQLite; safe for several processes at once (WAL plus a busy timeout)."""

    def __init__(self, path: str | Path | None = None, *, lease_ttl: float = LEASE_TTL) -> None:
        self.path = Path(path) if path else default_path()
        self.lease_ttl = lease_ttl
        # One connection shared by threads: a transaction must not interleave with another thread's writes.
        self._lock = threading.RLock()
        for attempt in range(OPEN_ATTEMPTS):
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self.db = self._open()
                return
            except sqlite3.OperationalError as exc:
                # A new file that many processes open at once: switching it to WAL needs every other
                # connection's lock released, which the busy timeout alone may not see under load.
                if "locked" in str(exc) and attempt + 1 < OPEN_ATTEMPTS:
                    time.sleep(random.uniform(0.05, 0.2) * (attempt + 1))
                    continue
                error: Exception = exc
            except (sqlite3.Error, OSError) as exc:
                error = exc
            raise StoreError(f"cannot open the trace store at {self.path}: {error}",
                             hint="pass --trace PATH or set REFLEXA_TRACE to a writable file") from None

    def _open(self) -> sqlite3.Connection:
        # isolation_level=None: autocommit, so each step is committed the moment it is written.
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            db.row_factory = sqlite3.Row
            db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            self._refuse_a_foreign_database(db)  # before WAL: another program's file is left as it was
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            self._migrate(db)
        except BaseException:
            db.close()
            raise
        return db

    def _refuse_a_foreign_database(self, db: sqlite3.Connection) -> None:
        """A database another program made (say --trace pointed at an app's own SQLite file) is refused,
        never given reflexa's tables: it has tables of its own and none of ours."""
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if tables and "runs" not in tables:
            raise StoreError(f"{self.path} is not a reflexa trace store (it holds other tables)",
                             hint="pass --trace PATH to a trace.db a reflexa command wrote, or to a new file")

    @staticmethod
    def _migrate(db: sqlite3.Connection) -> None:
        if db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS):
            return
        # Read the version inside the write lock: two processes opening a new file must not both migrate.
        db.execute("BEGIN IMMEDIATE")
        try:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
                for statement in (s.strip() for s in script.split(";")):
                    if statement:
                        db.execute(statement)
                db.execute(f"PRAGMA user_version={number}")
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    def _write(self, sql: str, params: tuple[Any, ...]) -> None:
        try:
            with self._lock:
                self.db.execute(sql, params)
        except sqlite3.Error as exc:
            raise StoreError(f"trace store write failed: {exc}") from None

    def _read(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        try:
            with self._lock:
                return self.db.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"trace store read failed: {exc}") from None

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction that takes the database's write lock up front (BEGIN IMMEDIATE), so a
        read-modify-write in it cannot interleave with another process's: waiting for the lock honours the
        busy timeout, where upgrading a read transaction would fail at once with "database is locked"."""
        with self._lock:
            try:
                self.db.execute("BEGIN IMMEDIATE")
                yield self.db
                self.db.execute("COMMIT")
            except sqlite3.Error as exc:
                self._rollback()
                raise StoreError(f"trace store write failed: {exc}") from None
            except BaseException:
                self._rollback()
                raise

    def _rollback(self) -> None:
        if self.db.in_transaction:
            self.db.execute("ROLLBACK")

    def start_run(self, record: RunRecord) -> None:
        self._write(
            "INSERT INTO runs (run_id, loop, task, status, started_at, meta) VALUES (?, ?, ?, ?, ?, ?)",
            (record.run_id, storable(record.loop), storable(record.task), record.status, record.started_at,
             to_json(record.meta)),
        )

    def reopen_run(self, run_id: str) -> None:
        self._write("UPDATE runs SET status='running', stop_reason=NULL, ended_at=NULL WHERE run_id=?", (run_id,))

    def add_step(self, step: Step) -> None:
        self._write(
            "INSERT INTO steps VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (step.run_id, step.step_id, storable(step.kind), storable(step.role) if step.role else step.role,
             to_json(step.input), to_json(step.output), step.usage.input_tokens, step.usage.output_tokens,
             step.usage.calls, step.started_at, step.ended_at),
        )

    def finish_run(self, run_id: str, stop_reason: str, ended_at: float, result: dict[str, Any],
                   status: str = "finished") -> None:
        self._write(
            "UPDATE runs SET status=?, stop_reason=?, ended_at=?, result=? WHERE run_id=?",
            (status, stop_reason, ended_at, to_json(result), run_id),
        )

    _record = staticmethod(record_from_row)

    def runs(self, limit: int = 20, *, loop: str | None = None, status: str | None = None,
             since: float | None = None) -> list[RunRecord]:
        sql, params = runs_query(limit, loop, status, since, "?")
        return [self._record(r) for r in self._read(sql, params)]

    def find_runs(self, prefix: str) -> list[RunRecord]:
        # substr, not LIKE: "%" and "_" in a prefix are characters, not wildcards.
        rows = self._read("SELECT * FROM runs WHERE substr(run_id, 1, ?) = ? LIMIT 2", (len(prefix), prefix))
        return [self._record(r) for r in rows]

    def get_run(self, run_id: str) -> RunRecord | None:
        """A run by its id or by a unique prefix of it."""
        rows = self._read("SELECT * FROM runs WHERE run_id = ?", (run_id,))
        matches = [self._record(rows[0])] if rows else self.find_runs(run_id)
        return matches[0] if len(matches) == 1 else None

    def steps(self, run_id: str) -> list[Step]:
        rows = self._read("SELECT * FROM steps WHERE run_id=? ORDER BY step_id", (run_id,))
        return [step_from_row(dict(r)) for r in rows]

    def get(self, ns: str, key: str) -> dict[str, Any] | None:
        rows = self._read("SELECT value FROM records WHERE ns=? AND key=?", (storable(ns), storable(key)))
        return json.loads(rows[0][0]) if rows else None

    def put(self, ns: str, key: str, value: dict[str, Any]) -> None:
        self._write("INSERT OR REPLACE INTO records VALUES (?, ?, ?, ?)",
                    (storable(ns), storable(key), to_json(value), time.time()))

    def items(self, ns: str) -> list[tuple[str, dict[str, Any]]]:
        rows = self._read("SELECT key, value FROM records WHERE ns=? ORDER BY key", (storable(ns),))
        return [(key, json.loads(value)) for key, value in rows]

    def delete(self, ns: str, key: str) -> None:
        self._write("DELETE FROM records WHERE ns=? AND key=?", (storable(ns), storable(key)))

    def incr(self, ns: str, key: str, fields: Mapping[str, int | float],
             defaults: Mapping[str, Any] | None = None, *,
             assign: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        ns, key = storable(ns), storable(key)
        with self._transaction() as db:
            row = db.execute("SELECT value FROM records WHERE ns=? AND key=?", (ns, key)).fetchone()
            if row is None and defaults is None:
                return None
            value = apply_incr(json.loads(row[0]) if row else dict(defaults or {}), fields, assign)
            db.execute("INSERT OR REPLACE INTO records VALUES (?, ?, ?, ?)", (ns, key, to_json(value), time.time()))
            return value

    def update(self, ns: str, key: str, change: Callable[[dict[str, Any]], dict[str, Any] | None]
               ) -> dict[str, Any] | None:
        ns, key = storable(ns), storable(key)
        with self._transaction() as db:  # BEGIN IMMEDIATE: no other writer between the read and the write
            row = db.execute("SELECT value FROM records WHERE ns=? AND key=?", (ns, key)).fetchone()
            written = change(json.loads(row[0])) if row is not None else None
            if written is not None:
                db.execute("INSERT OR REPLACE INTO records VALUES (?, ?, ?, ?)", (ns, key, to_json(written),
                                                                                  time.time()))
            return written

    def acquire_lease(self, run_id: str, owner: str, pid: int) -> None:
        with self._transaction() as db:
            row = db.execute("SELECT * FROM leases WHERE run_id=?", (run_id,)).fetchone()
            lease = decide_lease(Lease(**dict(row)) if row else None, run_id, storable(owner), pid, time.time(),
                                 self.lease_ttl)
            db.execute("INSERT OR REPLACE INTO leases VALUES (?, ?, ?, ?, ?, ?, ?)",
                       (lease.run_id, lease.owner, lease.pid, lease.host, lease.pid_start, lease.acquired_at,
                        lease.renewed_at))

    def release_lease(self, run_id: str, owner: str) -> None:
        self._write("DELETE FROM leases WHERE run_id=? AND owner=?", (run_id, storable(owner)))

    def lease(self, run_id: str) -> Lease | None:
        rows = self._read("SELECT * FROM leases WHERE run_id=?", (run_id,))
        return Lease(**dict(rows[0])) if rows else None

    def close(self) -> None:
        self.db.close()


class ReadOnlySQLiteStore(SQLiteStore):
    """A SQLiteStore that only reads, for a command that only reads (`reflexa runs`, `show`, `experience`,
    the viewer). The file is opened with SQLite's `mode=ro` URI and `query_only`, so a write fails in SQLite
    itself; the write methods raise before reaching it. Opening a missing file or one that is not a reflexa
    trace is a StoreError, never a new empty store.

    A store in WAL mode is read through its `-shm` side file, which SQLite creates next to the file when
    the writer left none. Where it cannot (a directory the reader may not write: another user's trace, a
    read-only mount), the file is read as immutable, with no side files, unless a `-wal` file holds steps
    not yet in the main file: reading without it would silently leave them out, so that is a StoreError."""

    def __init__(self, path: str | Path) -> None:
        # Not SQLiteStore.__init__: that one creates the file and migrates it.
        self.path = Path(path)
        self.lease_ttl = LEASE_TTL
        self._lock = threading.RLock()
        if not self.path.is_file():
            raise StoreError(f"no trace store at {self.path}",
                             hint="run a loop first (it creates the store), or pass --trace PATH")
        try:
            self.db = self._open_uri(file_uri(self.path, "ro"))
        except sqlite3.OperationalError as exc:
            if not _unwritable(exc):
                raise StoreError(f"cannot open the trace store at {self.path} read-only: {exc}") from None
            wal = self.path.with_name(self.path.name + "-wal")
            if wal.is_file() and wal.stat().st_size > 0:
                raise StoreError(
                    f"cannot read {self.path}: its directory is read-only and {wal.name} holds steps not yet "
                    "in the main file", hint="copy the file and its -wal file to a writable directory, or open "
                    "it as a user who may write there") from None
            self.db = self._open_uri(file_uri(self.path, "ro") + "&immutable=1")

    def _open_uri(self, uri: str) -> sqlite3.Connection:
        db = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
        try:
            db.row_factory = sqlite3.Row
            db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            db.execute("PRAGMA query_only=ON")
            version = db.execute("PRAGMA user_version").fetchone()[0]
        except sqlite3.Error as exc:
            db.close()
            if isinstance(exc, sqlite3.OperationalError) and _unwritable(exc):
                raise  # the caller tries again without side files
            raise StoreError(f"{self.path} is not a readable trace store: {exc}",
                             hint="pass --trace PATH to the trace.db a reflexa command wrote") from None
        if version == 0 or version > len(MIGRATIONS):
            db.close()
            what = "not a reflexa trace store" if version == 0 else f"from a newer reflexa (schema {version})"
            raise StoreError(f"{self.path} is {what}",
                             hint="pass --trace PATH to the trace.db a reflexa command wrote")
        return db

    def _write(self, sql: str, params: tuple[Any, ...]) -> None:
        raise StoreError(READ_ONLY)

    def incr(self, ns: str, key: str, fields: Mapping[str, int | float],
             defaults: Mapping[str, Any] | None = None, *,
             assign: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        raise StoreError(READ_ONLY)

    def acquire_lease(self, run_id: str, owner: str, pid: int) -> None:
        raise StoreError(READ_ONLY)


READ_ONLY = "this trace store was opened read-only"


def _unwritable(exc: sqlite3.OperationalError) -> bool:
    """SQLite could not create a WAL file's `-shm` beside it: the directory is not the reader's to write."""
    return "readonly database" in str(exc) or "unable to open database file" in str(exc)
