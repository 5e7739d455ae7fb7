"""The OpenAI backend against a real llama.cpp server process on 127.0.0.1, serving the embedded weights."""

import socket
import subprocess
import sys
import time

import httpx2 as httpx
import pytest
from pydantic import BaseModel

from reflexa import RegexCheck, Session, StopReason, refine, resolve_model

pytestmark = pytest.mark.server


class Answer(BaseModel):
    answer: str
    confident: bool


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(embedded, tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("server") / "server.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(embedded.path), "--host", "127.0.0.1",
             "--port", str(port), "--n_ctx", "2048", "--n_threads", "2"],
            stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 90
    try:
        while True:
            try:
                if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"llama.cpp server did not start:\n{log.read_text()[-2000:]}")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def test_profile_is_detected_from_the_server(server):
    model = resolve_model(f"openai:{server}")
    assert model.profile.schema_mode == "json_object"  # llama.cpp answers owned_by "me"
    assert model.model  # filled from GET /models


def test_plain_completion(server):
    model = resolve_model(f"openai:{server}#smollm2")
    completion = model.complete([{"role": "user", "content": "Say hello."}], max_tokens=16)
    assert completion.text.strip() and completion.usage.output_tokens > 0


def test_structured_completion_through_the_server(server):
    model = resolve_model(f"openai:{server}?profile=llamacpp#smollm2")
    completion = model.complete(
        [{"role": "user", "content": "What is the capital of France?"}], schema=Answer, max_tokens=64
    )
    assert isinstance(completion.value, Answer), completion.error


def test_refine_through_the_server(server):
    model = resolve_model(f"openai:{server}#smollm2")
    result = refine(
        "Write a Python function named add that returns a + b.",
        [RegexCheck("def add\\(")],
        max_reply_tokens=128,
        session=Session(model=model),
        max_attempts=2,
    )
    assert result.stop_reason in set(StopReason) - {StopReason.ERROR}


def test_a_time_budget_ends_a_request_the_server_is_still_answering(server):
    model = resolve_model(f"openai:{server}#smollm2")
    # A prompt of about 1,200 tokens that the model echoes takes seconds to answer here; a short one can end
    # on its own in under the 0.2 s budget and leave nothing to cut off.
    prompt = "The quick brown fox jumps over the lazy dog. " * 120 + "Count from 1 to 500, one number a line."
    completion = model.complete([{"role": "user", "content": prompt}], max_tokens=300, time_left=0.2)
    assert completion.finish_reason == "time" and completion.text == ""
    assert model.complete([{"role": "user", "content": "Say hello."}], max_tokens=8).text.strip()  # still serving
