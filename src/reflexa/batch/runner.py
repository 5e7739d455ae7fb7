"""The batch driver: read and check the tasks, skip what the store says is done, run the rest through an
executor (`reflexa.executors`), and write each result as it comes."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from ..errors import ConfigError, ReflexaError
from ..executors import Progress, drive, open_executor, pick
from ..executors.rows import ResultsFile
from ..executors.worker import check_model_spec, driver_models, driving, worker_store
from ..tasks import TaskLine, read_tasks
from ..tasks.spec import BUDGET_FIELDS
from ..trace.postgres import is_url
from .worker import BatchConfig, make_row, namespace, run_task


def batch_id(tasks: bytes, loop: str, options: dict[str, Any]) -> str:
    """The batch's identity: the tasks file's content, the loop and the options that change results. The
    same command on the same file is the same batch, so it resumes; any change makes a new one."""
    digest = hashlib.sha256(tasks)
    digest.update(json.dumps({"loop": loop, **options}, sort_keys=True, default=str).encode())
    return digest.hexdigest()[:12]


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
    Ctrl-C or SIGTERM raises `executors.Interrupted` once the results so far are written and no worker runs."""
    if concurrency < 1:
        raise ConfigError("--concurrency must be at least 1")
    kind = pick(executor, model)
    model, reflector_model = driver_models(model, reflector_model)
    budget = {k: v for k, v in (budget or {}).items() if k in BUDGET_FIELDS and v is not None}
    tasks = read_tasks(tasks_path, loop, defaults=budget)
    for spec in {model, reflector_model, *(t.spec.model for t in tasks), *(t.spec.reflector_model for t in tasks)}:
        check_model_spec(spec)
    store = store if is_url(store) else str(Path(store).resolve())
    # The reflector is part of the batch's identity only when there is one: older batches keep their ids.
    options = {"model": model, "budget": budget, "experience": experience, "governor": governor,
               **({"reflector_model": reflector_model} if reflector_model else {})}
    ident = batch_id(tasks_path.read_bytes(), loop, options)
    config = BatchConfig(ident, store, model, connections, experience, governor, reflector_model)
    results_path = out or tasks_path.with_name(tasks_path.stem + ".results.jsonl")
    _check_not_an_input(results_path, store, [p for t in tasks for p in (t.spec.path("tests"), t.spec.path("db"))
                                              if p is not None])
    shared = worker_store(store)
    state = Progress(ident, len(tasks))
    with driving(shared, namespace(ident), "batch", ident,
                 hint="wait for it, or stop it; a stopped batch resumes on the same command"), \
            ResultsFile(results_path, ident) as results:
        todo = _skip_finished(tasks, shared, config, results, state)
        if todo:
            pool = open_executor(kind, run_task, concurrency, address=address,
                                 max_tasks_per_worker=max_tasks_per_worker)
            drive(todo, pool, concurrency, args=lambda task: (config, task),
                  collect=lambda task, future: _collect(future, task, results, state), state=state,
                  progress=progress, settle=results.sync)
        elif progress:
            progress(state)
    return state


def _skip_finished(tasks: list[TaskLine], store: Any, config: BatchConfig, results: ResultsFile,
                   state: Progress) -> list[TaskLine]:
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


def _collect(future: Future[dict[str, Any]], task: TaskLine, results: ResultsFile, state: Progress) -> None:
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


def _count(state: Progress, task: TaskLine, row: dict[str, Any]) -> None:
    """A finished task's row in the batch's counts: by stop reason, passed, and failed (ERROR)."""
    reason = str(row.get("stop_reason"))
    state.by_reason[reason] = state.by_reason.get(reason, 0) + 1
    state.passed += bool(row.get("passed"))
    if row.get("stop_reason") == "ERROR":
        state.failed += 1
        state.errors.append(f"{task.key}: {row.get('error')}")


__all__ = ["BatchConfig", "batch_id", "make_row", "run_batch"]
