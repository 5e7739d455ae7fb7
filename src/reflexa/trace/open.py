"""One way to open the trace store a `--trace` value or $REFLEXA_TRACE names: a file path (SQLite) or a
postgresql:// URL (PostgreSQL, shared by many workers)."""

from __future__ import annotations

import os
from pathlib import Path

from .postgres import is_url
from .store import Store


def open_store(target: str | Path | None = None) -> Store:
    """The store `target` names: a postgresql:// (or postgres://) URL, or a SQLite file path. None means
    $REFLEXA_TRACE, else trace.db in the user's data directory."""
    if target is None:
        target = os.environ.get("REFLEXA_TRACE") or None
    if is_url(target):
        from .postgres import PostgresStore

        return PostgresStore(str(target))
    from .sqlite import SQLiteStore

    return SQLiteStore(target)
