"""`reflexa batch`: many tasks, run by concurrent workers that share one store (SQLite or PostgreSQL)."""

from .runner import batch_id, run_batch
from .worker import BatchConfig, run_task

__all__ = ["BatchConfig", "batch_id", "run_batch", "run_task"]
