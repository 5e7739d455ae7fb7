"""The Model seam: one narrow interface every backend implements."""

from __future__ import annotations

import asyncio
import copy
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..structured import Message, Schema, json_schema_of, parse
from ..types import Usage, valid_text

TIME_UP = "time"
"""The finish reason of a call a backend ended because its `time_left` ran out: the reply is unfinished."""


@dataclass(slots=True)
class Completion:
    """A model's reply. With a schema, `value` is the validated value, or None and `error` says why."""

    text: str
    value: Any = None
    usage: Usage = field(default_factory=Usage)
    finish_reason: str = "stop"
    """"stop"; "length" when the reply was cut off at max_tokens; TIME_UP when the backend ended the call
    at the time it was given (`Model.stops_in_time`)."""
    error: str | None = None

    @property
    def truncated(self) -> bool:
        """The reply was cut off at max_tokens: with a schema, re-ask for a shorter answer rather than
        read a cut-off JSON value as a model mistake."""
        return self.finish_reason == "length"


@dataclass(frozen=True, slots=True)
class Generation:
    """What a backend returns before reflexa parses it."""

    text: str
    input_tokens: int
    output_tokens: int
    finish_reason: str = "stop"


OnToken = Callable[[str], None]
"""Called with each piece of a reply's text as the backend produces it (a live view; never the result)."""


class Model(ABC):
    """A chat model. Subclasses implement `_generate`; parsing and validation live here, once."""

    name: str = "model"
    spec: str | None = None
    """The spec string `resolve` built it from (a file in it made absolute): what a resumed run rebuilds
    its model from. None for a model made in Python."""
    streams: ClassVar[bool] = False
    """The backend's `_generate` takes `on_token=` and calls it with each piece of text as it comes.
    Backends that cannot stream leave this False and are never passed one (so a plugin's `_generate`
    written before streaming existed keeps working)."""
    stops_in_time: ClassVar[bool] = False
    """The backend's `_generate` takes `time_left=` (seconds) and ends the call by then: a run's time budget
    then stops a call already under way. Every other backend's call finishes first."""
    answers_by_role: ClassVar[bool] = False
    """The backend's `_generate` takes `role=` (generator, reflector, planner, evaluator): the test model
    answers each role from its own script. Every other backend leaves this False and is never passed one."""
    replies_by_prompt: ClassVar[bool] = True
    """The same prompt, settings and seed give the same reply, so an eval may give one call's reply to every
    strategy that makes the same call (`reflexa.eval.calls`). False for the test model, whose replies follow
    a script."""
    seed: int = 0
    """The seed of a call sampled at a temperature above 0, on backends that take one (the local model, an
    OpenAI-compatible server): the same prompt, temperature and seed give the same reply."""

    @property
    def parameters(self) -> float | None:
        """The model's parameters in billions, where known (a local model's, read from its weights): what an
        eval's compute column multiplies its tokens by. None for a remote or test model."""
        return None

    def reseeded(self, seed: int) -> Model:
        """This model with another sampling seed (a shallow copy: the loaded weights and connections are
        shared): what gives independent samples of one prompt."""
        twin = copy.copy(self)
        twin.seed = seed
        return twin

    def complete(
        self,
        messages: list[Message],
        *,
        schema: Schema | None = None,
        max_tokens: int = 512,
        temperature: float = 0.0,
        on_token: OnToken | None = None,
        role: str | None = None,
        time_left: float | None = None,
    ) -> Completion:
        """One model call. With `schema` (a pydantic model class or a JSON schema dict) the backend is
        asked to follow it and the reply is validated; a reply that fails validation is returned with
        `value=None` and an `error`, never raised. `on_token`, where the backend streams, sees the reply's
        text piece by piece while it is produced; the Completion is the same with or without it. `role`
        says who asks (see `answers_by_role`); `time_left`, how long the call may take (`stops_in_time`)."""
        json_schema = json_schema_of(schema) if schema is not None else None
        extra = self._extra(role, time_left)
        if on_token is not None and self.streams:
            extra["on_token"] = on_token
        gen = self._generate(messages, json_schema, max_tokens, temperature, **extra)
        return completion_of(gen, schema, max_tokens)

    async def acomplete(
        self,
        messages: list[Message],
        *,
        schema: Schema | None = None,
        max_tokens: int = 512,
        temperature: float = 0.0,
        on_token: OnToken | None = None,
        role: str | None = None,
        time_left: float | None = None,
    ) -> Completion:
        """The async twin of `complete`, awaiting `_agenerate`. It does not stream: `on_token`, if given,
        sees the whole reply once, when it is complete."""
        json_schema = json_schema_of(schema) if schema is not None else None
        extra = self._extra(role, time_left)
        gen = await self._agenerate(messages, json_schema, max_tokens, temperature, **extra)
        if on_token is not None:
            on_token(gen.text)
        return completion_of(gen, schema, max_tokens)

    def _extra(self, role: str | None, time_left: float | None) -> dict[str, Any]:
        """The keywords this backend's `_generate` takes beyond the four every backend does."""
        extra: dict[str, Any] = {"role": role} if self.answers_by_role else {}
        if self.stops_in_time and time_left is not None:
            extra["time_left"] = time_left
        return extra

    async def _agenerate(
        self, messages: list[Message], json_schema: dict[str, Any] | None, max_tokens: int, temperature: float,
        **extra: Any,
    ) -> Generation:
        """The raw reply, awaited: `_generate` in a worker thread, unless the backend has a native async
        client and overrides this (an HTTP backend then needs no thread per call in flight)."""
        return await asyncio.to_thread(self._generate, messages, json_schema, max_tokens, temperature, **extra)

    @abstractmethod
    def _generate(
        self, messages: list[Message], json_schema: dict[str, Any] | None, max_tokens: int, temperature: float
    ) -> Generation:
        """Produce the raw reply. Raise ModelError subclasses for backend faults."""


MIN_REQUEST_SECONDS = 0.1
"""The shortest timeout a request is given, however little time the run has left."""


def within(client: Any, time_left: float | None) -> tuple[Any, bool]:
    """An SDK client (openai's or anthropic's) for a call that must end within `time_left` seconds: one
    try, timed out by then. True when that bound is tighter than the client's own timeout: a time-out is
    then the time budget's end (`timed_out`), not a slow server."""
    own = client.timeout  # seconds, an httpx Timeout, or None (no limit)
    own = getattr(own, "read", own)
    if time_left is None or (isinstance(own, int | float) and time_left >= own):
        return client, False
    return client.with_options(timeout=max(time_left, MIN_REQUEST_SECONDS), max_retries=0), True


def timed_out(messages: list[Message]) -> Generation:
    """A call ended at the time budget's end: no reply, its prompt's tokens estimated (four characters
    a token), as the server counted them and never said."""
    prompt = sum(len(str(m.get("content", ""))) for m in messages)
    return Generation("", (prompt + 3) // 4, 0, TIME_UP)


def schema_instruction(json_schema: dict[str, Any]) -> str:
    """A system-prompt line asking for JSON that follows a schema, for backends that cannot enforce it."""
    import json

    return "Reply with one JSON object only, following this JSON schema:\n" + json.dumps(json_schema)


def completion_of(gen: Generation, schema: Schema | None, max_tokens: int) -> Completion:
    """A Completion from a raw reply: usage counted, and with a schema the value validated (never raised)."""
    text = valid_text(gen.text)  # a reply cut mid-character, or a JSON "\ud800", must not break what encodes it
    completion = Completion(text, usage=Usage(gen.input_tokens, gen.output_tokens, 1), finish_reason=gen.finish_reason)
    if schema is not None:
        completion.value, completion.error = parse(text, schema)
        if completion.value is None and gen.finish_reason == "length":
            completion.error = f"reply cut off at max_tokens={max_tokens} ({completion.error})"
        elif completion.value is None and gen.finish_reason == TIME_UP:
            completion.error = f"reply cut off when the time budget ran out ({completion.error})"
    return completion
