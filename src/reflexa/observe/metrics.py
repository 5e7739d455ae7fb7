"""Prometheus metrics for runs (prometheus-client), from the same events and steps a tracer reads.

    reflexa_step_duration_seconds{loop,kind}              histogram: steps that take time (attempt, verdict,
                                                          react, search; not the checkpoints and decisions
                                                          recorded at one instant, nor model calls, below)
    reflexa_model_call_duration_seconds{loop,role,model}  histogram: model-call latency
    reflexa_model_tokens_total{loop,role,model,type}      counter: input and output tokens
    reflexa_run_duration_seconds{loop}                    histogram: whole runs
    reflexa_runs_total{loop,stop_reason}                  counter: how runs ended
    reflexa_gate_decisions_total{loop,decision}           counter: steps the gate found clean or failing
    reflexa_classifier_decisions_total{loop,decision}     counter: rule, unrecoverable, reflect
    reflexa_reflections_total{loop}                       counter: reflector calls
    reflexa_experience_lookups_total{loop,result}         counter: experience-library hits and misses

Steps count as they land; the engine's counts (gate, classifier, reflections, experience) when a run ends.
A run interrupted with Ctrl-C adds no engine counts: its resume reports the whole run's, so nothing is
counted twice (a run interrupted and never resumed leaves its engine counts out).

The series live in prometheus_client's default registry unless a Metrics is given another: serve that
registry (`prometheus_client.make_asgi_app()`), or `push()` it from a batch job that ends before a scrape.
They are plain numbers under one lock, turned into metric families when the registry is read: a
prometheus_client Histogram takes a lock per bucket and sum on each observation, three times the cost on
the loop's hot path.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from ..errors import ReflexaError
from ..runtime import RunStarted
from ..trace.store import Store
from ..types import Result, Step, StopReason

log = logging.getLogger("reflexa.observe")

STEP_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
"""Seconds: a step can be a millisecond of bookkeeping or minutes of a local model writing code."""
RUN_BUCKETS = (0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)

MODEL_CALLS = "reflexa_model_call_duration_seconds"

# name, help, labels, buckets (None: a counter)
_FAMILIES: tuple[tuple[str, str, tuple[str, ...], tuple[float, ...] | None], ...] = (
    ("reflexa_step_duration_seconds", "Duration of each step that takes time.", ("loop", "kind"), STEP_BUCKETS),
    (MODEL_CALLS, "Model-call latency.", ("loop", "role", "model"), STEP_BUCKETS),
    ("reflexa_model_tokens", "Model tokens spent.", ("loop", "role", "model", "type"), None),
    ("reflexa_run_duration_seconds", "Duration of whole runs.", ("loop",), RUN_BUCKETS),
    ("reflexa_runs", "Runs by how they ended.", ("loop", "stop_reason"), None),
    ("reflexa_gate_decisions", "Gate decisions: clean (no reflection) or failing.", ("loop", "decision"), None),
    ("reflexa_classifier_decisions", "Classifier decisions on failing signals.", ("loop", "decision"), None),
    ("reflexa_reflections", "Reflector calls.", ("loop",), None),
    ("reflexa_experience_lookups", "Experience-library lookups.", ("loop", "result"), None),
)


class _Series(Collector):
    """Every reflexa series of one registry, as plain numbers: a histogram is [count per bucket..., sum], a
    model call's [count per bucket..., sum, input tokens, output tokens] (the tokens counter is read from it,
    so a call costs one lookup on the loop's hot path)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.values: dict[str, dict[tuple[str, ...], Any]] = {name: {} for name, *_ in _FAMILIES}

    def histogram(self, name: str, labels: tuple[str, ...], buckets: tuple[float, ...]) -> list[Any]:
        """The numbers of one histogram series, made on first use; the caller holds `lock`."""
        series = self.values[name].get(labels)
        if series is None:
            extra = [0, 0] if name == MODEL_CALLS else []
            series = self.values[name][labels] = [0] * (len(buckets) + 1) + [0.0] + extra
        return series

    def add(self, name: str, labels: tuple[str, ...], amount: float) -> None:
        """Add to a counter; the caller holds `lock`."""
        values = self.values[name]
        values[labels] = values.get(labels, 0) + amount

    def collect(self) -> Iterator[Metric]:
        with self.lock:
            snapshot: dict[str, dict[tuple[str, ...], Any]] = {
                name: {k: (list(v) if isinstance(v, list) else v) for k, v in values.items()}
                for name, values in self.values.items()}
        tokens = snapshot["reflexa_model_tokens"]
        for labels, series in snapshot[MODEL_CALLS].items():
            tokens[(*labels, "input")], tokens[(*labels, "output")] = series[-2:]
            del series[-2:]
        for name, help_text, label_names, buckets in _FAMILIES:
            family: Metric
            if buckets is None:
                family = CounterMetricFamily(name, help_text, labels=label_names)
                for labels, value in snapshot[name].items():
                    family.add_metric(labels, float(value))
            else:
                family = HistogramMetricFamily(name, help_text, labels=label_names)
                bounds = [*(str(float(b)) for b in buckets), "+Inf"]
                for labels, series in snapshot[name].items():
                    cumulative, total = [], 0
                    for bound, count in zip(bounds, series[:-1], strict=True):
                        total += count
                        cumulative.append((bound, total))
                    family.add_metric(labels, cumulative, series[-1])
            yield family


_BY_REGISTRY: weakref.WeakKeyDictionary[CollectorRegistry, _Series] = weakref.WeakKeyDictionary()
"""One set of series per registry (a registry refuses the same names twice). Keyed by the registry itself,
held weakly: an id would be reused by the next registry once this one is freed."""


def _series(registry: CollectorRegistry) -> _Series:
    found = _BY_REGISTRY.get(registry)
    if found is None:
        found = _BY_REGISTRY[registry] = _Series()
        registry.register(found)
    return found


@dataclass(slots=True)
class _Run:
    """A run being counted: its labels, and its series, each found once per run rather than once per step."""

    loop: str
    since: float
    model: str
    series: dict[tuple[str, str | None, str], list[Any]] = field(default_factory=dict)
    """(step kind, role, model) -> the numbers of its histogram series."""


def _observe(series: list[Any], buckets: tuple[float, ...], seconds: float) -> None:
    """One observation into a histogram's numbers; the caller holds the lock."""
    series[bisect.bisect_left(buckets, seconds)] += 1  # the first bucket whose bound is >= seconds
    series[len(buckets) + 1] += seconds  # the sum, after the +Inf bucket


class Metrics:
    """An observer that counts runs into Prometheus series (see the module docstring for the list).
    Telemetry never breaks a run: an error in here is logged."""

    tokens = False
    """No ("token", text) events: a run traced or counted and not watched does not stream."""
    reads = frozenset({"run", "step", "finish"})
    """The events read; an `observers(...)` fan-out passes it no others."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        """`registry` None is prometheus_client's default registry."""
        self.registry = registry if registry is not None else REGISTRY
        self._series = _series(self.registry)
        self._runs: dict[str, _Run] = {}

    def __call__(self, event: str, data: Any) -> None:
        try:
            if event == "step":
                self._step(data)
            elif event == "run":
                self._runs[data.run_id] = _Run(data.loop, data.started_at, data.model)
            elif event == "finish":
                self._finish(data)
        except Exception:  # noqa: BLE001 - a telemetry fault must never end a run
            log.exception("reflexa metrics failed on a %r event", event)

    def _step(self, step: Step) -> None:
        seconds = step.ended_at - step.started_at
        if seconds <= 0.0:  # a step recorded at one instant (a checkpoint, a decision) has no time
            return
        run = self._runs.get(step.run_id)
        if run is None:
            return
        # A call served by another model than the run's (a reflector on its own model) is labelled with it.
        model = getattr(step.payload(), "model", None) if step.kind == "model_call" else None
        key = (step.kind, step.role, model or run.model)
        with self._series.lock:
            series = run.series.get(key)
            if series is None:
                series = run.series[key] = self._open(run, *key)
            _observe(series, STEP_BUCKETS, seconds)
            if step.kind == "model_call":
                series[-2] += step.usage.input_tokens
                series[-1] += step.usage.output_tokens

    def _open(self, run: _Run, kind: str, role: str | None, model: str) -> list[Any]:
        if kind == "model_call":
            return self._series.histogram(MODEL_CALLS, (run.loop, role or "", model), STEP_BUCKETS)
        return self._series.histogram("reflexa_step_duration_seconds", (run.loop, kind), STEP_BUCKETS)

    def _finish(self, result: Result, ended_at: float | None = None) -> None:
        started = self._runs.pop(result.run_id, None)
        if started is None:
            return
        loop = started.loop
        series = self._series
        with series.lock:
            seconds = max(0.0, (ended_at if ended_at is not None else time.time()) - started.since)
            _observe(series.histogram("reflexa_run_duration_seconds", (loop,), RUN_BUCKETS), RUN_BUCKETS, seconds)
            series.add("reflexa_runs", (loop, str(result.stop_reason)), 1)
        if result.stop_reason is StopReason.INTERRUPTED:
            return  # its resume reports the whole run's engine counts
        c = result.counters

        def count(name: str) -> int:
            value = c.get(name, 0)
            return value if isinstance(value, int) else 0

        gate_calls, gate_failing = count("gate_calls"), count("gate_signals")
        counts = (
            ("reflexa_gate_decisions", (loop, "clean"), max(0, gate_calls - gate_failing)),
            ("reflexa_gate_decisions", (loop, "failing"), gate_failing),
            ("reflexa_classifier_decisions", (loop, "rule"), count("rule_repairs")),
            ("reflexa_classifier_decisions", (loop, "unrecoverable"), count("unrecoverable")),
            ("reflexa_classifier_decisions", (loop, "reflect"), count("sent_to_reflection")),
            ("reflexa_reflections", (loop,), count("reflector_calls")),
            ("reflexa_experience_lookups", (loop, "hit"), count("experience_hits")),
            ("reflexa_experience_lookups", (loop, "miss"), count("experience_misses")),
        )
        with series.lock:
            for name, labels, amount in counts:
                series.add(name, labels, amount)


STORE_RUNS = 1000
"""Runs a store's metrics are rebuilt from, the newest first: a bound on the cost of one scrape."""


def from_store(store: Store, limit: int = STORE_RUNS) -> CollectorRegistry:
    """The same series rebuilt from what a store holds (its newest `limit` runs), in a registry of their
    own: what the web viewer serves at /metrics, since the runs it shows ran in other processes."""
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    for record in reversed(store.runs(limit)):
        model = str(record.meta.get("model", ""))
        metrics("run", RunStarted(record.run_id, record.loop, record.task, model, record.started_at))
        for step in store.steps(record.run_id):
            metrics("step", step)
        if record.status != "running" and record.stop_reason is not None:
            counters = (record.result or {}).get("counters", {})
            metrics._finish(Result(None, None, None, StopReason(record.stop_reason), {}, record.run_id,
                                   counters=counters if isinstance(counters, dict) else {}), record.ended_at)
    return registry


def push(gateway: str, job: str, *, registry: CollectorRegistry | None = None,
         grouping_key: dict[str, str] | None = None, timeout: float = 30.0) -> None:
    """Push the metrics to a Prometheus Pushgateway (`host:port` or a URL): for a batch job that ends
    before any scrape. Replaces what was pushed before under the same job and grouping key (HTTP PUT)."""
    from prometheus_client import push_to_gateway

    try:
        push_to_gateway(gateway, job=job, registry=registry if registry is not None else REGISTRY,
                        grouping_key=grouping_key, timeout=timeout)
    except OSError as exc:  # URLError and HTTPError are OSErrors: an unreachable or refusing gateway
        raise ReflexaError(f"could not push metrics to {gateway}: {exc}",
                           hint="check the Pushgateway address and that it is running") from None
