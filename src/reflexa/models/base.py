"""The Model seam: one narrow interface every backend implements."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..structured import Message, Schema, json_schema_of, parse
from ..types import Usage, valid_text


@dataclass(slots=True)
class Completion:
    """A model's reply. With a schema, `value` is the validated value, or None and `error` says why."""

    text: str
    value: Any = None
    usage: Usage = field(default_factory=Usage)
    finish_reason: str = "stop"
    """"stop", or "length" when the reply was cut off at max_tokens."""
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
    answers_by_role: ClassVar[bool] = False
    """The backend's `_generate` takes `role=` (generator, reflector, planner, evaluator): the test model
    answers each role from its own script. Every other backend leaves this False and is never passed one."""

    def complete(
        self,
        messages: list[Message],
        *,
        schema: Schema | None = None,
        max_tokens: int = 512,
        temperature: float = 0.0,
        on_token: OnToken | None = None,
        role: str | None = None,
    ) -> Completion:
        """One model call. With `schema` (a pydantic model class or a JSON schema dict) the backend is
        asked to follow it and the reply is validated; a reply that fails validation is returned with
        `value=None` and an `error`, never raised. `on_token`, where the backend streams, sees the reply's
        text piece by piece while it is produced; the Completion is the same with or without it. `role`
        says who asks (see `answers_by_role`)."""
        json_schema = json_schema_of(schema) if schema is not None else None
        extra: dict[str, Any] = {"role": role} if self.answers_by_role else {}
        if on_token is not None and self.streams:
            extra["on_token"] = on_token
        gen = self._generate(messages, json_schema, max_tokens, temperature, **extra)
        return _completion(gen, schema, max_tokens)

    async def acomplete(
        self,
        messages: list[Message],
        *,
        schema: Schema | None = None,
        max_tokens: int = 512,
        temperature: float = 0.0,
        on_token: OnToken | None = None,
        role: str | None = None,
    ) -> Completion:
        """The async twin of `complete`, awaiting `_agenerate`. It does not stream: `on_token`, if given,
        sees the whole reply once, when it is complete."""
        json_schema = json_schema_of(schema) if schema is not None else None
        extra: dict[str, Any] = {"role": role} if self.answers_by_role else {}
        gen = await self._agenerate(messages, json_schema, max_tokens, temperature, **extra)
        if on_token is not None:
            on_token(gen.text)
        return _completion(gen, schema, max_tokens)

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


def schema_instruction(json_schema: dict[str, Any]) -> str:
    """A system-prompt line asking for JSON that follows a schema, for backends that cannot enforce it."""
    import json

    return "Reply with one JSON object only, following this JSON schema:\n" + json.dumps(json_schema)


def _completion(gen: Generation, schema: Schema | None, max_tokens: int) -> Completion:
    """A Completion from a raw reply: usage counted, and with a schema the value validated (never raised)."""
    text = valid_text(gen.text)  # a reply cut mid-character, or a JSON "\ud800", must not break what encodes it
    completion = Completion(text, usage=Usage(gen.input_tokens, gen.output_tokens, 1), finish_reason=gen.finish_reason)
    if schema is not None:
        completion.value, completion.error = parse(text, schema)
        if completion.value is None and gen.finish_reason == "length":
            completion.error = f"reply cut off at max_tokens={max_tokens} ({completion.error})"
    return completion
