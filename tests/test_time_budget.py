"""`max_seconds` ends a model call already under way, on every backend that can end one, and the run
stops TIMEOUT with the unfinished reply stored."""

import time

import httpx2 as httpx
import pytest

from reflexa import Budget, MemoryStore, ScriptedModel, Session, StopReason, refine
from reflexa.errors import ModelUnavailable
from reflexa.models.anthropic_model import AnthropicModel
from reflexa.models.base import TIME_UP
from reflexa.models.local import _watch

HELLO = [{"role": "user", "content": "say hello"}]
SLOW_REPLY = "Plan: think\n```python\n" + "x = 1\n" * 40 + "```"


def test_a_run_out_of_time_ends_the_call_under_way_and_keeps_its_unfinished_reply():
    model = ScriptedModel([SLOW_REPLY], delay=3.0)  # the call alone would take 3 s
    store = MemoryStore()
    result = refine("task", [lambda candidate: True], budget=Budget(max_seconds=0.3),
                    session=Session(model=model, store=store))
    assert result.stop_reason is StopReason.TIMEOUT
    call = next(step for step in store.steps(result.run_id) if step.kind == "model_call")
    assert call.payload().finish_reason == TIME_UP
    assert 0 < len(call.payload().text) < len(SLOW_REPLY)  # cut where the budget ran out


def test_a_call_that_fits_in_the_time_left_is_untouched():
    model = ScriptedModel(["hello"], delay=0.01)
    completion = model.complete(HELLO, time_left=60.0)
    assert completion.text == "hello" and completion.finish_reason == "stop"


class CountingLlama:
    """The part of llama_cpp.Llama that `_watch` wraps: a generator that would sample 100 tokens."""

    def __init__(self):
        self.sampled = 0

    def generate(self, tokens, **kwargs):
        for token in range(100):
            self.sampled += 1
            yield token

    def detokenize(self, tokens, prev_tokens=None, special=False):
        return b"t"

    def create_chat_completion(self, **kwargs):
        return list(self.generate([0]))


def test_the_local_watch_ends_generation_at_the_deadline():
    llama = CountingLlama()
    with _watch(llama, None, deadline=time.monotonic() - 1) as watched:
        tokens = llama.create_chat_completion()
    assert watched.timed_out and tokens == [0] and llama.sampled == 1
    with _watch(llama, None, deadline=time.monotonic() + 60) as watched:
        assert len(llama.create_chat_completion()) == 100 and not watched.timed_out
    assert "generate" not in vars(llama)


def _timing_out(request):
    raise httpx.ReadTimeout("no answer", request=request)


def _openai(handler, timeout=60.0):
    import openai

    from reflexa.models.openai_compat import OpenAIModel

    model = OpenAIModel("m", base_url="http://127.0.0.1:9/v1", profile="openai")
    model.client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="x", max_retries=0, timeout=timeout,
                                 http_client=httpx.Client(transport=httpx.MockTransport(handler)))
    return model


def test_an_openai_request_gets_the_time_left_as_its_timeout_and_ends_the_call_at_it():
    timeouts = []

    def handler(request):
        timeouts.append(request.extensions["timeout"]["read"])
        return _timing_out(request)

    completion = _openai(handler).complete(HELLO, time_left=2.5)
    assert completion.finish_reason == TIME_UP and completion.text == ""
    assert timeouts == [2.5]  # one try, bounded by the budget
    with pytest.raises(ModelUnavailable, match="did not answer in time"):  # the server's own timeout
        _openai(handler).complete(HELLO, time_left=600.0)


def test_an_anthropic_request_ends_at_the_time_left():
    model = AnthropicModel("claude-sonnet-4-6", api_key="test", max_retries=0,
                           http_client=httpx.Client(transport=httpx.MockTransport(_timing_out)))
    assert model.complete(HELLO, time_left=1.0).finish_reason == TIME_UP
    with pytest.raises(ModelUnavailable, match="in time"):
        model.complete(HELLO)


@pytest.mark.model
def test_the_local_model_ends_its_reply_at_the_time_left(embedded):
    completion = embedded.complete([{"role": "user", "content": "Count from 1 to 500, one number a line."}],
                                   max_tokens=400, time_left=0.0)
    assert completion.finish_reason == TIME_UP and completion.usage.output_tokens <= 2
