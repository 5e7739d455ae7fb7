"""Executors: how the tasks of a batch or an eval are farmed out, and the one driver loop over them.

    threads    N sessions in this process, each a thread; model calls go through the per-backend
               connection limit. For HTTP backends (an OpenAI-compatible server, a hosted API), whose
               sessions mostly wait on the network. The loops stay synchronous: a thread per session,
               not a coroutine, is what makes one process drive N sessions.
    processes  N worker processes. For the embedded model, which decodes one prompt at a time: its
               concurrency comes from processes, each loading the model once.
    async      coroutines on one event loop, in a thread of its own (`reflexa.aio`).
    ray        each task a Ray task, on a local Ray or a cluster (`address`); see ray.py.
"local" picks threads, or processes for the embedded model.

`drive` runs the items through an executor, at most `concurrency` at a time, and hands each result to the
face's `collect` as it comes. A driver stopped by Ctrl-C or SIGTERM leaves no worker running: what is queued
is cancelled, worker processes are ended, a local Ray is shut down, and `Interrupted` says where it stood.
A worker process also ends when its driver dies without a word (SIGKILL): the kernel signals it.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, BrokenExecutor, Future, ProcessPoolExecutor, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from ..errors import ConfigError

KINDS = ("local", "threads", "processes", "async", "ray")
"""Where the tasks run (see the module's docstring)."""
POLL_SECONDS = 0.5
"""How often the driver wakes to refresh the progress view while it waits for results."""
STOP_SECONDS = 5.0
"""How long an ended worker process is given to exit before it is killed."""

T = TypeVar("T")


@dataclass(slots=True)
class Progress:
    """Where a batch or an eval stands; given to the `progress` callback after every change."""

    ident: str
    """The batch's or the eval's id."""
    total: int
    skipped: int = 0
    """Tasks finished by an earlier run of the same command (not run again)."""
    done: int = 0
    """Tasks finished by this run."""
    running: int = 0
    passed: int = 0
    """Tasks of the whole batch that passed, those done before included."""
    failed: int = 0
    """Tasks that ended in ERROR, or could not run (their worker died): see `errors`."""
    failed_unfinished: int = 0
    """Failed tasks that have no result (a re-run runs them again)."""
    waiting: int = 0
    """Tasks stopped AWAITING_APPROVAL: unfinished, resumed by a re-run after `reflexa approve`."""
    by_reason: dict[str, int] = field(default_factory=dict)
    """Finished tasks (those done before included), by stop reason."""
    rows: list[dict[str, Any]] = field(default_factory=list)
    """An eval's rows so far, those done before included."""
    errors: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.time)

    @property
    def remaining(self) -> int:
        return self.total - self.skipped - self.done - self.failed_unfinished


class Interrupted(KeyboardInterrupt):  # noqa: N818 - a KeyboardInterrupt, named like RunInterrupted
    """Ctrl-C or SIGTERM stopped the driver. Every result written so far is whole and no worker is left
    running; the same command again finishes the rest."""

    def __init__(self, progress: Progress, running: int, signum: int = signal.SIGINT) -> None:
        super().__init__(f"{progress.ident} interrupted")
        self.progress = progress
        self.running = running
        """Tasks that were under way: their runs resume on the next run of the command."""
        self.signum = signum

    @property
    def exit_code(self) -> int:
        """128 plus the signal's number, as a shell reports a process the signal ended: 130 for Ctrl-C."""
        return 128 + self.signum


class Terminated(KeyboardInterrupt):  # noqa: N818 - raised for SIGTERM where Ctrl-C raises KeyboardInterrupt
    """SIGTERM reached the driver: stop as Ctrl-C stops it."""


class Executor(Protocol):
    """Runs `work(*args)` somewhere and gives a Future of its value."""

    def submit(self, *args: Any) -> Future[Any]: ...

    def cancel(self) -> None:
        """Stop at once: cancel what is queued and end what runs (Ctrl-C, SIGTERM, an error)."""

    def close(self) -> None:
        """The normal end: release the workers, so none outlives the interpreter's exit hooks."""


def pick(kind: str, model: str | None) -> str:
    """The executor a kind names: `local` means threads, except for the embedded model (processes)."""
    if kind not in KINDS:
        raise ConfigError(f"unknown executor {kind!r}", hint=f"use {', '.join(KINDS)}")
    if kind != "local":
        return kind
    from ..models.config import configured_spec

    spec = model if model is not None else configured_spec()
    return "processes" if spec.strip().split(":", 1)[0] == "local" else "threads"


def open_executor(kind: str, work: Callable[..., Any], concurrency: int, *, address: str | None = None,
                  max_tasks_per_worker: int | None = None) -> Executor:
    """An executor of `kind` (not `local`: see `pick`) that runs `work`. `max_tasks_per_worker` replaces a
    worker process after that many tasks (processes)."""
    if kind == "ray":
        from .ray import RayExecutor

        return RayExecutor(work, concurrency, address)
    if kind == "async":
        return AsyncExecutor(work)
    if kind == "processes":
        return ProcessExecutor(work, concurrency, max_tasks_per_worker)
    return ThreadExecutor(work, concurrency)


class ThreadExecutor:
    """Threads of this process. A thread cannot be killed: `cancel` leaves the running ones to the process's
    exit, which the driver's face makes at once (the runs they leave resume on a re-run)."""

    def __init__(self, work: Callable[..., Any], concurrency: int) -> None:
        self.work = work
        self.pool = ThreadPoolExecutor(concurrency, thread_name_prefix="reflexa-worker")

    def submit(self, *args: Any) -> Future[Any]:
        return self.pool.submit(self.work, *args)

    def cancel(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        self.pool.shutdown()


class ProcessExecutor(ThreadExecutor):
    """Worker processes, started with spawn: the driver has threads (a progress view, a store pool) that a
    fork would copy mid-state. Each worker asks the kernel to end it when its driver dies."""

    def __init__(self, work: Callable[..., Any], concurrency: int, max_tasks: int | None = None) -> None:
        import multiprocessing

        self.work = work
        self.pool = ProcessPoolExecutor(concurrency, mp_context=multiprocessing.get_context("spawn"),  # type: ignore[assignment]
                                        max_tasks_per_child=max_tasks, initializer=die_with, initargs=(os.getpid(),))

    def cancel(self) -> None:
        """Cancel what is queued and end the workers: a worker in a model call would decode on, orphaned."""
        workers = list((getattr(self.pool, "_processes", None) or {}).values())
        self.pool.shutdown(wait=False, cancel_futures=True)
        for process in workers:
            if process.is_alive():
                process.terminate()
        deadline = time.monotonic() + STOP_SECONDS
        for process in workers:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()


def die_with(parent: int) -> None:
    """In a worker process: have the kernel send SIGTERM when the driver that started it dies (Linux's
    PR_SET_PDEATHSIG), so a driver killed outright leaves no worker decoding on; and exit now if it is gone
    already."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the driver's own `cancel` is what ends the workers
        pass
    if os.getppid() != parent:
        os._exit(1)


class AsyncExecutor:
    """`work(*args)` as coroutines on one event loop, in a thread of its own (`reflexa.aio`)."""

    def __init__(self, work: Callable[..., Any]) -> None:
        import asyncio

        self.work = work
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="reflexa-async", daemon=True)
        self.thread.start()

    def submit(self, *args: Any) -> Future[Any]:
        import asyncio

        from .. import aio

        return asyncio.run_coroutine_threadsafe(aio.run(self.work, *args), self.loop)

    def cancel(self) -> None:
        import asyncio

        def stop() -> None:  # on the loop's thread: cancel what runs (a run left unfinished resumes), then stop
            for pending in asyncio.all_tasks(self.loop):
                pending.cancel()
            self.loop.call_soon(self.loop.stop)

        self.loop.call_soon_threadsafe(stop)

    close = cancel


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """While the body runs on the main thread, SIGTERM raises `Terminated` there, so a driver that a
    scheduler or `kill` stops ends its workers as Ctrl-C does instead of vanishing and leaving them."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminated(signum: int, frame: object) -> None:
        raise Terminated

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def drive(items: Iterable[T], executor: Executor, concurrency: int, *, args: Callable[[T], tuple[Any, ...]],
          collect: Callable[[T, Future[Any]], None], state: Progress,
          progress: Callable[[Progress], None] | None = None, settle: Callable[[], None] = lambda: None) -> None:
    """Run every item (`executor.submit(*args(item))`), at most `concurrency` at once; `collect(item,
    future)` takes each finished one, and `settle` runs after each round of them (one fsync for the rows of
    a round). Ctrl-C or SIGTERM cancels the executor, collects what finished meanwhile and raises
    Interrupted; any other exception cancels it and goes on."""
    waiting = iter(items)
    inflight: dict[Future[Any], T] = {}
    more = True
    with sigterm_interrupts():
        try:
            while more or inflight:
                while more and len(inflight) < concurrency:
                    item = next(waiting, None)
                    if item is None:
                        more = False
                        break
                    try:
                        inflight[executor.submit(*args(item))] = item
                    except BrokenExecutor:
                        # A worker process was killed: the pool takes no more work. What is left runs on a re-run.
                        state.errors.append("a worker process died; run the same command again to finish")
                        more = False
                state.running = len(inflight)
                if progress:
                    progress(state)
                finished, _ = wait(list(inflight), timeout=POLL_SECONDS, return_when=FIRST_COMPLETED)
                for future in finished:
                    collect(inflight.pop(future), future)
                settle()
            state.running = 0
            if progress:
                progress(state)
        except KeyboardInterrupt as stop:
            # What finished before the stop is whole: keep it, so the results file is as full as the store.
            # Taken before the cancel, which fails the futures of the workers it ends.
            whole = [f for f in inflight if f.done() and not f.cancelled()]
            executor.cancel()
            for future in whole:
                collect(inflight.pop(future), future)
            settle()
            raise Interrupted(state, len(inflight),
                              signal.SIGTERM if isinstance(stop, Terminated) else signal.SIGINT) from None
        except BaseException:
            executor.cancel()
            raise
    executor.close()


__all__ = ["KINDS", "Executor", "Interrupted", "Progress", "drive", "open_executor", "pick"]
