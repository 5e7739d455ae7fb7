"""Running an eval: every strategy on every task, rows stored as they finish, resumed by (task, strategy).

A task is the unit of work an executor runs (threads, or processes for the embedded model, or Ray): its
strategies run one after another in `run_order`, so a budget-matched strategy finds the tokens of the one
it matches, and drift over a long run hits every strategy alike. Each finished (task, strategy) row goes to
the store at once; the rows file gets a task's rows when the task is done, and a re-run first copies into it
what the store has. A strategy interrupted part way runs again from its start (each is deterministic:
greedy, or sampled at a fixed seed), reading back from the store the calls it had made (calls.py).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError, ReflexaError
from ..executors import Progress, drive, open_executor, pick
from ..executors.rows import ResultsFile, own_rows
from ..executors.worker import driver_models, driving, worker_model, worker_store
from ..loops import Session
from ..loops.refine import Attempt
from ..models.base import Model
from ..tasks import TaskSpec
from ..types import Result, Role
from .calls import CallCache, Ledger, SharedCalls
from .dataset import EvalTask
from .naive import run_naive
from .score import citations, scored
from .strategies import MAX_SAMPLES, Strategy, run_order

ANSWER_CHARS = 4000
"""A row keeps at most this much of the final answer (the full one is in the run's trace)."""


@dataclass(frozen=True, slots=True)
class EvalConfig:
    """What every worker needs; plain data, so it travels to other processes."""

    eval_id: str
    store: str
    strategies: tuple[Strategy, ...]
    model: str | None = None
    reflector_model: str | None = None
    connections: int | None = None
    share_calls: bool = True
    """Strategies on one task share their deterministic model calls (calls.py)."""


def identity(dataset: Path, model: str | None, reflector_model: str | None) -> tuple[str, str | None, str | None]:
    """(the eval's id, its model spec, its reflector's), the specs as the workers resolve them."""
    model, reflector_model = driver_models(model, reflector_model)
    return eval_id(dataset, {"model": model, "reflector_model": reflector_model}), model, reflector_model


def stored_rows(tasks: list[EvalTask], strategies: list[Strategy], ident: str, store: Any,
                rows_file: Path) -> list[dict[str, Any]]:
    """The rows the store (None: no store) and the rows file have for these tasks and strategies, in task order:
    an eval's report so far, read while it runs, or from the rows file alone (which resumes an eval too)."""
    stored = {row["key"]: row for row in own_rows(rows_file.read_bytes(), ident)} if rows_file.is_file() else {}
    if store is not None:
        stored.update(store.items(namespace(ident)))
    return [stored[key] for task in tasks for s in strategies if (key := row_key(task.id, s.name)) in stored]


def eval_id(dataset: Path, options: dict[str, Any]) -> str:
    """The eval's identity: the dataset's content and the models. The same command resumes; a changed
    dataset or model is a new eval. Rows are keyed by (task, strategy), so another strategy or more tasks
    of the same dataset run only what has no row yet."""
    digest = hashlib.sha256(dataset.read_bytes())
    digest.update(json.dumps(options, sort_keys=True, default=str).encode())
    return digest.hexdigest()[:12]


EVALS = "evals"
"""The store's record of every eval (its dataset, strategies, models): what the viewer's Evals page lists."""


def namespace(ident: str) -> str:
    """Where an eval keeps its rows, one record per (task, strategy)."""
    return f"eval:{ident}"


def row_key(task: str, strategy: str) -> str:
    return f"{task}::{strategy}"


# --- one task, every strategy ----------------------------------------------------------------------------

def run_eval_task(config: EvalConfig, task: EvalTask, index: int) -> list[dict[str, Any]]:
    """Every strategy of the eval on `task` that the store has no row for; returns all of the task's rows."""
    store = worker_store(config.store)
    ns = namespace(config.eval_id)
    rows: dict[str, dict[str, Any]] = {}
    cache = CallCache(store=store, ns=f"calls:{config.eval_id}:{task.id}")
    for strategy in run_order([s for s in config.strategies if s.applies(task.spec)], index):
        key = row_key(task.id, strategy.name)
        done = store.get(ns, key)
        if done is None:
            budget = rows[strategy.match]["tokens"] if strategy.match is not None else None
            done = _row(config, task, strategy, budget, cache)
            store.put(ns, key, done)
        rows[strategy.name] = done
    return [rows[s.name] for s in config.strategies if s.name in rows]


def _row(config: EvalConfig, task: EvalTask, strategy: Strategy, budget: int | None,
         cache: CallCache) -> dict[str, Any]:
    started = time.monotonic()
    ledger = Ledger()
    session = _session(config, task.spec, cache if config.share_calls else None, ledger)
    meta = {"eval": config.eval_id, "eval_task": task.id, "strategy": strategy.name}
    try:
        if strategy.resamples:
            outcome = _resample(strategy, task, session, meta, budget)
        elif strategy.naive is not None:
            outcome = _once(task.spec, session, meta, naive=strategy.naive)
        else:
            outcome = _once(strategy.spec_for(task.spec), session, meta)
    except ReflexaError:
        raise
    except Exception as exc:  # noqa: BLE001 - a bug in a check or in reflexa: the row says so, the eval goes on
        outcome = StrategyRun(stop_reason="ERROR", error=f"{type(exc).__name__}: {exc}"[:500])
    # The strategy's own time, with what its shared calls took when they were made; scoring is not counted.
    seconds = time.monotonic() - started + ledger.seconds
    passed = scored(task, outcome.answer, outcome.visible)
    first = None
    if outcome.first is not None:
        first = passed if outcome.first == outcome.answer else scored(task, outcome.first, outcome.first_visible)
    return {"batch": config.eval_id, "key": row_key(task.id, strategy.name), "task": task.id,
            "strategy": strategy.name, "loop": task.spec.loop, "passed": passed, "visible": outcome.visible,
            "first_passed": first, "tokens": outcome.tokens, "calls": outcome.calls, "seconds": round(seconds, 3),
            "tflops": round(outcome.tflops, 4) if outcome.tflops is not None else None,
            "stop_reason": outcome.stop_reason, "samples": outcome.samples, "run_ids": outcome.run_ids,
            "shared_calls": ledger.calls, "citations": citations(task, outcome.answer),
            "answer": (outcome.answer or "")[:ANSWER_CHARS], "error": outcome.error, "meta": task.spec.meta}


@dataclass(slots=True)
class StrategyRun:
    """What a strategy did on a task, before scoring."""

    answer: str | None = None
    visible: bool = False
    """The run ended PASSED: the visible checks (or the loop's validator) passed."""
    first: str | None = None
    """refine: the first attempt's candidate (None for other loops)."""
    first_visible: bool = False
    tokens: int = 0
    calls: int = 0
    tflops: float | None = 0.0
    """The model calls' compute (`compute`); None when a model's size is unknown."""
    stop_reason: str = ""
    samples: int = 0
    run_ids: list[str] = field(default_factory=list)
    error: str | None = None

    def add(self, result: Result, session: Session) -> None:
        self.tokens += result.total_usage.total_tokens
        self.tflops = _sum(self.tflops, compute(result, session))
        # Model calls: a search is a call of the search role, and one the store has cached (from another
        # strategy's run on the same task) is not made again, so searches are not counted.
        self.calls += sum(usage.calls for role, usage in result.usage.items() if role != Role.SEARCH)
        self.run_ids.append(result.run_id)
        self.samples += 1

    def then(self, sample: StrategyRun) -> None:
        """A resample's next sample: its cost adds to the others', its answer replaces the last one's."""
        self.tokens, self.calls, self.samples = self.tokens + sample.tokens, self.calls + sample.calls, self.samples + 1
        self.tflops = _sum(self.tflops, sample.tflops)
        self.run_ids += sample.run_ids
        self.answer, self.visible, self.stop_reason = sample.answer, sample.visible, sample.stop_reason
        self.error = sample.error


def compute(result: Result, session: Session) -> float | None:
    """A run's model compute in TFLOP: 2 × parameters × tokens for each role's model, the forward pass's
    usual estimate (Kaplan et al., 2020). Unlike seconds, no load bends it, and unlike tokens it weighs a
    larger model's tokens as they cost: what compares a strategy that escalates to a bigger model with one
    that does not. None when a model that spent tokens has no known size."""
    total = 0.0
    for role, usage in result.usage.items():
        if role == Role.SEARCH or not usage.total_tokens:
            continue
        model = session.reflector_model if role == Role.REFLECTOR and session.reflector_model else session.model
        if model is None or (size := model.parameters) is None:
            return None
        total += 2 * size * usage.total_tokens / 1000  # 1e9 parameters x tokens, in units of 1e12
    return total


def _sum(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a + b


def _session(config: EvalConfig, spec: TaskSpec, cache: CallCache | None, ledger: Ledger) -> Session:
    """A session on the eval's store with no experience library and no governor: no strategy learns from
    another's runs. With `cache`, its models share the task's calls (`calls.py`)."""
    reflector = spec.reflector_model if spec.reflector_model is not None else config.reflector_model

    def model(name: str | None) -> Model:
        found = worker_model(name, config.connections, loop=spec.loop)
        return SharedCalls(found, cache, ledger) if cache is not None else found

    return Session(model=model(spec.model or config.model), store=worker_store(config.store),
                   reflector_model=model(reflector) if reflector else None)


def _once(spec: TaskSpec, session: Session, meta: dict[str, Any], naive: str | None = None) -> StrategyRun:
    """One run of `spec` (of the naive loop `naive` on it, when given)."""
    result = spec.run(session, meta=meta) if naive is None else run_naive(naive, spec, session, meta)
    visible = result.stop_reason.value == "PASSED" or bool(result.details.get("visible"))
    outcome = StrategyRun(answer=result.best or result.output, visible=visible, stop_reason=result.stop_reason.value,
                      error=result.error)
    outcome.add(result, session)
    if spec.loop == "refine":
        attempts = [p.candidate for p in (s.payload() for s in session.store.steps(result.run_id))
                    if isinstance(p, Attempt)]
        if attempts:
            outcome.first = attempts[0]
            outcome.first_visible = outcome.visible if len(attempts) == 1 else False
    return outcome


def _resample(strategy: Strategy, task: EvalTask, session: Session, meta: dict[str, Any],
              budget: int | None) -> StrategyRun:
    """Fresh one-attempt samples until one passes the visible checks, K are spent, or (budget-matched)
    the tokens reach `budget`; the last sample's answer stands when none passes. Each sample runs under
    what is left of `budget`, so the last one's reply is cut there (a cut reply is no answer): the strategy
    spends `budget`, plus at most the last call's prompt, which a token budget cannot cut."""
    outcome = StrategyRun()
    samples = strategy.samples or MAX_SAMPLES
    for index in range(samples):
        if budget is not None and outcome.tokens >= budget:
            break
        spec = strategy.sample(task.spec, index)
        if budget is not None:
            spec = spec.with_options(max_tokens=budget - outcome.tokens)
        sample = _once(spec, session, {**meta, "sample": index})
        if index == 0:
            outcome.first, outcome.first_visible = sample.first, sample.visible
        outcome.then(sample)
        if sample.visible:
            break
    if outcome.samples == 0:  # NAME spent nothing on this task (it could not run): nor does its baseline
        outcome.stop_reason = "BUDGET_TOKENS"
    return outcome


# --- the driver -------------------------------------------------------------------------------------------

def run_eval(tasks: list[EvalTask], strategies: list[Strategy], *, dataset: Path, store: str, out: Path,
             model: str | None = None, reflector_model: str | None = None, concurrency: int = 1,
             executor: str = "local", address: str | None = None, connections: int | None = None,
             share_calls: bool = True, progress: Callable[[Progress], None] | None = None) -> Progress:
    """Run every strategy on every task the store has no row for; rows go to OUT/rows.jsonl. Returns the
    final progress, whose `rows` are every row of the eval's tasks and strategies, and whose `done` counts
    tasks with every strategy's row. `share_calls`: the strategies on a task share their deterministic model
    calls (calls.py). Ctrl-C or SIGTERM raises `executors.Interrupted` once the rows so far are kept and no
    worker runs."""
    from ..trace.postgres import is_url

    if concurrency < 1:
        raise ConfigError("--concurrency must be at least 1")
    kind = pick(executor, model)
    ident, model, reflector_model = identity(dataset, model, reflector_model)
    store = store if is_url(store) else str(Path(store).resolve())
    config = EvalConfig(ident, store, tuple(strategies), model, reflector_model, connections, share_calls)
    state = Progress(ident, len(tasks))
    shared = worker_store(store)
    with driving(shared, namespace(ident), "eval", ident), ResultsFile(out / "rows.jsonl", ident) as results:
        header = shared.get(EVALS, ident) or {"started": time.time()}
        names = list(dict.fromkeys([*header.get("strategies", []), *(s.name for s in strategies)]))
        shared.put(EVALS, ident, {**header, "dataset": str(dataset), "model": model,
                                  "reflector_model": reflector_model, "strategies": names, "updated": time.time()})
        todo = _collect_done(tasks, config, shared, results, state)
        if progress:
            progress(state)
        if todo:
            def collect(item: tuple[int, EvalTask], future: Future[list[dict[str, Any]]]) -> None:
                state.rows += [row for row in future.result() if results.append(row, sync=False)]
                state.done += 1

            drive(todo, open_executor(kind, run_eval_task, concurrency, address=address), concurrency,
                  args=lambda item: (config, item[1], item[0]), collect=collect, state=state, progress=progress,
                  settle=results.sync)
    order = {(t.id, s.name): i for i, (t, s) in enumerate((t, s) for t in tasks for s in strategies)}
    state.rows.sort(key=lambda row: order.get((row["task"], row["strategy"]), len(order)))
    return state


def _collect_done(tasks: list[EvalTask], config: EvalConfig, store: Any, results: ResultsFile,
                  state: Progress) -> list[tuple[int, EvalTask]]:
    """The tasks with a strategy still to run; the rows the store has go to the results file now, and the
    rows the results file has that the store lacks (the file came from another machine, or its store was
    deleted) go to the store, so a rows file alone resumes an eval. Their runs stay in the store that made
    them."""
    stored = dict(store.items(namespace(config.eval_id)))
    for kept in own_rows(results.path.read_bytes(), config.eval_id):  # ResultsFile has made the file
        if kept["key"] not in stored:
            store.put(namespace(config.eval_id), kept["key"], kept)
            stored[kept["key"]] = kept
    todo = []
    for index, task in enumerate(tasks):
        rows = [stored.get(row_key(task.id, s.name)) for s in config.strategies if s.applies(task.spec)]
        for row in rows:
            if row is not None:
                results.append(row, sync=False)
                state.rows.append(row)
        if all(row is not None for row in rows):
            state.done += 1
        else:
            todo.append((index, task))
    results.sync()
    return todo
