"""Telemetry for runs: OpenTelemetry spans and Prometheus metrics, both built on the Observer seam.

Both are off unless switched on, and off they cost nothing: no observer is attached to a run. On, each is
one more observer beside the session's own (the CLI's live view), reading the same events and steps.

    REFLEXA_OTEL=1                  spans (also on when OTEL_EXPORTER_OTLP_ENDPOINT is set and the `otel`
                                    extra is installed; REFLEXA_OTEL=0 keeps them off)
    OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true
                                    prompts, completions, tool arguments and results on the spans
    REFLEXA_METRICS=1               Prometheus metrics in prometheus_client's default registry
    REFLEXA_PUSHGATEWAY=HOST:PORT   with REFLEXA_METRICS=1, push them there when the process exits (a batch
                                    job's way: job REFLEXA_PUSH_JOB or "reflexa", instance host:pid)

In code: `enable_tracing(provider)`, `enable_metrics()`, or a `Tracing` / `Metrics` observer in a
Session's `observer` (several at once with `observers(...)`). The viewer serves the metrics with
`prometheus_client.make_asgi_app()` (the default registry); a batch job pushes them with
`metrics.push(gateway, job)`.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..runtime import Observer

if TYPE_CHECKING:
    from .metrics import Metrics
    from .otel import Tracing

__all__ = ["Metrics", "Tracing", "attach", "disable", "enable_metrics", "enable_tracing", "observers"]

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})


class _FanOut:
    """Several observers as one, called in order."""

    __slots__ = ("observers", "tokens", "reads", "_routes")

    def __init__(self, observers: tuple[Observer, ...]) -> None:
        self.observers = observers
        self.tokens = any(getattr(o, "tokens", True) for o in observers)
        """Whether any of them reads ("token", text) events (see runtime.Observer)."""
        reads: list[frozenset[str] | None] = [getattr(o, "reads", None) for o in observers]
        self.reads = None if None in reads else frozenset[str]().union(*(r for r in reads if r is not None))
        """The events any of them reads; None when one of them reads all."""
        self._routes: dict[str, tuple[Observer, ...]] = {}
        """Event name -> the observers that read it (its `reads`, when an observer has one): telemetry
        reads no "call" or "status" events, and on the loop's hot path a call that is ignored still costs."""

    def __call__(self, event: str, data: Any) -> None:
        route = self._routes.get(event)
        if route is None:
            route = self._routes[event] = tuple(o for o in self.observers if _reads(o, event))
        for observer in route:
            observer(event, data)


def _reads(observer: Observer, event: str) -> bool:
    """Whether `observer` takes `event`: the events it says it reads (all when it says nothing), and token
    events only when its `tokens` is not False."""
    if event == "token" and not getattr(observer, "tokens", True):
        return False
    reads = getattr(observer, "reads", None)
    return reads is None or event in reads


def observers(*fns: Observer | None) -> Observer | None:
    """Several observers as one (None ones left out): e.g. `Session(observer=observers(view, Tracing()))`.
    None when there is none, the observer itself when there is one."""
    live = tuple(f for f in fns if f is not None)
    if not live:
        return None
    return live[0] if len(live) == 1 else _FanOut(live)


class _Switched:
    """The process-wide telemetry observers, switched on by `enable_*` or by the environment."""

    tracing: Tracing | None = None
    metrics: Metrics | None = None


def enable_tracing(provider: Any = None, *, content: bool | None = None) -> Tracing:
    """Trace every run in this process. `provider` is an OpenTelemetry TracerProvider (default: the global
    one if the application set one, else one that exports to OTLP as the OTEL_* variables say). `content`
    None follows OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT."""
    from .otel import Tracing

    _Switched.tracing = Tracing(provider, content=content) if provider is not None else Tracing.from_env(content)
    return _Switched.tracing


def enable_metrics(registry: Any = None) -> Metrics:
    """Count every run in this process, in `registry` (default: prometheus_client's default registry)."""
    from .metrics import Metrics

    _Switched.metrics = Metrics(registry)
    return _Switched.metrics


def disable() -> None:
    """Switch process-wide telemetry off again (the environment may switch it on at the next run)."""
    _Switched.tracing = _Switched.metrics = None


def attach(observer: Observer | None) -> Observer | None:
    """The observer a run gets: the session's own, plus tracing and metrics where they are on. Off, this is
    `observer` itself, so a run pays nothing for telemetry it does not use."""
    if _Switched.tracing is None and _tracing_wanted():
        enable_tracing()
    if _Switched.metrics is None and _flag("REFLEXA_METRICS"):
        _require("prometheus_client", "REFLEXA_METRICS=1", "metrics")
        enable_metrics()
        if gateway := os.environ.get("REFLEXA_PUSHGATEWAY", "").strip():
            _push_at_exit(gateway, os.environ.get("REFLEXA_PUSH_JOB", "").strip() or "reflexa")
    if _Switched.tracing is None and _Switched.metrics is None:
        return observer
    return observers(observer, _Switched.tracing, _Switched.metrics)


_PUSHING: set[str] = set()


def _push_at_exit(gateway: str, job: str) -> None:
    """Push the metrics to `gateway` when the process exits (once per gateway). Each process pushes under
    its own instance label, so the workers of one batch do not overwrite each other's numbers."""
    if gateway in _PUSHING:
        return
    _PUSHING.add(gateway)
    import atexit
    import socket
    import sys

    from ..errors import ReflexaError
    from .metrics import push

    def send() -> None:
        try:
            push(gateway, job, grouping_key={"instance": f"{socket.gethostname()}:{os.getpid()}"})
        except ReflexaError as exc:  # the run is over and stored: say so, no traceback at exit
            print(f"reflexa: {exc.explained()}", file=sys.stderr)

    atexit.register(send)


def _flag(name: str) -> bool:
    value = os.environ.get(name, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(f"{name} must be 1 or 0, not {value!r}")


def _tracing_wanted() -> bool:
    env = os.environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":  # OpenTelemetry's own off switch
        return False
    if env.get("REFLEXA_OTEL", "").strip():
        on = _flag("REFLEXA_OTEL")
        if on:
            _require("opentelemetry.sdk", "REFLEXA_OTEL=1", "otel")
        return on
    # An OTLP endpoint alone switches tracing on only where the extra is installed: the variable may be
    # meant for another program in the same environment.
    endpoint = env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    return bool(endpoint) and _installed("opentelemetry.sdk")


@functools.cache
def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # the parent package is missing
        return False


def _require(module: str, setting: str, extra: str) -> None:
    if not _installed(module):
        raise ConfigError(f"{setting} needs the `{extra}` extra", hint=f"pip install 'reflexa[{extra}]'")


def __getattr__(name: str) -> Any:
    # Tracing and Metrics import OpenTelemetry and prometheus_client: only when asked for.
    if name == "Tracing":
        from .otel import Tracing

        return Tracing
    if name == "Metrics":
        from .metrics import Metrics

        return Metrics
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
