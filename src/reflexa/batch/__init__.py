"""`reflexa batch`: many tasks, run by concurrent workers that share one store (SQLite or PostgreSQL)."""

from .runner import BatchInterrupted, Progress, batch_id, run_batch
from .tasks import BatchTask, read_tasks
from .worker import BatchConfig, run_task

__all__ = ["BatchConfig", "BatchInterrupted", "BatchTask", "Progress", "batch_id", "read_tasks", "run_batch",
           "run_task"]
