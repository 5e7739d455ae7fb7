"""Prometheus metrics for runs (prometheus-client), from the same events and steps a tracer reads.

    reflexa_step_duration_seconds{loop,kind}          histogram: steps that take time, by loop and step kind
                                                      (attempt, verdict, react, search; not the checkpoints
                                                      and decisions recorded at one instant, and not model
                                                      calls, which have their own)
    reflexa_model_call_duration_seconds{loop,role,model}  histogram: model-call latency
    reflexa_model_tokens_total{loop,role,model,type}  counter: input and output tokens
    reflexa_run_duration_seconds{loop}                histogram: whole runs
    reflexa_runs_total{loop,stop_reason}              counter: how runs ended
    reflexa_gate_decisions_total{loop,decision}       counter: steps the gate found clean or failing
    reflexa_classifier_decisions_total{loop,decision} counter: rule, unrecoverable, reflect
    reflexa_reflections_total{loop}                   counter: reflector calls
    reflexa_experience_lookups_total{loop,result}     counter: experience-library hits and misses

Steps count as they land; the engine's counts (gate, classifier, reflections, experience) when a run ends.
A run interrupted with Ctrl-C adds no engine counts: its resume reports the whole run's, so nothing is
counted twice (a run interrupted and never resumed leaves its engine counts out).

The metrics live in prometheus_client's default registry unless a Metrics is given another: serve that
registry (`prometheus_client.make_asgi_app()`), or `push()` it from a batch job that ends before a scrape.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram

from ..errors import ReflexaError
from ..runtime import RunStarted
from ..types import Result, Step, StopReason

log = logging.getLogger("reflexa.observe")

STEP_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
"""Seconds: a step can be a microsecond of bookkeeping or minutes of a local model writing code."""
RUN_BUCKETS = (0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)



class _Instruments:
    """The metric families, registered once per registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.steps = Histogram("reflexa_step_duration_seconds", "Duration of each stored step.",
                               ["loop", "kind"], buckets=STEP_BUCKETS, registry=registry)
        self.call_seconds = Histogram("reflexa_model_call_duration_seconds", "Model-call latency.",
                                      ["loop", "role", "model"], buckets=STEP_BUCKETS, registry=registry)
        self.tokens = Counter("reflexa_model_tokens", "Model tokens spent.", ["loop", "role", "model", "type"],
                              registry=registry)
        self.run_seconds = Histogram("reflexa_run_duration_seconds", "Duration of whole runs.", ["loop"],
                                     buckets=RUN_BUCKETS, registry=registry)
        self.runs = Counter("reflexa_runs", "Runs by how they ended.", ["loop", "stop_reason"], registry=registry)
        self.gate = Counter("reflexa_gate_decisions", "Gate decisions: clean (no reflection) or failing.",
                            ["loop", "decision"], registry=registry)
        self.classifier = Counter("reflexa_classifier_decisions", "Classifier decisions on failing signals.",
                                  ["loop", "decision"], registry=registry)
        self.reflections = Counter("reflexa_reflections", "Reflector calls.", ["loop"], registry=registry)
        self.experience = Counter("reflexa_experience_lookups", "Experience-library lookups.",
                                  ["loop", "result"], registry=registry)


_BY_REGISTRY: dict[int, _Instruments] = {}
"""One set of instruments per registry (prometheus_client refuses to register a name twice)."""


def _instruments(registry: CollectorRegistry) -> _Instruments:
    found = _BY_REGISTRY.get(id(registry))
    if found is None:
        found = _BY_REGISTRY[id(registry)] = _Instruments(registry)
    return found


class Metrics:
    """An observer that counts runs into Prometheus metrics (see the module docstring for the series).
    Telemetry never breaks a run: an error in here is logged."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        """`registry` None is prometheus_client's default registry."""
        self.registry = registry if registry is not None else REGISTRY
        self._m = _instruments(self.registry)
        self._runs: dict[str, tuple[str, float, str]] = {}  # run id -> (loop, wall-clock start, model)
        # Labelled children, cached: labels() costs several times an observe().
        self._step_children: dict[tuple[str, str], Any] = {}
        self._call_children: dict[tuple[str, str, str], tuple[Any, Any, Any]] = {}

    def __call__(self, event: str, data: Any) -> None:
        try:
            if event == "step":
                self._step(data)
            elif event == "run":
                self._start(data)
            elif event == "finish":
                self._finish(data)
        except Exception:  # noqa: BLE001 - a telemetry fault must never end a run
            log.exception("reflexa metrics failed on a %r event", event)

    def _start(self, started: RunStarted) -> None:
        self._runs[started.run_id] = (started.loop, started.started_at, started.model)

    def _step(self, step: Step) -> None:
        run = self._runs.get(step.run_id)
        seconds = step.ended_at - step.started_at
        if run is None or seconds <= 0.0:  # a step recorded at one instant (a checkpoint, a decision) has no time
            return
        if step.kind == "model_call":
            call = (run[0], step.role or "", run[2])
            children = self._call_children.get(call)
            if children is None:
                children = self._call_children[call] = (self._m.call_seconds.labels(*call),
                                                        self._m.tokens.labels(*call, "input"),
                                                        self._m.tokens.labels(*call, "output"))
            children[0].observe(seconds)
            children[1].inc(step.usage.input_tokens)
            children[2].inc(step.usage.output_tokens)
            return
        key = (run[0], step.kind)
        child = self._step_children.get(key)
        if child is None:
            child = self._step_children[key] = self._m.steps.labels(*key)
        child.observe(seconds)

    def _finish(self, result: Result) -> None:
        started = self._runs.pop(result.run_id, None)
        if started is None:
            return
        loop, since, _ = started
        m = self._m
        m.run_seconds.labels(loop).observe(max(0.0, time.time() - since))
        m.runs.labels(loop, str(result.stop_reason)).inc()
        if result.stop_reason is StopReason.INTERRUPTED:
            return  # its resume reports the whole run's engine counts
        c = result.counters

        def count(name: str) -> int:
            value = c.get(name, 0)
            return value if isinstance(value, int) else 0

        gate_calls, gate_failing = count("gate_calls"), count("gate_signals")
        m.gate.labels(loop, "clean").inc(max(0, gate_calls - gate_failing))
        m.gate.labels(loop, "failing").inc(gate_failing)
        m.classifier.labels(loop, "rule").inc(count("rule_repairs"))
        m.classifier.labels(loop, "unrecoverable").inc(count("unrecoverable"))
        m.classifier.labels(loop, "reflect").inc(count("sent_to_reflection"))
        m.reflections.labels(loop).inc(count("reflector_calls"))
        m.experience.labels(loop, "hit").inc(count("experience_hits"))
        m.experience.labels(loop, "miss").inc(count("experience_misses"))


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
