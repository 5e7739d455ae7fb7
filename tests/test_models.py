import json
from pathlib import Path

import httpx2 as httpx  # the SDKs moved to the httpx2 fork
import pytest
from pydantic import BaseModel

from reflexa import ScriptedModel
from reflexa.errors import ConfigError, ModelError, ModelUnavailable
from reflexa.models.anthropic_model import AnthropicModel
from reflexa.models.openai_compat import parse_target
from reflexa.models.spec import availability, resolve

FIXTURES = Path(__file__).parent / "fixtures" / "anthropic"


class Judgement(BaseModel):
    status: str
    reason: str


def test_scripted_model_replays_and_records(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(["hello", {"status": "PASS", "reason": "ok"}]))
    model = resolve(f"scripted:{path}")
    assert model.complete([{"role": "user", "content": "hi"}]).text == "hello"
    completion = model.complete([{"role": "user", "content": "judge"}], schema=Judgement)
    assert completion.value == Judgement(status="PASS", reason="ok")
    assert model.prompts[1][0]["content"] == "judge"
    with pytest.raises(ModelError):
        model.complete([{"role": "user", "content": "more"}])


def test_scripted_model_truncates_at_max_tokens():
    completion = ScriptedModel(["x" * 100]).complete([{"role": "user", "content": "go"}], max_tokens=5)
    assert completion.finish_reason == "length" and len(completion.text) == 20


def test_truncated_structured_reply_says_so():
    completion = ScriptedModel(['{"status": "PASS", "reason": "' + "y" * 100 + '"}']).complete(
        [{"role": "user", "content": "go"}], schema=Judgement, max_tokens=10
    )
    assert completion.value is None and "cut off" in completion.error


def test_async_twin_returns_the_same_completion():
    import asyncio

    completion = asyncio.run(ScriptedModel(["hi"]).acomplete([{"role": "user", "content": "go"}]))
    assert completion.text == "hi" and completion.usage.calls == 1


@pytest.mark.parametrize(
    "target,expected",
    [
        ("gpt-4o-mini", (None, "gpt-4o-mini", None)),
        ("http://127.0.0.1:8000/v1#smol", ("http://127.0.0.1:8000/v1", "smol", None)),
        ("http://127.0.0.1:8000/v1?profile=llamacpp#smol", ("http://127.0.0.1:8000/v1", "smol", "llamacpp")),
    ],
)
def test_openai_targets(target, expected):
    assert parse_target(target) == expected


def test_unknown_profile_is_a_config_error():
    with pytest.raises(ConfigError):
        parse_target("http://127.0.0.1:8000/v1?profile=weird#m")


def test_openai_without_a_key_is_a_config_error():
    with pytest.raises(ConfigError) as info:
        resolve("openai:gpt-4o-mini")
    assert "OPENAI_API_KEY" in info.value.hint


def test_availability_names_every_backend():
    rows = {row.backend: row for row in availability()}
    assert set(rows) == {"local", "openai", "anthropic", "scripted"}
    assert not rows["anthropic"].usable and "ANTHROPIC_API_KEY" in rows["anthropic"].detail


def recorded(name: str, seen: list[dict], status: int = 200) -> httpx.Client:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(status, json=json.loads((FIXTURES / f"{name}.json").read_text()))

    return httpx.Client(transport=httpx.MockTransport(handler))


def test_anthropic_structured_reply_comes_from_a_forced_tool_call():
    seen: list[dict] = []
    model = AnthropicModel("claude-sonnet-4-6", api_key="test", http_client=recorded("tool_use", seen))
    completion = model.complete(
        [{"role": "system", "content": "grade"}, {"role": "user", "content": "answer"}],
        schema=Judgement,
        max_tokens=100,
    )
    assert completion.value == Judgement(status="NEEDS_IMPROVEMENT", reason="misses negative numbers")
    assert completion.usage.input_tokens == 412 and completion.usage.output_tokens == 38
    request = seen[0]
    assert request["system"] == "grade" and request["messages"] == [{"role": "user", "content": "answer"}]
    assert request["tool_choice"] == {"type": "tool", "name": "reply"}
    assert request["tools"][0]["input_schema"]["properties"].keys() == {"status", "reason"}


def test_anthropic_text_reply_and_finish_reason():
    model = AnthropicModel("claude-sonnet-4-6", api_key="test", http_client=recorded("text", []))
    completion = model.complete([{"role": "user", "content": "write f"}], max_tokens=64)
    assert "def f" in completion.text and completion.finish_reason == "length"


def test_anthropic_overload_after_retries_is_model_unavailable():
    seen: list[dict] = []
    model = AnthropicModel(
        "claude-sonnet-4-6", api_key="test", max_retries=1, http_client=recorded("overloaded", seen, status=529)
    )
    with pytest.raises(ModelUnavailable):
        model.complete([{"role": "user", "content": "hi"}])
    assert len(seen) == 2  # one retry with backoff, then a typed error


def test_grammar_schema_drops_only_long_length_caps():
    from reflexa.models.local import _grammar_schema

    schema = {
        "properties": {
            "a": {"type": "string", "maxLength": 2000},
            "b": {"type": "array", "items": {"type": "string", "maxLength": 300}},
        }
    }
    assert _grammar_schema(schema) == {
        "properties": {"a": {"type": "string"}, "b": {"type": "array", "items": {"type": "string", "maxLength": 300}}}
    }


def test_only_a_file_backend_s_target_is_made_an_absolute_path(tmp_path):
    from reflexa.models.spec import absolute_spec

    (tmp_path / "gpt-4o").write_text("a file that happens to share the model's name")
    (tmp_path / "r.json").write_text("[]")
    assert absolute_spec("openai:gpt-4o", tmp_path) == "openai:gpt-4o"
    assert absolute_spec("scripted:r.json", tmp_path) == f"scripted:{tmp_path / 'r.json'}"


def test_the_reflector_spec_comes_from_the_flag_the_environment_or_a_config_file(tmp_path, monkeypatch):
    from reflexa.models.config import configured_reflector_spec
    from reflexa.models.spec import resolve, resolve_reflector

    monkeypatch.chdir(tmp_path)
    (tmp_path / "r.json").write_text("[]")
    assert configured_reflector_spec() is None and resolve_reflector() is None  # the run's model reflects
    (tmp_path / "reflexa.toml").write_text('reflector_model = "scripted:r.json"\n')
    assert configured_reflector_spec() == "scripted:r.json"
    monkeypatch.setenv("REFLEXA_REFLECTOR_MODEL", "local:qwen1.5b")
    assert configured_reflector_spec() == "local:qwen1.5b"
    monkeypatch.setenv("REFLEXA_REFLECTOR_MODEL", " ")  # blank is unset: the config file's
    reflector = resolve_reflector()
    assert reflector is not None and reflector.spec == f"scripted:{tmp_path / 'r.json'}"
    assert resolve_reflector("") is None  # an empty flag: the run's own model, whatever is configured
    generator = resolve("scripted:r.json")
    assert resolve_reflector("scripted:r.json", generator) is generator  # one model, not loaded twice
    with pytest.raises(ConfigError, match="no backend"):
        resolve_reflector("nosuch:model")
