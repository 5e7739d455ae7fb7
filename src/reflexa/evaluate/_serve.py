"""The candidate's side of a script check, run in the sandbox as `python -I -c <_wire.py + this> CANDIDATE_FILE`.

It runs the candidate file, then answers the judge's requests on the wire (the fd $REFLEXA_WIRE_FD names)
until the judge hangs up: what the candidate defines, and calls of its functions, classes and methods. Every
answer is plain data (_wire.py); an object that is not crosses as a handle, which the judge can call or read
an attribute of, but which equals no plain value. Nothing here decides a verdict: the tests run in the judge's
process, which this one cannot reach.
"""
# ruff: noqa: ANN401, BLE001 - what the candidate's code raises is the candidate's answer, whatever it is
from __future__ import annotations

import builtins
import os
import sys
import time
import traceback

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: typing is not loaded in the sandbox
if TYPE_CHECKING:
    from typing import Any

    from ._wire import decode, encode, receive, send

DUNDERS: dict[str, Any] = {"len": len, "str": str, "repr": repr, "bool": bool, "hash": hash, "list": list}
"""What the judge may ask of a handle besides calls and attributes (`list`: iterating it)."""
LAST_CALL = [0.0]
"""Seconds the latest call took: a failing assert's call is the latest one, and is traced only when quick."""
HANDLES: dict[int, Any] = {}
"""Objects the judge holds a handle to, by handle number."""
MESSAGE_CHARS = 500
TRACE_HEAD, TRACE_TAIL = 6, 4
"""Records of a traced call kept: its first lines run and its last ones (where it went wrong, or what it
returned from)."""
TRACE_EVENTS = 5_000
"""Lines a traced call may run before its tracing stops it: a long loop shows its start and where it was."""
TRACE_SECONDS = 1.5
"""Seconds a traced call may run before an alarm stops it (a loop of one line, a sleep: no line event
comes). The judge waits a little longer for the record (_harness.py)."""
VALUE_CHARS, RECORD_CHARS = 40, 160


class _TraceEnd(BaseException):
    """Raised into a traced call once it has run TRACE_EVENTS lines, or by the alarm after TRACE_SECONDS."""


def _short(text: object) -> str:
    try:
        text = " ".join(str(text).split())
    except BaseException:
        return "<unprintable>"
    return text if len(text) <= MESSAGE_CHARS else text[: MESSAGE_CHARS - 1] + "…"


def _plain(item: Any) -> Any:
    """A numpy scalar or array as the plain value it holds; anything else as it is."""
    module = getattr(type(item), "__module__", "") or ""
    if module.startswith("numpy"):
        for method in ("item", "tolist"):
            try:
                return getattr(item, method)()
            except BaseException:
                continue
    return item


def _handle(item: Any) -> dict:
    number = len(HANDLES) + 1
    HANDLES[number] = item
    try:
        kind = type(item).__name__
    except BaseException:
        kind = "object"
    return {"$": "handle", "id": number, "type": kind, "callable": callable(item)}


def _out(value: Any) -> Any:
    return encode(_plain(value), _handle)


def _arg(data: Any) -> Any:
    return decode(data, lambda h: HANDLES[int(h["id"])])


def _failure(exc: BaseException, candidate: str) -> dict:
    where = ""
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename == candidate:
            where = f"{frame.filename}:{frame.lineno}: {(frame.line or '').strip()}"
    return {"raise": {"type": type(exc).__name__, "module": type(exc).__module__, "message": _short(exc),
                      "where": _short(where)}}


class _Tracer:
    """The record of one traced call: each line of the candidate's it runs, as written, with the local values
    that are new or changed when it starts, then what the call returned or raised; the first TRACE_HEAD
    records and the last TRACE_TAIL, the ones between counted."""

    def __init__(self, candidate: str) -> None:
        import linecache  # here, not above: only a check's `values` mode needs them
        import reprlib

        self.candidate, self.getline = candidate, linecache.getline
        self.shown = reprlib.Repr()
        self.shown.maxstring = self.shown.maxother = VALUE_CHARS
        self.shown.maxlist, self.shown.maxdict, self.shown.maxlevel = 6, 4, 2
        self.head: list[str] = []
        self.tail: list[str] = []
        self.lines = self.records = 0
        self.last: dict = {}  # frame id -> {name: shown value} at its last line
        self.raising: set = set()  # frames an exception is leaving

    def record(self, text: str) -> None:
        self.records += 1
        text = _short(text)[:RECORD_CHARS]
        if len(self.head) < TRACE_HEAD:
            self.head.append(text)
        else:
            self.tail = [*self.tail, text][-TRACE_TAIL:]

    def show(self, value: Any) -> str:
        try:
            return self.shown.repr(value)
        except BaseException:
            return "<unprintable>"

    def changed(self, frame: Any) -> str:
        """The frame's local values that are new or changed since its last line, as name=value."""
        before = self.last.get(id(frame), {})
        now = {name: self.show(value) for name, value in list(frame.f_locals.items())
               if not name.startswith("__") and not callable(value)}
        self.last[id(frame)] = now
        return ", ".join(f"{name}={text}" for name, text in now.items() if before.get(name) != text)

    def local(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "exception":  # a return that follows is the exception leaving the frame, not a value
            self.raising.add(id(frame))
        elif event == "return":
            if id(frame) not in self.raising:
                self.record(f"returns {self.show(arg)}")
            self.raising.discard(id(frame))
        elif event == "line":
            self.raising.discard(id(frame))
            self.lines += 1
            if self.lines > TRACE_EVENTS:
                raise _TraceEnd
            news = self.changed(frame)
            line = self.getline(self.candidate, frame.f_lineno).strip()
            self.record(f"`{line}`" + (f" with {news}" if news else ""))
        return self.local

    def start(self, frame: Any, event: str, arg: Any) -> Any:
        return self.local if frame.f_code.co_filename == self.candidate else None

    def lines_shown(self) -> list[str]:
        left = self.records - len(self.head) - len(self.tail)
        return [*self.head, *([f"… {left} more"] if left > 0 else []), *self.tail]


def _traced(target: Any, args: list, kwargs: dict, candidate: str) -> dict:
    """Call `target` again, traced (_Tracer), under an alarm of TRACE_SECONDS. Only the feedback shows the
    record: the judge's verdict was reached before this ran."""
    import signal

    tracer = _Tracer(candidate)
    name = str(getattr(target, "__name__", type(target).__name__))
    given = [tracer.show(a) for a in args] + [f"{k}={tracer.show(v)}" for k, v in kwargs.items()]

    def alarm(signum: int, frame: Any) -> None:
        raise _TraceEnd(f"… stopped after {TRACE_SECONDS:g} s")

    before = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, TRACE_SECONDS)
    sys.settrace(tracer.start)
    try:
        target(*args, **kwargs)
    except _TraceEnd as end:
        tracer.record(str(end) or f"… stopped after {TRACE_EVENTS} lines")
    except BaseException as exc:
        tracer.record(f"raises {type(exc).__name__}: {_short(exc)[:VALUE_CHARS * 2]}")
    finally:
        sys.settrace(None)
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)
    return {"trace": [_short(f"{name}({', '.join(given)})")[:RECORD_CHARS], *tracer.lines_shown()]}


def _names(namespace: dict) -> dict:
    """What the candidate defines at module level, for the judge to bind: plain values as they are, the rest
    (functions, classes) as handles."""
    found = {}
    for name, value in list(namespace.items()):
        if name.startswith("__") or type(value).__name__ == "module":
            continue
        try:
            found[name] = _out(value)
        except BaseException:
            continue
    return found


def _answer(request: dict, namespace: dict, candidate: str) -> dict:
    """The answer to one request: a value, a failure, or the arguments after a call changed them."""
    op = request.get("op")
    target: Any = HANDLES.get(int(request.get("id", 0)))
    try:
        if op == "call":
            args, kwargs = [_arg(a) for a in request["args"]], {k: _arg(v) for k, v in request["kwargs"].items()}
            started = time.monotonic()
            try:
                value = target(*args, **kwargs)
            finally:
                LAST_CALL[0] = time.monotonic() - started
            return {"value": _out(value), "args": [_out(a) for a in args]}
        if op == "trace":  # the failing call once more, traced, for the feedback alone
            if LAST_CALL[0] > TRACE_SECONDS / 3:  # a slow call run again could take the check past its limit
                return {"trace": ["that call", f"… not run again: it took {LAST_CALL[0]:.1f} s"]}
            args, kwargs = [_arg(a) for a in request["args"]], {k: _arg(v) for k, v in request["kwargs"].items()}
            return _traced(target, args, kwargs, candidate)
        if op == "getattr":
            return {"value": _out(getattr(target, str(request["name"])))}
        if op == "eq":  # two handles: the candidate's own equality, as the tests compare its own objects
            return {"value": _out(target == HANDLES.get(int(request["other"])))}
        if op in DUNDERS:
            return {"value": _out(DUNDERS[op](target))}
    except SystemExit as exc:
        return {"exit": _short(exc.code)}
    except BaseException as exc:
        return _failure(exc, candidate)
    return {"raise": {"type": "TypeError", "module": "builtins", "message": f"unknown request {op!r}", "where": ""}}


def main() -> None:
    candidate = sys.argv[1]
    wire = int(os.environ.pop("REFLEXA_WIRE_FD"))
    os.set_inheritable(wire, False)
    namespace: dict = {"__name__": "__main__", "__file__": candidate, "__builtins__": builtins}
    try:
        with open(candidate, encoding="utf-8", errors="replace") as fh:
            code = compile(fh.read(), candidate, "exec", dont_inherit=True)
    except BaseException as exc:  # a syntax error: nothing ran
        traceback.print_exception(type(exc), exc, None)
        send(wire, {"compile": _failure(exc, candidate)["raise"]})
        return
    try:
        exec(code, namespace)  # noqa: S102 - the candidate, in the sandbox
    except SystemExit as exc:
        send(wire, {"exit": _short(exc.code)})
        return
    except BaseException as exc:
        traceback.print_exception(type(exc), exc, exc.__traceback__.tb_next if exc.__traceback__ else None)
        send(wire, {"crash": _failure(exc, candidate)["raise"]})
        return
    send(wire, {"names": _names(namespace)})
    while True:
        try:
            request = receive(wire)
        except Exception:  # the judge hung up: the tests are over
            return
        try:
            send(wire, _answer(request, namespace, candidate))
        except Exception as exc:  # an answer too large, or a value that cannot be written
            send(wire, {"raise": {"type": "ValueError", "module": "builtins", "where": "",
                                  "message": _short(f"the candidate's result cannot cross to the judge: {exc}")}})


if __name__ == "__main__":
    main()
