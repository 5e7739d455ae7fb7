"""A connection limit per backend: at most N calls in flight to one server, however many sessions share it.

Sessions that run side by side in one process (threads, or coroutines under `reflexa.aio`) each call
their model; a server (vLLM, Ollama, llama.cpp's server, a hosted API) serves only so many requests at once
before it queues or refuses them.
`limited(model, n)` wraps a model so that its calls wait for one of `n` slots, and every model that talks
to the same backend (the same base URL, or the same backend name) shares those slots. Threads wait on a
semaphore; coroutines on an asyncio one per event loop, with the same limit (so the limit holds among the
threads, and among each loop's coroutines, not across the two).
"""

from __future__ import annotations

import asyncio
import copy
import threading
import weakref
from typing import Any

from ..structured import Message, Schema
from .base import Completion, Generation, Model, OnToken

_SLOTS: dict[str, tuple[int, threading.BoundedSemaphore]] = {}
_GUARD = threading.Lock()
_ASYNC_SLOTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Semaphore]] = (
    weakref.WeakKeyDictionary())


def backend_key(model: Model) -> str:
    """What identifies a backend for its connection limit: a server's base URL, else the model's name."""
    return str(getattr(model, "base_url", None) or model.name)


def slots(key: str, limit: int) -> threading.BoundedSemaphore:
    """The shared semaphore of a backend; the first limit given for a key is the one that holds."""
    with _GUARD:
        if key not in _SLOTS:
            _SLOTS[key] = (limit, threading.BoundedSemaphore(limit))
        return _SLOTS[key][1]


def async_slots(key: str) -> asyncio.Semaphore:
    """The running event loop's semaphore for a backend, with the limit `slots` holds for it (an asyncio
    semaphore belongs to one loop, so each loop has its own)."""
    per_loop = _ASYNC_SLOTS.setdefault(asyncio.get_running_loop(), {})
    if key not in per_loop:
        per_loop[key] = asyncio.Semaphore(_SLOTS[key][0])
    return per_loop[key]


class LimitedModel(Model):
    """`inner`, with at most `limit` calls in flight per backend among this process's threads, and among
    the coroutines of each event loop (an asyncio semaphore belongs to one loop: threads and coroutines, or
    two loops, each hold the limit on their own). Calls go to `inner.complete`, so it streams as it would
    alone, and a run records `inner`'s spec."""

    def __init__(self, inner: Model, limit: int) -> None:
        if limit < 1:
            raise ValueError("a connection limit is at least 1")
        self.inner = inner
        self.name, self.spec = inner.name, inner.spec
        self.key = backend_key(inner)
        self._slots = slots(self.key, limit)

    @property
    def parameters(self) -> float | None:
        return self.inner.parameters

    def reseeded(self, seed: int) -> Model:
        twin = copy.copy(self)
        twin.inner = self.inner.reseeded(seed)
        return twin

    def complete(self, messages: list[Message], *, schema: Schema | None = None, max_tokens: int = 512,
                 temperature: float = 0.0, on_token: OnToken | None = None, role: str | None = None,
                 time_left: float | None = None) -> Completion:
        with self._slots:
            return self.inner.complete(messages, schema=schema, max_tokens=max_tokens, temperature=temperature,
                                       on_token=on_token, role=role, time_left=time_left)

    async def acomplete(self, messages: list[Message], *, schema: Schema | None = None, max_tokens: int = 512,
                        temperature: float = 0.0, on_token: OnToken | None = None,
                        role: str | None = None, time_left: float | None = None) -> Completion:
        async with async_slots(self.key):
            return await self.inner.acomplete(messages, schema=schema, max_tokens=max_tokens,
                                              temperature=temperature, on_token=on_token, role=role,
                                              time_left=time_left)

    def _generate(self, messages: list[Message], json_schema: dict[str, Any] | None, max_tokens: int,
                  temperature: float) -> Generation:
        """Required by Model; `complete` and `acomplete` above go to the inner model's own."""
        with self._slots:
            return self.inner._generate(messages, json_schema, max_tokens, temperature)


def limited(model: Model, limit: int | None) -> Model:
    """`model` under a per-backend connection limit; unchanged when `limit` is None."""
    return model if limit is None else LimitedModel(model, limit)
