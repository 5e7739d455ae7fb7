"""`reflexa batch`: the progress view and the summary (the command's options are in app.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from ..batch import BatchInterrupted, run_batch
from ..batch.runner import Progress as BatchProgress
from ..errors import ConfigError
from .live import hard_exit


class BatchView:
    """A progress bar: done of total, passed, failed, running, elapsed and ETA."""

    def __init__(self, console: Console) -> None:
        self.progress = Progress(TextColumn("[bold]batch {task.fields[batch]}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[counts]}"), TimeElapsedColumn(), TextColumn("ETA"),
                                 TimeRemainingColumn(), console=console, transient=False)
        self.task: Any = None

    def __call__(self, state: BatchProgress) -> None:
        counts = (f"[green]{state.passed} passed[/green] · [red]{state.failed} failed[/red] · "
                  f"{state.running} running" + (f" · {state.skipped} done before" if state.skipped else ""))
        # The bar counts this run's tasks only, so the ETA comes from this run's pace.
        total = state.total - state.skipped
        if self.task is None:
            self.progress.start()
            self.task = self.progress.add_task("batch", total=total, batch=state.batch_id, counts=counts)
        self.progress.update(self.task, completed=state.done + state.failed_unfinished, counts=counts)

    def stop(self) -> None:
        self.progress.stop()


def summary(state: BatchProgress, *, out: Path, store: str, seconds: float) -> dict[str, Any]:
    ran = state.done + state.failed_unfinished
    return {"batch": state.batch_id, "tasks": state.total, "done_before": state.skipped, "done": state.done,
            "passed": state.passed, "failed": state.failed, "unfinished": state.remaining,
            "seconds": round(seconds, 2), "tasks_per_second": round(ran / seconds, 2) if seconds > 0 else None,
            "results": str(out), "store": _redacted(store), "errors": state.errors[:20]}


def _redacted(store: str) -> str:
    from ..trace.postgres import is_url, redact

    return redact(store) if is_url(store) else store


def run(tasks: Path, loop: str, *, store: str, out: Path | None, console: Console, errors: Console,
        as_json: bool, **options: Any) -> int:
    """Run the batch under the progress view; print the summary; return the exit code (0 every task has a
    result and none failed, 1 some failed, 130 interrupted)."""
    out = out or tasks.with_name(tasks.stem + ".results.jsonl")
    if out.resolve() == tasks.resolve():
        raise ConfigError("--out names the tasks file itself", hint="give --out another file")
    view = None if as_json else BatchView(console)
    started = time.monotonic()
    try:
        state = run_batch(tasks, loop, store=store, out=out, progress=view, **options)
    except BatchInterrupted as stop:
        if view:
            view.stop()
        left = stop.progress.remaining
        errors.print(f"interrupted: batch {stop.progress.batch_id}: {stop.progress.done} finished now, {left} left "
                     f"({stop.running} were running; they resume where they stopped). Run the same command again "
                     "to finish it.", highlight=False)
        # Every result so far is whole in the store and the results file. Worker threads still in a model call
        # would hold the exit until they finish: leave now (their checks' sandboxes killed with it); their
        # runs resume on the re-run.
        hard_exit(130)
    finally:
        if view:
            view.stop()
    report = summary(state, out=out, store=store, seconds=time.monotonic() - started)
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        console.print(f"batch {state.batch_id}: {state.done} run now, {state.skipped} done before; "
                      f"{state.passed} passed, {state.failed} failed, {state.remaining} unfinished; "
                      f"{report['seconds']} s ({report['tasks_per_second']} tasks/s)", highlight=False)
        console.print(f"results: {out}  store: {report['store']}", markup=False, highlight=False)
        for line in state.errors[:5]:
            errors.print(f"[red]failed[/red] {escape(line)}", highlight=False)
    if state.remaining:
        return 1
    return 1 if state.failed else 0
