"""MCP servers as tools: a stdio server reflexa starts and stops, or a streamable HTTP one at a URL.

Each server's tools join a run's registry with their own JSON schemas, so a bad call is a SCHEMA signal
before anything is sent. A tool not annotated read-only is side-effecting (MCP's own default: a tool may
change the world unless it says it does not), so it gets an idempotency key and a resume never repeats it.
MCP errors and timeouts become reflexa's error codes; output is capped and fenced as data like any tool's.

The SDK is asynchronous and a loop calls tools from a thread: each server's client lives on an event loop
of its own, in a daemon thread, and a call waits on it with the tool's timeout.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import copy
import json
import logging
import re
import shlex
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, create_model, model_validator

from ..errors import ConfigError
from ..structured import schema_error
from ..types import ErrorCode, cap, valid_text
from .registry import RESERVED, TOOL_TIMEOUT, Abandoned, Tool, ToolError

CONNECT_TIMEOUT = 30.0
"""Seconds a server has to start, answer the handshake and list its tools."""
CLOSE_TIMEOUT = 5.0
"""Seconds a server has to shut down before its process is left to the SDK's kill."""
MAX_TOOLS = 64
"""Tools taken from one server; the rest are skipped (a long tool list costs every prompt tokens)."""
MAX_PROPERTIES = 64
"""Arguments a tool's schema may declare; a tool with more is skipped (it would swamp the prompt)."""
MAX_SCHEMA_CHARS = 20_000
"""Characters of a tool's JSON schema; a larger one is skipped."""
INSTRUCTIONS_CHARS = 1000
"""Characters of a server's instructions shown to the model, as its tools' context: fenced as data unless the
server is trusted, since they are a third party's text."""
DESCRIPTION_CHARS = 200
"""Characters of a tool's description shown to the model: its first line, cut here. A description is the
server's text in the prompt, so it is kept short enough not to carry a second set of instructions."""
MAX_OUTPUT_CHARS = 200_000
"""Characters of one call's output kept at all (the model is shown far fewer, and pages through them)."""
SDK_PREFIX = re.compile(r"^Error executing tool \S+: ")
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")
STDERR_TAIL = 600
"""Characters of a stdio server's own error output quoted when it fails to start."""


class MCPClient:
    """A client of an MCP server, whose tools a `react`, `trials` or `plan` run can call.

    `target` is a URL (`http://127.0.0.1:8000/mcp`, streamable HTTP) or a command that starts a stdio server
    (a string, split as a shell would, or a list). Use it as a context manager, or call `close()`; the server
    connects on first use. `timeout` bounds each call (an unanswered call is a TIMEOUT signal), and
    `connect_timeout` the start, handshake and listing (a ConfigError past it). A `trusted` server's tool
    descriptions reach the prompt as written, like a Python tool's; by default they are fenced as data."""

    def __init__(self, target: str | Sequence[str], *, timeout: float = TOOL_TIMEOUT,
                 connect_timeout: float = CONNECT_TIMEOUT, env: dict[str, str] | None = None,
                 cwd: str | Path | None = None, trusted: bool = False) -> None:
        self.target, self.trusted = target, trusted
        self.timeout, self.connect_timeout = timeout, connect_timeout
        self.env, self.cwd = env, cwd
        self.skipped: list[str] = []
        """Tools the server listed and reflexa did not take, each with why."""
        self.instructions = ""
        """What the server says of itself when it connects: its tools' context (Tool.context)."""
        self._listed: list[Any] = []
        self._client: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._held: concurrent.futures.Future[None] | None = None
        self._closing: asyncio.Event | None = None
        self._stderr = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115 - lives with the server
        self._tools: list[Tool] | None = None

    @property
    def name(self) -> str:
        """The target as a user wrote it, for messages."""
        return self.target if isinstance(self.target, str) else shlex.join(self.target)

    def tools(self) -> list[Tool]:
        """The server's tools, connecting first if need be."""
        if self._tools is None:
            self._connect()
            self._tools = [t for t in (self._tool(listed) for listed in self._listed[:MAX_TOOLS]) if t is not None]
            self.skipped += [f"{getattr(t, 'name', '?')}: past the first {MAX_TOOLS} tools"
                             for t in self._listed[MAX_TOOLS:]]
        return self._tools

    def __enter__(self) -> MCPClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the connection, on its own event loop -------------------------------------------------------------

    def _connect(self) -> None:
        _sdk()
        # The SDK logs a server's malformed lines with tracebacks; with no logging configured, Python would
        # print them over the terminal. A handler of its own keeps them for whoever configures logging.
        if not (sdk_log := logging.getLogger("mcp")).handlers:
            sdk_log.addHandler(logging.NullHandler())
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, daemon=True, name="reflexa-mcp").start()
        ready = threading.Event()
        failure: list[BaseException] = []
        self._held = asyncio.run_coroutine_threadsafe(self._hold(ready, failure), self._loop)
        if not ready.wait(self.connect_timeout):
            self.close()
            raise ConfigError(f"MCP server {self.name} did not answer within {self.connect_timeout:g}s"
                              + self._stderr_tail())
        if failure:
            self.close()
            raise ConfigError(f"MCP server {self.name} failed: {_describe(failure[0])}" + self._stderr_tail())

    async def _hold(self, ready: threading.Event, failure: list[BaseException]) -> None:
        """Keep the connection until `close`; a close while it is still opening cancels the opening, so a
        server that never answers is stopped at once."""
        self._closing = asyncio.Event()
        serving = asyncio.ensure_future(self._serve(ready, failure))
        closing = asyncio.ensure_future(self._closing.wait())
        await asyncio.wait({serving, closing}, return_when=asyncio.FIRST_COMPLETED)
        for task in (serving, closing):
            task.cancel()
            with contextlib.suppress(BaseException):
                await task  # the SDK's own cleanup: a stdio server's process is stopped here

    async def _serve(self, ready: threading.Event, failure: list[BaseException]) -> None:
        """Open the client, list the tools, and wait for `close`."""
        from mcp import Client

        assert self._closing is not None
        try:
            async with Client(self._transport(), read_timeout_seconds=self.connect_timeout) as client:
                self._listed = await _list_tools(client)
                self.instructions = valid_text(client.instructions or "")
                self._client = client
                ready.set()
                await self._closing.wait()
        except BaseException as exc:  # noqa: BLE001 - reported to the thread that waits on `ready`
            failure.append(exc)
        finally:
            ready.set()

    def _transport(self) -> Any:
        if isinstance(self.target, str) and re.match(r"https?://", self.target):
            return self.target
        from mcp.client.stdio import StdioServerParameters, stdio_client

        argv = shlex.split(self.target) if isinstance(self.target, str) else list(self.target)
        if not argv:
            raise ConfigError("an MCP server needs a command or a URL")
        # The server's own error output goes to a file, not the terminal a live view owns; a failure quotes it.
        return stdio_client(StdioServerParameters(command=argv[0], args=argv[1:], env=self.env, cwd=self.cwd),
                            errlog=self._stderr)

    def close(self) -> None:
        """Close the connection and stop a stdio server's process."""
        loop, self._loop = self._loop, None
        if loop is None:
            return
        if self._closing is not None:
            loop.call_soon_threadsafe(self._closing.set)
        if self._held is not None:
            try:
                self._held.result(CLOSE_TIMEOUT)
            except BaseException:  # noqa: BLE001 - closing: nothing left to report to
                self._held.cancel()
        loop.call_soon_threadsafe(loop.stop)
        self._client = None

    def _stderr_tail(self) -> str:
        self._stderr.seek(0)
        text = self._stderr.read()[-STDERR_TAIL:].strip()
        return f"; its error output ends: {text}" if text else ""

    # --- tools ------------------------------------------------------------------------------------------

    def _tool(self, listed: Any) -> Tool | None:
        """A registry Tool for one listed MCP tool; None (and a note in `skipped`) when it is not usable."""
        try:
            return self._usable(listed)
        except Exception as exc:  # noqa: BLE001 - a listing no rule foresaw: that tool is left out, not the run
            self.skipped.append(f"{cap(str(getattr(listed, 'name', '?')), 60)}: unusable ({_describe(exc)})")
            return None

    def _usable(self, listed: Any) -> Tool | None:
        name, schema = str(listed.name), listed.input_schema or {"type": "object"}
        text = json.dumps(schema, default=str)
        why = ("not a usable tool name" if not NAME.match(name) else "a name reflexa reserves" if name in RESERVED
               else f"its schema is {len(text):,} characters (at most {MAX_SCHEMA_CHARS:,})"
               if len(text) > MAX_SCHEMA_CHARS
               else f"its schema has {len(schema.get('properties', {})):,} arguments (at most {MAX_PROPERTIES})"
               if len(schema.get("properties", {})) > MAX_PROPERTIES else None)
        if why is None and (problem := _schema_problem(schema)):
            why = problem
        if why is not None:
            self.skipped.append(f"{cap(name, 60)}: {why}")
            return None
        hints = listed.annotations
        read_only = bool(hints is not None and hints.read_only_hint)
        description = valid_text(next(iter((listed.description or "").strip().splitlines()), ""))
        return Tool(name, cap(description, DESCRIPTION_CHARS), self._caller(name), _args_model(name, schema),
                    timeout=self.timeout + 1, side_effect=not read_only, takes_model=True, untrusted=not self.trusted,
                    context=cap(self.instructions, INSTRUCTIONS_CHARS))

    def _caller(self, name: str) -> Any:
        def call(args: BaseModel) -> str:
            return self._call(name, args.model_dump(exclude_unset=True))

        return call

    def _call(self, name: str, args: dict[str, Any]) -> str:
        from mcp.shared.exceptions import MCPError
        from mcp.types import CONNECTION_CLOSED, REQUEST_TIMEOUT

        loop, client = self._loop, self._client
        if loop is None or client is None:
            raise ToolError(ErrorCode.TOOL_ERROR, f"MCP server {self.name} is closed", fatal=True)
        future = asyncio.run_coroutine_threadsafe(client.call_tool(name, args, read_timeout_seconds=self.timeout),
                                                  loop)
        try:
            result = future.result(self.timeout + 0.5)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise Abandoned(f"no answer within {self.timeout:g}s") from None
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                raise Abandoned(f"no answer within {self.timeout:g}s") from None
            if exc.code == CONNECTION_CLOSED:  # the server is gone: no later call can work
                raise ToolError(ErrorCode.TOOL_ERROR, f"MCP server {self.name} closed the connection",
                                fatal=True) from None
            raise ToolError(_code(exc), valid_text(exc.error.message)) from None
        except Exception as exc:  # noqa: BLE001 - a closed connection, a malformed reply
            raise ToolError(ErrorCode.TOOL_ERROR, f"MCP server {self.name}: {_describe(exc)}", fatal=True) from None
        if result.is_error:
            raise _error(result, name)
        return _text(result)


async def _list_tools(client: Any) -> list[Any]:
    """Every tool the server lists, page by page, up to a page past MAX_TOOLS."""
    tools: list[Any] = []
    cursor = None
    while True:
        page = await client.list_tools(cursor=cursor)
        tools += page.tools
        cursor = page.next_cursor
        if not cursor or len(tools) > MAX_TOOLS:
            return tools


class _Args(BaseModel):
    """The arguments of an MCP tool: checked against the server's own JSON schema, which is also what the
    model's action grammar is built from."""

    model_config = ConfigDict(extra="allow")
    schema_: ClassVar[dict[str, Any]] = {}

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return copy.deepcopy(cls.schema_)

    @model_validator(mode="before")
    @classmethod
    def _follows_schema(cls, data: Any) -> Any:
        if (why := schema_error(cls.schema_, data, message_chars=200)) is not None:
            raise ValueError(why)
        return data


def _args_model(name: str, schema: dict[str, Any]) -> type[BaseModel]:
    clean = {k: v for k, v in schema.items() if k not in ("title", "$schema")}
    clean.setdefault("type", "object")
    # Only the declared arguments, as for a Python @tool: the model's grammar then cannot wander into
    # arguments the server never named, and an unknown one is a SCHEMA signal with a close-match repair.
    clean.setdefault("additionalProperties", False)
    required = set(schema.get("required", []))
    # Names pydantic cannot take as fields (model_dump, schema_, _private) are still checked by the schema.
    fields: dict[str, Any] = {key: (Any, ... if key in required else None)
                              for key in schema.get("properties", {}) if _field_name(key)}
    model = create_model(f"{name}_args", __base__=_Args, **fields)
    model.schema_ = clean
    return model


def _dangling_ref(node: Any, root: dict[str, Any]) -> str | None:
    """The first `$ref` in a schema that does not name a part of that same schema (`#/$defs/Item`), else None: a
    reference to anything else cannot be resolved offline, and would fail every call."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if ref is not None and (not isinstance(ref, str) or _pointed(root, ref) is None):
            return str(ref)
        return next((found for value in node.values() if (found := _dangling_ref(value, root)) is not None), None)
    if isinstance(node, list):
        return next((found for value in node if (found := _dangling_ref(value, root)) is not None), None)
    return None


def _pointed(root: dict[str, Any], ref: str) -> Any:
    """The part of `root` a local JSON pointer (`#/$defs/Item`) names, or None."""
    if ref == "#":
        return root
    if not ref.startswith("#/"):
        return None
    node: Any = root
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def _field_name(key: str) -> bool:
    """Whether pydantic can take an argument's name as a field (not `model_dump`, `schema_` or `_private`)."""
    return key.isidentifier() and not key.startswith(("_", "model_")) and not hasattr(_Args, key)


ARG_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
"""An argument name the prompt may show: an identifier. A server's name is its text in the prompt outside the
data fences (`lookup(key: string)`), so one that could carry words (a newline, a colon) is refused."""


def _schema_problem(schema: dict[str, Any]) -> str | None:
    import jsonschema

    if schema.get("type", "object") != "object":
        return "its arguments are not an object"
    if bad := [key for key in schema.get("properties", {}) if not ARG_NAME.match(str(key))]:
        return f"an argument name is no identifier ({cap(repr(str(bad[0])), 40)})"
    if (ref := _dangling_ref(schema, schema)) is not None:
        return f"its schema refers to {cap(repr(ref), 60)}, which it does not define"
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        return f"its schema is invalid: {cap(exc.message, 120)}"
    return None


def _error(result: Any, name: str) -> ToolError:
    """An error result as a ToolError: its text, and reflexa's code, close-match suggestion and fatal flag when
    the server gives them as the result's structured content (`{"code": "NOT_FOUND", "suggestion": {...},
    "fatal": false}`), as a reflexa-aware server may; else a TOOL_ERROR."""
    # The Python SDK's servers put "Error executing tool NAME: " before the tool's own message.
    message = SDK_PREFIX.sub("", _text(result, structured=False), count=1) or f"{name} failed"
    said = result.structured_content if isinstance(result.structured_content, dict) else {}
    code = str(said["code"]) if said.get("code") in ErrorCode.__members__ else "TOOL_ERROR"
    suggestion = said.get("suggestion") if isinstance(said.get("suggestion"), dict) else None
    return ToolError(ErrorCode(code), message, suggestion=suggestion, fatal=said.get("fatal") is True)


def _text(result: Any, *, structured: bool = True) -> str:
    """A call result as text: its text parts, else its structured content as JSON; other parts named."""
    parts: list[str] = []
    for item in result.content or []:
        if getattr(item, "type", None) == "text":
            parts.append(item.text)
        else:
            parts.append(f"[{getattr(item, 'type', 'content')} {getattr(item, 'mime_type', '') or ''}]".strip())
    if not parts and structured and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, default=str, ensure_ascii=False))
    return valid_text("\n".join(parts))[:MAX_OUTPUT_CHARS]


def _code(exc: Any) -> ErrorCode:
    """A JSON-RPC error's code as reflexa's: invalid params, an unknown method, else a tool error."""
    return {-32602: ErrorCode.INVALID_ARGUMENT, -32601: ErrorCode.NOT_FOUND}.get(exc.code, ErrorCode.TOOL_ERROR)


def _describe(exc: BaseException) -> str:
    """One line for an exception, or for the first of an exception group (anyio raises those)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return cap(f"{type(exc).__name__}: {exc}", 300)


def _sdk() -> None:
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise ConfigError("MCP servers need the mcp SDK", hint="pip install 'reflexa[mcp]'") from None
