"""Checks: objective signals about a candidate (tests, commands, schemas, patterns), plus an opt-in
LLM judge whose signal is marked subjective."""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import importlib.util
import inspect
import os
import re
import shlex
import socket
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, TypeGuard

from pydantic import BaseModel, field_validator

from ..errors import ConfigError
from ..structured import Message, Text300, json_document
from ..types import ErrorCode, Role, Signal, Status, Verdict, cap, fence_untrusted
from .patterns import PatternTimeout, compile_pattern, search
from .sandbox import ExecResult, Limits, Sandbox, hidden_in_every_run

WIRE_ENV = "REFLEXA_WIRE_FD"
"""The environment variable naming the wire's descriptor in a script check's judge and candidate processes."""

EVIDENCE_CHARS = 1500
"""Output kept as a signal's evidence: the tail, where test runners put their summary."""
VALUES_CHARS = 900
"""The traced values a failing call's message shows at most (PythonScriptCheck's `values`)."""


@dataclass(slots=True)
class CheckContext:
    """What a check may know besides the candidate. `ask` makes a budgeted model call (LLM judge)."""

    task: str = ""
    ask: Callable[..., Any] | None = None


class Check(Protocol):
    """Anything that turns a candidate into one Signal."""

    name: str
    subjective: bool

    def run(self, candidate: str, context: CheckContext) -> Signal: ...


_COUNTS = re.compile(r"(\d+) (passed|failed|errors?)\b")
_FAILED_LINE = re.compile(r"^(?:FAILED|ERROR) (.*)$", re.MULTILINE)


def pytest_score(output: str) -> tuple[int, int] | None:
    """(passed, total) from pytest's closing line, or None when there is none."""
    counts = {"passed": 0, "failed": 0, "error": 0}
    found = False
    for number, word in _COUNTS.findall(output):
        counts[word.rstrip("s") if word.startswith("error") else word] += int(number)
        found = True
    if not found:
        return None
    return counts["passed"], counts["passed"] + counts["failed"] + counts["error"]


def preluded(prelude: str, candidate: str) -> str:
    """The candidate with a task's prelude (its stub or imports) in front, as checks and selection run it."""
    return f"{prelude.rstrip(chr(10))}\n{candidate}" if prelude else candidate


def _tail(text: str, limit: int = EVIDENCE_CHARS) -> str:
    return text if len(text) <= limit else "…" + text[-limit:]


def _last_line(text: str) -> str:
    """The error line of a traceback, with the source line that raised it; else the last line."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    frames = [i for i, line in enumerate(lines) if line.lstrip().startswith('File "')]
    if frames and frames[-1] + 1 < len(lines) - 1:
        return f"{lines[-1].strip()} at `{lines[frames[-1] + 1].strip()}`"
    return lines[-1].strip()


# --- secrets ------------------------------------------------------------------------------------------

SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL", re.IGNORECASE)
"""Environment variable names whose values are treated as secrets."""
SECRET_MIN_CHARS = 8
"""Shorter values are not redacted: they would match ordinary words and numbers."""
REDACTED = "[REDACTED]"


def secret_values(environ: Mapping[str, str] | None = None, extra: Iterable[str] = ()) -> list[str]:
    """Values of secret-looking variables of this process (and `extra`), longest first."""
    environ = os.environ if environ is None else environ
    values = {v for k, v in environ.items() if SECRET_NAME.search(k) and len(v) >= SECRET_MIN_CHARS}
    values.update(v for v in extra if len(v) >= SECRET_MIN_CHARS)
    return sorted(values, key=len, reverse=True)


def redact_secrets(text: str, extra: Iterable[str] = ()) -> str:
    """`text` with every secret value of the parent's environment (and `extra`) replaced by [REDACTED]:
    a check's output goes into prompts and the trace, and sandboxed code may have found a way to echo
    a secret (a file it could read, a process it could see)."""
    for value in secret_values(extra=extra):
        if value in text:
            text = text.replace(value, REDACTED)
    return text


def _redacted(signal: Signal, extra: Iterable[str] = ()) -> Signal:
    extra = [*extra, *(value for folder in hidden_in_every_run() for value in _dotenv_secrets(folder))]
    message, evidence = redact_secrets(signal.message, extra), redact_secrets(signal.evidence, extra)
    if message == signal.message and evidence == signal.evidence:
        return signal
    return dataclasses.replace(signal, message=message, evidence=evidence)


def _dotenv_secrets(workdir: Path) -> list[str]:
    """Secret-looking values assigned in the working directory's .env files."""
    found = []
    for path in workdir.glob(".env*"):
        try:
            lines = path.read_text(errors="replace").splitlines() if path.is_file() else []
        except OSError:
            continue
        for line in lines:
            name, sep, value = line.removeprefix("export ").partition("=")
            if sep and SECRET_NAME.search(name):
                found.append(value.strip().strip("'\""))
    return found


# --- mapping a sandboxed run to a signal --------------------------------------------------------------

def _limit_signal(source: str, result: ExecResult, limits: Limits, output: str) -> Signal | None:
    """Timeouts and resource limits come first, whatever the run reported."""
    if result.timed_out or result.killed_by == "SIGXCPU":
        return Signal(source, False, ErrorCode.TIMEOUT,
                      f"killed after {limits.timeout:g}s wall / {limits.cpu_seconds}s CPU limit",
                      _tail(output), score=0.0)
    if result.memory_exceeded:
        return Signal(source, False, ErrorCode.RESOURCE_LIMIT,
                      f"the process tree went over its {limits.tree_memory_mb} MiB memory limit and was killed",
                      _tail(output), score=0.0)
    return None


def _crash_limit(source: str, result: ExecResult, output: str) -> Signal | None:
    if "MemoryError" in output or result.killed_by in ("SIGXFSZ", "SIGSEGV"):
        return Signal(source, False, ErrorCode.RESOURCE_LIMIT,
                      f"hit a resource limit ({result.killed_by or 'MemoryError'})", _tail(output), score=0.0)
    return None


def signal_from_exec(source: str, result: ExecResult, limits: Limits) -> Signal:
    """Map a sandboxed command to a signal by its exit status: pass, test counts, timeout or resource
    limit. For a command the user chose; code checks use `signal_from_report`. Secrets are redacted."""
    output = (result.stdout + "\n" + result.stderr).strip()
    limit = _limit_signal(source, result, limits, output)
    if limit is not None:
        return _redacted(limit)
    if result.ok:
        return _redacted(Signal(source, True, message="passed", evidence=_tail(output), score=1.0))
    crash = _crash_limit(source, result, output)
    if crash is not None:
        return _redacted(crash)
    counts = pytest_score(output)
    failures = _FAILED_LINE.findall(output)
    if counts is not None:
        passed, total = counts
        detail = "; ".join(cap(f, 200) for f in failures[:3]) or _last_line(output)
        return _redacted(Signal(source, False, ErrorCode.TEST_FAILED,
                                f"{total - passed} of {total} tests failed: {detail}",
                                _tail(output), score=passed / total if total else 0.0))
    # No test summary: the program died before any test ran (syntax error, import error, crash).
    return _redacted(Signal(source, False, ErrorCode.TEST_FAILED,
                            cap(_last_line(output) or f"exit code {result.returncode}", 300),
                            _tail(output), score=_crash_score(output)))


def signal_from_report(source: str, result: ExecResult, limits: Limits, *,
                       expected_tests: frozenset[str] | None = None, output: str | None = None) -> Signal:
    """Map a harness run (PytestCheck, PythonScriptCheck) to a signal. Only the harness's nonce-stamped
    report can say "passed"; the exit status and the output text never do. Secrets are redacted. `output`:
    what the evidence is read from (default: the run's own)."""
    output = (result.stdout + "\n" + result.stderr).strip() if output is None else output
    signal = _limit_signal(source, result, limits, output)
    if signal is None and result.report is None:
        signal = _crash_limit(source, result, output) or _no_report(source, result, output)
    if signal is None:
        report = result.report or {}
        signal = (_pytest_signal(source, report, output, expected_tests) if report.get("mode") == "pytest"
                  else _script_signal(source, report, output))
    return _redacted(signal)


def _no_report(source: str, result: ExecResult, output: str) -> Signal:
    if result.returncode == 0:
        message = ("exited with status 0 but the test harness never reported: the process ended before "
                   "the tests finished (os._exit in the code under test?)")
    else:
        message = f"the tests did not report (exit code {result.returncode}): {_last_line(output)}"
    return Signal(source, False, ErrorCode.NO_TEST_REPORT, cap(message, 300), _tail(output), score=0.0)


def _pytest_signal(source: str, report: dict[str, Any], output: str, expected: frozenset[str] | None) -> Signal:
    evidence = _tail(output)
    if not report.get("finished") and report.get("stage") == "candidate":  # its module failed before the tests
        return _script_signal(source, report, output)
    if not report.get("finished"):
        return Signal(source, False, ErrorCode.NO_TEST_REPORT,
                      cap(f"pytest did not finish: {report.get('reason', 'unknown')}", 300), evidence, score=0.0)
    if report.get("internal_error"):
        return Signal(source, False, ErrorCode.NO_TEST_REPORT,
                      cap(f"the tests did not run to the end: {report['internal_error']} escaped pytest "
                          "(an exit in the code under test?)", 300), evidence, score=0.0)
    collected, passed = int(report.get("collected", 0)), int(report.get("passed", 0))
    failed, errors = int(report.get("failed", 0)), int(report.get("errors", 0))
    collect_errors = int(report.get("collect_errors", 0))
    tampered = [str(t) for t in report.get("tampered") or []]
    if expected and collected and not collect_errors:
        seen = {str(i).rsplit("::", 1)[-1].split("[", 1)[0] for i in report.get("ids") or []}
        if missing := sorted(expected - seen):
            tampered.append(f"tests in the test file were not collected: {', '.join(missing[:5])}")
    if tampered:
        return Signal(source, False, ErrorCode.TAMPERED, cap("; ".join(tampered), 300), evidence, score=0.0)
    total = collected + collect_errors
    # A test the file itself skips or marks xfail is the test author's call, not a failure; a skip the code
    # under test raises while a test runs is no pass (the harness counts it apart: "skipped_at_run").
    declared = int(report.get("skipped", 0)) if not report.get("skipped_at_run") else 0
    if (collected > 0 and passed > 0 and passed + declared == collected and failed == errors == collect_errors == 0
            and report.get("exit_code") == 0):
        skipped = f", {declared} skipped or xfail as the test file says" if declared else ""
        return Signal(source, True, message=f"{passed} passed{skipped}", evidence=evidence, score=1.0)
    if total == 0:
        return Signal(source, False, ErrorCode.TEST_FAILED, "no tests were collected", evidence, score=0.0)
    failures = [f"{nodeid}: {cap(str(why), 200)}" for nodeid, why in (report.get("failures") or [])[:3]]
    detail = "; ".join(failures) or (f"{report.get('skipped', 0)} skipped" if report.get("skipped")
                                     else f"pytest exited {report.get('exit_code')}")
    return Signal(source, False, ErrorCode.TEST_FAILED, cap(f"{total - passed} of {total} tests failed: {detail}", 600),
                  evidence, score=passed / total)


def _script_signal(source: str, report: dict[str, Any], output: str) -> Signal:
    evidence = _tail(output)
    if report.get("finished"):
        return Signal(source, True, message="passed", evidence=evidence, score=1.0)
    error, stage = str(report.get("error", "error")), str(report.get("stage", "candidate"))
    message, where = str(report.get("message", "")), str(report.get("where", ""))
    if error in ("SystemExit", "KeyboardInterrupt", "CandidateExit"):
        when = ("at import, before the tests ran" if stage == "candidate"
                else "while the tests ran, before they finished")
        what = {"SystemExit": f"the code called sys.exit({message})", "KeyboardInterrupt": "the code raised "
                "KeyboardInterrupt"}.get(error, "the candidate's process ended")
        return Signal(source, False, ErrorCode.NO_TEST_REPORT, cap(f"{what} {when}", 300), evidence, score=0.0)
    if error == "MemoryError":
        return Signal(source, False, ErrorCode.RESOURCE_LIMIT, "hit a resource limit (MemoryError)", evidence,
                      score=0.0)
    text = f"{error}: {message}" if message else error
    if where and not message.startswith("assert "):
        text += f" at `{where}`"
    text = cap(text, 400)
    # Pinpointed: the message names the value a failing assert got, or a crash's file and line (a bare
    # AssertionError names neither), and the cap left that part in.
    if error == "AssertionError":
        pinpointed = bool(report.get("got")) and " failed: got " in text
    else:
        pinpointed = bool(where) and f" at `{where.split(': ', 1)[0]}: " in text
    if isinstance(values := report.get("values"), list) and values:
        call, *lines = [line for line in values if isinstance(line, str)] or [""]
        text += (f"\nWhat {call or 'that call'} computed on the way (each line it ran, with the values that "
                 "changed before it):\n" + cap("\n".join(lines), VALUES_CHARS))
    # An AssertionError means the code ran and was wrong somewhere (revise); anything else means wrong
    # direction (restart): a syntax error, a crash at import, a crash inside the tests.
    return Signal(source, False, ErrorCode.TEST_FAILED, text, evidence,
                  score=None if error == "AssertionError" else 0.0, pinpointed=pinpointed)


def _crash_score(output: str) -> float | None:
    """An AssertionError means the code ran and was wrong somewhere (revise); anything else before the
    tests ran means wrong direction (restart)."""
    return None if "AssertionError" in output else 0.0


@functools.cache
def _source(name: str) -> str:
    """A standalone part's source after the wire's (_wire.py), as `python -c` runs it in a sandbox."""
    here = Path(__file__).parent
    own = (here / name).read_text().replace("from __future__ import annotations\n", "", 1)
    return (here / "_wire.py").read_text() + "\n" + own


def _test_names(source: str) -> frozenset[str] | None:
    """Test functions defined in a pristine test file: module-level `test*` functions and `test*`
    methods of `Test*` classes. None when the file does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    names = set()
    for node in tree.body:
        if _is_test(node):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            names.update(n.name for n in node.body if _is_test(n))
    return frozenset(names)


def test_file_problem(source: str) -> str | None:
    """Why no candidate could ever pass a pytest file (it is not Python, or defines no test), else None."""
    names = _test_names(source)
    if names is None:
        return "is not valid Python"
    return None if names else "defines no test"


def _is_test(node: ast.stmt) -> TypeGuard[ast.FunctionDef | ast.AsyncFunctionDef]:
    """A `test*` function that is not a fixture (a fixture named test_input is no test)."""
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or not node.name.startswith("test"):
        return False
    return not any("fixture" in ast.unparse(decorator) for decorator in node.decorator_list)


class PytestCheck:
    """Runs a pytest file against the candidate, in two processes of the sandbox: the candidate's module
    (`<module>.py`) in one (_serve.py), the tests in the other (_harness.py), where the module they import is
    the candidate's names as handles: every call crosses the wire and every value comes back as plain data,
    compared where the tests run. Nothing the candidate does in its own process reaches the tests, pytest, the
    test file or the report.

    It passes only on the harness's report: every collected test passed, at least one was collected, none
    failed or errored, every test defined in the file was collected, and the file the tests ran from is the
    one written here (its hash). A test that needs the candidate's objects in its own interpreter (isinstance
    of a candidate class, monkeypatching its module, passing it a function of the test's) cannot run so:
    docs/checks.md says what to choose then."""

    subjective = False

    def __init__(self, tests: Path, *, module: str = "solution", sandbox: Sandbox | None = None) -> None:
        if importlib.util.find_spec("pytest") is None:
            # A setup fault, not the candidate's: say so before any model call is spent on it.
            raise ConfigError("pytest is not installed in this environment", hint="pip install pytest")
        self.tests = Path(tests)
        self.test_source = self.tests.read_text()
        self.module = module
        self.sandbox = sandbox or Sandbox()
        self.name = f"pytest:{self.tests.name}"
        self._expected = _test_names(self.test_source)
        # A test file that cannot pass any candidate is the user's mistake: say so before a model call.
        if problem := test_file_problem(self.test_source):
            raise ConfigError(f"the test file {self.tests} {problem}",
                              hint="pytest collects test_* functions and the test_* methods of Test* classes")

    def run(self, candidate: str, context: CheckContext) -> Signal:
        judged, output, limited = _judged(self.name, self.sandbox, candidate, f"{self.module}.py",
                                          ["pytest", self.tests.name, self.module],
                                          {self.tests.name: self.test_source})
        if limited is not None:
            return _redacted(limited)
        written = hashlib.sha256(self.test_source.encode("utf-8", "replace")).hexdigest()
        if judged.report is not None and judged.report.get("test_sha256") not in (None, written):
            return _redacted(Signal(self.name, False, ErrorCode.TAMPERED, "the tests ran from another file than the "
                                    "one written", _tail(output), score=0.0))
        return signal_from_report(self.name, judged, self.sandbox.limits, expected_tests=self._expected,
                                  output=output)


def _judged(source: str, sandbox: Sandbox, candidate: str, candidate_file: str, judge_args: list[str],
            judge_files: dict[str, str]) -> tuple[ExecResult, str, Signal | None]:
    """(the judge's run, both processes' output, a signal when either hit a limit): the candidate served from
    its own scratch directory by _serve.py, the tests run by _harness.py in another, joined by a socket pair
    (the wire)."""
    judge_end, candidate_end = (end.detach() for end in socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM))
    limits = sandbox.limits
    with ThreadPoolExecutor(1, thread_name_prefix="reflexa-candidate") as pool:
        served = pool.submit(sandbox.run, [sys.executable, "-I", "-c", _source("_serve.py"), candidate_file],
                             files={candidate_file: candidate}, wires={WIRE_ENV: candidate_end})
        judged = sandbox.run([sys.executable, "-I", "-c", _source("_harness.py"), *judge_args], files=judge_files,
                             wires={WIRE_ENV: judge_end}, report=True,
                             limits=dataclasses.replace(limits, timeout=limits.timeout + JUDGE_GRACE))
        server = served.result()
    output = f"{server.stdout}\n{server.stderr}\n{judged.stdout}\n{judged.stderr}".strip()
    limited = _limit_signal(source, server, limits, output) or _limit_signal(source, judged, limits, output)
    return judged, output, limited


JUDGE_GRACE = 5.0
"""Seconds a script check's judge outlives the candidate's timeout: time to report a candidate that was killed."""


class PythonScriptCheck:
    """Runs test code (asserts, or HumanEval's `check(...)`) against the candidate, each in a process of its
    own (_harness.py's judge, _serve.py): the candidate's functions are called across a wire and their results
    come back as plain data, compared where the tests run. Nothing the candidate does in its own process (its
    threads, its forks, rewriting its own memory) reaches the tests, their comparisons or the report, and the
    test code is not in the candidate's sandbox to be read. Passes only when the judge saw the test code run
    to its end. A failing `assert f(x) == y` names the value the candidate returned: `assert f(2) == 4
    failed: got 5`. With `values`, the message also shows what that call computed on the way: the call runs
    once more in the candidate's process with its lines traced, and each line it ran is shown with the local
    values that changed before it (the first TRACE_HEAD and the last TRACE_TAIL of them, _serve.py)."""

    subjective = False

    def __init__(self, test_code: str, *, name: str = "python-tests", sandbox: Sandbox | None = None,
                 values: bool = False) -> None:
        self.test_code = test_code
        self.name = name
        self.sandbox = sandbox or Sandbox()
        self.values = values

    def run(self, candidate: str, context: CheckContext) -> Signal:
        mode = ["values"] if self.values else []
        judged, output, signal = _judged(self.name, self.sandbox, candidate, "candidate.py",
                                         ["judge", "tests.py", *mode], {"tests.py": self.test_code})
        if signal is None and judged.report is None:
            signal = _no_report(self.name, judged, output)
        return _redacted(signal or _script_signal(self.name, judged.report or {}, output))


class CommandCheck:
    """Runs a shell command in a scratch copy of `workdir` (without dotfiles, .gitignored files or
    symlinks out of the tree), with the candidate written to `out`. Exit status 0 passes: the user chose
    the command, so its status is the signal."""

    subjective = False

    def __init__(self, command: str, *, out: str, workdir: Path, sandbox: Sandbox | None = None) -> None:
        self.command = command
        self.out = out
        self.workdir = Path(workdir)
        self.sandbox = sandbox or Sandbox()
        self.name = f"command:{cap(command, 60)}"

    def run(self, candidate: str, context: CheckContext) -> Signal:
        result = self.sandbox.run(["/bin/sh", "-c", self.command], files={self.out: candidate},
                                  copy_from=self.workdir)
        secrets = _dotenv_secrets(self.workdir)
        signal = _redacted(signal_from_exec(self.name, result, self.sandbox.limits), secrets)
        if not signal.ok and signal.code is ErrorCode.TEST_FAILED and pytest_score(signal.evidence) is None:
            # Not a test runner: the exit status is the whole signal.
            crashed = "Traceback (most recent call last)" in signal.evidence
            return _redacted(Signal(
                self.name, False, ErrorCode.COMMAND_FAILED,
                f"`{shlex.quote(self.command)}` exited {result.returncode}: {cap(_last_line(signal.evidence), 200)}",
                signal.evidence, score=_crash_score(signal.evidence) if crashed else None), secrets)
        return signal


class JsonSchemaCheck:
    """The candidate must be JSON that validates against a JSON schema."""

    subjective = False
    name = "json-schema"

    def __init__(self, schema: dict[str, Any]) -> None:
        import jsonschema

        try:
            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise ConfigError(f"not a valid JSON schema: {exc.message}") from None
        self.validator = jsonschema.Draft202012Validator(schema)

    def run(self, candidate: str, context: CheckContext) -> Signal:
        try:
            data = json_document(candidate)  # the candidate must *be* JSON, not hold some inside prose
        except ValueError as exc:
            return Signal(self.name, False, ErrorCode.SCHEMA, f"the candidate is not a JSON document: {exc}",
                          cap(candidate, 300), score=0.0)
        errors = list(self.validator.iter_errors(data))
        if not errors:
            return Signal(self.name, True, message="valid", score=1.0)
        first = errors[0]
        where = "/".join(str(p) for p in first.absolute_path) or "(root)"
        return Signal(self.name, False, ErrorCode.SCHEMA,
                      f"{len(errors)} schema violation(s); at {where}: {first.message}", cap(candidate, 300))


class RegexCheck:
    """The candidate must match (or, with must_match=False, must not match) a regular expression. Each search
    is bounded in time (evaluate/patterns.py): one that runs past it fails the check with TIMEOUT."""

    subjective = False

    def __init__(self, pattern: str, *, must_match: bool = True, flags: int = 0) -> None:
        self.regex = compile_pattern(pattern, flags)
        self.must_match = must_match
        self.name = f"regex:{cap(pattern, 40)}"

    def run(self, candidate: str, context: CheckContext) -> Signal:
        try:
            match = search(self.regex, candidate)
        except PatternTimeout as exc:
            return Signal(self.name, False, ErrorCode.TIMEOUT, str(exc), score=0.0)
        if bool(match) == self.must_match:
            return Signal(self.name, True, message="matched" if match else "absent", score=1.0)
        if self.must_match:
            return Signal(self.name, False, ErrorCode.NO_MATCH, f"does not match /{self.regex.pattern}/")
        return Signal(self.name, False, ErrorCode.NO_MATCH, f"must not match /{self.regex.pattern}/",
                      evidence=match.group(0)[:200] if match else "")


def _status(value: Any) -> Any:
    """Case- and whitespace-blind status: ' needs improvement ' reads as NEEDS_IMPROVEMENT."""
    return re.sub(r"[\s_-]+", "_", value.strip()).upper() if isinstance(value, str) else value


class Judgement(BaseModel):
    """What the LLM judge answers."""

    status: Literal["PASS", "NEEDS_IMPROVEMENT", "FAIL"]
    reason: Text300

    _norm = field_validator("status", mode="before")(_status)


class LLMJudge:
    """Opt-in: a model grades the candidate against the task. Its signal is marked subjective, since a
    model can pass what the world would fail (measured: SmolLM2-135M passed 34 of 34 failing
    programs)."""

    subjective = True
    name = "llm-judge"

    def run(self, candidate: str, context: CheckContext) -> Signal:
        if context.ask is None:
            raise ValueError("LLMJudge needs a model: run it inside a loop")
        messages: list[Message] = [
            {"role": "system", "content": "You grade an answer against its task. You never rewrite it."},
            {"role": "user", "content": f"Task:\n{context.task}\n\nAnswer:\n<<<\n{fence_untrusted(candidate)}\n>>>\n\n"
             "Reply with JSON: status PASS, NEEDS_IMPROVEMENT or FAIL, and a one-sentence reason."},
        ]
        completion = context.ask(Role.EVALUATOR, messages, schema=Judgement, max_tokens=160)
        if completion is None:
            return Signal(self.name, False, ErrorCode.JUDGED_FAIL, "no budget left to judge", subjective=True)
        if completion.value is None:
            return Signal(self.name, False, ErrorCode.SCHEMA, f"judge reply unusable: {completion.error}",
                          cap(completion.text, 300), subjective=True)
        judgement: Judgement = completion.value
        score = {"PASS": 1.0, "NEEDS_IMPROVEMENT": 0.5, "FAIL": 0.0}[judgement.status]
        passed = judgement.status == "PASS"
        return Signal(self.name, passed, None if passed else ErrorCode.JUDGED_FAIL, judgement.reason,
                      subjective=True, score=score)


class FunctionCheck:
    """A plain function as a check: `candidate -> bool | str | Signal | None` (see `said_signal`). An
    exception the function raises fails the candidate (the next attempt starts fresh) and names the
    exception. A function that cannot take the candidate, or an async one, is refused when it is given."""

    subjective = False

    def __init__(self, function: Callable[[str], bool | str | Signal | None], name: str | None = None) -> None:
        self.function = function
        self.name = name or getattr(function, "__name__", "check").replace("<lambda>", "check")
        hint = ("a check function is `def check(candidate: str) -> bool | str | Signal`; a Check object has "
                "`run(candidate, context)`")
        if inspect.iscoroutinefunction(function):
            raise ConfigError(f"the check function {self.name} is async: a check is called, not awaited", hint=hint)
        try:
            signature = inspect.signature(function, follow_wrapped=False)
        except (TypeError, ValueError):
            return  # no signature to read (a builtin): called as it is
        try:
            signature.bind("candidate")
        except TypeError:
            raise ConfigError(f"the check function {self.name} does not take one argument, the candidate",
                              hint=hint) from None

    def run(self, candidate: str, context: CheckContext) -> Signal:
        try:
            said = self.function(candidate)
        except Exception as exc:  # noqa: BLE001 - a user's check that raised: the candidate fails, named
            return Signal(self.name, False, ErrorCode.TEST_FAILED, f"{type(exc).__name__}: {exc}"[:300], score=0.0)
        return said_signal(self.name, said)


def said_signal(name: str, said: object) -> Signal:
    """What a check function's return means. True or None passes; False fails; a string fails and says what
    is wrong (the next attempt revises the candidate with it); a Signal is taken as it is (with its
    `pinpointed` flag). Anything else is a ConfigError: the function is wrong, not the candidate."""
    if isinstance(said, Signal):
        return said
    if said is None or said is True:
        return Signal(name, True, score=1.0)
    # A plain failure says nothing of how far off the candidate is: revise it with what the check said.
    if said is False:
        return Signal(name, False, ErrorCode.TEST_FAILED, f"{name} returned False")
    if isinstance(said, str):
        return Signal(name, False, ErrorCode.TEST_FAILED, said or f"{name} failed")
    raise ConfigError(f"the check function {name} returned {type(said).__name__}",
                      hint="a check function returns a bool, a str (what is wrong), a Signal or None")


def as_check(check: CheckLike) -> Check:
    """A check as given: a `Check` (anything with `name` and `run`), or a plain function (FunctionCheck)."""
    if isinstance(check, type):
        raise ConfigError(f"{check.__name__} is a class, not a check", hint=f"give an instance: {check.__name__}(...)")
    if hasattr(check, "run") and hasattr(check, "name"):
        return check  # type: ignore[return-value]
    if callable(check):
        return FunctionCheck(check)
    raise ConfigError(f"not a check: {check!r}", hint=_HINT)


_HINT = "give a Check (PytestCheck, RegexCheck, ...), a function candidate -> bool | str | Signal, or a list of them"

CheckLike = Check | Callable[[str], Any]
"""A check as a caller may give it: a `Check`, or a plain function `candidate -> bool | str | Signal | None`."""


def as_checks(checks: CheckLike | Iterable[CheckLike]) -> list[Check]:
    """Checks as given: one check or any iterable of them (a string is neither: it is no check, and as a
    sequence it would be read letter by letter)."""
    if isinstance(checks, str | bytes):
        raise ConfigError(f"not a check: {checks!r}", hint=_HINT)
    if hasattr(checks, "run") or callable(checks):
        return [as_check(checks)]  # type: ignore[arg-type]
    try:
        given = list(checks)
    except TypeError:
        raise ConfigError(f"not a check: {checks!r}", hint=_HINT) from None
    return [as_check(check) for check in given]


def verdict_from(signals: Sequence[Signal]) -> Verdict:
    """PASS when every signal holds; FAIL when a failing signal shows nothing held (score 0, wrong
    direction); otherwise NEEDS_IMPROVEMENT."""
    subjective = any(s.subjective for s in signals)
    failing = [s for s in signals if not s.ok]
    if not failing:
        return Verdict(Status.PASS, tuple(signals), subjective=subjective)
    status = Status.FAIL if any(s.score == 0.0 for s in failing) else Status.NEEDS_IMPROVEMENT
    feedback = "\n".join(f"[{s.source}] {s.code or 'FAILED'}: {s.message}" for s in failing)
    return Verdict(status, tuple(signals), feedback, subjective)


def run_checks(checks: Sequence[Check], candidate: str, context: CheckContext) -> Verdict:
    """Run every check on a candidate. An empty candidate fails at once, without running anything."""
    if not candidate.strip():
        return verdict_from([Signal("candidate", False, ErrorCode.EMPTY, "the answer is empty", score=0.0)])
    signals = []
    for check in checks:
        signal = check.run(candidate, context)
        if getattr(check, "subjective", False) and not signal.subjective:
            signal = dataclasses.replace(signal, subjective=True)  # a judge's pass is never an objective one
        signals.append(signal)
    return verdict_from(signals)
