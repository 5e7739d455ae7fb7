"""`reflexa.aio`: loops as coroutines over the async model seam, many sessions on one event loop."""

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from reflexa import RegexCheck, ScriptedModel, Session, aio, refine
from reflexa.errors import ModelUnavailable
from reflexa.models.base import Generation, Model
from reflexa.models.limit import limited
from reflexa.models.openai_compat import OpenAIModel

GOOD = "Plan: say it.\n```\nGOOD\n```"


class Gate(Model):
    """An async model that holds every call until `expected` calls are in flight at once (or times out),
    so a test fails if the sessions were run one after another."""

    name = "gate"

    def __init__(self, expected: int) -> None:
        self.expected, self.inflight, self.most = expected, 0, 0
        self.all_in = asyncio.Event()

    async def _agenerate(self, messages, json_schema, max_tokens, temperature):
        self.inflight += 1
        self.most = max(self.most, self.inflight)
        if self.inflight >= self.expected:
            self.all_in.set()
        await asyncio.wait_for(self.all_in.wait(), timeout=10)
        self.inflight -= 1
        return Generation(GOOD, 10, 5)

    def _generate(self, *args):
        raise AssertionError("a loop run by aio.run must not call the model synchronously")


def many(model, n):
    async def main():
        return await asyncio.gather(*(aio.run(refine, f"say GOOD {i}", [RegexCheck("GOOD")],
                                              session=Session(model=model)) for i in range(n)))
    return asyncio.run(main())


def test_a_loop_run_as_a_coroutine_gives_what_it_gives_synchronously():
    replies = ["```\nbad\n```", json.dumps({"failure_step": "the answer", "observed_mismatch": "bad is not GOOD",
                                             "root_cause": "wrong word", "correction": "write GOOD"}), GOOD]
    plain = refine("say GOOD", [RegexCheck("GOOD")], session=Session(model=ScriptedModel(list(replies))))
    awaited = asyncio.run(aio.run(refine, "say GOOD", [RegexCheck("GOOD")],
                                  session=Session(model=ScriptedModel(list(replies)))))
    assert (awaited.stop_reason, awaited.output, awaited.steps, awaited.iterations) == (
        plain.stop_reason, plain.output, plain.steps, plain.iterations)


def test_a_session_sees_its_caller_s_context_and_its_own_spans_only():
    """aio.run copies the caller's context variables into the session, as asyncio does into a task: the
    caller's span parents the run. Sessions sharing the thread do not parent each other's runs."""
    import contextvars

    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from reflexa.observe import Tracing, observers

    exporter, provider = InMemorySpanExporter(), TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    request = contextvars.ContextVar("request", default=None)
    seen = []

    def watch(event, data):
        if event == "run":
            seen.append(request.get())

    def session():
        return Session(model=ScriptedModel(["bad", GOOD]), observer=observers(watch, Tracing(provider)))

    async def main():
        request.set("req-42")
        with provider.get_tracer("app").start_as_current_span("request"):
            await asyncio.gather(*(aio.run(refine, f"say GOOD {i}", [RegexCheck("GOOD")], session=session())
                                   for i in range(2)))

    asyncio.run(main())
    spans = exporter.get_finished_spans()
    (caller,) = [s for s in spans if s.name == "request"]
    runs = [s for s in spans if s.name.startswith("invoke_agent")]
    assert seen == ["req-42", "req-42"] and len(runs) == 2
    assert all(run.parent.span_id == caller.context.span_id for run in runs)


def test_sessions_on_one_event_loop_have_their_model_calls_in_flight_together():
    gate = Gate(16)
    results = many(gate, 16)
    assert gate.most == 16 and all(r.stop_reason.value == "PASSED" for r in results)


def test_the_connection_limit_holds_for_coroutines():
    gate = Gate(3)
    results = many(limited(gate, 3), 12)
    assert gate.most == 3 and len(results) == 12 and all(r.stop_reason.value == "PASSED" for r in results)


def test_a_model_error_reaches_the_loop_where_it_made_the_call():
    class Down(Model):
        name = "down"

        async def _agenerate(self, *args):
            raise ModelUnavailable("cannot reach the model server")

        def _generate(self, *args):
            raise ModelUnavailable("cannot reach the model server")

    plain = refine("say GOOD", [RegexCheck("GOOD")], session=Session(model=Down()))
    awaited = asyncio.run(aio.run(refine, "say GOOD", [RegexCheck("GOOD")], session=Session(model=Down())))
    assert (awaited.stop_reason, awaited.error) == (plain.stop_reason, plain.error)


def test_outside_aio_run_a_model_call_stays_synchronous():
    model = ScriptedModel([GOOD])
    assert refine("say GOOD", [RegexCheck("GOOD")], session=Session(model=model)).stop_reason.value == "PASSED"


@pytest.fixture()
def openai_server():
    """An OpenAI-compatible server on 127.0.0.1 whose replies wait until 8 requests are open at once."""
    arrived = threading.Barrier(8, timeout=10)
    seen = {"requests": 0}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):  # noqa: N802 - http.server's naming
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            seen["requests"] += 1
            arrived.wait()
            body = json.dumps({"id": "c", "object": "chat.completion", "created": 0, "model": "fake",
                               "choices": [{"index": 0, "finish_reason": "stop",
                                            "message": {"role": "assistant", "content": GOOD}}],
                               "usage": {"prompt_tokens": 50, "completion_tokens": 8, "total_tokens": 58}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):  # noqa: N802 - GET /v1/models: a llama.cpp server's answer, after a while
            seen["listed"] = seen.get("listed", 0) + 1
            time.sleep(0.6)
            body = json.dumps({"object": "list", "data": [{"id": "fake", "object": "model", "created": 0,
                                                           "owned_by": "llamacpp"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", seen
    httpd.shutdown()


def test_the_openai_backend_keeps_calls_in_flight_on_the_event_loop_without_threads(openai_server):
    url, seen = openai_server
    model = OpenAIModel("fake", base_url=url, profile="prompt", max_retries=0)
    before = {t.name for t in threading.enumerate()}
    results = many(model, 8)
    assert seen["requests"] == 8 and all(r.stop_reason.value == "PASSED" for r in results)
    # The SDK's async client, not asyncio's worker threads, carried the eight calls.
    assert not [t for t in threading.enumerate() if t.name.startswith("asyncio_") and t.name not in before]


def test_the_server_s_profile_is_detected_on_the_event_loop_too(openai_server):
    url, seen = openai_server
    model = OpenAIModel("fake", base_url=url, max_retries=0)  # no profile: GET /models decides it
    before = {t.name for t in threading.enumerate()}
    gaps: list[float] = []

    async def main():
        async def ticker():  # the event loop's heartbeat while the sessions wait on the server
            while True:
                last = time.monotonic()
                await asyncio.sleep(0.05)
                gaps.append(time.monotonic() - last)

        beat = asyncio.create_task(ticker())
        results = await asyncio.gather(*(aio.run(refine, f"say GOOD {i}", [RegexCheck("GOOD")],
                                                 session=Session(model=model)) for i in range(8)))
        beat.cancel()
        return results

    results = asyncio.run(main())
    assert all(r.stop_reason.value == "PASSED" for r in results)
    assert seen["listed"] >= 1 and model.profile.schema_mode == "json_object"  # llama.cpp's
    # The 0.6 s answer to GET /models did not hold up the event loop: blocked, one beat would take 0.6 s
    # or more. The margin is for a busy two-core machine (a CI run once read 0.42 s).
    assert max(gaps) < 0.55
    assert not [t for t in threading.enumerate() if t.name.startswith("asyncio_") and t.name not in before]


def test_a_batch_runs_its_sessions_as_coroutines(tmp_path):
    from reflexa.batch import run_batch

    (tmp_path / "good.json").write_text(json.dumps([GOOD]))
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps({"id": f"t{i}", "task": f"say GOOD {i}", "regex": "GOOD"}) + "\n"
                            for i in range(10)))
    state = run_batch(path, "refine", store=str(tmp_path / "trace.db"), model=f"scripted:{tmp_path / 'good.json'}",
                      concurrency=4, executor="async")
    assert (state.done, state.passed, state.failed) == (10, 10, 0)


def test_a_backoff_inside_a_session_is_awaited_not_slept(monkeypatch):
    """react waits before retrying a timed-out tool; under aio.run it awaits, so the event loop (and every
    other session on it) goes on meanwhile. Outside aio the same wait is a plain sleep."""
    from reflexa import react, tool

    slept = []
    monkeypatch.setattr(time, "sleep", lambda seconds: slept.append(seconds))

    def run_once():
        calls = []

        @tool
        def fetch(url: str) -> str:
            """Fetch a page."""
            calls.append(url)
            if len(calls) == 1:
                raise TimeoutError("upstream timed out")
            return "page text"

        model = ScriptedModel([{"action": {"thought": "t", "tool": "fetch", "args": {"url": "u"}, "confidence": 1}},
                               {"action": {"thought": "t", "tool": "final_answer", "args": {"answer": "done"},
                                           "confidence": 1}}])
        return fetch, model, calls

    fetch, model, calls = run_once()
    result = asyncio.run(aio.run(react, "get the page", [fetch], session=Session(model=model)))
    assert calls == ["u", "u"] and result.output == "done" and slept == []
    fetch, model, calls = run_once()
    react("get the page", [fetch], session=Session(model=model))
    assert calls == ["u", "u"] and slept and slept[0] > 0
