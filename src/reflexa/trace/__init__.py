"""The trace: every run and step, in a store."""

from .open import open_store
from .sqlite import SQLiteStore, default_path
from .store import MemoryStore, RunRecord, Store

__all__ = ["MemoryStore", "RunRecord", "SQLiteStore", "Store", "default_path", "open_store"]
