"""Tasks as data: `TaskSpec`, and the one place a task of any loop becomes a loop call (`run.py`). Faces (the
CLI, batch, resume, eval) build a spec, or read a file of them (`file.py`), and run it; none calls a loop with
options of its own."""

from .file import TaskLine, read_tasks
from .spec import TaskSpec

__all__ = ["TaskLine", "TaskSpec", "read_tasks"]
