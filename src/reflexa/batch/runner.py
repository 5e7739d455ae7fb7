"""The batch driver: read and check the tasks, skip what the store says is done, run the rest through an
executor, and write each result as it comes.

Executors:
    threads    N sessions in this process, each a thread; model calls go through the per-backend
               connection limit. For HTTP backends (an OpenAI-compatible server, a hosted API), whose
               sessions mostly wait on the network. The loops stay synchronous: a thread per session,
               not a coroutine, is what makes one process drive N sessions.
    processes  N worker processes. For the embedded model, which decodes one prompt at a time: its
               concurrency comes from processes, each loading the model once.
    ray        each task a Ray task, on a local Ray or a cluster (`address`); see ray_executor.py.
"local" picks threads, or processes for the embedded model.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import (
    FIRST_COMPLETED,
    BrokenExecutor,
    Executor,
    Future,
    ProcessPoolExecutor,
    ThreadPoolExecutor,
    wait,
)
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError, ReflexaError, RunLeased
from ..models.spec import absolute_spec, configured_reflector_spec, configured_spec
from ..trace.postgres import is_url
from .results import ResultsFile
from .tasks import BUDGET, BatchTask, read_tasks
from .worker import BatchConfig, make_row, namespace, run_task, worker_store

POLL_SECONDS = 0.5
"""How often the driver wakes to refresh the progress view while it waits for results."""


@dataclass(slots=True)
class Progress:
    """Where a batch stands; given to the `progress` callback after every change."""

    batch_id: str
    total: int
    skipped: int = 0
    """Tasks finished by an earlier run of the same batch (not run again)."""
    done: int = 0
    passed: int = 0
    """Tasks of the whole batch that passed, those done before included."""
    failed: int = 0
    """Tasks of the whole batch that ended in ERROR, or could not run (their worker died): see the rows and
    `errors`."""
    running: int = 0
    started: float = field(default_factory=time.time)
    errors: list[str] = field(default_factory=list)
    by_reason: dict[str, int] = field(default_factory=dict)
    """Finished tasks of the whole batch (those done before included), by stop reason."""

    @property
    def remaining(self) -> int:
        return self.total - self.skipped - self.done - self.failed_unfinished

    failed_unfinished: int = 0
    """Failed tasks that have no result (a re-run runs them again)."""
    waiting: int = 0
    """Tasks stopped AWAITING_APPROVAL: unfinished, resumed by a re-run after `reflexa approve`."""


class BatchInterrupted(KeyboardInterrupt):  # noqa: N818 - a KeyboardInterrupt, named like RunInterrupted
    """Ctrl-C stopped the batch. Every result written so far is whole; a re-run finishes the rest."""

    def __init__(self, progress: Progress, running: int) -> None:
        super().__init__(f"batch {progress.batch_id} interrupted")
        self.progress = progress
        self.running = running


def batch_id(tasks: bytes, loop: str, options: dict[str, Any]) -> str:
    """The batch's identity: the tasks file's content, the loop and the options that change results. The
    same command on the same file is the same batch, so it resumes; any change makes a new one."""
    digest = hashlib.sha256(tasks)
    digest.update(json.dumps({"loop": loop, **options}, sort_keys=True, default=str).encode())
    return digest.hexdigest()[:12]


def pick_executor(executor: str, model: str | None) -> str:
    """`local` means threads, except for the embedded model (processes)."""
    if executor != "local":
        return executor
    from ..models.config import configured_spec

    spec = model if model is not None else configured_spec()
    return "processes" if spec.strip().split(":", 1)[0] == "local" else "threads"


def _check_backend(spec: str | None) -> None:
    """An unknown model backend is bad input: say so before any worker starts."""
    from ..models.named import is_named
    from ..models.registry import names
    from ..models.spec import FILE_BACKENDS

    if spec is None:
        return
    kind, _, target = spec.strip().partition(":")
    if kind not in names():
        raise ConfigError(f"unknown model spec {spec!r}: no backend {kind!r}",
                          hint=f"registered backends: {', '.join(names())}")
    # A file a task's model reads (scripted:FILE, local:PATH.gguf) that is missing would stop the batch at
    # that task; a named model (local:smollm2, local:qwen1.5b, whose name has a "suffix") is no path.
    named = kind == "local" and is_named(target)
    if kind in FILE_BACKENDS and not named and ("/" in target or Path(target).suffix) and not Path(target).is_file():
        raise ConfigError(f"model file not found: {target} (model spec {spec!r})",
                          hint="a task's model file is relative to the tasks file's folder")


def _check_not_an_input(results: Path, store: str, inputs: list[Path]) -> None:
    """The results file must not be a file the batch reads (a task's tests or database) or its trace store
    (with its -wal and -shm): rows appended to it would break it."""
    from ..trace.open import trace_files

    if results.resolve() in {path.resolve() for path in inputs} | trace_files(store):
        raise ConfigError(f"--out names a file the batch reads or writes: {results}", hint="give --out another file")


def run_batch(tasks_path: Path, loop: str = "refine", *, store: str, model: str | None = None,
              concurrency: int = 4, executor: str = "local", address: str | None = None, out: Path | None = None,
              connections: int | None = None, experience: bool = True, governor: bool = False,
              budget: dict[str, Any] | None = None, progress: Callable[[Progress], None] | None = None,
              max_tasks_per_worker: int | None = None, reflector_model: str | None = None) -> Progress:
    """Run every task of a tasks file that the store has no result for; return the final Progress.

    `loop` is the loop of a line that names none; `model` and `budget` fill what a line leaves unset.
    `store` is a SQLite path or a postgresql:// URL that every worker opens. Results go to the store and,
    one JSON line each, to `out` (default: TASKS.results.jsonl beside the tasks file). `executor` is
    local, threads, processes, async (coroutines on one event loop, `reflexa.aio`) or ray (`address` names
    a Ray cluster; default a local Ray).
    `max_tasks_per_worker` replaces a worker process after that many tasks (processes executor).
    `reflector_model` (default: the configured one, `configured_reflector_spec`) serves every task's
    reflector calls; None lets each task's model reflect.
    Ctrl-C raises BatchInterrupted once the results so far are written."""
    if concurrency < 1:
        raise ConfigError("--concurrency must be at least 1")
    if executor not in ("local", "threads", "processes", "async", "ray"):
        raise ConfigError(f"unknown executor {executor!r}", hint="use local, async or ray")
    model, reflector_model = _models(model, reflector_model)
    budget = {k: v for k, v in (budget or {}).items() if k in BUDGET and v is not None}
    tasks = read_tasks(tasks_path, loop, defaults=budget)
    for spec in {model, reflector_model, *(t.spec.model for t in tasks), *(t.spec.reflector_model for t in tasks)}:
        _check_backend(spec or None)
    store = store if is_url(store) else str(Path(store).resolve())
    # The reflector is part of the batch's identity only when there is one: older batches keep their ids.
    options = {"model": model, "budget": budget, "experience": experience, "governor": governor,
               **({"reflector_model": reflector_model} if reflector_model else {})}
    ident = batch_id(tasks_path.read_bytes(), loop, options)
    config = BatchConfig(ident, store, model, connections, experience, governor, reflector_model)
    results_path = out or tasks_path.with_name(tasks_path.stem + ".results.jsonl")
    _check_not_an_input(results_path, store, [p for t in tasks for p in (t.spec.path("tests"), t.spec.path("db"))
                                              if p is not None])
    results = ResultsFile(results_path, ident)
    shared = worker_store(store)
    state = Progress(ident, len(tasks))
    with driving(shared, namespace(ident), "batch", ident, results,
                 hint="wait for it, or stop it; a stopped batch resumes on the same command"):
        todo = _skip_finished(tasks, shared, config, results, state)
        if todo:
            _drive(todo, config, pick_executor(executor, model), concurrency, address, max_tasks_per_worker,
                   results, state, progress)
        elif progress:
            progress(state)
    return state


@contextmanager
def driving(store: Any, ns: str, what: str, ident: str, results: ResultsFile, *,
            hint: str | None = None) -> Iterator[None]:
    """Hold the driver's lease on `ns` while the body runs, so a second driver of the same batch or eval is
    refused (a ConfigError naming the process that holds it); the results file is closed either way."""
    owner = f"{what}-driver:{os.getpid()}"
    try:
        store.acquire_lease(ns, owner, os.getpid())
    except RunLeased as exc:
        results.close()
        raise ConfigError(f"{what} {ident} is already running: pid {exc.pid} on {exc.host}", hint=hint) from None
    try:
        yield
    finally:
        store.release_lease(ns, owner)
        results.close()


def _models(model: str | None, reflector: str | None) -> tuple[str | None, str | None]:
    """The batch's model spec and its reflector's, files made absolute. A reflector that is '' or the
    model itself is none: each task's model reflects."""
    model = absolute_spec(model, Path.cwd())
    reflector = (configured_reflector_spec() if reflector is None else reflector) or ""
    reflector = absolute_spec(reflector.strip(), Path.cwd()) if reflector.strip() else None
    if reflector is not None and reflector == (model or configured_spec()):
        reflector = None
    return model, reflector


def _skip_finished(tasks: list[BatchTask], store: Any, config: BatchConfig, results: ResultsFile,
                   state: Progress) -> list[BatchTask]:
    """The tasks still to run. A finished task missing from the results file (the driver was killed after
    the store had its result) gets its row written now."""
    records = dict(store.items(namespace(config.batch_id)))
    todo = []
    for task in tasks:
        record = records.get(task.key) or {}
        if record.get("state") == "done":
            results.append(record["row"], sync=False)
            state.skipped += 1
            _count(state, task, record["row"])  # a re-run still says how the whole batch went
        else:
            todo.append(task)
    results.sync()
    return todo


def _executor(kind: str, concurrency: int, address: str | None, max_tasks: int | None,
              config: BatchConfig
              ) -> tuple[Callable[[BatchTask], Future[dict[str, Any]]], Callable[[], None], Callable[[], None]]:
    """submit(task) -> Future; a shutdown for Ctrl-C or an error, which cancels what is queued and does not
    wait; and a finish for the normal end, which joins a pool's idle workers so none outlives the
    interpreter's exit hooks."""
    if kind == "ray":
        from .ray_executor import RayExecutor

        ray = RayExecutor(config, concurrency, address)
        return ray.submit, ray.shutdown, ray.shutdown
    if kind == "async":
        submit, stop = async_executor(run_task)
        return (lambda task: submit(config, task)), stop, stop
    pool: Executor
    if kind == "processes":
        import multiprocessing

        # spawn: the driver has threads (a progress view, a store pool) that a fork would copy mid-state.
        pool = ProcessPoolExecutor(concurrency, mp_context=multiprocessing.get_context("spawn"),
                                   max_tasks_per_child=max_tasks)
    else:
        pool = ThreadPoolExecutor(concurrency, thread_name_prefix="reflexa-batch")

    def shutdown() -> None:
        pool.shutdown(wait=False, cancel_futures=True)

    return (lambda task: pool.submit(run_task, config, task)), shutdown, pool.shutdown


def async_executor(work: Callable[..., Any]) -> tuple[Callable[..., Future[Any]], Callable[[], None]]:
    """submit(*args) runs `work(*args)` as a coroutine on one event loop, in a thread of its own (`reflexa.aio`),
    and gives a Future: a driver waits on it like any other executor's. And a shutdown."""
    import asyncio
    import threading

    from .. import aio

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="reflexa-batch-async", daemon=True)
    thread.start()

    def submit(*args: Any) -> Future[Any]:
        return asyncio.run_coroutine_threadsafe(aio.run(work, *args), loop)

    def stop() -> None:  # on the loop's thread: cancel what runs (a run left unfinished resumes), then stop
        for pending in asyncio.all_tasks(loop):
            pending.cancel()
        loop.call_soon(loop.stop)

    def shutdown() -> None:
        loop.call_soon_threadsafe(stop)

    return submit, shutdown


def _drive(todo: list[BatchTask], config: BatchConfig, kind: str, concurrency: int, address: str | None,
           max_tasks: int | None, results: ResultsFile, state: Progress,
           progress: Callable[[Progress], None] | None) -> None:
    submit, shutdown, finish = _executor(kind, concurrency, address, max_tasks, config)
    waiting: Iterator[BatchTask] = iter(todo)
    inflight: dict[Future[dict[str, Any]], BatchTask] = {}
    more = True
    try:
        while more or inflight:
            while more and len(inflight) < concurrency:
                task = next(waiting, None)
                if task is None:
                    more = False
                    break
                try:
                    inflight[submit(task)] = task
                except BrokenExecutor:
                    # A worker process was killed: the pool takes no more work. What is left runs on a re-run.
                    state.errors.append("a worker process died; run the same command again to finish the batch")
                    more = False
            state.running = len(inflight)
            if progress:
                progress(state)
            finished, _ = wait(list(inflight), timeout=POLL_SECONDS, return_when=FIRST_COMPLETED)
            for future in finished:
                _collect(future, inflight.pop(future), config, results, state)
            results.sync()  # one fsync for the rows of this round, not one per row: the driver feeds the workers
        state.running = 0
        if progress:
            progress(state)
    except KeyboardInterrupt:
        shutdown()
        # What finished in the meantime is whole: write it, so the results file is as full as the store.
        for future in [f for f in inflight if f.done() and not f.cancelled()]:
            _collect(future, inflight.pop(future), config, results, state)
        results.sync()
        raise BatchInterrupted(state, len(inflight)) from None
    except BaseException:
        shutdown()
        raise
    finish()


def _collect(future: Future[dict[str, Any]], task: BatchTask, config: BatchConfig, results: ResultsFile,
             state: Progress) -> None:
    try:
        report = future.result()
    except ReflexaError as exc:
        # A setup fault (no model, no store): every task would fail the same way; stop the batch.
        raise ConfigError(f"task {task.key} (line {task.line}): {exc}", hint=exc.hint) from None
    except Exception as exc:  # noqa: BLE001 - the worker died (a killed process, Ray giving up): no result
        report = {"state": "failed", "key": task.key, "error": f"worker failed: {type(exc).__name__}: {exc}"}
    if report["state"] == "done":
        row = report["row"]
        results.append(row, sync=False)
        state.done += 1
        _count(state, task, row)
    elif report["state"] == "failed":
        state.failed += 1
        state.failed_unfinished += 1
        state.errors.append(f"{task.key}: {report.get('error')}")
    elif report["state"] == "waiting":  # unfinished, no result yet: a re-run after `reflexa approve` resumes it
        state.waiting += 1
        state.errors.append(f"{task.key}: a call waits for approval: reflexa approve {str(report['run_id'])[:12]}, "
                            "then run the batch again")


def _count(state: Progress, task: BatchTask, row: dict[str, Any]) -> None:
    """A finished task's row in the batch's counts: by stop reason, passed, and failed (ERROR)."""
    reason = str(row.get("stop_reason"))
    state.by_reason[reason] = state.by_reason.get(reason, 0) + 1
    state.passed += bool(row.get("passed"))
    if row.get("stop_reason") == "ERROR":
        state.failed += 1
        state.errors.append(f"{task.key}: {row.get('error')}")


__all__ = ["BatchConfig", "BatchInterrupted", "Progress", "batch_id", "make_row", "run_batch"]
