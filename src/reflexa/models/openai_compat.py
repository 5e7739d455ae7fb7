"""OpenAI and OpenAI-compatible servers (vLLM, Ollama, llama.cpp's server) through the `openai` SDK.

Servers differ in how they accept a schema, so each has a capability profile. The SDK itself retries
429 and 5xx answers with exponential backoff, and every request has a timeout.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, cast
from urllib.parse import parse_qs, urlsplit, urlunsplit

from ..errors import ConfigError, ModelError, ModelNotInstalled, ModelUnavailable, ReflexaError
from ..structured import Message
from .base import Generation, Model, OnToken, schema_instruction, timed_out, within

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam

SchemaMode = Literal["json_schema", "json_object", "tool", "prompt"]


@dataclass(frozen=True, slots=True)
class Profile:
    """How one kind of server takes structured output."""

    schema_mode: SchemaMode
    """json_schema: response_format json_schema; json_object: json_object with a `schema` field (llama.cpp);
    tool: a forced function call; prompt: ask in the prompt, then validate."""
    extra_body: dict[str, Any] = field(default_factory=dict)
    stream: bool = False
    """The server reports usage at the end of a stream (`stream_options.include_usage`), so a streamed
    call counts the same tokens as a plain one; only then does a live view get the reply streamed."""


PROFILES: dict[str, Profile] = {
    "openai": Profile("json_schema", stream=True),
    "vllm": Profile("json_schema", stream=True),
    "ollama": Profile("json_schema", stream=True),
    # llama.cpp's server rejects json_schema with HTTP 500 but honours json_object with a schema; its
    # default repeat_penalty (1.1) differs from in-process llama.cpp (1.0), so pin it for parity. Its
    # streams carry no usage (llama-cpp-python 0.3.36), so it is not streamed.
    "llamacpp": Profile("json_object", {"repeat_penalty": 1.0}),
    "tool": Profile("tool"),
    "prompt": Profile("prompt"),
}

# What each server answers as `owned_by` in GET /models: enough to pick a profile when none is given.
_OWNERS = {"vllm": "vllm", "me": "llamacpp", "llamacpp": "llamacpp", "library": "ollama", "ollama": "ollama"}


def parse_target(target: str) -> tuple[str | None, str, str | None]:
    """Split `http://host:port/v1?profile=llamacpp#MODEL` (or a bare `MODEL`) into (base_url, model, profile)."""
    if not target.startswith(("http://", "https://")):
        return None, target, None
    try:
        parts = urlsplit(target)
        parts.port  # noqa: B018 - parsed lazily; a bad port raises here, not at the first request
    except ValueError as exc:
        raise ConfigError(f"bad server URL {target!r}: {exc}", hint="use openai:http://HOST:PORT/v1#MODEL") from None
    if not parts.hostname:
        raise ConfigError(f"bad server URL {target!r}: no host", hint="use openai:http://HOST:PORT/v1#MODEL")
    profile = parse_qs(parts.query).get("profile", [None])[0]
    if profile is not None and profile not in PROFILES:
        raise ConfigError(f"unknown profile {profile!r}", hint=f"use one of: {', '.join(PROFILES)}")
    base = urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
    return base, parts.fragment, profile


class OpenAIModel(Model):
    """A model behind the OpenAI chat-completions API. With an `on_token` listener, and a server whose
    profile reports usage in streams, the reply is streamed (`stream=True`, usage asked for in the last
    chunk); otherwise it is one plain request."""

    streams = True
    stops_in_time = True

    def __init__(
        self,
        model: str = "",
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        profile: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
    ) -> None:
        try:
            import openai
        except ImportError:
            raise ModelNotInstalled("the openai package is not installed",
                                    hint="pip install 'reflexa[openai]'") from None
        if base_url is None and not model:
            raise ConfigError("no model named", hint="use openai:MODEL or openai:http://HOST:PORT/v1#MODEL")
        # A local server needs no key, but the SDK insists on one; a keyed gateway gets $OPENAI_API_KEY.
        key = api_key or os.environ.get("OPENAI_API_KEY") or ("not-needed" if base_url else None)
        try:
            self.client = openai.OpenAI(base_url=base_url, api_key=key, timeout=timeout, max_retries=max_retries)
        except openai.OpenAIError as exc:
            raise ConfigError(str(exc), hint="set OPENAI_API_KEY, or give a server URL") from None
        self.base_url = str(self.client.base_url)
        if profile and not model:  # only detecting the server's profile fills in a missing model name
            raise ConfigError(f"{self.base_url}: a profile without a model name",
                              hint="name the model after '#': openai:http://HOST:PORT/v1?profile=...#MODEL")
        self.model = model
        self._profile = PROFILES[profile] if profile else (PROFILES["openai"] if base_url is None else None)
        self.name = f"openai:{model or self.base_url}"
        self._aclient: Any = None
        self._aloop: Any = None
        """The async client and the event loop it was made on (see `_async_client`)."""

    @property
    def profile(self) -> Profile:
        if self._profile is None:
            self._profile = PROFILES[self._detect()]
        return self._profile

    def _detect(self) -> str:
        """Ask the server what it is; fall back to prompt-then-validate, which every server supports (a
        server with no GET /models included)."""
        try:
            return self._profile_of(self._request(lambda: list(self.client.models.list()), reading=False))
        except _NoModelList:
            return "prompt"

    async def _adetect(self, client: Any) -> None:
        """`_detect` on the async client, so a coroutine's first call does not block its event loop."""

        async def listed() -> list[Any]:
            return [m async for m in client.models.list()]

        try:
            self._profile = PROFILES[self._profile_of(await self._arequest(listed, reading=False))]
        except _NoModelList:
            self._profile = PROFILES["prompt"]

    def _profile_of(self, models: list[Any]) -> str:
        """The profile for the server that listed `models` (GET /models); fills in the model if none was given."""
        if not self.model and models:
            self.model = models[0].id
        owner = next((m.owned_by for m in models if m.id == self.model), models[0].owned_by if models else "")
        return _OWNERS.get(str(owner).lower(), "prompt")

    def _request(self, send: Any, *, reading: bool = True) -> Any:
        try:
            return send()
        except Exception as exc:  # noqa: BLE001 - every failure of the call is a typed reflexa error
            raise self._error(exc, reading) from None

    async def _arequest(self, send: Any, *, reading: bool = True) -> Any:
        try:
            return await send()
        except Exception as exc:  # noqa: BLE001 - every failure of the call is a typed reflexa error
            raise self._error(exc, reading) from None

    def _error(self, exc: Exception, reading: bool = True) -> Exception:
        """The reflexa error for a failed call. `reading` False (the profile probe): a server without
        GET /models is _NoModelList, not a missing model."""
        import openai

        if isinstance(exc, ReflexaError):
            return exc
        if not reading and isinstance(exc, openai.NotFoundError):
            return _NoModelList()
        if isinstance(exc, openai.APITimeoutError):
            return RequestTimedOut(f"the model server at {self.base_url} did not answer in time",
                                   hint="is the server overloaded? (a longer timeout: timeout=)")
        if isinstance(exc, openai.APIConnectionError):
            return ModelUnavailable(f"cannot reach the model server at {self.base_url}: {exc}",
                                    hint="is the server running?")
        if isinstance(exc, openai.AuthenticationError):
            return ModelError("the server refused the API key", hint="check OPENAI_API_KEY")
        if isinstance(exc, openai.NotFoundError):
            return ModelError(f"model {self.model!r} not found at {self.base_url}", hint="check the model name")
        if isinstance(exc, openai.APIStatusError):
            return ModelUnavailable(f"the model server answered HTTP {exc.status_code}: {exc.message}")
        # Anything else: a reply the SDK or reflexa could not read (HTML for JSON, an error event mid-stream,
        # a chunk without choices). It is the server's answer that is wrong, not reflexa: say so.
        return ModelError(f"the model server's reply could not be read: {type(exc).__name__}: {str(exc)[:200]}")

    def _arguments(self, messages: list[Message], json_schema: dict[str, Any] | None, max_tokens: int,
                   temperature: float) -> dict[str, Any]:
        """The chat-completions request: the schema in the form this server's profile takes."""
        profile = self.profile  # may fill self.model from the server's list
        kwargs: dict[str, Any] = {"model": self.model, "max_tokens": max_tokens, "temperature": temperature}
        if temperature > 0:
            kwargs["seed"] = self.seed
        if profile.extra_body:
            kwargs["extra_body"] = profile.extra_body
        if json_schema is not None:
            mode = profile.schema_mode
            if mode == "json_schema":
                kwargs["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": "reply", "schema": json_schema},
                }
            elif mode == "json_object":
                kwargs["response_format"] = {"type": "json_object", "schema": json_schema}
            elif mode == "tool":
                kwargs["tools"] = [{"type": "function", "function": {"name": "reply", "parameters": json_schema}}]
                kwargs["tool_choice"] = {"type": "function", "function": {"name": "reply"}}
            if mode in ("prompt", "json_object"):
                # The schema also goes into the prompt, so the model knows the field names.
                messages = [{"role": "system", "content": schema_instruction(json_schema)}, *messages]
        # reflexa's messages are plain role/content dicts, which the SDK's TypedDict union accepts at run time.
        kwargs["messages"] = cast("list[ChatCompletionMessageParam]", messages)
        return kwargs

    def _generate(
        self, messages: list[Message], json_schema: dict[str, Any] | None, max_tokens: int, temperature: float,
        on_token: OnToken | None = None, time_left: float | None = None,
    ) -> Generation:
        kwargs = self._arguments(messages, json_schema, max_tokens, temperature)
        client, bounded = within(self.client, time_left)
        try:
            if on_token is not None and self.profile.stream:
                return self._request(lambda: _streamed(client.chat.completions.create(
                    stream=True, stream_options={"include_usage": True}, **kwargs), kwargs["messages"], on_token))
            return self._request(lambda: _generation(client.chat.completions.create(**kwargs)))
        except RequestTimedOut:
            if bounded:  # the request outlived the time the run had left
                return timed_out(kwargs["messages"])
            raise

    async def _agenerate(
        self, messages: list[Message], json_schema: dict[str, Any] | None, max_tokens: int, temperature: float,
        time_left: float | None = None, **extra: Any,
    ) -> Generation:
        """The same request on the SDK's async client: no thread per call in flight. The server's profile
        is detected on that client too, before the first call (concurrent first calls may each ask)."""
        client = self._async_client()
        if self._profile is None:
            await self._adetect(client)
        kwargs = self._arguments(messages, json_schema, max_tokens, temperature)
        bounded_client, bounded = within(client, time_left)
        try:
            reply = await self._arequest(lambda: bounded_client.chat.completions.create(**kwargs))
        except RequestTimedOut:
            if bounded:
                return timed_out(kwargs["messages"])
            raise
        return self._request(lambda: _generation(reply))

    def _async_client(self) -> Any:
        """An async client for the running event loop: an httpx pool belongs to the loop it was made on."""
        import asyncio

        import openai

        loop = asyncio.get_running_loop()
        if self._aloop is not loop:
            sync = self.client
            self._aclient = openai.AsyncOpenAI(base_url=self.base_url, api_key=sync.api_key, timeout=sync.timeout,
                                               max_retries=sync.max_retries)
            self._aloop = loop
        return self._aclient


class RequestTimedOut(ModelUnavailable):
    """The server did not answer within the request's timeout."""


class _NoModelList(Exception):  # noqa: N818 - a signal between two methods, never raised to a caller
    """The server has no GET /models: its profile cannot be detected."""


def _generation(out: Any) -> Generation:
    """A plain (not streamed) chat completion as a Generation: the text, or the forced tool's arguments."""
    if not out.choices:  # a server that answered with no choice at all
        raise ModelError("the model server's reply has no choices")
    choice = out.choices[0]
    text = choice.message.content or ""
    if choice.message.tool_calls:
        text = choice.message.tool_calls[0].function.arguments
    usage = out.usage
    finish = "length" if choice.finish_reason == "length" else "stop"
    # A server may send usage with null counts: 0, not None (the budget meter adds them up).
    return Generation(text, (usage.prompt_tokens or 0) if usage else 0, (usage.completion_tokens or 0) if usage else 0,
                      finish)


def _streamed(chunks: Any, messages: list[Message], on_token: OnToken) -> Generation:
    """Read a streamed reply as the plain request would: the text (or, when the server called the forced
    tool, its arguments), the finish reason, and the usage the last chunk carries. A server that sends no
    usage gets an estimate: one token per chunk out (servers send about one a chunk), four characters a
    token in."""
    content: list[str] = []
    arguments: list[str] = []
    finish, usage, pieces = "stop", None, 0
    for chunk in chunks:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in (chunk.choices or [])[:1]:  # a chunk may carry usage only, with null choices
            delta = choice.delta
            call = delta.tool_calls[0].function if delta.tool_calls else None
            for piece, into in ((delta.content, content), (call.arguments if call else None, arguments)):
                if piece:
                    into.append(piece)
                    pieces += 1
                    on_token(piece)
            if choice.finish_reason:
                finish = "length" if choice.finish_reason == "length" else "stop"
    text = "".join(arguments) if arguments else "".join(content)
    if usage is not None and usage.prompt_tokens is not None:
        return Generation(text, usage.prompt_tokens, usage.completion_tokens or 0, finish)
    prompt = sum(len(str(m.get("content", ""))) for m in messages)
    return Generation(text, (prompt + 3) // 4, pieces, finish)
