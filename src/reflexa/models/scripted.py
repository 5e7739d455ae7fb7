"""ScriptedModel: the test model. It answers from scripts of replies (one per role, or one shared), or from
a function per call, and records every prompt it gets.

    ScriptedModel(generator=["```python\\ndef add(a, b):\\n    return a + b\\n```"],
                  reflector=[{"failure_step": ..., "observed_mismatch": ..., "root_cause": ..., "correction": ...}])
    ScriptedModel(function=lambda call: "GOOD" if call.role == "generator" else {...})
    ScriptedModel(["reply 1", "reply 2"])   # one queue for every role, in call order

docs/testing.md shows what each loop's roles expect, with one example per loop.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError, ModelError
from ..files import read_json
from ..structured import Message
from .base import TIME_UP, Generation, Model, OnToken

Reply = str | dict[str, Any] | list[Any] | BaseException
ROLES = ("generator", "reflector", "planner", "evaluator")
"""The roles a script may be given for: those of `reflexa.types.Role` that call a model (a search does not)."""


@dataclass(frozen=True, slots=True)
class ScriptedCall:
    """What a `function` script is called with: one model call."""

    number: int
    """1 for the model's first call, counting every role."""
    role: str | None
    messages: list[Message]
    schema: dict[str, Any] | None
    max_tokens: int


def estimate_tokens(text: str) -> int:
    """About four characters a token: close enough for budgets in tests."""
    return max(1, (len(text) + 3) // 4)


class ScriptedModel(Model):
    """Replays scripted replies.

    A reply is a string (sent as is), a dict or list (sent as JSON) or an exception (raised, to inject
    backend faults). A role given a script of its own (`generator=[...]`, `reflector=[...]`, `planner=[...]`,
    `evaluator=[...]`) takes its replies from it, in order; every other role takes them from the shared
    `replies`, in call order. `function`, instead, is asked for each reply (a `ScriptedCall` in, a reply
    out). When a script is used up, `default` answers; without one, the call is a ModelError that names
    the role. A reply longer than the call's max_tokens is cut and finishes with "length", as a real
    model's would.

    It streams like a real backend: `on_token` gets the reply in pieces of STREAM_CHARS characters.
    `delay` (seconds) makes each call take that long, spread evenly over those pieces, so a test can
    watch a slow run (a live view, Ctrl-C) without a real model. Like the local model it stops in time:
    a call given `time_left` shorter than its delay ends then, with the pieces streamed so far.
    """

    name = "scripted"
    streams = True
    answers_by_role = True
    replies_by_prompt = False
    stops_in_time = True
    STREAM_CHARS = 4
    """Characters per streamed piece: about one token (see `estimate_tokens`)."""

    def __init__(self, replies: Iterable[Reply] = (), *, generator: Iterable[Reply] | None = None,
                 reflector: Iterable[Reply] | None = None, planner: Iterable[Reply] | None = None,
                 evaluator: Iterable[Reply] | None = None, function: Callable[[ScriptedCall], Reply] | None = None,
                 default: Reply | None = None, delay: float = 0.0, parameters: float | None = None) -> None:
        if delay < 0:
            raise ConfigError(f"scripted delay must be 0 or more seconds, not {delay}")
        self.queue: deque[Reply] = deque(replies)
        self.scripts: dict[str, deque[Reply]] = {
            role: deque(script) for role, script in (("generator", generator), ("reflector", reflector),
                                                     ("planner", planner), ("evaluator", evaluator))
            if script is not None}
        self.function = function
        self.default = default
        self.delay = delay
        self._parameters = parameters
        self.prompts: list[list[Message]] = []
        self.schemas: list[dict[str, Any] | None] = []
        self.roles: list[str | None] = []
        """The role of each call, in order."""
        self._lock = threading.Lock()

    @property
    def parameters(self) -> float | None:
        """The size it stands in for (`parameters=`, billions), for a test of an eval's compute column."""
        return self._parameters

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedModel:
        """Replies from a UTF-8 JSON file: a list (one shared script), or an object with `replies` and/or a
        script per role (`generator`, `reflector`, `planner`, `evaluator`), and `delay` in seconds."""
        hint = ('give a JSON file holding a list of replies, or {"generator": [...], "reflector": [...], '
                '"delay": 1.5}: scripted:FILE.json')
        try:
            data = read_json(Path(path), "scripted replies file")
        except ConfigError as exc:
            raise ConfigError(str(exc), hint=hint) from None
        if isinstance(data, list):
            return cls(data)
        if not isinstance(data, dict) or not data:
            raise ConfigError(f"scripted replies file must hold a JSON list, or an object of scripts: {path}",
                              hint=hint)
        if unknown := sorted(set(data) - {"replies", "delay", *ROLES}):
            raise ConfigError(f"scripted replies file {path} has no such script: {', '.join(unknown)}",
                              hint=f"its keys are replies, delay and a script per role: {', '.join(ROLES)}")
        delay = data.get("delay", 0.0)
        if isinstance(delay, bool) or not isinstance(delay, int | float) or delay < 0:
            raise ConfigError(f"scripted delay must be a number of seconds, 0 or more: {path}", hint=hint)
        scripts = {key: value for key, value in data.items() if key != "delay"}
        if not all(isinstance(script, list) for script in scripts.values()):
            raise ConfigError(f"each script in {path} must be a JSON list of replies", hint=hint)
        return cls(scripts.pop("replies", []), delay=float(delay), **scripts)

    def enqueue(self, *replies: Reply) -> ScriptedModel:
        """Add replies to the shared script."""
        self.queue.extend(replies)
        return self

    @property
    def calls(self) -> int:
        return len(self.prompts)

    def _generate(
        self, messages: list[Message], json_schema: dict[str, Any] | None, max_tokens: int, temperature: float,
        on_token: OnToken | None = None, role: str | None = None, time_left: float | None = None,
    ) -> Generation:
        deadline = None if time_left is None else time.monotonic() + time_left
        with self._lock:  # sessions on threads share one test model: each call takes its own reply
            self.prompts.append([dict(m) for m in messages])
            self.schemas.append(json_schema)
            self.roles.append(role)
            reply = self._next(ScriptedCall(len(self.prompts), role, messages, json_schema, max_tokens))
        if isinstance(reply, BaseException):
            raise reply
        text = reply if isinstance(reply, str) else json.dumps(reply)
        finish = "stop"
        if estimate_tokens(text) > max_tokens:
            text, finish = text[: max_tokens * 4], "length"
        if (streamed := self._stream(text, on_token, deadline)) != text:
            text, finish = streamed, TIME_UP
        prompt = "".join(m.get("content", "") for m in messages)
        return Generation(text, estimate_tokens(prompt), estimate_tokens(text), finish)

    def _next(self, call: ScriptedCall) -> Reply:
        if self.function is not None:
            return self.function(call)
        own = self.scripts.get(call.role or "")
        script = own if own is not None else self.queue
        if script:
            return script.popleft()
        if self.default is not None:
            return self.default
        whose = f"the {call.role}'s script" if own is not None else "its script"
        raise ModelError(f"the scripted model has no replies left in {whose} (call {call.number}, "
                         f"role {call.role or 'unknown'})")

    def _stream(self, text: str, on_token: OnToken | None, deadline: float | None = None) -> str:
        """Hand `text` to `on_token` piece by piece, taking `delay` seconds in all (slept even without a
        listener, so a call takes as long either way); the text streamed, which stops at `deadline`."""
        pieces = [text[i:i + self.STREAM_CHARS] for i in range(0, len(text), self.STREAM_CHARS)] or [""]
        pause = self.delay / len(pieces)
        streamed = ""
        for piece in pieces:
            if pause:
                if deadline is not None and time.monotonic() + pause > deadline:
                    time.sleep(max(0.0, deadline - time.monotonic()))
                    return streamed
                time.sleep(pause)
            if on_token is not None and piece:
                on_token(piece)
            streamed += piece
        return streamed
