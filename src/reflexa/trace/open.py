"""One way to open the trace store a `--trace` value or $REFLEXA_TRACE names: a file path (SQLite) or a
postgresql:// URL (PostgreSQL, shared by many workers)."""

from __future__ import annotations

from pathlib import Path

from .postgres import is_url
from .store import Store, trace_env


def open_store(target: str | Path | None = None, *, reader: bool = False) -> Store:
    """The store `target` names: a postgresql:// (or postgres://) URL, or a SQLite file path. None means
    $REFLEXA_TRACE, else trace.db in the user's data directory. A `reader` (a command that only reads)
    never creates a store, and opens an existing SQLite file it may not write read-only."""
    if target is None:
        target = trace_env()
    path = sqlite_path(target)
    if path is None:
        from .postgres import PostgresStore

        return PostgresStore(str(target))
    from ..errors import StoreError
    from .sqlite import ReadOnlySQLiteStore, SQLiteStore

    if reader and not path.exists():  # a reader never creates a store, at a mistyped path least of all
        raise StoreError(f"no trace store at {path}",
                         hint="run a loop first (it creates the store), or pass --trace PATH to an existing one")
    try:
        return SQLiteStore(path)
    except StoreError:
        if not (reader and path.is_file()):
            raise
        return ReadOnlySQLiteStore(path)


def sqlite_path(target: str | Path | None = None) -> Path | None:
    """The SQLite file `target` names (None: $REFLEXA_TRACE, else trace.db in the user's data directory), or
    None when it is a PostgreSQL URL."""
    if target is None:
        target = trace_env()
    if is_url(target):
        return None
    from .sqlite import default_path

    return Path(target) if target else default_path()


def trace_files(target: str | Path | None = None) -> set[Path]:
    """The files, resolved, of the SQLite store `target` names (see sqlite_path): the database and its -wal
    and -shm. An empty set for a PostgreSQL URL, which names no file."""
    path = sqlite_path(target)
    if path is None:
        return set()
    from .sqlite import store_files

    return store_files(path)
