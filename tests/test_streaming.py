"""Streaming through the Model seam: each backend hands a listener the reply piece by piece, and the
Completion is the same with or without one."""

import json

import httpx2 as httpx  # the SDKs moved to the httpx2 fork
import pytest

from reflexa import ScriptedModel
from reflexa.errors import ConfigError
from reflexa.loops import Session
from reflexa.loops.refine import refine
from reflexa.models.base import Generation, Model
from reflexa.models.local import _watch

HELLO = [{"role": "user", "content": "say hello"}]


def test_scripted_model_streams_its_reply_in_pieces():
    pieces = []
    streamed = ScriptedModel(["def add(a, b):\n    return a + b"]).complete(HELLO, on_token=pieces.append)
    plain = ScriptedModel(["def add(a, b):\n    return a + b"]).complete(HELLO)
    assert len(pieces) > 3 and "".join(pieces) == streamed.text
    assert streamed == plain  # the listener changes nothing in the result


def test_scripted_delay_comes_from_the_replies_file(tmp_path):
    path = tmp_path / "slow.json"
    path.write_text(json.dumps({"replies": ["hi"], "delay": 0.25}))
    model = ScriptedModel.from_file(path)
    assert model.delay == 0.25 and model.complete(HELLO).text == "hi"
    path.write_text(json.dumps({"replies": ["hi"], "delay": "slow"}))
    with pytest.raises(ConfigError, match="delay"):
        ScriptedModel.from_file(path)
    path.write_text(json.dumps({"replies": "hi"}))
    with pytest.raises(ConfigError, match="JSON list"):
        ScriptedModel.from_file(path)


def test_a_backend_that_does_not_stream_is_never_given_a_listener():
    class Legacy(Model):  # a plugin written before streaming: its _generate takes no on_token
        def _generate(self, messages, json_schema, max_tokens, temperature):
            return Generation("plain", 3, 1)

    pieces = []
    assert Legacy().complete(HELLO, on_token=pieces.append).text == "plain" and pieces == []


def test_a_run_forwards_tokens_to_the_observer_between_call_and_step():
    events = []

    class Always:
        name, subjective = "always", False

        def run(self, candidate, context):
            from reflexa.types import Signal

            return Signal("always", True)

    refine("t", [Always()], session=Session(model=ScriptedModel(["```\nok = 1\n```"]),
                                           observer=lambda e, d: events.append(e)))
    assert events[0] == "run"
    first_step = events.index("step")
    assert events[1] == "call" and set(events[2:first_step]) == {"token"}


class FakeLlama:
    """The parts of llama_cpp.Llama that `_watch` touches: generate, detokenize, and a completion that
    runs through self.generate as llama-cpp-python's does."""

    PIECES = {1: b"def", 2: b" f", 3: "é".encode()[:1], 4: "é".encode()[1:], 5: b""}  # 5: EOS

    def generate(self, tokens, **kwargs):
        yield from [1, 2, 3, 4, 5]

    def detokenize(self, tokens, prev_tokens=None, special=False):
        return b"".join(self.PIECES[t] for t in tokens)

    def create_chat_completion(self, **kwargs):
        tokens = [t for t in self.generate([9, 9]) if t != 5]
        return {"text": self.detokenize(tokens).decode()}


def test_local_watch_sees_each_sampled_token_and_leaves_the_call_alone():
    llama = FakeLlama()
    pieces = []
    with _watch(llama, pieces.append):
        out = llama.create_chat_completion()
    assert pieces == ["def", " f", "é"]  # a character split over two tokens waits for its second half
    assert out == {"text": "def fé"} and "generate" not in vars(llama)  # the instance is as it was
    with _watch(llama, None):
        assert "generate" not in vars(llama)


def _sse(*chunks) -> bytes:
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


def _chunk(content=None, finish=None, usage=None, tool_args=None):
    delta = {"role": "assistant", "content": content}
    if tool_args is not None:
        delta["tool_calls"] = [{"index": 0, "id": "c", "type": "function",
                                "function": {"name": "reply", "arguments": tool_args}}]
    choices = [] if usage else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": choices,
            "usage": usage}


def _openai(handler, profile="openai"):
    import openai

    from reflexa.models.openai_compat import OpenAIModel

    model = OpenAIModel("m", base_url="http://127.0.0.1:9/v1", profile=profile)
    model.client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="x", max_retries=0,
                                 http_client=httpx.Client(transport=httpx.MockTransport(handler)))
    return model


def test_openai_streams_with_usage_from_the_last_chunk():
    sent = []

    def handler(request):
        sent.append(json.loads(request.content))
        body = _sse(_chunk("Hel"), _chunk("lo"), _chunk(None, "length"),
                    _chunk(usage={"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}))
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    pieces = []
    completion = _openai(handler).complete(HELLO, on_token=pieces.append)
    assert pieces == ["Hel", "lo"] and completion.text == "Hello" and completion.finish_reason == "length"
    assert (completion.usage.input_tokens, completion.usage.output_tokens) == (7, 2)
    assert sent[0]["stream"] is True and sent[0]["stream_options"] == {"include_usage": True}


def test_openai_stream_of_a_forced_tool_call_reads_its_arguments_and_estimates_missing_usage():
    def handler(request):
        body = _sse(_chunk(tool_args='{"a":'), _chunk(tool_args=" 1}"), _chunk(None, "tool_calls"))
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    pieces = []
    completion = _openai(handler).complete(HELLO, on_token=pieces.append)
    assert completion.text == '{"a": 1}' and completion.finish_reason == "stop"
    assert completion.usage.output_tokens == 2 and completion.usage.input_tokens == 3  # no usage sent: estimated


@pytest.mark.parametrize("listen,profile", [(False, "openai"), (True, "llamacpp")])
def test_openai_without_a_listener_or_usage_in_streams_sends_one_plain_request(listen, profile):
    sent = []

    def handler(request):
        sent.append(json.loads(request.content))
        return httpx.Response(200, json={
            "id": "x", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}})

    pieces = []
    completion = _openai(handler, profile).complete(HELLO, on_token=pieces.append if listen else None)
    assert completion.text == "Hello" and "stream" not in sent[0] and pieces == []
    assert completion.usage.input_tokens == 7  # the server's count, as without a listener


def test_a_reply_with_no_choices_is_a_model_error():
    from types import SimpleNamespace

    from reflexa.errors import ModelError
    from reflexa.models.openai_compat import _generation

    with pytest.raises(ModelError, match="no choices"):
        _generation(SimpleNamespace(choices=[], usage=None))


def _reply(usage):
    return {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "usage": usage,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello"}, "finish_reason": "stop"}]}


def test_odd_server_replies_are_model_errors_or_read_as_well_as_they_can_be():
    from reflexa.errors import ModelError

    html = _openai(lambda request: httpx.Response(200, text="<html>a proxy's page</html>",
                                                  headers={"content-type": "application/json"}))
    with pytest.raises(ModelError, match="could not be read"):
        html.complete(HELLO)
    null = _openai(lambda request: httpx.Response(200, json=_reply({"prompt_tokens": None})))
    assert null.complete(HELLO).usage.input_tokens == 0  # null counts are 0, not a crash in the budget meter
    broken = _openai(lambda request: httpx.Response(
        200, content=b'data: {"error": {"message": "overloaded mid-stream"}}\n\n',
        headers={"content-type": "text/event-stream"}))
    with pytest.raises(ModelError):
        broken.complete(HELLO, on_token=lambda piece: None)


def test_a_server_without_a_model_list_is_asked_plainly():
    """GET /models is 404: the profile falls back to prompt-then-validate instead of "model not found"."""
    def handler(request):
        if request.url.path.endswith("/models"):
            return httpx.Response(404, json={"error": {"message": "not found"}})
        return httpx.Response(200, json=_reply({"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}))

    model = _openai(handler, profile=None)
    assert model.complete(HELLO).text == "Hello" and model.profile.schema_mode == "prompt"


def test_a_connection_limit_keeps_the_backend_streaming():
    from reflexa.models.limit import limited

    sent = []

    def handler(request):
        sent.append(json.loads(request.content))
        return httpx.Response(200, content=_sse(_chunk("Hel"), _chunk("lo", "stop")),
                              headers={"content-type": "text/event-stream"})

    pieces = []
    assert limited(_openai(handler), 2).complete(HELLO, on_token=pieces.append).text == "Hello"
    assert pieces == ["Hel", "lo"] and sent[0]["stream"] is True
