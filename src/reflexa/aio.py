"""Loops as coroutines: many sessions on one event loop, each model call awaited, no thread per session.

    >>> import asyncio
    >>> from reflexa import RegexCheck, Session, aio, refine, resolve_model
    >>> model = aio.limited(resolve_model("openai:http://127.0.0.1:8000/v1#qwen"), 8)  # 8 calls in flight at most
    >>> async def main(tasks):
    ...     return await asyncio.gather(*(aio.run(refine, task, [RegexCheck("GOOD")], session=Session(model=model))
    ...                                   for task in tasks))

Every loop is plain synchronous control flow, one screen each; an async copy of each would be a second
engine to keep in step. Instead `aio.run` runs the loop in a greenlet (SQLAlchemy's asyncio layer does the
same): when the loop calls its model, the greenlet hands the call back to the coroutine, which awaits the
model's `acomplete` on the event loop and switches back in with the reply. An HTTP backend's async client
(`openai`) then keeps every call in flight on one thread, under the per-backend connection limit.

Limits: only model calls yield to the event loop. Checks, tools, searches and store writes run where the
loop is, on the event loop's thread, so a slow check holds up the other sessions for its duration (use
threads or `reflexa batch` for check-heavy work). The embedded model decodes one prompt at a time; its
calls go to a worker thread, so coroutines gain nothing over one session there: give it processes.
Needs the `greenlet` package (extra `async`).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from .models.base import Completion, Model, OnToken
from .models.limit import limited
from .structured import Message, Schema

T = TypeVar("T")

__all__ = ["limited", "run"]
"""`run` a loop as a coroutine; `limited(model, n)` keeps at most n of a backend's calls in flight."""


async def run(loop: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """`loop(*args, **kwargs)` as a coroutine: its model calls are awaited on the running event loop. Any
    loop (`refine`, `research`, `react`, `trials`, `plan`) or function that makes model calls through a
    Session works; its result, or its exception, is the coroutine's."""
    session = _session_class()(loop)
    # The caller's context variables (its current span, a request id), copied as asyncio copies them into a
    # task: a new greenlet would otherwise start from an empty context.
    session.gr_context = contextvars.copy_context()
    pending = session.switch(*args, **kwargs)
    while not session.dead:
        try:
            reply = await pending
        except BaseException as exc:  # noqa: BLE001 - the loop sees the call's error where it made the call
            pending = session.throw(exc)
        else:
            pending = session.switch(reply)
    return pending


def complete(model: Model, messages: list[Message], *, schema: Schema | None, max_tokens: int,
             temperature: float, on_token: OnToken | None, role: str | None = None,
             time_left: float | None = None) -> Completion:
    """`model.complete(...)`; inside a loop that `run` drives, `model.acomplete(...)` awaited by it."""
    getcurrent = _getcurrent()
    current = getcurrent() if getcurrent is not None else None
    if current is None or not isinstance(current, _session_class()):
        return model.complete(messages, schema=schema, max_tokens=max_tokens, temperature=temperature,
                              on_token=on_token, role=role, time_left=time_left)
    call: Awaitable[Completion] = model.acomplete(messages, schema=schema, max_tokens=max_tokens,
                                                  temperature=temperature, on_token=on_token, role=role,
                                                  time_left=time_left)
    return current.parent.switch(call)


def sleep(seconds: float) -> None:
    """`time.sleep(seconds)`; inside a loop that `run` drives, `asyncio.sleep` awaited by it, so a backoff
    does not hold up the other sessions on the event loop."""
    getcurrent = _getcurrent()
    current = getcurrent() if getcurrent is not None else None
    if current is None or not isinstance(current, _session_class()):
        time.sleep(seconds)
        return
    current.parent.switch(asyncio.sleep(seconds))


@functools.cache
def _getcurrent() -> Callable[[], Any] | None:
    try:
        from greenlet import getcurrent
    except ImportError:
        return None
    return getcurrent


@functools.cache
def _session_class() -> Any:
    """The greenlet a session runs in: its own class, so a model call knows `run` is driving it."""
    try:
        from greenlet import greenlet
    except ImportError:
        from .errors import ConfigError

        raise ConfigError("running loops as coroutines needs the greenlet package",
                          hint="pip install 'reflexa[async]'") from None
    return type("Session", (greenlet,), {"__doc__": "A loop run by reflexa.aio.run."})
