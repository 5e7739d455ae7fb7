"""Running a loop under the CLI: what the terminal shows while it runs, and Ctrl-C.

The loop runs in a worker thread and the main thread only waits, so Ctrl-C is seen at once even when the
loop is inside a long C call (llama.cpp reading a prompt, a blocking SQLite query). The main thread then
raises KeyboardInterrupt in the worker, which stores the run as INTERRUPTED the ordinary way
(`run_loop`); a worker still stuck in C after INTERRUPT_GRACE seconds is left behind: the CLI stores the
run as interrupted itself and exits, and `reflexa resume` takes the run over from the dead process.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

from rich.console import Console

from ..errors import RunInterrupted
from ..runtime import Stop
from ..trace.store import Store
from ..types import Result, Step, StopReason, Usage
from .output import Output
from .render import JsonLines, LiveView, fan_out

T = TypeVar("T")

INTERRUPT_GRACE = 0.8
"""Seconds a run gets after Ctrl-C to store itself as interrupted; then the CLI does it and exits. Keeps
the whole stop under a second, as a user expects of Ctrl-C."""
WAIT_SLICE = 0.1
"""How long the main thread blocks at a time while it waits for the worker."""


@dataclass(slots=True)
class RunTracker:
    """Which runs this process has open (innermost last): what Ctrl-C must close and name."""

    open: list[str] = field(default_factory=list)
    seen: list[str] = field(default_factory=list)
    """Every run opened, in order (a trials run, then each trial's own run)."""
    view: LiveView | None = None
    jsonl: JsonLines | None = None

    def __call__(self, event: str, data: Any) -> None:
        if event == "run" and data not in self.open:
            self.open.append(str(data))
            self.seen.append(str(data))
        elif event == "step" and getattr(data, "kind", None) == "stop" and data.run_id in self.open:
            self.open.remove(data.run_id)

    @property
    def outermost(self) -> str | None:
        return self.open[0] if self.open else None


def observer_for(out: Output, console: Console, errors: Console,
                 view: type[LiveView] | None = None) -> RunTracker:
    """The CLI's observer chain for one command: the tracker first, then the live view (of class `view`,
    LiveView by default) or the JSON lines."""
    tracker = RunTracker()
    if out.jsonl:
        tracker.jsonl = JsonLines(sys.stdout)
    if not out.quiet:
        data_out = out.json or out.jsonl
        tracker.view = (view or LiveView)(errors if data_out else console, verbose=out.verbose, steps=not data_out)
    return tracker


def chain(tracker: RunTracker) -> Callable[[str, Any], None]:
    observer = fan_out(tracker, tracker.jsonl, tracker.view)
    assert observer is not None  # the tracker is always there
    return observer


def run_in_worker(run: Callable[[], T], *, tracker: RunTracker, store: Store,
                  on_interrupt: Callable[[str | None, bool], NoReturn]) -> T:
    """Run `run()` in a worker thread and return what it returns (or raise what it raises).

    On Ctrl-C: interrupt the worker and give it INTERRUPT_GRACE seconds to store the run as interrupted;
    if it is still busy (inside a C call), store that here. Then `on_interrupt(run_id, left_behind)`,
    which must not return; `left_behind` means the worker still runs, so the process must end with
    `hard_exit` (a normal exit would tear the interpreter down under it). `run_id` is the run to resume
    (the outermost one open), or None when Ctrl-C came before a run opened."""
    box: dict[str, Any] = {}
    # An Event, not Thread.join: on Python 3.11 a join interrupted by Ctrl-C can mark a thread that still
    # runs as stopped (the bpo-45274 fix releases the thread's own lock), and the result would be lost.
    done = threading.Event()

    def work() -> None:
        try:
            box["value"] = run()
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            box["error"] = exc
        finally:
            done.set()

    worker = threading.Thread(target=work, name="reflexa-run", daemon=True)
    worker.start()
    try:
        while not done.wait(WAIT_SLICE):
            pass
    except KeyboardInterrupt:
        outermost = tracker.outermost
        _raise_in(worker, KeyboardInterrupt)
        with contextlib.suppress(KeyboardInterrupt):  # a second Ctrl-C: stop waiting
            done.wait(INTERRUPT_GRACE)
        if not done.is_set():
            for run_id in reversed(tracker.open):
                mark_interrupted(store, run_id)
            on_interrupt(outermost, True)
    if "value" in box:
        return box["value"]  # it finished before the interrupt took
    error = box["error"]
    if isinstance(error, RunInterrupted):
        on_interrupt(error.run_id, False)
    if isinstance(error, KeyboardInterrupt):  # before a run opened, or while one was closing
        outermost = tracker.outermost
        for run_id in reversed(tracker.open):
            mark_interrupted(store, run_id)
        on_interrupt(outermost, False)
    raise error


def _raise_in(thread: threading.Thread, exc: type[BaseException]) -> None:
    """Raise `exc` in `thread` at its next Python instruction (a thread inside a C call gets it on return)."""
    if thread.ident is not None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(exc))


def mark_interrupted(store: Store, run_id: str) -> None:
    """Close a run whose worker is stuck, as `Run.finish` would: a stop step and an INTERRUPTED result
    (usage summed from its stored steps). Best effort: the worker may be writing the same run. The step
    that was under way when Ctrl-C came is lost; the run resumes from its last stored step."""
    now = time.time()
    try:
        steps = store.steps(run_id)
        record = store.get_run(run_id)
        if record is None or record.status != "running":
            return  # the worker closed it after all
        usage: dict[str, Usage] = {}
        for step in steps:
            if step.role and step.usage.calls:
                usage.setdefault(step.role, Usage()).add(step.usage)
        error = "interrupted by the user (during a model call or tool; that step was not stored)"
        number = (steps[-1].step_id if steps else 0) + 1
        store.add_step(Step(run_id, number, Stop.KIND, None, None, Stop(StopReason.INTERRUPTED, error), Usage(),
                            now, now))
        result = Result(output=None, best=None, verdict=None, stop_reason=StopReason.INTERRUPTED, usage=usage,
                        run_id=run_id, error=error, steps=number)
        store.finish_run(run_id, StopReason.INTERRUPTED, now, result.to_dict(), status="interrupted")
    except Exception:  # noqa: BLE001, S110 - exiting anyway; the dead process's lease lets resume take over
        pass


def hard_exit(code: int) -> NoReturn:
    """Leave now, with output flushed, without waiting for a worker stuck in C, and with no check left
    running in a sandbox (its timeout was the worker's to enforce)."""
    if (sandbox := sys.modules.get("reflexa.evaluate.sandbox")) is not None:  # loaded only if a check ran
        sandbox.stop_all()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
