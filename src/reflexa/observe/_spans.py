"""Two ways to write reflexa's spans: through a Tracer, or straight to a span processor reflexa owns.

`TracerWriter` goes through any TracerProvider (an application's, with its sampler and processors): the
general way. `DirectWriter` hands finished spans to a SpanProcessor (a BatchSpanProcessor with the OTLP
exporter, say) that reflexa set up itself. Why a second way: a step is stored before it is traced, so all
of a step span (name, attributes, start, end) is known at once, yet a live SDK span pays for the
machinery of a span still running (sampler, locks, attribute checks, a copy at the end): about 10 µs each
on an idle machine, six times what a finished span handed to the processor costs. The SDK's docs say
finished spans (ReadableSpan) are normally made by its Tracer; reflexa makes them only for a pipeline it
owns, and its tests run both writers through the same assertions.
"""

from __future__ import annotations

from random import getrandbits
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from .._version import __version__

EVENT_LIMIT = 128
"""Events kept on one run span (the SDK's default limit): a long run's later decisions are dropped."""
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_UNSET = Status(StatusCode.UNSET)


class RunSpan:
    """A run's span while the run is open: what its steps' spans need to name it as their parent."""

    __slots__ = ("span", "context", "span_context", "parent", "name", "attributes", "events", "start")

    def __init__(self, span_context: SpanContext, name: str, attributes: dict[str, Any], start: int) -> None:
        self.span_context = span_context
        self.name = name
        self.attributes = attributes
        self.start = start
        self.span: Any = None  # the live span (TracerWriter)
        self.context: otel_context.Context | None = None  # a context holding it (TracerWriter)
        self.parent: SpanContext | None = None  # (DirectWriter)
        self.events: list[tuple[str, dict[str, Any], int]] = []  # (DirectWriter) made Events at close


def _status(error: str | None) -> Status:
    return _UNSET if error is None else Status(StatusCode.ERROR, error)


class TracerWriter:
    """Spans through a Tracer: any provider, its sampler and its processors."""

    def __init__(self, provider: Any) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("reflexa", __version__)

    def open(self, name: str, parent: RunSpan | None, attributes: dict[str, Any], start: int) -> RunSpan:
        context = parent.context if parent is not None else None  # None: the caller's current span, if any
        span = self.tracer.start_span(name, context=context, kind=SpanKind.INTERNAL, attributes=attributes,
                                      start_time=start)
        run = RunSpan(span.get_span_context(), name, attributes, start)
        run.span, run.context = span, trace.set_span_in_context(span, context)
        return run

    def child(self, run: RunSpan, name: str, kind: SpanKind, attributes: dict[str, Any], start: int, end: int,
              error: str | None = None) -> None:
        span = self.tracer.start_span(name, context=run.context, kind=kind, attributes=attributes, start_time=start)
        if error is not None:
            span.set_status(_status(error))
        span.end(end)

    def event(self, run: RunSpan, name: str, attributes: dict[str, Any], timestamp: int) -> None:
        run.span.add_event(name, attributes, timestamp=timestamp)

    def close(self, run: RunSpan, attributes: dict[str, Any], error: str | None, end: int) -> None:
        run.span.set_attributes(attributes)
        if error is not None:
            run.span.set_status(_status(error))
        run.span.end(end)

    def flush(self, timeout_millis: int) -> bool:
        force_flush = getattr(self.provider, "force_flush", None)
        return bool(force_flush(timeout_millis)) if force_flush else True

    def shutdown(self) -> None:
        """Nothing: the provider belongs to whoever made it."""


class DirectWriter:
    """Finished spans straight to a span processor reflexa owns (see the module docstring for why)."""

    def __init__(self, processor: SpanProcessor, resource: Resource | None = None) -> None:
        self.processor = processor
        self.resource = resource if resource is not None else Resource.create({})
        self.scope = InstrumentationScope("reflexa", __version__)
        self.ids = RandomIdGenerator()

    def open(self, name: str, parent: RunSpan | None, attributes: dict[str, Any], start: int) -> RunSpan:
        above = parent.span_context if parent is not None else trace.get_current_span().get_span_context()
        trace_id = above.trace_id if above.is_valid else self.ids.generate_trace_id()
        run = RunSpan(SpanContext(trace_id, self.ids.generate_span_id(), False, _SAMPLED), name, attributes, start)
        run.parent = above if above.is_valid else None
        return run

    def child(self, run: RunSpan, name: str, kind: SpanKind, attributes: dict[str, Any], start: int, end: int,
              error: str | None = None) -> None:
        # One frame less per span than the id generator and _status(): this runs three times an iteration.
        context = SpanContext(run.span_context.trace_id, getrandbits(64) or 1, False, _SAMPLED)  # 0 is invalid
        status = _UNSET if error is None else Status(StatusCode.ERROR, error)
        self.processor.on_end(ReadableSpan(name, context, run.span_context, self.resource, attributes,
                                           kind=kind, status=status, start_time=start, end_time=end,
                                           instrumentation_scope=self.scope))

    def event(self, run: RunSpan, name: str, attributes: dict[str, Any], timestamp: int) -> None:
        if len(run.events) < EVENT_LIMIT:
            run.events.append((name, attributes, timestamp))  # an Event only at close: off the hot path

    def close(self, run: RunSpan, attributes: dict[str, Any], error: str | None, end: int) -> None:
        self.processor.on_end(ReadableSpan(run.name, run.span_context, run.parent, self.resource,
                                           {**run.attributes, **attributes},
                                           tuple(Event(*event) for event in run.events),
                                           kind=SpanKind.INTERNAL, status=_status(error), start_time=run.start,
                                           end_time=end, instrumentation_scope=self.scope))

    def flush(self, timeout_millis: int) -> bool:
        return bool(self.processor.force_flush(timeout_millis))

    def shutdown(self) -> None:
        self.processor.shutdown()
