"""Calls shared across an eval's strategies: on one task, every strategy's first attempt is the same greedy
call (and `refine` and `refine:reflect=off` share more), so the eval makes it once and gives its reply to
each strategy that makes it again. With a store, the calls outlive the eval's process: a strategy added later,
or a task run again after an interruption, reads back the calls an earlier run of the same eval made.

Each strategy is billed as if it had made the call: its tokens and calls count in full, and the seconds the
call took when it was made are added to the strategy's time (`Ledger`). So a row reads the same as in an
eval that shares nothing, on a backend whose replies are a function of the prompt (`Model.replies_by_prompt`:
the embedded model, greedy or at a fixed seed). A call with a time limit (`--max-seconds`) is never shared:
its reply depends on the time left.
"""

from __future__ import annotations

import copy
import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ..models.base import Completion, Generation, Model, OnToken, completion_of
from ..models.limit import LimitedModel
from ..structured import Message, Schema, json_schema_of
from ..trace.store import Store


@dataclass(slots=True)
class Ledger:
    """What one strategy's shared calls cost when they were made."""

    seconds: float = 0.0
    calls: int = 0


@dataclass(slots=True)
class CallCache:
    """One task's calls, by everything that decides a reply; with `store`, kept in its namespace `ns` too,
    so another process of the same eval finds them (the raw reply is kept, and a schema's value is validated
    again when read back)."""

    replies: dict[str, tuple[Completion, float]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    store: Store | None = None
    ns: str = ""

    def get(self, key: str, schema: Schema | None, max_tokens: int) -> tuple[Completion, float] | None:
        with self.lock:
            hit = self.replies.get(key)
        if hit is not None or self.store is None:
            return hit
        kept = self.store.get(self.ns, _digest(key)) or {}
        try:
            raw = Generation(str(kept["text"]), int(kept["input_tokens"]), int(kept["output_tokens"]),
                             str(kept["finish_reason"]))
            hit = (completion_of(raw, schema, max_tokens), float(kept["seconds"]))
        except (KeyError, TypeError, ValueError):  # none kept, or a record this code did not write: make the call
            return None
        with self.lock:
            self.replies[key] = hit
        return hit

    def put(self, key: str, reply: Completion, seconds: float) -> None:
        with self.lock:
            self.replies[key] = (copy.deepcopy(reply), seconds)
        if self.store is not None:
            self.store.put(self.ns, _digest(key), {
                "text": reply.text, "input_tokens": reply.usage.input_tokens,
                "output_tokens": reply.usage.output_tokens, "finish_reason": reply.finish_reason,
                "seconds": seconds})


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _follows_prompt(model: Model) -> bool:
    """The backend's `replies_by_prompt`, under any connection limit wrapped around it."""
    while isinstance(model, LimitedModel):
        model = model.inner
    return model.replies_by_prompt


class SharedCalls(Model):
    """`inner`, with each deterministic call answered from `cache` when made before on this task."""

    def __init__(self, inner: Model, cache: CallCache, ledger: Ledger) -> None:
        self.inner, self.cache, self.ledger = inner, cache, ledger
        self.name, self.spec, self.seed = inner.name, inner.spec, inner.seed

    @property
    def parameters(self) -> float | None:
        return self.inner.parameters

    def reseeded(self, seed: int) -> Model:
        twin = copy.copy(self)  # the same cache and ledger
        twin.inner, twin.seed = self.inner.reseeded(seed), seed
        return twin

    def complete(self, messages: list[Message], *, schema: Schema | None = None, max_tokens: int = 512,
                 temperature: float = 0.0, on_token: OnToken | None = None, role: str | None = None,
                 time_left: float | None = None) -> Completion:
        key = self._key(messages, schema, max_tokens, temperature, time_left)
        if key is not None and (hit := self._hit(key, schema, max_tokens)) is not None:
            return hit
        started = time.monotonic()
        reply = self.inner.complete(messages, schema=schema, max_tokens=max_tokens, temperature=temperature,
                                    on_token=on_token, role=role, time_left=time_left)
        return self._keep(key, reply, started)

    async def acomplete(self, messages: list[Message], *, schema: Schema | None = None, max_tokens: int = 512,
                        temperature: float = 0.0, on_token: OnToken | None = None, role: str | None = None,
                        time_left: float | None = None) -> Completion:
        key = self._key(messages, schema, max_tokens, temperature, time_left)
        if key is not None and (hit := self._hit(key, schema, max_tokens)) is not None:
            return hit
        started = time.monotonic()
        reply = await self.inner.acomplete(messages, schema=schema, max_tokens=max_tokens, temperature=temperature,
                                           on_token=on_token, role=role, time_left=time_left)
        return self._keep(key, reply, started)

    def _key(self, messages: list[Message], schema: Schema | None, max_tokens: int, temperature: float,
             time_left: float | None) -> str | None:
        """What decides the reply, or None for a call that is never shared."""
        if time_left is not None or not _follows_prompt(self.inner):
            return None
        return json.dumps([self.inner.spec, self.inner.seed if temperature > 0 else None, temperature, max_tokens,
                           messages, json_schema_of(schema) if schema is not None else None], default=str)

    def _hit(self, key: str, schema: Schema | None, max_tokens: int) -> Completion | None:
        hit = self.cache.get(key, schema, max_tokens)
        if hit is None:
            return None
        self.ledger.seconds += hit[1]
        self.ledger.calls += 1
        return copy.deepcopy(hit[0])  # each strategy gets a reply of its own to use as it likes

    def _keep(self, key: str | None, reply: Completion, started: float) -> Completion:
        if key is not None:
            self.cache.put(key, reply, time.monotonic() - started)
        return reply

    def _generate(self, messages: list[Message], json_schema: dict[str, Any] | None, max_tokens: int,
                  temperature: float) -> Generation:
        """Required by Model; `complete` above goes to the inner model's own."""
        return self.inner._generate(messages, json_schema, max_tokens, temperature)
