"""Checks: objective signals about a candidate (tests, commands, schemas, patterns), plus an opt-in
LLM judge whose signal is marked subjective."""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, field_validator

from ..structured import Message, Text300, extract_json
from ..types import ErrorCode, Role, Signal, Status, Verdict, cap
from .sandbox import ExecResult, Limits, Sandbox

EVIDENCE_CHARS = 1500
"""Output kept as a signal's evidence: the tail, where test runners put their summary."""


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


def signal_from_exec(source: str, result: ExecResult, limits: Limits) -> Signal:
    """Map a sandboxed run to a signal: pass, test counts, timeout or resource limit."""
    output = (result.stdout + "\n" + result.stderr).strip()
    if result.timed_out or result.killed_by == "SIGXCPU":
        return Signal(source, False, ErrorCode.TIMEOUT,
                      f"killed after {limits.timeout:g}s wall / {limits.cpu_seconds}s CPU limit",
                      _tail(output), score=0.0)
    if result.ok:
        return Signal(source, True, message="passed", evidence=_tail(output), score=1.0)
    if "MemoryError" in output or result.killed_by in ("SIGXFSZ", "SIGSEGV"):
        return Signal(source, False, ErrorCode.RESOURCE_LIMIT,
                      f"hit a resource limit ({result.killed_by or 'MemoryError'})", _tail(output), score=0.0)
    counts = pytest_score(output)
    failures = _FAILED_LINE.findall(output)
    if counts is not None:
        passed, total = counts
        detail = "; ".join(cap(f, 200) for f in failures[:3]) or _last_line(output)
        return Signal(source, False, ErrorCode.TEST_FAILED, f"{total - passed} of {total} tests failed: {detail}",
                      _tail(output), score=passed / total if total else 0.0)
    # No test summary: the program died before any test ran (syntax error, import error, crash).
    return Signal(source, False, ErrorCode.TEST_FAILED, cap(_last_line(output) or f"exit code {result.returncode}", 300),
                  _tail(output), score=_crash_score(output))


def _crash_score(output: str) -> float | None:
    """An AssertionError means the code ran and was wrong somewhere (revise); anything else before the
    tests ran means wrong direction (restart)."""
    return None if "AssertionError" in output else 0.0


class PytestCheck:
    """Runs a pytest file against the candidate, written as `<module>.py`, inside the sandbox."""

    subjective = False

    def __init__(self, tests: Path, *, module: str = "solution", sandbox: Sandbox | None = None) -> None:
        self.tests = Path(tests)
        self.test_source = self.tests.read_text()
        self.module = module
        self.sandbox = sandbox or Sandbox()
        self.name = f"pytest:{self.tests.name}"

    def run(self, candidate: str, context: CheckContext) -> Signal:
        argv = [sys.executable, "-I", "-m", "pytest", "-q", "--no-header", "-p", "no:cacheprovider",
                "--tb=short", "-rfE", self.tests.name]
        files = {f"{self.module}.py": candidate, self.tests.name: self.test_source}
        result = self.sandbox.run(argv, files=files)
        return signal_from_exec(self.name, result, self.sandbox.limits)


class PythonScriptCheck:
    """Runs the candidate followed by test code (e.g. HumanEval's `check(...)`) as one script."""

    subjective = False

    def __init__(self, test_code: str, *, name: str = "python-tests", sandbox: Sandbox | None = None) -> None:
        self.test_code = test_code
        self.name = name
        self.sandbox = sandbox or Sandbox()

    def run(self, candidate: str, context: CheckContext) -> Signal:
        program = candidate + "\n\n" + self.test_code + "\n"
        result = self.sandbox.run([sys.executable, "-I", "program.py"], files={"program.py": program})
        return signal_from_exec(self.name, result, self.sandbox.limits)


class CommandCheck:
    """Runs a shell command in a scratch copy of `workdir`, with the candidate written to `out`."""

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
        signal = signal_from_exec(self.name, result, self.sandbox.limits)
        if not signal.ok and signal.code is ErrorCode.TEST_FAILED and pytest_score(signal.evidence) is None:
            # Not a test runner: the exit status is the whole signal.
            crashed = "Traceback (most recent call last)" in signal.evidence
            return Signal(self.name, False, ErrorCode.COMMAND_FAILED,
                          f"`{shlex.quote(self.command)}` exited {result.returncode}: {cap(_last_line(signal.evidence), 200)}",
                          signal.evidence, score=_crash_score(signal.evidence) if crashed else None)
        return signal


class JsonSchemaCheck:
    """The candidate must be JSON that validates against a JSON schema."""

    subjective = False
    name = "json-schema"

    def __init__(self, schema: dict[str, Any]) -> None:
        import jsonschema

        jsonschema.Draft202012Validator.check_schema(schema)
        self.validator = jsonschema.Draft202012Validator(schema)

    def run(self, candidate: str, context: CheckContext) -> Signal:
        try:
            data = extract_json(candidate)
        except ValueError as exc:
            return Signal(self.name, False, ErrorCode.SCHEMA, str(exc), cap(candidate, 300), score=0.0)
        errors = list(self.validator.iter_errors(data))
        if not errors:
            return Signal(self.name, True, message="valid", score=1.0)
        first = errors[0]
        where = "/".join(str(p) for p in first.absolute_path) or "(root)"
        return Signal(self.name, False, ErrorCode.SCHEMA, f"{len(errors)} schema violation(s); at {where}: {first.message}",
                      cap(candidate, 300))


class RegexCheck:
    """The candidate must match (or, with must_match=False, must not match) a regular expression."""

    subjective = False

    def __init__(self, pattern: str, *, must_match: bool = True, flags: int = 0) -> None:
        self.regex = re.compile(pattern, flags)
        self.must_match = must_match
        self.name = f"regex:{cap(pattern, 40)}"

    def run(self, candidate: str, context: CheckContext) -> Signal:
        match = self.regex.search(candidate)
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
    model can pass what the world would fail (FACTS.md: the embedded model passed 34 of 34 failing
    programs)."""

    subjective = True
    name = "llm-judge"

    def run(self, candidate: str, context: CheckContext) -> Signal:
        if context.ask is None:
            raise ValueError("LLMJudge needs a model: run it inside a loop")
        messages: list[Message] = [
            {"role": "system", "content": "You grade an answer against its task. You never rewrite it."},
            {"role": "user", "content": f"Task:\n{context.task}\n\nAnswer:\n<<<\n{candidate}\n>>>\n\n"
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
        return Signal(self.name, judgement.status == "PASS", None if judgement.status == "PASS" else ErrorCode.JUDGED_FAIL,
                      judgement.reason, subjective=True, score=score)


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
    return verdict_from([check.run(candidate, context) for check in checks])
