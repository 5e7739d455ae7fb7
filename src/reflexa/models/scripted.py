"""ScriptedModel: a queue of replies for tests and docs. It records every prompt it gets."""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import ConfigError, ModelError
from ..structured import Message
from .base import Generation, Model, OnToken

Reply = str | dict[str, Any] | list[Any] | Exception


def estimate_tokens(text: str) -> int:
    """About four characters a token: close enough for budgets in tests."""
    return max(1, (len(text) + 3) // 4)


class ScriptedModel(Model):
    """Replays queued replies in order.

    A reply is a string (sent as is), a dict or list (sent as JSON) or an exception (raised, to inject
    backend faults). A reply longer than the call's max_tokens is cut and finishes with "length", as a
    real model would. When the queue is empty, `default` is used; without one, the call is a ModelError.

    It streams like a real backend: `on_token` gets the reply in pieces of STREAM_CHARS characters.
    `delay` (seconds) makes each call take that long, spread evenly over those pieces, so a test can
    watch a slow run (a live view, Ctrl-C) without a real model.
    """

    name = "scripted"
    streams = True
    STREAM_CHARS = 4
    """Characters per streamed piece: about one token (see `estimate_tokens`)."""

    def __init__(self, replies: Iterable[Reply] = (), *, default: Reply | None = None, delay: float = 0.0) -> None:
        if delay < 0:
            raise ConfigError(f"scripted delay must be 0 or more seconds, not {delay}")
        self.queue: deque[Reply] = deque(replies)
        self.default = default
        self.delay = delay
        self.prompts: list[list[Message]] = []
        self.schemas: list[dict[str, Any] | None] = []

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedModel:
        """Replies from a UTF-8 JSON file holding a list, or an object {"replies": [...], "delay": SECONDS}.
        Anything else is a ConfigError."""
        hint = 'give a JSON file holding a list of replies (or {"replies": [...], "delay": 1.5}): scripted:FILE.json'
        try:
            replies = json.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"scripted replies file not found: {path}", hint=hint) from None
        except IsADirectoryError:
            raise ConfigError(f"scripted replies path is a directory: {path}", hint=hint) from None
        except OSError as exc:
            raise ConfigError(f"cannot read scripted replies file {path}: {exc.strerror or exc}", hint=hint) from None
        except UnicodeDecodeError:
            raise ConfigError(f"scripted replies file is not UTF-8 text: {path}", hint=hint) from None
        except json.JSONDecodeError as exc:
            raise ConfigError(f"scripted replies file is not JSON: {path}: {exc}", hint=hint) from None
        except RecursionError:
            raise ConfigError(f"scripted replies file is JSON nested too deeply to read: {path}", hint=hint) from None
        delay: Any = 0.0
        if isinstance(replies, dict) and set(replies) <= {"replies", "delay"}:
            delay = replies.get("delay", 0.0)
            replies = replies.get("replies")
            if isinstance(delay, bool) or not isinstance(delay, int | float) or delay < 0:
                raise ConfigError(f"scripted delay must be a number of seconds, 0 or more: {path}", hint=hint)
        if not isinstance(replies, list):
            raise ConfigError(f"scripted replies file must hold a JSON list: {path}", hint=hint)
        return cls(replies, delay=float(delay))

    def enqueue(self, *replies: Reply) -> ScriptedModel:
        self.queue.extend(replies)
        return self

    @property
    def calls(self) -> int:
        return len(self.prompts)

    def _generate(
        self, messages: list[Message], json_schema: dict[str, Any] | None, max_tokens: int, temperature: float,
        on_token: OnToken | None = None,
    ) -> Generation:
        self.prompts.append([dict(m) for m in messages])
        self.schemas.append(json_schema)
        if self.queue:
            reply = self.queue.popleft()
        elif self.default is not None:
            reply = self.default
        else:
            raise ModelError("the scripted model has no replies left")
        if isinstance(reply, Exception):
            raise reply
        text = reply if isinstance(reply, str) else json.dumps(reply)
        finish = "stop"
        if estimate_tokens(text) > max_tokens:
            text, finish = text[: max_tokens * 4], "length"
        self._stream(text, on_token)
        prompt = "".join(m.get("content", "") for m in messages)
        return Generation(text, estimate_tokens(prompt), estimate_tokens(text), finish)

    def _stream(self, text: str, on_token: OnToken | None) -> None:
        """Hand `text` to `on_token` piece by piece, taking `delay` seconds in all (slept even without a
        listener, so a call takes as long either way)."""
        pieces = [text[i:i + self.STREAM_CHARS] for i in range(0, len(text), self.STREAM_CHARS)] or [""]
        pause = self.delay / len(pieces)
        for piece in pieces:
            if pause:
                time.sleep(pause)
            if on_token is not None and piece:
                on_token(piece)
