"""Anthropic's Messages API through the `anthropic` SDK (optional extra). A schema is sent as a forced
tool call, whose input is the structured reply. The SDK's transport is `httpx2`; tests replay recorded
responses through an `httpx2.MockTransport`."""

from __future__ import annotations

import json
import os
from typing import Any

from ..errors import ConfigError, ModelError, ModelNotInstalled, ModelUnavailable
from ..structured import Message
from .base import Generation, Model, timed_out, within


class AnthropicModel(Model):
    """A Claude model. The SDK retries 429 and 5xx with backoff; every request has a timeout."""

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        http_client: Any = None,
    ) -> None:
        try:
            import anthropic
        except ImportError:
            raise ModelNotInstalled(
                "the anthropic package is not installed", hint="pip install 'reflexa[anthropic]'"
            ) from None
        if not model:
            raise ConfigError("no model named", hint="use anthropic:MODEL, e.g. anthropic:claude-sonnet-4-6")
        # Checked here: the SDK builds a client without a key and fails only at the first request.
        if api_key is None and not os.environ.get("ANTHROPIC_API_KEY"):
            raise ConfigError("ANTHROPIC_API_KEY is not set", hint="export ANTHROPIC_API_KEY=..., or pick another "
                              "backend (`reflexa models` lists them)")
        try:
            self.client = anthropic.Anthropic(
                api_key=api_key, timeout=timeout, max_retries=max_retries, http_client=http_client
            )
        except anthropic.AnthropicError as exc:
            raise ConfigError(str(exc), hint="set ANTHROPIC_API_KEY") from None
        self.model = model
        self.name = f"anthropic:{model}"

    stops_in_time = True

    def _generate(
        self, messages: list[Message], json_schema: dict[str, Any] | None, max_tokens: int, temperature: float,
        time_left: float | None = None,
    ) -> Generation:
        import anthropic

        system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
        turns = [{"role": m["role"], "content": m["content"]} for m in messages if m["role"] != "system"]
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": turns,
            "max_tokens": max_tokens,
        }
        # `temperature` is not sent: current SDKs (2.x) no longer accept it; the API samples itself.
        if system:
            kwargs["system"] = system
        if json_schema is not None:
            kwargs["tools"] = [{"name": "reply", "description": "Give the reply.", "input_schema": json_schema}]
            kwargs["tool_choice"] = {"type": "tool", "name": "reply"}
        client, bounded = within(self.client, time_left)
        try:
            out = client.messages.create(**kwargs)
        except anthropic.APITimeoutError:
            if bounded:  # the request outlived the time the run had left
                return timed_out(messages)
            raise ModelUnavailable("Anthropic's API did not answer in time") from None
        except anthropic.APIConnectionError as exc:
            raise ModelUnavailable(f"cannot reach Anthropic's API: {exc}") from None
        except anthropic.AuthenticationError:
            raise ModelError("Anthropic refused the API key", hint="check ANTHROPIC_API_KEY") from None
        except anthropic.APIStatusError as exc:
            raise ModelUnavailable(f"Anthropic answered HTTP {exc.status_code}: {exc.message}") from None
        text = ""
        for block in out.content:
            if block.type == "tool_use":
                text = json.dumps(block.input)
                break
            if block.type == "text":
                text += block.text
        finish = "length" if out.stop_reason == "max_tokens" else "stop"
        return Generation(text, out.usage.input_tokens, out.usage.output_tokens, finish)
