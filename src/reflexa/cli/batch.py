"""`reflexa batch`: the command, its progress view and its summary."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from ..batch import run_batch
from ..errors import ConfigError
from ..executors import KINDS, Interrupted
from ..executors import Progress as BatchProgress
from .common import EXIT_CODES, NOT_PASSED, clean_errors, console, errors, exit_code
from .live import hard_exit
from .options import JsonOpt, ModelOpt, ReflectorOpt, TraceOpt, budget_flags, option, path_arg, with_flags


class BatchView:
    """A progress bar: done of total, passed, failed, running, elapsed and ETA."""

    def __init__(self, console: Console) -> None:
        self.progress = Progress(TextColumn("[bold]batch {task.fields[batch]}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[counts]}"), TimeElapsedColumn(), TextColumn("ETA"),
                                 TimeRemainingColumn(), console=console, transient=False)
        self.task: Any = None

    def __call__(self, state: BatchProgress) -> None:
        stopped = sum(state.by_reason.values()) - state.passed - state.by_reason.get("ERROR", 0)
        counts = (f"[green]{state.passed} passed[/green] · [yellow]{stopped} not passed[/yellow] · "
                  f"[red]{state.failed} failed[/red] · {state.running} running"
                  + (f" · {state.skipped} done before" if state.skipped else ""))
        # The bar counts this run's tasks only, so the ETA comes from this run's pace.
        total = state.total - state.skipped
        if self.task is None:
            self.progress.start()
            self.task = self.progress.add_task("batch", total=total, batch=state.ident, counts=counts)
        self.progress.update(self.task, completed=state.done + state.failed_unfinished, counts=counts)

    def stop(self) -> None:
        self.progress.stop()


TasksArg = Annotated[Path, typer.Argument(parser=path_arg, metavar="TASKS", show_default=False,
                                         help="A JSON Lines file: one task spec a line (docs/tasks.md).")]


def _batch(
    tasks: TasksArg,
    loop: Annotated[str, option("LOOP", "The loop of a line that names none (default refine).",
                                names=("--loop", "-l"))] = "refine",
    concurrency: Annotated[int, option("N", "Tasks at once (default 4).", names=("--concurrency", "-c"), min=1,
                                       max=1024)] = 4,
    executor: Annotated[str, option("KIND", "local (threads; processes for the embedded model, the default), "
                                    "async (coroutines on one event loop) or ray.")] = "local",
    address: Annotated[str | None, option("ADDRESS", "A Ray cluster to run on (default: a local Ray).")] = None,
    out: Annotated[Path | None, option("FILE", "The results file (JSON Lines). Default: TASKS.results.jsonl "
                                       "beside the tasks file.", names=("--out", "-o"), path=True)] = None,
    model: ModelOpt = None,
    reflector_model: ReflectorOpt = None,
    connections: Annotated[int | None, option("N", "Model calls in flight at most per backend in one process "
                                              "(default: no limit beyond --concurrency).", min=1)] = None,
    experience: Annotated[bool, option(None, "Tasks share the experience library (default on).",
                                       names=("--experience/--no-experience",))] = True,
    governor: Annotated[bool, option(None, "Let the ROI governor cut retries that do not pay.",
                                     names=("--governor",))] = False,
    as_json: JsonOpt = False,
    trace: TraceOpt = None,
    budget: dict[str, Any] | None = None,
) -> None:
    """Run every task of a JSON Lines file with concurrent workers on one store; the same command again
    skips finished tasks and resumes interrupted ones. Exit 0 when every task passed (docs/batch.md)."""
    from ..trace.sqlite import default_path
    from ..trace.store import trace_env
    from ..types import LOOPS

    with clean_errors():
        if loop not in LOOPS:
            raise ConfigError(f"--loop must be one of {', '.join(LOOPS)}, not {loop!r}")
        if executor not in KINDS:
            raise ConfigError(f"--executor must be one of {', '.join(KINDS)}, not {executor!r}")
        if address is not None and executor != "ray":
            raise ConfigError("--address needs --executor ray")
        store = trace or trace_env() or str(default_path())
        code = run(tasks, loop, store=store, out=out, as_json=as_json, model=model, concurrency=concurrency,
                   executor=executor, address=address, connections=connections, experience=experience,
                   governor=governor, budget=budget, reflector_model=reflector_model)
    raise typer.Exit(code)


def batch_exit_code(state: BatchProgress) -> int:
    """1 when a task ended in ERROR or has no result (its worker died); else 5 when a task waits for approval;
    else 3 when a task stopped without passing; else 4 when some answer was unverified; else 0: every task
    PASSED."""
    if state.remaining > state.waiting or state.failed:
        return EXIT_CODES["ERROR"]
    if state.waiting:
        return EXIT_CODES["AWAITING_APPROVAL"]
    codes = {exit_code(reason) for reason in state.by_reason}
    return next((code for code in (NOT_PASSED, EXIT_CODES["ANSWERED_UNVERIFIED"]) if code in codes), 0)


def summary(state: BatchProgress, *, out: Path, store: str, seconds: float) -> dict[str, Any]:
    ran = state.done + state.failed_unfinished
    return {"batch": state.ident, "tasks": state.total, "done_before": state.skipped, "done": state.done,
            "by_stop_reason": dict(sorted(state.by_reason.items())), "passed": state.passed,
            "failed": state.failed, "unfinished": state.remaining, "exit_code": batch_exit_code(state),
            "seconds": round(seconds, 2), "tasks_per_second": round(ran / seconds, 2) if seconds > 0 else None,
            "results": str(out), "store": _redacted(store), "errors": state.errors[:20]}


def _redacted(store: str) -> str:
    from ..trace.postgres import is_url, redact

    return redact(store) if is_url(store) else store


def run(tasks: Path, loop: str, *, store: str, out: Path | None, as_json: bool, **options: Any) -> int:
    """Run the batch under the progress view; print the summary; return the exit code (batch_exit_code, or
    130 interrupted)."""
    out = out or tasks.with_name(tasks.stem + ".results.jsonl")
    if out.resolve() == tasks.resolve():
        raise ConfigError("--out names the tasks file itself", hint="give --out another file")
    view = None if as_json else BatchView(console)
    started = time.monotonic()
    try:
        state = run_batch(tasks, loop, store=store, out=out, progress=view, **options)
    except Interrupted as stop:
        if view:
            view.stop()
        left = stop.progress.remaining
        errors.print(f"interrupted: batch {stop.progress.ident}: {stop.progress.done} finished now, {left} left "
                     f"({stop.running} were running; they resume where they stopped). Run the same command again "
                     "to finish it.", highlight=False)
        # Every result so far is whole in the store and the results file, and no worker process is left. Worker
        # threads still in a model call would hold the exit until they finish: leave now (their checks'
        # sandboxes killed with it); their runs resume on the re-run.
        hard_exit(stop.exit_code)
    finally:
        if view:
            view.stop()
    report = summary(state, out=out, store=store, seconds=time.monotonic() - started)
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        _print_summary(state, report, out)
    return int(report["exit_code"])


def _print_summary(state: BatchProgress, report: dict[str, Any], out: Path) -> None:
    """Every task counted by how it ended, then where the rows are, then the first errors."""
    reasons = ", ".join(f"{count} {reason}" for reason, count in sorted(state.by_reason.items(),
                                                                        key=lambda item: -item[1]))
    unfinished = f", {state.remaining} unfinished" if state.remaining else ""
    console.print(f"batch {state.ident}: {state.total} task(s): {reasons or 'none finished'}{unfinished} "
                  f"({state.done} run now, {state.skipped} done before; {report['seconds']} s)", highlight=False)
    console.print(f"results: {out}  store: {report['store']}", markup=False, highlight=False)
    for line in state.errors[:5]:
        errors.print(f"[red]failed[/red] {escape(line)}", highlight=False)


batch = with_flags(_batch, budget_flags("each task that sets none"), into="budget")
