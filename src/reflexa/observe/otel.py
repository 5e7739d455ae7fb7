"""OpenTelemetry spans for runs, named and attributed after the GenAI semantic conventions.

    invoke_agent refine          a run: reflexa.loop, reflexa.stop_reason, reflexa.verdict, token totals
    ├── chat qwen                a model call: gen_ai.request.model, gen_ai.usage.*, reflexa.role
    ├── reflexa.check            refine's step: the checks of one attempt, reflexa.iteration, reflexa.verdict,
    │                            reflexa.gate.decision (an attempt's own time is its chat span's)
    ├── execute_tool query       a react tool call: gen_ai.tool.name, error.type when it failed
    ├── retrieval                a research search (reflexa.queries, reflexa.check: research's other steps)
    ├── reflexa.trial            a trials step
    └── invoke_agent refine      a run started inside this one (trials), under its span

The engine's decisions are events on the run's span (`reflexa.decision`: reflexa.classifier.decision,
reflexa.engine.decision, reflexa.lesson.id, reflexa.experience.hit), and so are flags.

Spans are made from the stored steps with the steps' own start and end times: nothing is timed for
tracing in the loop. Prompt and completion content (gen_ai.input.messages, gen_ai.output.messages, tool
arguments and results, candidates, lessons) is left off unless content capture is on
(OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true, or `content=True`).

The names follow the GenAI conventions as of semantic-conventions 1.37 (gen_ai.provider.name, not the
older gen_ai.system). They are still marked "development" upstream and may change.
"""

from __future__ import annotations

import atexit
import contextvars
import hashlib
import json
import logging
import os
import re
import sys
import time
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import SpanKind

from ..errors import ConfigError
from ..runtime import RunStarted
from ..types import Lesson, Result, Step, StopReason
from ._spans import DirectWriter, RunSpan, TracerWriter

log = logging.getLogger("reflexa.observe")

CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The GenAI instrumentations' standard switch for recording message content."""
_CONTENT_ON = frozenset({"true", "1", "span_only", "span_and_event"})

# GenAI semantic-convention attribute names.
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
AGENT_NAME = "gen_ai.agent.name"
REQUEST_MODEL = "gen_ai.request.model"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
FINISH_REASONS = "gen_ai.response.finish_reasons"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
TOOL_NAME = "gen_ai.tool.name"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_RESULT = "gen_ai.tool.call.result"
QUERY_TEXT = "gen_ai.retrieval.query.text"
ERROR_TYPE = "error.type"

IN_PROCESS = frozenset({"local", "scripted"})
"""Providers whose model runs in this process: their chat spans are INTERNAL rather than CLIENT."""


def capture_content() -> bool:
    """Whether OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT asks for content on spans."""
    return os.environ.get(CONTENT_ENV, "").strip().lower() in _CONTENT_ON


def lesson_id(lesson: Lesson) -> str:
    """A lesson's id: a hash of its text, so the same lesson (e.g. reused from the experience library)
    has the same id in every run."""
    text = "\n".join((lesson.failure_step, lesson.observed_mismatch, lesson.root_cause, lesson.correction))
    # BLAKE2 is Python's own code; SHA-256 goes through OpenSSL, whose per-hash setup measured about 4 µs
    # per lesson inside the loop (cold), against 2 for this.
    return hashlib.blake2b(text.encode(), digest_size=6).hexdigest()


_ENV_WRITER: TracerWriter | DirectWriter | None = None


def writer_from_env() -> TracerWriter | DirectWriter:
    """Where `REFLEXA_OTEL=1` sends spans. The application's global TracerProvider when it set one
    (reflexa's spans then join its traces); else a pipeline made once per process from the standard OTEL_*
    variables: OTLP over HTTP (OTEL_EXPORTER_OTLP_ENDPOINT, default http://localhost:4318), the console
    (OTEL_TRACES_EXPORTER=console, on stderr) or nowhere (none), batched, flushed at exit. With
    OTEL_TRACES_SAMPLER set, that pipeline sits behind an SDK TracerProvider so the sampler applies."""
    global _ENV_WRITER
    current = trace.get_tracer_provider()
    if not isinstance(current, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return TracerWriter(current)
    if _ENV_WRITER is not None:
        return _ENV_WRITER
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: "reflexa"}))
    exporter_name = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower()
    exporter: SpanExporter | None
    if exporter_name == "none":
        exporter = None
    elif exporter_name == "console":
        exporter = ConsoleSpanExporter(out=sys.stderr)  # stdout is the CLI's (and --json's)
    elif exporter_name == "otlp":
        exporter = _otlp_exporter()
    else:
        raise ConfigError(f"OTEL_TRACES_EXPORTER={exporter_name!r} is not one reflexa sets up",
                          hint="use otlp, console or none, or configure a TracerProvider yourself")
    processor = BatchSpanProcessor(exporter) if exporter is not None else SpanProcessor()
    if os.environ.get("OTEL_TRACES_SAMPLER"):
        provider = TracerProvider(resource=resource)  # reads the sampler from the environment
        provider.add_span_processor(processor)  # and shuts it down at exit
        _ENV_WRITER = TracerWriter(provider)
    else:
        atexit.register(processor.shutdown)  # exports what is still queued
        _ENV_WRITER = DirectWriter(processor, resource)
    return _ENV_WRITER


def _otlp_exporter() -> Any:
    protocol = (os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf").strip()
    if protocol != "http/protobuf":
        raise ConfigError(f"reflexa exports OTLP over http/protobuf, not {protocol}",
                          hint="unset OTEL_EXPORTER_OTLP_PROTOCOL, or configure a TracerProvider yourself")
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        raise ConfigError("exporting spans over OTLP needs the `otel` extra",
                          hint="pip install 'reflexa[otel]'") from None
    return OTLPSpanExporter()  # reads OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT and _HEADERS itself


@dataclass(slots=True)
class _OpenRun:
    span: RunSpan
    provider: str
    model: str
    chat_name: str
    chat_kind: SpanKind
    chat_attributes: dict[str, Any]
    """What every chat span of the run says alike: the operation, the provider, the model."""
    attempt: tuple[int, bool, str] | None = None
    """refine's latest attempt, for the span of its checks."""


def _provider_model(name: str) -> tuple[str, str]:
    """A model's name (`local:qwen`, `openai:gpt-4o`) as the provider and the model."""
    provider, colon, model = name.partition(":")
    return provider, model if colon else provider


def _chat(name: str) -> tuple[str, SpanKind, dict[str, Any]]:
    """A chat span's name, kind and the attributes every call to the model `name` shares."""
    provider, model = _provider_model(name)
    kind = SpanKind.INTERNAL if provider in IN_PROCESS else SpanKind.CLIENT
    return f"chat {model}", kind, {OPERATION: "chat", PROVIDER: provider, REQUEST_MODEL: model}


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


def _text_json(role: str, text: str, finish_reason: str | None = None) -> str:
    message: dict[str, Any] = {"role": role, "parts": [{"type": "text", "content": text}]}
    if finish_reason is not None:
        message["finish_reason"] = finish_reason
    return json.dumps([message], ensure_ascii=False)


def _messages_json(step_input: Any) -> str:
    messages = step_input.get("messages", []) if isinstance(step_input, dict) else []
    return json.dumps([{"role": m.get("role", "user"), "parts": [{"type": "text", "content": m.get("content", "")}]}
                       for m in messages], ensure_ascii=False)


def _tool(action: str) -> tuple[str, str]:
    """A react action's tool name and arguments, from its text form `tool({...})` or `page N of tool`."""
    name, paren, rest = action.partition("(")
    if paren and name:
        return name, rest[:-1] if rest.endswith(")") else rest
    if action.startswith("page "):
        return action.rpartition(" of ")[2], ""
    return "invalid", ""


_INTERNAL_ERROR = re.compile(r"internal error: (\w+):")
_OTHER: Any = object()
"""The handler of a step kind this module does not know: a plain span (`Tracing._other`)."""


class Tracing:
    """An observer that turns runs into OpenTelemetry spans (see the module docstring for the tree).

    A run started while another is open in the same thread is its child; the first run in a thread is a
    child of the caller's current span, if any. Telemetry never breaks a run: an error in here is logged."""

    tokens = False
    """No ("token", text) events: a run traced or counted and not watched does not stream."""
    reads = frozenset({"run", "step", "finish"})
    """The events read; an `observers(...)` fan-out passes it no others."""

    def __init__(self, provider: Any = None, *, processor: Any = None, resource: Any = None,
                 content: bool | None = None) -> None:
        """Spans go through `provider`'s tracer (a TracerProvider; default: the global one), or with
        `processor` (an SDK SpanProcessor, e.g. BatchSpanProcessor(OTLPSpanExporter())) straight to it,
        the cheaper way (see _spans.py), described by `resource`. `content` None follows
        OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT."""
        if processor is not None:
            self.writer: TracerWriter | DirectWriter = DirectWriter(processor, resource)
        else:
            self.writer = TracerWriter(provider if provider is not None else trace.get_tracer_provider())
        self.content = capture_content() if content is None else content
        self._runs: dict[str, _OpenRun] = {}
        self._open: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("reflexa_open_runs", default=())
        """The runs open in this context, innermost last: a run's parent span. A context, not a thread: the
        sessions `aio.run` drives share a thread, each in a context of its own."""
        self._handlers = {
            "model_call": self._model_call, "attempt": self._attempt, "verdict": self._checked,
            "engine": self._decided, "react": self._acted, "search": self._searched, "audit": self._audited,
            "trial": self._trial, "queries": self._queries, "flag": self._event, "no_progress": self._event,
            "repair": self._event,
            "checkpoint": None, "stop": None,  # plumbing, and the end the run span already says
        }

    @classmethod
    def from_env(cls, content: bool | None = None) -> Tracing:
        """Tracing to where the environment says (`writer_from_env()`)."""
        tracing = cls(content=content)
        tracing.writer = writer_from_env()
        return tracing

    def flush(self, timeout_millis: int = 30_000) -> bool:
        """Export the spans still queued (a batch job's last act); True when all went out."""
        return self.writer.flush(timeout_millis)

    def shutdown(self) -> None:
        """Flush and close a span processor this Tracing writes to directly (a provider is left alone)."""
        self.writer.shutdown()

    def __call__(self, event: str, data: Any) -> None:
        try:
            if event == "step":
                self._step(data)
            elif event == "run":
                self._start(data)
            elif event == "finish":
                self._finish(data)
        except Exception:  # noqa: BLE001 - a telemetry fault must never end a run
            log.exception("reflexa tracing failed on a %r event", event)

    # runs

    def _start(self, started: RunStarted) -> None:
        stack = self._open.get()
        parent = self._runs[stack[-1]].span if stack and stack[-1] in self._runs else None
        provider, model = _provider_model(started.model)
        attributes: dict[str, Any] = {
            OPERATION: "invoke_agent", AGENT_NAME: started.loop, PROVIDER: provider, REQUEST_MODEL: model,
            "reflexa.loop": started.loop, "reflexa.run_id": started.run_id, "reflexa.resumed": started.resumed,
        }
        if self.content:
            attributes[INPUT_MESSAGES] = _text_json("user", started.task)
        span = self.writer.open(f"invoke_agent {started.loop}", parent, attributes, _ns(started.started_at))
        self._runs[started.run_id] = _OpenRun(span, provider, model, *_chat(started.model))
        self._open.set((*stack, started.run_id))

    def _finish(self, result: Result) -> None:
        run = self._runs.pop(result.run_id, None)
        if run is None:
            return
        self._open.set(tuple(r for r in self._open.get() if r != result.run_id))
        total = result.total_usage
        counters = result.counters
        attributes: dict[str, Any] = {
            "reflexa.stop_reason": str(result.stop_reason),
            "reflexa.verdict": str(result.verdict.status) if result.verdict else "none",
            "reflexa.iterations": result.iterations, "reflexa.steps": result.steps,
            INPUT_TOKENS: total.input_tokens, OUTPUT_TOKENS: total.output_tokens,
        }
        for name in ("reflector_calls", "experience_hits", "rule_repairs", "gate_signals"):
            if isinstance(counters.get(name), int):
                attributes[f"reflexa.engine.{name}"] = counters[name]
        if self.content and result.output is not None:
            attributes[OUTPUT_MESSAGES] = _text_json("assistant", result.output)
        error = None
        if result.stop_reason is StopReason.ERROR:
            match = _INTERNAL_ERROR.match(result.error or "")
            attributes[ERROR_TYPE] = match.group(1) if match else "_OTHER"
            error = (result.error or "")[:500]
        self.writer.close(run.span, attributes, error, time.time_ns())

    # steps

    def _step(self, step: Step) -> None:
        handler = self._handlers.get(step.kind, _OTHER)
        if handler is None:
            return
        run = self._runs.get(step.run_id)
        if run is None:  # a run this observer did not see start
            return
        (self._other if handler is _OTHER else handler)(run, step, step.payload())

    def _emit(self, run: _OpenRun, name: str, step: Step, attributes: dict[str, Any],
              kind: SpanKind = SpanKind.INTERNAL, error: str | None = None) -> None:
        self.writer.child(run.span, name, kind, attributes, int(step.started_at * 1e9), int(step.ended_at * 1e9),
                          error)

    def _model_call(self, run: _OpenRun, step: Step, data: Any) -> None:
        usage = step.usage
        # A call served by another model than the run's (a reflector on its own model) names that model.
        name, kind, chat_attributes = _chat(data.model) if data.model else (run.chat_name, run.chat_kind,
                                                                            run.chat_attributes)
        attributes: dict[str, Any] = {
            **chat_attributes, INPUT_TOKENS: usage.input_tokens, OUTPUT_TOKENS: usage.output_tokens,
            FINISH_REASONS: (data.finish_reason,), "reflexa.role": step.role or "",
        }
        error = None
        if data.failed:  # the call itself failed: the span's error, the backend's words
            attributes[ERROR_TYPE] = data.error.partition(":")[0] or "_OTHER"
            error = data.error
        elif data.error:  # the call worked; its reply did not fit the schema (a signal, not a span error)
            attributes["reflexa.reply.invalid"] = True
        if self.content:
            attributes[INPUT_MESSAGES] = _messages_json(step.input)
            attributes[OUTPUT_MESSAGES] = _text_json("assistant", data.text, data.finish_reason)
        self._emit(run, name, step, attributes, kind, error)

    def _attempt(self, run: _OpenRun, step: Step, data: Any) -> None:
        # No span of its own: an attempt's time is its model call's (the chat span). What it adds, the
        # iteration and the candidate, goes on the span of the checks that judge it.
        run.attempt = (data.iteration, data.revising, data.candidate)

    def _checked(self, run: _OpenRun, step: Step, data: Any) -> None:
        verdict = data.verdict
        sources, codes, failing = [], [], False
        for signal in verdict.signals:  # one pass, no comprehensions: this runs once per attempt
            sources.append(signal.source)
            if not signal.ok:
                failing = True
                if signal.code:
                    codes.append(str(signal.code))
        attributes: dict[str, Any] = {
            "reflexa.verdict": str(verdict.status), "reflexa.verdict.score": verdict.score,
            "reflexa.gate.decision": "failing" if failing else "clean", "reflexa.check.sources": tuple(sources),
        }
        if failing:
            attributes["reflexa.signal.codes"] = tuple(codes)
        if run.attempt is not None:
            iteration, revising, candidate = run.attempt
            attributes["reflexa.iteration"], attributes["reflexa.revising"] = iteration, revising
            if self.content:
                attributes["reflexa.candidate"] = candidate
            run.attempt = None
        if self.content and verdict.feedback:
            attributes["reflexa.feedback"] = verdict.feedback
        self._emit(run, "reflexa.check", step, attributes)

    def _audited(self, run: _OpenRun, step: Step, data: Any) -> None:
        signal = data.signal
        attributes: dict[str, Any] = {"reflexa.check.sources": (signal.source,),
                                      "reflexa.gate.decision": "clean" if signal.ok else "failing"}
        if signal.code:
            attributes["reflexa.signal.codes"] = (str(signal.code),)
        self._emit(run, "reflexa.check", step, attributes)

    def _decided(self, run: _OpenRun, step: Step, data: Any) -> None:
        if data.decision == "repair":
            classifier = "rule"
        elif data.stop is StopReason.UNRECOVERABLE and data.lesson is None:
            classifier = "unrecoverable"
        else:
            classifier = "reflect"
        signal = data.signal
        # Few attributes, on purpose: each costs the SDK a validation on the hot path. The source of the
        # failing signal is on the check's span, and the gate said "failing", or no decision was made.
        attributes: dict[str, Any] = {
            "reflexa.classifier.decision": classifier, "reflexa.engine.decision": data.decision,
            "reflexa.signal.code": str(signal.code) if signal.code else "",
        }
        if data.reused:
            attributes["reflexa.experience.hit"] = True
        if data.lesson is not None:
            attributes["reflexa.lesson.id"] = lesson_id(data.lesson)
        if data.repair is not None:
            attributes["reflexa.repair.kind"] = data.repair.kind
        if data.stop is not None:
            attributes["reflexa.stop_reason"] = str(data.stop)
        if self.content:  # the reason may quote the failure (a tool's error text): content, like the message
            attributes["reflexa.engine.reason"] = data.reason[:200]
            attributes["reflexa.signal.message"] = signal.message
            attributes["reflexa.action"] = data.action
            if data.lesson is not None:
                attributes["reflexa.lesson"] = data.lesson.render()
        # An event on the run's span, not a span: a decision is an instant (the reflector's call, when there
        # is one, has its own span), and an event costs a fraction of a span on the loop's hot path.
        self.writer.event(run.span, "reflexa.decision", attributes, _ns(step.ended_at))

    def _acted(self, run: _OpenRun, step: Step, data: Any) -> None:
        name, arguments = _tool(data.action)
        attributes: dict[str, Any] = {
            OPERATION: "execute_tool", TOOL_NAME: name, TOOL_TYPE: "function",
            "reflexa.react.step": data.step, "reflexa.tool.ok": data.ok,
        }
        if data.is_final:
            attributes["reflexa.final"] = True
        if data.replayed:
            attributes["reflexa.replayed"] = True
        error = None
        if not data.ok:
            attributes[ERROR_TYPE] = str(data.code) if data.code else "_OTHER"
            error = attributes[ERROR_TYPE]
        if self.content:
            attributes[TOOL_ARGUMENTS] = arguments
            attributes[TOOL_RESULT] = data.observation
            attributes["reflexa.thought"] = data.thought
        self._emit(run, f"execute_tool {name}", step, attributes, error=error)

    def _searched(self, run: _OpenRun, step: Step, data: Any) -> None:
        attributes: dict[str, Any] = {
            OPERATION: "retrieval", "reflexa.search.status": data.status,
            "reflexa.search.cached": data.cached, "reflexa.search.hits": len(data.evidence),
        }
        error = None
        if data.status == "failed":
            attributes[ERROR_TYPE] = error = "search_failed"
        if self.content:
            attributes[QUERY_TEXT] = data.query
        self._emit(run, "retrieval", step, attributes, error=error)

    def _trial(self, run: _OpenRun, step: Step, data: Any) -> None:
        self._emit(run, "reflexa.trial", step, {
            "reflexa.trial": data.trial, "reflexa.trial.run_id": data.run_id,
            "reflexa.stop_reason": str(data.stop_reason), "reflexa.lessons": len(data.lessons),
            # Not gen_ai.usage.*: the trial's own chat spans carry those, and a sum over spans would count twice.
            "reflexa.trial.input_tokens": step.usage.input_tokens,
            "reflexa.trial.output_tokens": step.usage.output_tokens,
        })

    def _queries(self, run: _OpenRun, step: Step, data: Any) -> None:
        self._emit(run, "reflexa.queries", step, {
            "reflexa.queries.proposed": len(data.proposed),
            "reflexa.queries.run": len(data.run), "reflexa.queries.rejected": len(data.rejected),
        })

    def _event(self, run: _OpenRun, step: Step, data: Any) -> None:
        # A flag, a stall or a repair choice: an event on the run's span, not a span of its own.
        self.writer.event(run.span, f"reflexa.{step.kind}", {"reflexa.step.id": step.step_id,
                                                             "reflexa.reason": data.why}, _ns(step.ended_at))

    def _other(self, run: _OpenRun, step: Step, data: Any) -> None:
        # A step kind added after this module (another loop's): a plain span, so the tree has no hole.
        self._emit(run, f"reflexa.{step.kind}", step, {"reflexa.step.id": step.step_id,
                                                        "reflexa.role": step.role or ""})
