"""Tools an agent may call: typed Python functions, validated before they run, each bounded and capped.

A tool call never raises into the loop. It returns an Observation whose `code` is one of a small closed
set of error codes, so the reflection engine can tell a typo from a permission problem.
"""

from __future__ import annotations

import difflib
import hashlib
import inspect
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from ..errors import ConfigError
from ..types import TAIL_SHARE, Control, ErrorCode, cap, fence_untrusted, strip_controls, valid_text
from . import approval
from .approval import ApprovalRequest, Approver, AwaitingApproval
from .transient import is_transient, retry_after

OUTPUT_CHARS = 2000
"""Characters of a tool's output shown to the model: a longer one shows its first 3/4 and its last 1/4 of
them (types.TAIL_SHARE), the cut marked, and pages show the middle that was cut."""
CONTEXT_CHARS = 2400
"""Characters of the tools' contexts (schemas, API descriptions) a prompt shows at most."""
TOOL_TIMEOUT = 10.0
"""Seconds a tool may run. A Python function cannot be killed, so a timed-out call is abandoned."""


class ToolError(Exception):
    """Raised by a tool to report a failure with a precise code, and optionally a close-match suggestion."""

    def __init__(self, code: ErrorCode, message: str, *, suggestion: dict[str, Any] | None = None,
                 fatal: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.suggestion = suggestion
        self.fatal = fatal


@dataclass(frozen=True, slots=True)
class Tool:
    """A callable plus the facts the engine needs about it."""

    name: str
    description: str
    function: Callable[..., Any]
    args_model: type[BaseModel]
    timeout: float = TOOL_TIMEOUT
    side_effect: bool = False
    """Changes the world: gets an idempotency key, so a resumed run never repeats it."""
    empty_ok: bool = True
    """Whether an empty result is a legal answer (a search may find nothing) or a failure."""
    max_chars: int = OUTPUT_CHARS
    takes_model: bool = False
    """The function takes one pydantic model instance rather than keyword arguments."""
    untrusted: bool = False
    """Its description is a third party's text (an MCP server's): the prompt shows it fenced, as data."""
    context: str = ""
    """What the model should know up front about the world this tool works on: a database's tables and
    columns, an API's description. The prompt shows each context once, before the steps, so the model need
    not guess names (fenced as data when the tool is `untrusted`)."""


def tool(function: Callable[..., Any] | None = None, *, name: str | None = None, timeout: float = TOOL_TIMEOUT,
         side_effect: bool = False, empty_ok: bool = True, max_chars: int = OUTPUT_CHARS) -> Any:
    """Make a Tool from a typed function; usable bare (`@tool`) or with options (`@tool(side_effect=True)`).
    The argument schema comes from the type hints; the description from the docstring."""

    def wrap(fn: Callable[..., Any]) -> Tool:
        description = inspect.getdoc(fn) or ""
        signature = inspect.signature(fn, eval_str=True)  # modules with `from __future__ import annotations`
        only = list(signature.parameters.values())
        if len(only) == 1 and inspect.isclass(only[0].annotation) and issubclass(only[0].annotation, BaseModel):
            # A function of one pydantic model: that model is the argument schema.
            return Tool(name or fn.__name__, description, fn, only[0].annotation, timeout, side_effect, empty_ok,
                        max_chars, takes_model=True)
        params: dict[str, Any] = {}  # field name -> (annotation, default), as create_model takes them
        for pname, param in signature.parameters.items():
            annotation = param.annotation if param.annotation is not inspect.Parameter.empty else Any
            default = param.default if param.default is not inspect.Parameter.empty else ...
            params[pname] = (annotation, default)
        model = create_model(f"{fn.__name__}_args", __config__=ConfigDict(extra="forbid"), **params)
        return Tool(name or fn.__name__, description, fn, model, timeout, side_effect, empty_ok, max_chars)

    return wrap(function) if function is not None else wrap


@dataclass(slots=True)
class Observation:
    """What one tool call returned, as the model will see it."""

    tool: str
    args: dict[str, Any]
    ok: bool
    output: str = ""
    code: ErrorCode | None = None
    message: str = ""
    truncated: bool = False
    full_chars: int = 0
    suggestion: dict[str, Any] | None = None
    fatal: bool = False
    replayed: bool = False
    """A recorded side effect returned again instead of running the tool a second time."""
    superseded: bool = False
    """A resumed step chose other arguments than the call recorded for it: this one ran as a new call."""
    denied: bool = False
    """A human denied the call (PERMISSION): the agent may route around it; the tool stays blocked."""
    transient: bool = False
    """The failure is one waiting may fix (a dropped connection, a 429 or a 503: tools/transient.py)."""
    retry_after: float | None = None
    """Seconds the failure asked to wait before a retry, when it named them."""

    def shown(self) -> str:
        if not self.ok:
            return f"ERROR {self.code}: {self.message}"
        suffix = f"\n[truncated: showing {len(self.output)} of {self.full_chars} characters]" if self.truncated else ""
        return (self.output or "(empty result)") + suffix


def _split(size: int) -> tuple[int, int]:
    """(head, tail): the characters a truncated output of `size` shows from its start and from its end."""
    tail = size // TAIL_SHARE
    return size - tail, tail


def _ends(text: str, size: int) -> str:
    """The first view of an output longer than `size`: its head and its tail, the cut marked between."""
    head, tail = _split(size)
    return f"{text[:head]}\n[... {len(text) - size} characters cut: page 1 shows them ...]\n{text[-tail:]}"


def _code_for(exc: BaseException) -> ErrorCode:
    if isinstance(exc, ToolError):
        return exc.code
    if isinstance(exc, TimeoutError):
        return ErrorCode.TIMEOUT
    if isinstance(exc, PermissionError):
        return ErrorCode.PERMISSION
    if isinstance(exc, (FileNotFoundError, KeyError, LookupError)):
        return ErrorCode.NOT_FOUND
    if isinstance(exc, (ValueError, TypeError)):
        return ErrorCode.INVALID_ARGUMENT
    return ErrorCode.TOOL_ERROR


def _said(exc: BaseException) -> str:
    """What a failure says, its type named unless it is reflexa's own ToolError: ConnectionResetError's words
    alone ("[Errno 104] Connection reset by peer") hide what failed; a __str__ that raises says nothing."""
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 - a tool's exception whose __str__ is broken
        text = ""
    if isinstance(exc, ToolError | Escaped):
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _render(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, default=str, ensure_ascii=False)


JOIN_SLICE = 0.1
"""Seconds a tool call is waited on at a time (see `_run_with_timeout`)."""


class Abandoned(TimeoutError):
    """A tool call given up on at its timeout: its thread may still be running, and may still act."""


class Escaped(Exception):  # noqa: N818 - named for what the tool's exception did
    """A tool raised what is no Exception (SystemExit, GeneratorExit, KeyboardInterrupt, a bare BaseException):
    a failure of that tool like any other, never a way to end the run or the process."""

    def __init__(self, raised: BaseException) -> None:
        super().__init__(f"the tool raised {_said(raised)}")
        self.raised = raised


def _run_with_timeout(fn: Callable[[], Any], timeout: float) -> Any:
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - reported as an observation
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while thread.is_alive() and (left := deadline - time.monotonic()) > 0:
        # In slices: the CLI runs a loop in a worker thread and stops it on Ctrl-C with an exception that
        # arrives only between Python instructions, which one long join would hold back until the timeout.
        thread.join(min(left, JOIN_SLICE))
    if thread.is_alive():
        raise Abandoned(f"no answer within {timeout:g}s")
    if "error" in box:
        error = box["error"]
        raise error if isinstance(error, Exception) else Escaped(error)
    return box.get("value")


@dataclass(slots=True)
class Blocks:
    """Tools and argument values a lesson has blocked for the rest of the run."""

    tools: set[str] = field(default_factory=set)
    values: set[tuple[str, str, str]] = field(default_factory=set)

    def to_dict(self) -> dict[str, list[Any]]:
        return {"tools": sorted(self.tools), "values": sorted(list(v) for v in self.values)}

    @classmethod
    def from_dict(cls, data: dict[str, list[Any]]) -> Blocks:
        return cls(set(data.get("tools", [])), {(str(a), str(b), str(c)) for a, b, c in data.get("values", [])})

    def apply(self, control: Control) -> None:
        if control.kind == "block_tool":
            self.tools.add(control.tool)
        elif control.kind == "block_value":
            self.values.add((control.tool, control.arg, control.value))

    def refuses(self, name: str, args: dict[str, Any]) -> str | None:
        if name in self.tools:
            return f"tool {name} is blocked for this run"
        for tool_name, arg, value in self.values:
            if tool_name == name and str(args.get(arg)) == value:
                return f"{name}({arg}={value!r}) is blocked for this run"
        return None


@runtime_checkable
class ToolSource(Protocol):
    """Something that provides tools, such as an MCP server (`MCPClient`): a registry takes its tools."""

    def tools(self) -> list[Tool]: ...


RESERVED = frozenset({"final_answer"})
"""Tool names the loops use themselves; a tool may not take one."""


class ToolRegistry:
    """A static set of tools: names, argument schemas and descriptions. Per-run state (blocks, pages,
    effect records) lives in a ToolSession, so one registry can serve many runs."""

    def __init__(self, tools: Iterable[Tool | ToolSource]) -> None:
        self.tools: dict[str, Tool] = {}
        for t in (one for item in tools for one in (item.tools() if isinstance(item, ToolSource) else [item])):
            if t.name in self.tools:  # the later one would silently replace the earlier
                raise ConfigError(f"two tools are named {t.name!r}", hint="give each tool its own name")
            self.tools[t.name] = t
        if taken := RESERVED & set(self.tools):
            raise ConfigError(f"tool name {sorted(taken)[0]!r} is reserved", hint="rename the tool")

    def context(self, limit: int = CONTEXT_CHARS) -> str:
        """The tools' contexts, each once, in order, at most `limit` characters in all (each block cut to its
        share); an untrusted one fenced as data. Empty when no tool has one."""
        blocks: dict[str, bool] = {}
        for t in self.tools.values():
            if t.context.strip():
                blocks[t.context.strip()] = blocks.get(t.context.strip(), False) or t.untrusted
        if not blocks:
            return ""
        share = max(200, limit // len(blocks))
        return "\n\n".join(f"<<<{fence_untrusted(cap(text, share))}>>>" if untrusted else cap(text, share)
                           for text, untrusted in blocks.items())[:limit]

    def describe(self) -> str:
        lines = []
        for t in self.tools.values():
            props = t.args_model.model_json_schema().get("properties", {})
            args = ", ".join(f"{k}: {v.get('type', 'any')}" for k, v in props.items())
            said = t.description.splitlines()[0] if t.description else ""
            lines.append(f"- {t.name}({args}): {f'<<<{fence_untrusted(said)}>>>' if t.untrusted else said}")
        return "\n".join(lines)


@dataclass(slots=True)
class ToolSession:
    """One run's use of a registry: the blocks its lessons set, the full text of truncated outputs (for
    paging), and, through `effects` (a Store), the idempotency records of side-effecting calls and, with an
    `approver`, the human decisions on them."""

    registry: ToolRegistry
    effects: Any = None
    run_id: str = ""
    blocks: Blocks = field(default_factory=Blocks)
    approver: Approver | None = None
    """Decides on each side-effecting call before it runs (tools/approval.py); None runs them unasked."""
    _full: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.approver is not None and self.effects is None:  # decisions need a place to live
            from ..trace.store import MemoryStore

            self.effects = MemoryStore()

    def call(self, name: str, args: dict[str, Any], *, step: int = 0) -> Observation:
        """Validate, run and cap one call. A side-effecting call whose key (run, step, tool, arguments) is
        already recorded returns the recorded observation without running again."""
        if name not in self.registry.tools:
            return Observation(name, args, False, code=ErrorCode.SCHEMA,
                               message=f"unknown tool {cap(name, 60)!r}; tools: {', '.join(self.registry.tools)}")
        t = self.registry.tools[name]
        if reason := self.blocks.refuses(name, {}):  # the tool itself, whatever its arguments
            return Observation(name, args, False, code=ErrorCode.BLOCKED, message=reason)
        try:
            valid = t.args_model.model_validate(args)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "args"
            said = str(first["msg"]).removeprefix("Value error, ")  # a schema check's own message, unprefixed
            return Observation(name, args, False, code=ErrorCode.SCHEMA, message=f"{where}: {said}",
                               suggestion=_renamed(args, t.args_model))
        # Blocked values and effect keys compare the arguments as validated (17.0, "17" and "017" are the
        # int 17; an omitted default is there), so another spelling of the same call is the same call.
        canonical = valid.model_dump(mode="json")
        if reason := self.blocks.refuses(name, canonical):
            return Observation(name, args, False, code=ErrorCode.BLOCKED, message=reason)
        key = (effect_key(self.run_id, step, name, canonical) if t.side_effect and self.effects is not None
               else None)
        if key is not None:
            if (done := self.effects.get("effects", key)) is not None:
                if done.get("pending"):
                    # The process died during this very call: the effect may or may not have happened.
                    return Observation(name, args, False, code=ErrorCode.TOOL_ERROR, fatal=True,
                                       message=f"{name} was interrupted during an earlier run; not repeated, "
                                       "check its effect by hand")
                return Observation(**{**done, "code": ErrorCode(done["code"]) if done["code"] else None},
                                   replayed=True)
            if self.approver is not None:
                decided = self._approval(t, key, step, args, valid, canonical)
                if isinstance(decided, Observation):
                    return decided
                args, valid = decided
            self.effects.put("effects", key, {"pending": True})
        observation = self._invoke(t, args, valid)
        if key is not None:
            # Recorded before the loop's own step, so a crash right after the effect cannot repeat it.
            self.effects.put("effects", key, {k: getattr(observation, k) for k in observation.__slots__
                                              if k not in ("replayed", "superseded")})
            observation.superseded = any(other.startswith(key.rsplit(":", 1)[0] + ":") and other != key
                                         for other, _ in self.effects.items("effects"))
        return observation

    def _approval(self, t: Tool, key: str, step: int, args: dict[str, Any], valid: BaseModel,
                  canonical: dict[str, Any]) -> Observation | tuple[dict[str, Any], BaseModel]:
        """The human decision on a side-effecting call (stored, or asked for and stored at once): the arguments
        to run it with (the proposed ones, as given and validated, unless edited), or the observation of a
        denial. A deferral raises AwaitingApproval."""
        request = ApprovalRequest(self.run_id, step, t.name, canonical, t.description,
                                  t.args_model.model_json_schema())
        earlier = approval.take(self.effects, key)
        decision = earlier.decision() if earlier is not None else None
        if decision is None:
            assert self.approver is not None
            decision = self.approver(request)
            approval.record(self.effects, key, request, decision)
        if decision.verdict == "defer":
            raise AwaitingApproval(request)
        if decision.verdict == "deny":
            self.blocks.tools.add(t.name)  # denied once, blocked for the rest of the run
            return Observation(t.name, args, False, code=ErrorCode.PERMISSION, denied=True,
                               message=f"a human denied this call: {cap(decision.reason, 300)}")
        if decision.args is None:
            return args, valid
        try:
            return decision.args, t.args_model.model_validate(decision.args)
        except ValidationError as exc:
            return Observation(t.name, decision.args, False, code=ErrorCode.SCHEMA,
                               message=f"the arguments a human edited are invalid: {exc.errors()[0]['msg']}")

    def _invoke(self, t: Tool, args: dict[str, Any], valid: BaseModel) -> Observation:
        # The validated values as they are (a nested model or a dataclass stays one; model_dump made dicts).
        values = {name: getattr(valid, name) for name in type(valid).model_fields}
        call = (lambda: t.function(valid)) if t.takes_model else (lambda: t.function(**values))
        try:
            value = _run_with_timeout(call, t.timeout)
        except Exception as exc:  # noqa: BLE001 - every failure becomes an observation; KeyboardInterrupt still stops
            suggestion = exc.suggestion if isinstance(exc, ToolError) else None
            message = cap(strip_controls(valid_text(_said(exc))) or type(exc).__name__, 400)
            if t.side_effect and isinstance(exc, Abandoned):
                # Its effect is unknown and may yet happen: repeating the call could do it twice.
                return Observation(t.name, args, False, code=ErrorCode.TIMEOUT, fatal=True,
                                   message=f"{message}; {t.name} has side effects and may still be running, so "
                                   "it is not repeated: check its effect by hand")
            said = _said(exc)
            return Observation(t.name, args, False, code=_code_for(exc), message=message,
                               suggestion=suggestion, fatal=getattr(exc, "fatal", False),
                               transient=is_transient(exc, said), retry_after=retry_after(exc, said))
        text = strip_controls(valid_text(_render(value)))  # stored, printed and shown to a model: plain text
        if not text.strip() and not t.empty_ok:
            return Observation(t.name, args, False, code=ErrorCode.EMPTY, message=f"{t.name} returned nothing")
        if len(text) <= t.max_chars:
            return Observation(t.name, args, True, text, full_chars=len(text))
        self._full[t.name] = text
        return Observation(t.name, args, True, _ends(text, t.max_chars), truncated=True, full_chars=len(text))

    def page(self, tool_name: str, page: int) -> Observation | None:
        """Page `page` (from 1) of the middle that a tool's last truncated output cut, without running the
        tool again; None past the last page."""
        full = self._full.get(tool_name)
        if full is None or tool_name not in self.registry.tools or page < 1:
            return None
        size = self.registry.tools[tool_name].max_chars
        head, tail = _split(size)
        middle = full[head : len(full) - tail]
        if (page - 1) * size >= len(middle):
            return None
        chunk = middle[(page - 1) * size : page * size]
        return Observation(tool_name, {"page": page}, True, chunk, truncated=page * size < len(middle),
                           full_chars=len(full))


def _renamed(args: dict[str, Any], model: type[BaseModel]) -> dict[str, Any] | None:
    """Arguments with each unknown name replaced by its one close match among the missing ones, when
    that makes them valid; None when the fix is not that simple (then the failure needs judgement)."""
    fields = set(model.model_fields)
    missing = [f for f in fields if f not in args]
    fixed = {}
    for key, value in args.items():
        if key in fields:
            fixed[key] = value
        elif close := difflib.get_close_matches(key, missing, n=1, cutoff=0.6):
            fixed[close[0]] = value
        else:
            return None
    try:
        model.model_validate(fixed)
    except ValidationError:
        return None
    return fixed if fixed != args else None


def effect_key(run_id: str, step: int, tool_name: str, args: dict[str, Any]) -> str:
    """The idempotency key of a side-effecting call: the same run, step, tool and arguments is the same
    effect. A resumed step that chooses other arguments is a new call, never a replay of the old one."""
    digest = hashlib.sha256(json.dumps(args, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return f"{run_id}:{step}:{tool_name}:{digest}"


def interrupted_effects(effects: Any, run_id: str) -> list[str]:
    """Side-effecting calls of a run that began and never reported back (the process died inside them)."""
    return [key for key, value in effects.items("effects") if key.startswith(f"{run_id}:") and value.get("pending")]


def effect_tool(key: str) -> str:
    """The tool name inside an effect key."""
    return key.split(":")[2] if key.count(":") >= 3 else key


def sqlite_error_code(exc: sqlite3.Error) -> ErrorCode:
    text = str(exc).lower()
    if "no such" in text:
        return ErrorCode.NOT_FOUND
    if "readonly" in text or "read-only" in text or "not authorized" in text:
        return ErrorCode.PERMISSION
    if "syntax" in text:
        return ErrorCode.INVALID_ARGUMENT
    return ErrorCode.TOOL_ERROR
