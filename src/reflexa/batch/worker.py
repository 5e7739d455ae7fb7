"""One task of a batch, run in whichever worker the executor chose: a thread, a process or a Ray task.

The store is the batch's memory. Each task has a record in the namespace `batch:<batch id>`: "running"
with its run id as soon as the run is stored, "done" with its result row once it finished. A worker that
finds a task "running" (its last worker was killed) resumes that run from its last stored step instead
of starting another one, and a task found "done" is never run again. So a batch killed anywhere, in a
worker or in the driver, finishes on a re-run with every task run once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ..errors import ReflexaError, RunInterrupted, RunLeased
from ..executors.worker import WORKER, worker_model, worker_store
from ..tasks import TaskLine
from ..trace.store import Store


@dataclass(frozen=True, slots=True)
class BatchConfig:
    """What every worker needs to run a task of the batch; plain data, so it travels to other processes."""

    batch_id: str
    store: str
    """The store's path (SQLite) or URL (PostgreSQL), as every worker opens it."""
    model: str | None = None
    """The model spec; None means the configured default."""
    connections: int | None = None
    """Model calls in flight at most per backend in one process (threads wait for a slot)."""
    experience: bool = True
    """Tasks share the experience library: a repair learnt by one is reused by the others."""
    governor: bool = False
    """The ROI governor may cut retries for a task family where they have not paid (changes what a
    batch measures, so off by default)."""
    reflector_model: str | None = None
    """The reflector's own model spec; None means each task's model reflects."""


def namespace(batch_id: str) -> str:
    """Where a batch keeps its tasks' records."""
    return f"batch:{batch_id}"


# --- result rows ------------------------------------------------------------------------------------------

def make_row(config: BatchConfig, task: TaskLine, result: dict[str, Any], *, seconds: float | None,
             worker: str = WORKER) -> dict[str, Any]:
    """A task's result row, as the results file and the store keep it."""
    total = result.get("total_usage") or {}
    return {
        "batch": config.batch_id, "key": task.key, "line": task.line, "loop": task.spec.loop,
        "run_id": result.get("run_id"),
        "stop_reason": result.get("stop_reason"), "passed": result.get("stop_reason") == "PASSED",
        "output": result.get("output"), "best": result.get("best"), "iterations": result.get("iterations", 0),
        "tokens": int(total.get("input_tokens", 0)) + int(total.get("output_tokens", 0)),
        "calls": int(total.get("calls", 0)), "error": result.get("error"),
        "counters": result.get("counters") or {}, "seconds": seconds, "worker": worker, "meta": task.spec.meta,
    }


def _crash_row(config: BatchConfig, task: TaskLine, run_id: str, error: str, seconds: float) -> dict[str, Any]:
    return make_row(config, task, {"run_id": run_id, "stop_reason": "ERROR", "error": error[:500]}, seconds=seconds)


def failed(task: TaskLine, error: str) -> dict[str, Any]:
    """What a worker reports for a task it could not run (its worker died, another process holds it): no
    result, so a re-run runs it."""
    return {"state": "failed", "key": task.key, "error": error}


# --- one task ---------------------------------------------------------------------------------------------

def run_task(config: BatchConfig, task: TaskLine) -> dict[str, Any]:
    """Run (or resume, or skip) one task; its record in the store says which. Returns {"state": "done",
    "row": ...}, {"state": "interrupted"} (Ctrl-C: the run resumes on a re-run), {"state": "waiting"} (a call
    waits for `reflexa approve`; a re-run resumes it) or a `failed` report.
    A setup fault before the run opened (no such model backend, no store) raises ReflexaError."""
    store = worker_store(config.store)
    ns = namespace(config.batch_id)
    state = store.get(ns, task.key) or {}
    if state.get("state") == "done":
        return {"state": "done", "row": state["row"]}
    resume: str | None = None
    if run_id := state.get("run_id"):
        record = store.get_run(run_id)
        if record is not None and record.status == "finished" and record.result is not None:
            # Killed after the run ended but before its record said so: the result is there already.
            return _done(store, ns, task, make_row(config, task, record.result, seconds=None))
        resume = record.run_id if record is not None else None
    opened: list[str] = []

    def observer(event: str, data: Any) -> None:
        if event == "run" and not opened:
            opened.append(data)
            store.put(ns, task.key, {"state": "running", "run_id": data, "line": task.line, "worker": WORKER,
                                     "since": time.time()})

    started = time.time()
    try:
        result = _run(config, task, store, observer, resume).to_dict()
    except RunInterrupted:
        return {"state": "interrupted", "key": task.key}
    except RunLeased as exc:
        return failed(task, str(exc))
    except Exception as exc:  # noqa: BLE001 - a bug in a check or in reflexa: the run is stored as ERROR
        if not opened:
            raise
        message = exc.explained() if isinstance(exc, ReflexaError) else f"internal error: {type(exc).__name__}: {exc}"
        return _done(store, ns, task, _crash_row(config, task, opened[0], message, time.time() - started))
    if result["stop_reason"] == "AWAITING_APPROVAL":  # not done: a re-run of the batch resumes it
        return {"state": "waiting", "key": task.key, "run_id": result["run_id"]}
    return _done(store, ns, task, make_row(config, task, result, seconds=round(time.time() - started, 3)))


def _done(store: Store, ns: str, task: TaskLine, row: dict[str, Any]) -> dict[str, Any]:
    store.put(ns, task.key, {"state": "done", "row": row})
    return {"state": "done", "row": row}


def _run(config: BatchConfig, task: TaskLine, store: Store, observer: Any, resume: str | None) -> Any:
    """The task's spec, run in a session on the shared store."""
    from ..loops import Session
    from ..reflect import ExperienceLibrary, Governor

    # A line's own reflector wins ('' is the task's model); else the batch's.
    reflector = task.spec.reflector_model if task.spec.reflector_model is not None else config.reflector_model
    session = Session(model=worker_model(task.spec.model or config.model, config.connections, loop=task.spec.loop),
                      store=store,
                      observer=observer, experience=ExperienceLibrary(store) if config.experience else None,
                      governor=Governor(store) if config.governor else None,
                      reflector_model=worker_model(reflector, config.connections) if reflector else None)
    return task.spec.run(session, resume=resume, meta={"batch": config.batch_id, "batch_task": task.key})


def record_row(store: Store, config: BatchConfig, task: TaskLine) -> dict[str, Any] | None:
    """The task's finished row from the store, or None while it has none."""
    state = store.get(namespace(config.batch_id), task.key) or {}
    return state.get("row") if state.get("state") == "done" else None


__all__ = ["BatchConfig", "make_row", "namespace", "record_row", "run_task"]
