"""Tasks as data: `TaskSpec`, the one place a task of any loop becomes a loop call (DESIGN.md, "A task is
data"). Faces (the CLI, batch, resume, eval) build a spec and run it; none calls a loop with options of
its own."""

from .spec import LOOPS, TaskSpec

__all__ = ["LOOPS", "TaskSpec"]
