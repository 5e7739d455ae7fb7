"""The harness PytestCheck and PythonScriptCheck run inside the sandbox, as `python -I -c <this text>`.

It runs the tests in-process and reports their outcome as one JSON line on the sandbox's report channel
(see sandbox.py), stamped with a nonce. The nonce's pipe is read and closed, the test sources read,
hashed and compiled, before any untrusted code runs, so the code under test cannot learn the nonce from
its environment, its arguments or its file descriptors: an early exit (`os._exit(0)`, `sys.exit(0)`), a
forged exit status or a forged pytest summary leaves no valid report, and the check fails.

The code under test runs in this process, so everything the report depends on is bound before it runs:
the function that sends the report is a closure held in local variables (patching this module's globals
through `import __main__`, or builtins such as `dict` or `len`, changes nothing the report uses). What it
cannot stop: code that reads the harness's own memory (walks the interpreter's frames, or the garbage
collector's referrers, up to it) could still forge a report. Against the common shortcuts it also records
which test functions really returned (pytest's outcome alone can be rewritten by a plugin or a patch),
checks that pytest's core functions are the ones it started with, and that the test file is unchanged.

Standalone on purpose: it must not import reflexa (the sandboxed interpreter may see another copy).

    python -I -c HARNESS pytest TEST_FILE
    python -I -c HARNESS script CANDIDATE_FILE TESTS_FILE
"""
# Broad excepts throughout, on purpose: whatever the code under test raises or breaks, the harness must
# still reach a verdict (or leave no report, which fails the check). try/except rather than
# contextlib.suppress: a statement cannot be patched by the code under test, a module attribute can.
# ruff: noqa: BLE001, S110, S112, SIM105

from __future__ import annotations

import ast
import builtins
import hashlib
import json
import os
import reprlib
import sys
import traceback

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: the harness starts before every check, typing is not loaded
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import CodeType, TracebackType
    from typing import Any, NoReturn

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

    def finish(data: dict[str, Any], code: int) -> NoReturn:
        """Send the report and leave at once: atexit hooks and threads of the code under test get no say."""
        for stream in streams:
            try:
                stream.flush()
            except Exception:
                pass
        payload = (dumps({**data, "mode": mode, "nonce": stamp}, default=str) + "\n").encode()
        while payload:
            payload = payload[write(report_fd, payload):]
        leave(code)

    return finish


def _short(text: object) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= _MESSAGE_CHARS else text[: _MESSAGE_CHARS - 1] + "…"


# --- pytest ---------------------------------------------------------------------------------------------

_WATCHED = (
    ("_pytest.python", "Function.runtest"), ("_pytest.python", "pytest_pyfunc_call"),
    ("_pytest.runner", "runtestprotocol"), ("_pytest.runner", "call_and_report"),
    ("_pytest.runner", "call_runtest_hook"), ("_pytest.runner", "pytest_runtest_call"),
    ("_pytest.runner", "CallInfo.from_call"), ("_pytest.reports", "TestReport.from_item_and_call"),
    ("_pytest.reports", "BaseReport.passed"), ("_pytest.reports", "BaseReport.failed"),
    ("_pytest.main", "pytest_runtestloop"), ("_pytest.main", "Session.perform_collect"),
    ("pluggy._callers", "_multicall"), ("pluggy._hooks", "HookCaller.__call__"),
)
"""pytest and pluggy internals whose replacement would let tests pass without running them."""


def _watched() -> list[tuple[str, Any, str, Any]]:
    """(label, owner, name, object) for each watched internal this pytest version has."""
    import importlib

    found = []
    for module_name, dotted in _WATCHED:
        try:
            owner = importlib.import_module(module_name)
            *path, name = dotted.split(".")
            for part in path:
                owner = getattr(owner, part)
            found.append((f"{module_name}.{dotted}", owner, name, owner.__dict__.get(name)))
        except Exception:
            continue  # another pytest or pluggy version: watch what exists
    return found


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


def run_pytest(finish: Finish, test_file: str) -> NoReturn:
    import pytest

    # Bound before the tests run: what checks their outcome must not be rebindable by the code under test.
    sha, short, length, ordered = _sha256, _short, len, sorted
    before = sha(test_file)
    watched = _watched()
    recorder = _recorder(pytest)
    args = ["-q", "--no-header", "-p", "no:cacheprovider", "--tb=short", "-rfE", test_file]
    try:
        exit_code = int(pytest.main(args, plugins=[recorder]))
    except BaseException as exc:  # SystemExit or KeyboardInterrupt out of pytest itself
        finish({"finished": False, "reason": short(f"{type(exc).__name__}: {exc}")}, 1)
    tampered = []
    if sha(test_file) != before:
        tampered.append(f"the test file {test_file} was changed during the run")
    tampered += [f"pytest internals replaced: {label}"
                 for label, owner, name, obj in watched if owner.__dict__.get(name) is not obj]
    unseen = ordered(recorder.passed - recorder.called_ok)
    if unseen:
        tampered.append(f"{length(unseen)} test(s) reported passing although their function never returned: "
                        + ", ".join(unseen[:3]))
    passed = recorder.passed & recorder.called_ok
    data = {
        "finished": True, "exit_code": exit_code, "collected": length(recorder.collected),
        "ids": recorder.collected[:500], "passed": length(passed), "failed": length(recorder.failed),
        "errors": length(recorder.errors), "collect_errors": recorder.collect_errors,
        "skipped": length(recorder.skipped), "skipped_at_run": length(recorder.skipped_at_run),
        "failures": recorder.failures[:10], "tampered": tampered, "internal_error": recorder.internal_error,
    }
    finish(data, exit_code or 0)


# --- a candidate followed by test code (HumanEval, MBPP) ----------------------------------------------

_REPR = reprlib.Repr()
_REPR.maxstring, _REPR.maxother, _REPR.maxlist, _REPR.maxtuple = 200, 200, 20, 20
_REPR.maxdict, _REPR.maxset, _REPR.maxlevel = 10, 10, 4


class _Described(str):
    """A failing assert's message that names the value the candidate returned (the report says so)."""


def _describe(text: str, got: object, message: object = None) -> str:
    """The message of a rewritten assert: its source, and the value the candidate actually returned."""
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
    return _Described(out[:_MESSAGE_CHARS])


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
        got = ast.NamedExpr(target=ast.Name("_reflexa_got", ast.Store()), value=getattr(holder, slot))
        setattr(holder, slot, ast.copy_location(got, getattr(holder, slot)))
        node.msg = ast.copy_location(ast.Call(
            func=ast.Name("_reflexa_describe", ast.Load()),
            args=[ast.Constant(" ".join(text.split())), ast.Name("_reflexa_got", ast.Load()),
                  node.msg or ast.Constant(None)],
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


def run_script(finish: Finish, candidate_file: str, tests_file: str) -> NoReturn:
    execute = _exec  # bound before the candidate runs: replacing the global must not skip the tests
    with open(candidate_file, encoding="utf-8", errors="replace") as fh:
        candidate = fh.read()
    with open(tests_file, encoding="utf-8", errors="replace") as fh:
        tests = fh.read()
    stage = "candidate"
    try:
        candidate_code = _compile(candidate, candidate_file, "exec", dont_inherit=True, optimize=0)
        stage = "tests"
        tests_code = _compile_tests(tests, tests_file)
    except BaseException as exc:  # a syntax error: nothing ran
        traceback.print_exception(type(exc), exc, None)
        finish({"finished": False, "stage": stage, "ran": False, "error": type(exc).__name__,
                "message": _short(exc), "where": ""}, 1)
    namespace = {"__name__": "__main__", "__file__": candidate_file, "__builtins__": builtins,
                 "_reflexa_describe": _describe}
    stage = "candidate"
    try:
        execute(candidate_code, namespace)
        stage = "tests"
        execute(tests_code, namespace)
    except BaseException as exc:  # SystemExit included: an exit before the tests end is no pass
        tb = exc.__traceback__.tb_next if exc.__traceback__ else None
        try:
            traceback.print_exception(type(exc), exc, tb)
        except BaseException:
            print(f"{type(exc).__name__}", file=sys.stderr)
        try:
            message = _short(exc)
        except BaseException:
            message = "<unprintable>"
        try:  # a rewritten assert failed: its message names the value the candidate returned
            got = isinstance(exc, AssertionError) and type(exc.args[0]) is _Described
        except BaseException:
            got = False
        finish({"finished": False, "stage": stage, "ran": True, "error": type(exc).__name__,
                "message": message, "got": got, "where": _where(tb, (candidate_file, tests_file))}, 1)
    finish({"finished": True}, 0)


def main() -> None:
    mode, *paths = sys.argv[1:]
    finish = _finisher(mode)
    sys.argv = [paths[0]] if paths else ["harness"]
    if mode == "pytest":
        run_pytest(finish, *paths)
    else:
        run_script(finish, *paths)


if __name__ == "__main__":
    main()
