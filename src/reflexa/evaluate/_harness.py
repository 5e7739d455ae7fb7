"""The harness PytestCheck and PythonScriptCheck run in the sandbox, as `python -I -c <_wire.py + this>`.

    python -I -c HARNESS pytest TEST_FILE MODULE     a pytest file here, the candidate in its own process
    python -I -c HARNESS judge TESTS_FILE            test code here, the candidate in its own process

Either way it reports the outcome as one JSON line on the sandbox's report channel (a Unix socket, see
sandbox.py), stamped with a nonce read, and its pipe closed, before anything else runs; this process is
made undumpable, so no other process reads its memory.

Either way the candidate runs in a process of its own (_serve.py) and the tests call it across the wire
($REFLEXA_WIRE_FD): its functions and classes are bound here as handles, every call runs there, and every
value comes back as plain data, so every comparison the tests make is made here, out of the candidate's
reach, and the candidate never sees the test code. No code of the candidate's runs in this process: it
cannot rewrite the test file, patch pytest, walk up to this harness's frames or hand the tests an object
that says it equals anything.

`judge` runs test code (asserts) with the candidate's names bound as its globals. `pytest` runs a pytest
file with the candidate's module in sys.modules as a module of those handles, so `from solution import f`
binds a handle; it records which test functions really returned and reports the hash of the test file it
ran, which the parent compares with the file it wrote.

Standalone on purpose: it must not import reflexa (the sandboxed interpreter may see another copy).
"""
# Broad excepts throughout, on purpose: whatever the code under test raises or breaks, the harness must
# still reach a verdict (or leave no report, which fails the check). try/except rather than
# contextlib.suppress: a statement cannot be patched by the code under test, a module attribute can.
# ruff: noqa: BLE001, S110, S112, SIM105

from __future__ import annotations

import ast
import builtins
import copy
import functools
import hashlib
import json
import os
import reprlib
import select
import sys
import traceback

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: the harness starts before every check, typing is not loaded
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import CodeType, TracebackType
    from typing import Any, NoReturn

    from ._wire import WireError, decode, encode, receive, send

    Finish = Callable[[dict[str, Any], int], NoReturn]

# Bound before any untrusted code runs: rebinding os.write or json.dumps later changes nothing here.
_write, _dumps, _exit, _compile, _exec = os.write, json.dumps, os._exit, builtins.compile, builtins.exec
_MESSAGE_CHARS = 500


def _finisher(mode: str) -> Finish:
    """Read the nonce, close its pipe, and return the one function that sends the report and exits. It holds
    everything it uses in its closure, bound now, before any untrusted code runs."""
    nonce_fd, report_fd = (int(fd) for fd in os.environ.pop("REFLEXA_REPORT_FDS").split(","))
    nonce = b""
    while chunk := os.read(nonce_fd, 64):
        nonce += chunk
    os.close(nonce_fd)
    os.set_inheritable(report_fd, False)
    stamp, write, dumps, leave, streams = nonce.decode(), _write, _dumps, _exit, (sys.stdout, sys.stderr)

    def send(data: dict[str, Any]) -> None:
        payload = (dumps({**data, "mode": mode, "nonce": stamp}, default=str) + "\n").encode()
        while payload:
            payload = payload[write(report_fd, payload):]

    def finish(data: dict[str, Any], code: int) -> NoReturn:
        """Send the report and leave at once: atexit hooks and threads of the code under test get no say."""
        for stream in streams:
            try:
                stream.flush()
            except Exception:
                pass
        send(data)
        leave(code)

    return finish


def _short(text: object) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= _MESSAGE_CHARS else text[: _MESSAGE_CHARS - 1] + "…"


# --- pytest ---------------------------------------------------------------------------------------------

def _recorder(pytest: Any) -> Any:
    """A pytest plugin that counts what really happened."""

    class Recorder:
        def __init__(self) -> None:
            self.collected: list[str] = []
            self.collect_errors = 0
            self.called_ok: set[str] = set()
            self.passed: set[str] = set()
            self.failed: set[str] = set()
            self.errors: set[str] = set()
            self.skipped: set[str] = set()
            self.skipped_at_run: set[str] = set()
            """Skipped while the test ran, not by its marks: the code under test may have raised the skip."""
            self.failures: list[list[str]] = []
            self.internal_error: str | None = None

        @pytest.hookimpl(hookwrapper=True, tryfirst=True)
        def pytest_pyfunc_call(self, pyfuncitem: Any) -> Any:
            # The test function itself returned without raising: a witness a rewritten report lacks.
            outcome = yield
            if outcome.excinfo is None:
                self.called_ok.add(pyfuncitem.nodeid)

        def pytest_collection_finish(self, session: Any) -> None:
            self.collected = [item.nodeid for item in session.items]

        def pytest_collectreport(self, report: Any) -> None:
            if report.failed:
                self.collect_errors += 1
                self.failures.append([report.nodeid or "collection", _crash(report)])

        def pytest_runtest_logreport(self, report: Any) -> None:
            nodeid = report.nodeid
            if report.failed:
                (self.failed if report.when == "call" else self.errors).add(nodeid)
                self.failures.append([nodeid, _crash(report)])
            elif report.skipped:
                # Declared by the test file: a skip mark (decided in setup) or an xfail mark.
                declared = report.when == "setup" or (hasattr(report, "wasxfail") and "xfail" in report.keywords)
                (self.skipped if declared else self.skipped_at_run).add(nodeid)
            elif report.when == "call" and report.passed:
                self.passed.add(nodeid)

        def pytest_internalerror(self, excrepr: Any, excinfo: Any) -> None:
            self.internal_error = _short(f"{excinfo.typename}: {excinfo.value}")

    return Recorder()


def _crash(report: Any) -> str:
    """The one-line reason of a failed report: pytest's crash message, else the last line."""
    longrepr = report.longrepr
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None and getattr(crash, "message", None):
        return _short(crash.message)
    lines = [line for line in str(longrepr).splitlines() if line.strip()]
    return _short(lines[-1] if lines else "failed")


def _sha256(path: str) -> str | None:
    try:
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()
    except OSError:
        return None


def run_pytest(finish: Finish, test_file: str, module_name: str = "solution") -> NoReturn:
    """Run a pytest file with the candidate's module standing in sys.modules: its names bound as values and
    handles to the candidate's process (the wire), every call answered there, every comparison made here."""
    import types

    wire = Wire(int(os.environ.pop("REFLEXA_WIRE_FD")))
    os.set_inheritable(wire.fd, False)
    before = _sha256(test_file)  # the bytes pytest will compile: the parent compares them with what it wrote
    try:
        first = receive(wire.fd)
    except WireError as exc:  # the candidate's process ended before it said what it defines (os._exit)
        finish({"finished": False, "stage": "candidate", "ran": True, "error": "CandidateExit",
                "message": _short(exc), "where": "", "test_sha256": before}, 1)
    if (failed := _opening(first)) is not None:
        finish({**failed, "test_sha256": before}, 1)
    module = types.ModuleType(module_name)
    try:
        for name, value in first["names"].items():
            setattr(module, str(name), decode(value, wire.remote))
    except Exception as exc:
        finish({"finished": False, "stage": "candidate", "ran": True, "error": "WireError", "where": "",
                "message": _short(f"the candidate's process answered no plain data: {exc}"),
                "test_sha256": before}, 1)
    sys.modules[module_name] = module
    import pytest

    recorder = _recorder(pytest)
    args = ["-q", "--no-header", "-p", "no:cacheprovider", "--tb=short", "-rfE", test_file]
    try:
        exit_code = int(pytest.main(args, plugins=[recorder]))
    except BaseException as exc:  # SystemExit or KeyboardInterrupt out of pytest itself
        finish({"finished": False, "reason": _short(f"{type(exc).__name__}: {exc}"), "test_sha256": before}, 1)
    tampered = []
    if _sha256(test_file) != before:
        tampered.append(f"the test file {test_file} was changed during the run")
    if unseen := sorted(recorder.passed - recorder.called_ok):
        tampered.append(f"{len(unseen)} test(s) reported passing although their function never returned: "
                        + ", ".join(unseen[:3]))
    passed = recorder.passed & recorder.called_ok
    data = {
        "finished": True, "exit_code": exit_code, "collected": len(recorder.collected),
        "ids": recorder.collected[:500], "passed": len(passed), "failed": len(recorder.failed),
        "errors": len(recorder.errors), "collect_errors": recorder.collect_errors,
        "skipped": len(recorder.skipped), "skipped_at_run": len(recorder.skipped_at_run),
        "failures": recorder.failures[:10], "tampered": tampered, "internal_error": recorder.internal_error,
        "test_sha256": before,
    }
    finish(data, exit_code or 0)


# --- a candidate followed by test code (HumanEval, MBPP) ----------------------------------------------

_REPR = reprlib.Repr()
_REPR.maxstring, _REPR.maxother, _REPR.maxlist, _REPR.maxtuple = 200, 200, 20, 20
_REPR.maxdict, _REPR.maxset, _REPR.maxlevel = 10, 10, 4


class _Described(str):
    """A failing assert's message that names the value the candidate returned (the report says so)."""

    values: list[str] = []
    """The failing call run again with its lines traced (judge's `values` mode), else empty."""


_TRACE_SECONDS = 3.0
"""How long the judge waits for a failing call's traced rerun (which stops itself after 1.5 s, _serve.py's
TRACE_SECONDS, unless a long call into C holds it); past it the message says so, and the verdict stands."""


def _describe(text: str, got: object, message: object = None, again: Callable[[], object] | None = None, *,
              tracer: Wire | None = None) -> str:
    """The message of a rewritten assert: its source, and the value the candidate actually returned. With a
    `tracer` (the judge's `values` mode), `again` (the assert's call, once more) runs with the candidate's
    first call traced on it."""
    try:
        shown = _REPR.repr(got)
    except BaseException:  # a hostile __repr__ must not hide the failure
        shown = f"<unprintable {type(got).__name__}>"
    out = f"assert {text} failed: got {shown}"
    if message is not None:
        try:
            out += f" ({message})"
        except BaseException:
            pass
    described = _Described(out[:_MESSAGE_CHARS])
    if again is not None and tracer is not None:
        described.values = tracer.traced(again)
    return described


class _Rewrite(ast.NodeTransformer):
    """`assert f(x) == y` becomes `assert (_reflexa_got := f(x)) == y, _reflexa_describe(...)`, so a
    failure names the actual value without calling the candidate twice. Also `assert f(x)` and
    `assert not f(x)`. Other asserts stay as written."""

    def __init__(self, source: str) -> None:
        self.source = source

    def visit_Assert(self, node: ast.Assert) -> ast.Assert:
        test = node.test
        holder: ast.AST
        if isinstance(test, ast.Compare) and len(test.ops) == 1:
            holder, slot = test, "left"
        elif isinstance(test, ast.Call):
            holder, slot = node, "test"
        elif isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            holder, slot = test, "operand"
        else:
            return node
        text = ast.get_source_segment(self.source, test) or ast.unparse(test)
        again = ast.Lambda(args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]),
                           body=copy.deepcopy(getattr(holder, slot)))
        got = ast.NamedExpr(target=ast.Name("_reflexa_got", ast.Store()), value=getattr(holder, slot))
        setattr(holder, slot, ast.copy_location(got, getattr(holder, slot)))
        node.msg = ast.copy_location(ast.Call(
            func=ast.Name("_reflexa_describe", ast.Load()),
            args=[ast.Constant(" ".join(text.split())), ast.Name("_reflexa_got", ast.Load()),
                  node.msg or ast.Constant(None), again],
            keywords=[]), node)
        return ast.fix_missing_locations(node)


def _compile_tests(source: str, filename: str) -> CodeType:
    try:
        tree = _Rewrite(source).visit(ast.parse(source, filename))
        return _compile(tree, filename, "exec", dont_inherit=True, optimize=0)
    except Exception:  # whatever the rewrite trips on, the tests still run as written
        return _compile(source, filename, "exec", dont_inherit=True, optimize=0)


def _where(tb: TracebackType | None, files: tuple[str, ...]) -> str:
    """`file:line: source` of the innermost frame in the candidate or the tests."""
    found = None
    for frame in traceback.extract_tb(tb):
        if frame.filename in files:
            found = f"{frame.filename}:{frame.lineno}: {(frame.line or '').strip()}"
    return _short(found or "")


# --- a script check's judge: the tests here, the candidate in its own process -------------------------------

class CandidateExit(BaseException):  # noqa: N818 - named for what the candidate did
    """The candidate's process exited (`code`: what it gave sys.exit), or went away (`code` None), while
    the tests called it."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


class Remote:
    """An object in the candidate's process (a function, a class, an instance), held by handle. Calling it
    or reading an attribute asks the candidate's process; what comes back is plain data or another handle.
    It equals no plain value: a candidate cannot pass a test by returning an object that says it does."""

    def __init__(self, wire: Wire, data: dict[str, Any]) -> None:
        object.__setattr__(self, "_wire", wire)
        object.__setattr__(self, "_id", int(data["id"]))
        object.__setattr__(self, "_type", str(data.get("type", "object")))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._wire.call(self._id, args, kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return self._wire.ask({"op": "getattr", "id": self._id, "name": name})

    def __eq__(self, other: object) -> Any:
        if not isinstance(other, Remote):
            return NotImplemented  # a plain value never equals an object of the candidate's
        return other._id == self._id or bool(self._wire.ask({"op": "eq", "id": self._id, "other": other._id}))

    def __ne__(self, other: object) -> Any:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self) -> int:
        return int(self._wire.ask({"op": "hash", "id": self._id}))

    def __len__(self) -> int:
        return int(self._wire.ask({"op": "len", "id": self._id}))

    def __bool__(self) -> bool:
        return bool(self._wire.ask({"op": "bool", "id": self._id}))

    def __iter__(self) -> Any:
        return iter(self._wire.ask({"op": "list", "id": self._id}))

    def __str__(self) -> str:
        return str(self._wire.ask({"op": "str", "id": self._id}))

    def __repr__(self) -> str:
        try:
            return str(self._wire.ask({"op": "repr", "id": self._id}))
        except Exception:  # a repr that raises must not hide what the candidate returned
            return f"<{self._type} instance>"


class Wire:
    """The judge's end of the wire to the candidate's process."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.tracing = False
        self.trace: list[str] = []
        self.broken = False
        """A traced call did not answer in time: the wire is out of step, and no later call may use it."""

    def traced(self, again: Callable[[], object]) -> list[str]:
        """Run `again` (a failing assert's call) with the first call it makes of the candidate's traced there:
        the lines that call ran and their values (_serve.py). Whatever it does, the verdict stands."""
        self.tracing, self.trace = True, []
        try:
            again()
        except BaseException:
            pass
        self.tracing = False
        return self.trace

    def remote(self, data: dict[str, Any]) -> Remote:
        return Remote(self, data)

    def ask(self, request: dict[str, Any]) -> Any:
        """Send a request; the candidate's answer as a value, or its exception raised here."""
        return self._result(self._exchange(request))

    def call(self, target: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Call a function of the candidate's with plain data; a list, dict or set it changed is changed
        here too, as an in-place function's caller expects."""
        try:
            sent = encode(list(args), self.reference)["v"]
            named = {k: encode(v, self.reference) for k, v in kwargs.items()}
        except WireError as exc:
            raise TypeError(f"cannot pass that to the candidate's process: {exc}") from None
        if self.tracing:  # one traced call: its record is all `traced` wants, so no value comes back
            self.tracing = False
            try:
                send(self.fd, {"op": "trace", "id": target, "args": sent, "kwargs": named})
            except WireError:
                raise CandidateExit("traced") from None
            if not select.select([self.fd], [], [], _TRACE_SECONDS)[0]:
                # Still running (a loop no line event breaks, a sleep): its answer would come out of turn.
                self.broken = True
                self.trace = [f"… the call did not finish again within {_TRACE_SECONDS:g} s"]
                raise CandidateExit("traced")
            trace = self._exchange(None).get("trace")
            if type(trace) is list:
                self.trace = [_short(line) for line in trace[:20]]
            raise CandidateExit("traced")
        reply = self._exchange({"op": "call", "id": target, "args": sent, "kwargs": named})
        value = self._result(reply)
        for before, after in zip(args, reply.get("args") or [], strict=False):
            _changed(before, decode(after, self.remote))
        return value

    def _exchange(self, request: dict[str, Any] | None) -> dict[str, Any]:
        """Send `request` (None: it was sent) and return the answer."""
        if self.broken:
            raise CandidateExit("the candidate's process did not answer a traced call in time")
        try:
            if request is not None:
                send(self.fd, request)
            reply = receive(self.fd)
        except WireError as exc:
            raise CandidateExit(f"the candidate's process ended before the tests finished ({exc})") from None
        if type(reply) is not dict:
            raise CandidateExit("the candidate's process answered garbage")
        return reply

    def _result(self, reply: dict[str, Any]) -> Any:
        if "value" in reply:
            try:
                return decode(reply["value"], self.remote)
            except (WireError, RecursionError, ValueError, TypeError) as exc:
                raise CandidateError(f"WireError: the candidate's answer is no plain data ({exc})") from None
        if "exit" in reply:
            raise CandidateExit("the candidate called sys.exit", str(reply["exit"]))
        raise _rebuilt(reply.get("raise") or {})

    @staticmethod
    def reference(obj: Any) -> dict[str, Any]:
        if isinstance(obj, Remote):
            return {"$": "handle", "id": obj._id}
        raise WireError(f"a {type(obj).__name__} object is no plain data")


def _changed(before: Any, after: Any) -> None:
    """Carry a change the candidate made to an argument over to the judge's own object."""
    if type(before) is list and type(after) is list:
        before[:] = after
    elif type(before) in (dict, set) and type(after) is type(before):
        before.clear()
        before.update(after)


class CandidateError(Exception):
    """An exception of the candidate's own (or a library's) type, as the tests see it."""


def _rebuilt(error: dict[str, Any]) -> BaseException:
    """The candidate's exception, raised here: of the same builtin type where it has one (so a test that
    expects a ValueError gets one), else a CandidateError naming it. `where` is the candidate's line."""
    name, message = str(error.get("type", "Exception")), str(error.get("message", ""))
    cls = getattr(builtins, name, None) if error.get("module") == "builtins" else None
    if not (isinstance(cls, type) and issubclass(cls, BaseException)) or cls is CandidateExit:
        cls, message = CandidateError, f"{name}: {message}"
    try:
        exc = cls(message)
    except BaseException:
        exc = CandidateError(f"{name}: {message}")
    exc._reflexa_where = str(error.get("where", ""))  # type: ignore[attr-defined]
    return exc


def _opening(first: Any) -> dict[str, Any] | None:
    """The report when the candidate's process failed before the tests could call it, else None."""
    for key, ran in (("compile", False), ("crash", True)):
        if type(first) is dict and type(first.get(key)) is dict:
            error = first[key]
            return {"finished": False, "stage": "candidate", "ran": ran, "error": error.get("type"),
                    "message": error.get("message", ""), "where": error.get("where", "")}
    if type(first) is dict and "exit" in first:
        return {"finished": False, "stage": "candidate", "ran": True, "error": "SystemExit",
                "message": _short(first["exit"]), "where": ""}
    if type(first) is dict and type(first.get("names")) is dict:
        return None
    return {"finished": False, "stage": "candidate", "ran": True, "error": "WireError",
            "message": "the candidate's process answered no list of what it defines"}


def run_judge(finish: Finish, tests_file: str, mode: str = "") -> NoReturn:
    """Run the tests against the candidate's process on the wire ($REFLEXA_WIRE_FD): its names bound as
    values and handles, every call answered there, every comparison made here. Mode `values`: a failing
    assert's call runs once more, traced, and the report holds what it computed on the way."""
    wire = Wire(int(os.environ.pop("REFLEXA_WIRE_FD")))
    os.set_inheritable(wire.fd, False)
    with open(tests_file, encoding="utf-8", errors="replace") as fh:
        tests = fh.read()
    try:
        tests_code = _compile_tests(tests, tests_file)
        first = receive(wire.fd)
    except WireError as exc:  # the candidate's process ended before it said what it defines (os._exit)
        finish({"finished": False, "stage": "candidate", "ran": True, "error": "CandidateExit",
                "message": _short(exc), "where": ""}, 1)
    except BaseException as exc:  # the tests do not compile
        finish({"finished": False, "stage": "tests", "ran": False, "error": type(exc).__name__,
                "message": _short(exc), "where": ""}, 1)
    if (failed := _opening(first)) is not None:
        finish(failed, 1)
    try:
        namespace = {str(name): decode(value, wire.remote) for name, value in first["names"].items()}
    except Exception as exc:  # the candidate's process answered something that is no list of names
        finish({"finished": False, "stage": "candidate", "ran": True, "error": "WireError",
                "message": _short(f"the candidate's process answered no plain data: {exc}"), "where": ""}, 1)
    namespace.update({"__name__": "__main__", "__file__": tests_file, "__builtins__": builtins,
                      "_reflexa_describe": functools.partial(_describe, tracer=wire if mode == "values" else None)})
    try:
        _exec(tests_code, namespace)
    except BaseException as exc:
        finish(_failed_tests(exc, tests_file), 1)
    finish({"finished": True}, 0)


def _failed_tests(exc: BaseException, tests_file: str) -> dict[str, Any]:
    """The report of tests that raised: where, and whether a rewritten assert named the value it got."""
    tb = exc.__traceback__.tb_next if exc.__traceback__ else None
    try:
        traceback.print_exception(type(exc), exc, tb)
    except BaseException:
        print(f"{type(exc).__name__}", file=sys.stderr)
    error, message = type(exc).__name__, _short(exc)
    if isinstance(exc, CandidateExit):
        error, message = ("SystemExit", exc.code) if exc.code is not None else ("CandidateExit", message)
    elif isinstance(exc, CandidateError):  # the candidate's own exception type, named as it is
        error, _, message = message.partition(": ")
    where = getattr(exc, "_reflexa_where", "") or _where(tb, (tests_file,))
    got = isinstance(exc, AssertionError) and bool(exc.args) and type(exc.args[0]) is _Described
    report = {"finished": False, "stage": "tests", "ran": True, "error": error, "message": message,
              "got": got, "where": where}
    if got and exc.args[0].values:
        report["values"] = exc.args[0].values
    return report


def _undumpable() -> None:
    """No other process of the sandbox (a fork of the code under test, or the candidate's own process) may
    read or write this one's memory through /proc/PID/mem or ptrace: that takes a capability they lack."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    except Exception:
        pass  # not Linux: the namespaces and the wire still keep the candidate out


def main() -> None:
    mode, *paths = sys.argv[1:]
    _undumpable()
    finish = _finisher(mode)
    sys.argv = [paths[0]] if paths else ["harness"]
    if mode == "pytest":
        run_pytest(finish, *paths)
    else:
        run_judge(finish, *paths)


if __name__ == "__main__":
    main()
