"""OpenTelemetry spans and Prometheus metrics from scripted runs: the span tree and its attribute names,
content capture, a real OTLP/HTTP receiver on 127.0.0.1, the metric series, and a push to a gateway."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("prometheus_client")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from reflexa import MemoryStore, ModelUnavailable, ReflexaError, ScriptedModel, Session, Signal, StopReason, refine
from reflexa.loops import react
from reflexa.observe import Metrics, Tracing, attach, disable, observers, otel
from reflexa.observe.metrics import push
from reflexa.tools import sql_tools
from reflexa.types import ErrorCode

REPLY_BAD = "Plan: subtract\n```\ndef add(a, b):\n    return a - b\n```"
REPLY_GOOD = "Plan: add\n```\ndef add(a, b):\n    return a + b\n```"
LESSON = {
    "failure_step": "attempt 1",
    "observed_mismatch": "add(1, 2) returned -1",
    "root_cause": "subtraction instead of addition",
    "correction": "return a + b",
}


class FailsOnce:
    """Fails the first candidate with evidence a lesson can name, passes the next."""

    name, subjective = "unit", False

    def __init__(self):
        self.calls = 0

    def run(self, candidate, context):
        self.calls += 1
        if "a - b" in candidate:
            return Signal("unit", False, ErrorCode.TEST_FAILED, "assert add(1, 2) == 3",
                          evidence="AssertionError: add(1, 2) returned -1", score=0.0)
        return Signal("unit", True, score=1.0)


@pytest.fixture(autouse=True)
def _no_switched_telemetry(monkeypatch):
    for name in ("REFLEXA_OTEL", "REFLEXA_METRICS", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SDK_DISABLED",
                 "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER", otel.CONTENT_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(otel, "_ENV_WRITER", None)
    disable()
    yield
    disable()


WRITERS = ["tracer", "direct"]
"""Spans through a TracerProvider's tracer, or straight to a span processor: the same spans either way."""


def memory_tracing(writer="tracer", **kwargs):
    exporter = InMemorySpanExporter()
    if writer == "direct":
        return Tracing(processor=SimpleSpanProcessor(exporter), **kwargs), exporter
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Tracing(provider, **kwargs), exporter


def refine_run(observer, store=None):
    model = ScriptedModel([REPLY_BAD, LESSON, REPLY_GOOD])
    return refine("Write add(a, b)", [FailsOnce()], session=Session(model=model, store=store or MemoryStore(),
                                                                  observer=observer))


@pytest.mark.parametrize("writer", WRITERS)
def test_refine_span_tree_follows_the_genai_conventions(writer):
    tracing, exporter = memory_tracing(writer)
    store = MemoryStore()
    result = refine_run(tracing, store)
    assert result.passed
    spans = exporter.get_finished_spans()
    (run,) = [s for s in spans if s.parent is None]
    assert run.name == "invoke_agent refine"
    assert [s.name for s in spans if s is not run] == [
        "chat scripted", "reflexa.check", "chat scripted", "chat scripted", "reflexa.check",
    ]
    assert all(s.parent.span_id == run.context.span_id and s.context.trace_id == run.context.trace_id
               for s in spans if s is not run)
    a = run.attributes
    assert a["gen_ai.operation.name"] == "invoke_agent" and a["gen_ai.agent.name"] == "refine"
    assert a["reflexa.loop"] == "refine" and a["reflexa.run_id"] == result.run_id
    assert a["reflexa.stop_reason"] == "PASSED" and a["reflexa.verdict"] == "PASS"
    assert a["gen_ai.usage.input_tokens"] == result.total_usage.input_tokens > 0
    assert a["reflexa.engine.reflector_calls"] == 1

    chats = [s for s in spans if s.name == "chat scripted"]
    assert [c.attributes["reflexa.role"] for c in chats] == ["generator", "reflector", "generator"]
    stored = [s for s in store.steps(result.run_id) if s.kind == "model_call"]
    for chat, step in zip(chats, stored, strict=True):
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.request.model"] == "scripted"
        assert chat.attributes["gen_ai.provider.name"] == "scripted"
        assert chat.attributes["gen_ai.usage.input_tokens"] == step.usage.input_tokens
        assert chat.attributes["gen_ai.usage.output_tokens"] == step.usage.output_tokens
        assert chat.attributes["gen_ai.response.finish_reasons"] == ("stop",)
        # The span carries the stored step's own times: nothing was timed twice.
        assert chat.start_time == int(step.started_at * 1e9) and chat.end_time == int(step.ended_at * 1e9)

    first_check, second_check = [s for s in spans if s.name == "reflexa.check"]
    assert first_check.attributes["reflexa.verdict"] != "PASS"
    assert first_check.attributes["reflexa.gate.decision"] == "failing"
    assert first_check.attributes["reflexa.signal.codes"] == ("TEST_FAILED",)
    assert first_check.attributes["reflexa.check.sources"] == ("unit",)
    assert first_check.attributes["reflexa.iteration"] == 1 and first_check.attributes["reflexa.revising"] is False
    assert second_check.attributes["reflexa.gate.decision"] == "clean"
    assert second_check.attributes["reflexa.verdict"] == "PASS" and second_check.attributes["reflexa.iteration"] == 2
    checked = [s for s in store.steps(result.run_id) if s.kind == "verdict"]
    assert first_check.start_time == int(checked[0].started_at * 1e9) < first_check.end_time
    (decision,) = [e for e in run.events if e.name == "reflexa.decision"]
    assert decision.attributes["reflexa.classifier.decision"] == "reflect"
    assert decision.attributes["reflexa.engine.decision"] == "lesson"
    assert decision.attributes["reflexa.signal.code"] == "TEST_FAILED"
    assert len(decision.attributes["reflexa.lesson.id"]) == 12
    assert first_check.end_time <= decision.timestamp <= second_check.start_time

    # Content is off by default: no prompt, completion, candidate or lesson text on any span or event.
    content = {"gen_ai.input.messages", "gen_ai.output.messages", "reflexa.candidate", "reflexa.lesson"}
    attribute_sets = [s.attributes for s in spans] + [e.attributes for e in run.events]
    assert not any(content & set(a) for a in attribute_sets)
    assert not any("a + b" in str(v) for a in attribute_sets for v in a.values())


@pytest.mark.parametrize("writer", WRITERS)
def test_a_failed_model_call_is_a_failed_chat_span(writer):
    tracing, exporter = memory_tracing(writer)
    model = ScriptedModel([REPLY_BAD, ModelUnavailable("cannot reach the model server")])
    store = MemoryStore()
    result = refine("Write add(a, b)", [FailsOnce()], session=Session(model=model, store=store, observer=tracing))
    assert result.stop_reason is StopReason.ERROR
    chats = [s for s in exporter.get_finished_spans() if s.name == "chat scripted"]
    assert [c.status.status_code for c in chats] == [StatusCode.UNSET, StatusCode.ERROR]
    assert chats[1].attributes["error.type"] == "ModelUnavailable"
    assert "cannot reach the model server" in chats[1].status.description
    (failed,) = [s for s in store.steps(result.run_id) if s.kind == "model_call" and s.payload().error]
    assert failed.role == "reflector" and chats[1].end_time == int(failed.ended_at * 1e9)


@pytest.mark.parametrize("writer", WRITERS)
def test_content_is_captured_with_the_standard_setting(monkeypatch, writer):
    monkeypatch.setenv(otel.CONTENT_ENV, "true")
    tracing, exporter = memory_tracing(writer)
    refine_run(tracing)
    spans = exporter.get_finished_spans()
    chat = next(s for s in spans if s.name == "chat scripted")
    sent = json.loads(chat.attributes["gen_ai.input.messages"])
    assert sent[-1]["role"] == "user" and "Write add(a, b)" in sent[-1]["parts"][0]["content"]
    (answer,) = json.loads(chat.attributes["gen_ai.output.messages"])
    assert answer["role"] == "assistant" and "a - b" in answer["parts"][0]["content"]
    assert answer["finish_reason"] == "stop"
    run = next(s for s in spans if s.parent is None)
    decision = next(e for e in run.events if e.name == "reflexa.decision")
    assert "return a + b" in decision.attributes["reflexa.lesson"]
    assert "Write add(a, b)" in run.attributes["gen_ai.input.messages"]
    assert "a - b" in next(s for s in spans if s.name == "reflexa.check").attributes["reflexa.candidate"]
    # The explicit argument wins over the environment.
    tracing, exporter = memory_tracing(writer, content=False)
    refine_run(tracing)
    assert not any("gen_ai.input.messages" in s.attributes for s in exporter.get_finished_spans())


def act(tool_name, thought, **args):
    return {"action": {"thought": thought, "tool": tool_name, "args": args, "confidence": 0.9}}


@pytest.mark.parametrize("writer", WRITERS)
def test_react_tool_calls_are_execute_tool_spans(shop, writer):
    tracing, exporter = memory_tracing(writer)
    model = ScriptedModel([act("query", "look it up", sql="SELECT nme FROM customers WHERE id = 1"),
                           act("final_answer", "done", answer="done")])
    result = react("Name of customer 1?", sql_tools(shop), validator=lambda answer: None,
                   session=Session(model=model, observer=tracing))
    assert result.passed
    spans = exporter.get_finished_spans()
    tools = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "execute_tool"]
    assert [s.name for s in tools] == ["execute_tool query", "execute_tool query", "execute_tool final_answer"]
    failed, repaired, final = tools
    assert failed.attributes["gen_ai.tool.name"] == "query" and failed.attributes["reflexa.tool.ok"] is False
    assert failed.status.status_code is StatusCode.ERROR and failed.attributes["error.type"]
    assert repaired.status.status_code is StatusCode.UNSET and "error.type" not in repaired.attributes
    assert final.attributes["reflexa.final"] is True
    assert failed.end_time >= failed.start_time
    (decision,) = [e for s in spans for e in s.events if e.name == "reflexa.decision"]
    assert decision.attributes["reflexa.classifier.decision"] == "rule"
    assert decision.attributes["reflexa.repair.kind"] == "args"
    assert "gen_ai.tool.call.arguments" not in failed.attributes  # content off
    assert "reflexa.engine.reason" not in decision.attributes  # it may quote the tool's error text


@pytest.mark.parametrize("writer", WRITERS)
def test_a_run_inside_a_run_is_a_child_span(writer):
    from reflexa.loops import trials

    tracing, exporter = memory_tracing(writer)
    inner = ScriptedModel([REPLY_BAD, REPLY_GOOD])
    outer = ScriptedModel([LESSON])
    result = trials("Write add(a, b)", lambda t: refine(
        "Write add(a, b)", [FailsOnce()], lessons=t.lessons, budget=t.budget, max_attempts=1,
        session=Session(model=inner, observer=tracing)), session=Session(model=outer, observer=tracing))
    assert result.passed
    spans = exporter.get_finished_spans()
    (top,) = [s for s in spans if s.parent is None]
    children = [s for s in spans if s.name == "invoke_agent refine"]
    assert top.name == "invoke_agent trials" and len(children) == 2
    assert all(c.parent.span_id == top.context.span_id for c in children)
    assert len({s.context.trace_id for s in spans}) == 1 and len({s.context.span_id for s in spans}) == len(spans)
    assert [s.attributes["reflexa.stop_reason"] for s in spans if s.name == "reflexa.trial"] == [
        "MAX_ITERATIONS", "PASSED"]
    # Usage summed over the chat spans is the whole run's: a trial span repeats its trial's in its own names.
    chats = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "chat"]
    summed = sum(s.attributes.get("gen_ai.usage.input_tokens", 0) for s in spans if s.name != "invoke_agent trials"
                 and not s.name.startswith("invoke_agent refine"))
    assert summed == sum(c.attributes["gen_ai.usage.input_tokens"] for c in chats) == result.total_usage.input_tokens


@pytest.mark.parametrize("writer", WRITERS)
def test_a_run_joins_the_callers_current_span(writer):
    app = TracerProvider()
    app_spans = InMemorySpanExporter()
    app.add_span_processor(SimpleSpanProcessor(app_spans))
    tracing, exporter = memory_tracing(writer)
    with app.get_tracer("app").start_as_current_span("nightly job") as job:
        refine_run(tracing)
    (run,) = [s for s in exporter.get_finished_spans() if s.name == "invoke_agent refine"]
    assert run.parent.span_id == job.get_span_context().span_id
    assert run.context.trace_id == job.get_span_context().trace_id


def test_a_telemetry_fault_never_breaks_a_run(monkeypatch, caplog):
    tracing, _ = memory_tracing()

    def broken(*args):
        raise RuntimeError("exporter bug")

    monkeypatch.setattr(tracing, "_attempt", broken)
    tracing._handlers["attempt"] = broken
    assert refine_run(tracing).passed
    assert "reflexa tracing failed" in caplog.text


def test_observers_fan_out():
    seen = []
    assert observers(None, None) is None
    one = lambda event, data: seen.append(("one", event))
    assert observers(None, one) is one
    both = observers(one, lambda event, data: seen.append(("two", event)))
    both("status", "x")
    assert seen == [("one", "status"), ("two", "status")]

    class Quiet:  # reads every event but tokens
        tokens = False

        def __call__(self, event, data):
            seen.append(("quiet", event))

    seen.clear()
    fan = observers(one, Quiet())
    fan("token", "he")
    fan("step", None)
    assert seen == [("one", "token"), ("one", "step"), ("quiet", "step")]


def test_off_attaches_nothing_and_the_switches_turn_it_on(monkeypatch):
    mine = lambda event, data: None
    assert attach(mine) is mine and attach(None) is None  # off: the run gets the session's own observer
    monkeypatch.setenv("REFLEXA_OTEL", "maybe")
    with pytest.raises(ReflexaError, match="REFLEXA_OTEL must be 1 or 0"):
        attach(mine)
    monkeypatch.setenv("REFLEXA_OTEL", "0")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    assert attach(mine) is mine  # REFLEXA_OTEL=0 beats an endpoint meant for someone else
    monkeypatch.setenv("REFLEXA_OTEL", "1")
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    monkeypatch.setenv("REFLEXA_METRICS", "1")
    fan = attach(mine)
    kinds = [type(o).__name__ for o in fan.observers]
    assert fan.observers[0] is mine and kinds[1:] == ["Tracing", "Metrics"]
    assert type(fan.observers[1].writer).__name__ == "DirectWriter"  # reflexa's own pipeline
    disable()
    monkeypatch.setattr(otel, "_ENV_WRITER", None)
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")  # a sampler needs the SDK's tracer
    assert type(attach(mine).observers[1].writer).__name__ == "TracerWriter"
    disable()
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    monkeypatch.setenv("REFLEXA_METRICS", "0")
    assert attach(mine) is mine


def test_bad_exporter_settings_are_clear_errors(monkeypatch):
    monkeypatch.setenv("REFLEXA_OTEL", "1")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    with pytest.raises(ReflexaError, match="http/protobuf"):
        attach(None)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_PROTOCOL")
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "zipkin")
    with pytest.raises(ReflexaError, match="OTEL_TRACES_EXPORTER"):
        attach(None)


class Recorder(BaseHTTPRequestHandler):
    """A tiny HTTP receiver: records each request's method, path, content type and body; answers 200."""

    def _record(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.requests.append((self.command, self.path, self.headers.get("Content-Type"), body))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_POST = do_PUT = _record

    def log_message(self, *args):
        pass


@pytest.fixture()
def receiver():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_spans_reach_a_real_otlp_http_receiver(monkeypatch, receiver):
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    # Only the standard variable: an endpoint switches tracing on where the extra is installed.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{receiver.server_port}")
    result = refine_run(None)
    tracing = attach(None)
    assert isinstance(tracing, Tracing) and tracing.flush(10_000)
    tracing.shutdown()
    posts = [r for r in receiver.requests if r[0] == "POST"]
    assert posts and all(path == "/v1/traces" and ctype == "application/x-protobuf" for _, path, ctype, _ in posts)
    names, runs, service = [], [], set()
    for *_, body in posts:
        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            service |= {a.value.string_value for a in resource_spans.resource.attributes if a.key == "service.name"}
            for scope_spans in resource_spans.scope_spans:
                assert scope_spans.scope.name == "reflexa"
                for span in scope_spans.spans:
                    names.append(span.name)
                    attributes = {a.key: a.value for a in span.attributes}
                    if span.name == "invoke_agent refine":
                        runs.append(attributes["reflexa.run_id"].string_value)
    assert service == {"reflexa"}
    assert runs == [result.run_id] and names.count("chat scripted") == 3 and names.count("reflexa.check") == 2


def metric_values(registry):
    values = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            values[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return values


def test_metrics_series_after_a_scripted_run():
    registry = CollectorRegistry()
    result = refine_run(Metrics(registry))
    v = metric_values(registry)
    loop = (("loop", "refine"),)
    assert v[("reflexa_runs_total", (("loop", "refine"), ("stop_reason", "PASSED")))] == 1
    assert v[("reflexa_run_duration_seconds_count", loop)] == 1
    assert v[("reflexa_step_duration_seconds_count", (("kind", "attempt"), ("loop", "refine")))] == 2
    assert v[("reflexa_step_duration_seconds_count", (("kind", "verdict"), ("loop", "refine")))] == 2
    assert 0 < v[("reflexa_step_duration_seconds_sum", (("kind", "verdict"), ("loop", "refine")))] < 60
    assert not any(k[0].startswith("reflexa_step_duration") and ("kind", "checkpoint") in k[1] for k in v)
    generator = (("loop", "refine"), ("model", "scripted"), ("role", "generator"))
    assert v[("reflexa_model_call_duration_seconds_count", (*generator[:2], ("role", "reflector")))] == 1
    assert 0 < v[("reflexa_model_call_duration_seconds_sum", generator)] < 60
    assert v[("reflexa_model_call_duration_seconds_count", generator)] == 2
    for kind, spent in (("input", result.usage["generator"].input_tokens),
                        ("output", result.usage["generator"].output_tokens)):
        assert v[("reflexa_model_tokens_total", (*generator, ("type", kind)))] == spent > 0
    assert v[("reflexa_reflections_total", loop)] == 1
    assert v[("reflexa_gate_decisions_total", (("decision", "clean"), ("loop", "refine")))] == 1
    assert v[("reflexa_gate_decisions_total", (("decision", "failing"), ("loop", "refine")))] == 1
    assert v[("reflexa_classifier_decisions_total", (("decision", "reflect"), ("loop", "refine")))] == 1
    assert v[("reflexa_experience_lookups_total", (("loop", "refine"), ("result", "hit")))] == 0
    refine_run(Metrics(registry))  # a second observer on the same registry adds to the same series
    assert metric_values(registry)[("reflexa_runs_total", (("loop", "refine"), ("stop_reason", "PASSED")))] == 2


def test_histogram_buckets_are_cumulative_and_bounds_inclusive():
    from reflexa.runtime import RunStarted
    from reflexa.types import Step

    registry = CollectorRegistry()
    metrics = Metrics(registry)
    metrics("run", RunStarted("r1", "refine", "t", "scripted", 0.0))
    for seconds in (0.005, 0.007, 400.0):
        metrics("step", Step("r1", 1, "verdict", started_at=0.0, ended_at=seconds))
    metrics("step", Step("r1", 2, "checkpoint", started_at=11.0, ended_at=11.0))  # an instant: not a duration
    v = metric_values(registry)
    labels = lambda le: (("kind", "verdict"), ("le", le), ("loop", "refine"))
    assert v[("reflexa_step_duration_seconds_bucket", labels("0.001"))] == 0
    assert v[("reflexa_step_duration_seconds_bucket", labels("0.005"))] == 1  # a value on a bound is in it
    assert v[("reflexa_step_duration_seconds_bucket", labels("0.01"))] == 2
    assert v[("reflexa_step_duration_seconds_bucket", labels("300.0"))] == 2
    assert v[("reflexa_step_duration_seconds_bucket", labels("+Inf"))] == 3
    assert v[("reflexa_step_duration_seconds_count", (("kind", "verdict"), ("loop", "refine")))] == 3
    assert v[("reflexa_step_duration_seconds_sum", (("kind", "verdict"), ("loop", "refine")))] == pytest.approx(400.012)
    assert not any(("kind", "checkpoint") in k[1] for k in v)


def test_interrupted_runs_add_no_engine_counts():
    from reflexa.types import Result

    registry = CollectorRegistry()
    metrics = Metrics(registry)
    from reflexa.runtime import RunStarted

    metrics("run", RunStarted("r1", "refine", "t", "scripted", 0.0))
    metrics("finish", Result(None, None, None, StopReason.INTERRUPTED, {}, "r1", counters={"reflector_calls": 2}))
    v = metric_values(registry)
    assert v[("reflexa_runs_total", (("loop", "refine"), ("stop_reason", "INTERRUPTED")))] == 1
    assert ("reflexa_reflections_total", (("loop", "refine"),)) not in v


def test_each_new_registry_gets_its_own_series():
    """A registry freed and a new one made at the same address: the new one still counts (an id-keyed
    cache handed it the dead registry's series, and this failed in CI)."""
    from reflexa.runtime import RunStarted
    from reflexa.types import Result

    for _ in range(20):
        registry = CollectorRegistry()
        metrics = Metrics(registry)
        metrics("run", RunStarted("r1", "refine", "t", "scripted", 0.0))
        metrics("finish", Result(None, None, None, StopReason.PASSED, {}, "r1"))
        assert registry.get_sample_value("reflexa_runs_total", {"loop": "refine", "stop_reason": "PASSED"}) == 1


def test_push_to_a_gateway(receiver):
    registry = CollectorRegistry()
    refine_run(Metrics(registry))
    push(f"127.0.0.1:{receiver.server_port}", "nightly", registry=registry)
    ((method, path, _, body),) = receiver.requests
    assert method == "PUT" and path == "/metrics/job/nightly"
    assert b'reflexa_runs_total{loop="refine",stop_reason="PASSED"} 1.0' in body


def test_push_to_a_gateway_that_is_not_there():
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ReflexaError, match="could not push metrics"):
        push(f"127.0.0.1:{port}", "nightly", registry=CollectorRegistry(), timeout=5)


def test_a_batch_process_pushes_its_metrics_when_it_exits(tmp_path, receiver):
    import os
    import subprocess
    import sys

    script = tmp_path / "job.py"
    script.write_text(
        "from reflexa import RegexCheck, ScriptedModel, Session, refine\n"
        "r = refine('t', [RegexCheck('x')], session=Session(model=ScriptedModel(['```\\nx\\n```'])))\n"
        "print(r.stop_reason)\n"
    )
    env = {**os.environ, "REFLEXA_METRICS": "1", "REFLEXA_PUSHGATEWAY": f"127.0.0.1:{receiver.server_port}",
           "REFLEXA_PUSH_JOB": "nightly"}
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "PASSED" in done.stdout, done.stderr
    ((method, path, _, body),) = receiver.requests
    assert method == "PUT" and path.startswith("/metrics/job/nightly/instance/")
    assert b'reflexa_runs_total{loop="refine",stop_reason="PASSED"} 1.0' in body


def test_the_run_event_is_still_the_run_id():
    from reflexa.runtime import RunStarted

    started = RunStarted("abc123", "refine", "task", "local:qwen", 1.5, resumed=True)
    assert started == "abc123" and started.run_id == "abc123" and json.dumps({"id": started}) == '{"id": "abc123"}'
    assert (started.loop, started.model, started.started_at, started.resumed) == ("refine", "local:qwen", 1.5, True)


def test_telemetry_alone_does_not_make_a_call_stream():
    class Quiet:
        tokens = False

        def __init__(self):
            self.events = []

        def __call__(self, event, data):
            self.events.append(event)

    quiet, loud = Quiet(), []
    refine_run(quiet)
    assert "token" not in quiet.events and "step" in quiet.events
    refine_run(observers(lambda event, data: loud.append(event), Tracing(TracerProvider())))
    assert "token" in loud  # a live view beside the tracer still gets the reply as it streams
    assert observers(Quiet(), Tracing(TracerProvider())).tokens is False


def test_a_fan_out_passes_an_observer_only_the_events_it_reads():
    seen, everything = [], []

    class StepsOnly:
        reads = frozenset({"step"})

        def __call__(self, event, data):
            seen.append(event)

    refine_run(observers(StepsOnly(), lambda event, data: everything.append(event)))
    assert set(seen) == {"step"}
    assert {"run", "call", "step", "finish"} <= set(everything)


def test_a_run_sends_no_event_that_no_observer_reads():
    sent = []

    class Reads:
        def __init__(self, *events):
            self.reads = frozenset(events)

        def __call__(self, event, data):
            sent.append(event)

    fan = observers(Reads("run", "step"), Reads("finish"))
    assert fan.reads == {"run", "step", "finish"}
    refine_run(fan)
    assert set(sent) == {"run", "step", "finish"}  # no "call" and no "status" were made for nobody
    assert observers(Reads("step"), lambda event, data: None).reads is None  # one that reads all: all are sent


def test_a_reflector_on_its_own_model_is_named_on_its_chat_span_and_its_metric_series():
    """The run's span names the run's model; the reflector's chat span and call series name the model that
    served it (an HTTP model's span is a CLIENT span, an in-process one's INTERNAL)."""
    from opentelemetry.trace import SpanKind

    tracing, exporter = memory_tracing()
    registry = CollectorRegistry()
    reflector = ScriptedModel([LESSON])
    reflector.name = "openai:big"
    session = Session(model=ScriptedModel([REPLY_BAD, REPLY_GOOD]), reflector_model=reflector,
                      observer=observers(tracing, Metrics(registry)))
    assert refine("Write add(a, b)", [FailsOnce()], session=session).passed
    spans = exporter.get_finished_spans()
    (run,) = [s for s in spans if s.parent is None]
    assert run.attributes["gen_ai.request.model"] == "scripted"
    chats = [(s.name, s.attributes["reflexa.role"], s.attributes["gen_ai.provider.name"],
              s.attributes["gen_ai.request.model"], s.kind) for s in spans if s.name.startswith("chat")]
    assert chats == [("chat scripted", "generator", "scripted", "scripted", SpanKind.INTERNAL),
                     ("chat big", "reflector", "openai", "big", SpanKind.CLIENT),
                     ("chat scripted", "generator", "scripted", "scripted", SpanKind.INTERNAL)]
    v = metric_values(registry)
    loop = ("loop", "refine")
    assert v[("reflexa_model_call_duration_seconds_count", (loop, ("model", "openai:big"), ("role", "reflector")))] == 1
    assert v[("reflexa_model_call_duration_seconds_count", (loop, ("model", "scripted"), ("role", "generator")))] == 2
    assert not any(k[0] == "reflexa_model_call_duration_seconds_count" and ("model", "scripted") in k[1]
                   and ("role", "reflector") in k[1] for k in v)
