"""Core data types shared by every layer. Plain dataclasses: cheap to import, easy to serialise."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, TypeVar


class Status(StrEnum):
    """An evaluation's outcome. FAIL means wrong direction (restart); NEEDS_IMPROVEMENT means revise."""

    PASS = "PASS"
    NEEDS_IMPROVEMENT = "NEEDS_IMPROVEMENT"
    FAIL = "FAIL"


LOOPS: tuple[str, ...] = ("refine", "react", "trials", "research", "plan")
"""The loops a task, and a stored run, can be of (the task spec's `loop`)."""


class StopReason(StrEnum):
    """Why a run ended. Every loop returns one; none raises for a spent budget.

    PASSED means an objective check passed. ANSWERED_UNVERIFIED means the loop produced an answer that
    nothing checked (react without a validator, research whose answer cites no audited evidence): it is
    reported as such, never as a success.
    """

    PASSED = "PASSED"
    ANSWERED_UNVERIFIED = "ANSWERED_UNVERIFIED"
    MAX_ITERATIONS = "MAX_ITERATIONS"
    BUDGET_TOKENS = "BUDGET_TOKENS"
    BUDGET_CALLS = "BUDGET_CALLS"
    TIMEOUT = "TIMEOUT"
    NO_PROGRESS = "NO_PROGRESS"
    UNRECOVERABLE = "UNRECOVERABLE"
    ERROR = "ERROR"
    INTERRUPTED = "INTERRUPTED"
    AWAITING_APPROVAL = "AWAITING_APPROVAL"
    """A side-effecting tool call waits for a human's decision (`reflexa approve`); the run resumes from it."""


UNFINISHED: dict[StopReason, str] = {StopReason.INTERRUPTED: "interrupted", StopReason.AWAITING_APPROVAL: "awaiting"}
"""Stop reasons that leave a run to be resumed, and the status each stores; every other one finishes it."""


class Role(StrEnum):
    """Who spent the tokens. Usage is kept per role."""

    GENERATOR = "generator"
    PLANNER = "planner"
    """plan's planner: the goal tree, and a replan."""
    EVALUATOR = "evaluator"
    REFLECTOR = "reflector"
    SEARCH = "search"


class ErrorCode(StrEnum):
    """The closed set of failure codes a signal can carry."""

    TIMEOUT = "TIMEOUT"
    SCHEMA = "SCHEMA"
    EMPTY = "EMPTY"
    TOOL_ERROR = "TOOL_ERROR"
    TEST_FAILED = "TEST_FAILED"
    TOO_LONG = "TOO_LONG"
    UNCITED = "UNCITED"
    NO_MATCH = "NO_MATCH"
    COMMAND_FAILED = "COMMAND_FAILED"
    RESOURCE_LIMIT = "RESOURCE_LIMIT"
    JUDGED_FAIL = "JUDGED_FAIL"
    NOT_FOUND = "NOT_FOUND"
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    PERMISSION = "PERMISSION"
    BLOCKED = "BLOCKED"
    REPEATED = "REPEATED"
    LOW_CONFIDENCE = "LOW_CONFIDENCE"
    VALIDATION_FAILED = "VALIDATION_FAILED"
    GAP = "GAP"
    NO_TEST_REPORT = "NO_TEST_REPORT"
    """The tests did not run to the end: the process exited early or left no harness report."""
    TAMPERED = "TAMPERED"
    """The candidate changed the test apparatus: the test file, pytest's internals, or test outcomes."""
    REPLY_CUT = "REPLY_CUT"
    """The model's reply reached its token cap before its answer ended: nothing wrong with the code to learn,
    only a shorter reply to ask for."""


_NUMBER = re.compile(r"\b0x[0-9a-f]+\b|\d+(\.\d+)?")
_SPACE = re.compile(r"\s+")


@functools.lru_cache(maxsize=4096)  # the same failure message is fingerprinted several times a step
def normalise(text: str) -> str:
    """Lower-case, numbers and addresses folded to N, whitespace collapsed: for comparing failures."""
    return _SPACE.sub(" ", _NUMBER.sub("N", text.lower())).strip()


@dataclass(frozen=True, slots=True)
class Signal:
    """One objective observation about a candidate.

    `score` is the fraction of sub-checks that held (1.0 for a pass, 0.0 when nothing held), so a
    verdict can tell "almost there" (revise) from "wrong direction" (restart). `subjective` marks a
    signal from an LLM judge rather than from the world.
    """

    source: str
    ok: bool
    code: ErrorCode | None = None
    message: str = ""
    evidence: str = ""
    score: float | None = None
    subjective: bool = False
    pinpointed: bool = False
    """The message names the failure's concrete cause (the value a failing assert got, or a crash's exception
    and the line it was raised at), so it says what a lesson would: a failing test so marked is revised with
    the signal by rule, with no reflector call. The code test harness sets it; a custom check may too."""

    @property
    def fingerprint(self) -> str:
        """Identity of a failure, blind to numbers and spacing: the same bug twice has one fingerprint.
        A repeat keeps its numbers: repeating `refund(1)` and repeating `refund(2)` are two failures."""
        message = " ".join(self.message.lower().split()) if self.code is ErrorCode.REPEATED else normalise(self.message)
        return f"{self.source}|{self.code}|{message[:200]}"


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of evaluating one candidate: status, the signals behind it, and feedback."""

    status: Status
    signals: tuple[Signal, ...] = ()
    feedback: str = ""
    subjective: bool = False

    @property
    def failing(self) -> tuple[Signal, ...]:
        return tuple(s for s in self.signals if not s.ok)

    @property
    def objective(self) -> bool:
        """An objective check (not an LLM judge) looked at the candidate and held."""
        return any(s.ok and not s.subjective for s in self.signals)

    @property
    def score(self) -> float:
        """Mean score of the objective signals (of all, when every one is a judge's); used to rank candidates
        for best-so-far, so a judge's opinion never outranks what the tests measured."""
        measured = [s for s in self.signals if not s.subjective] or list(self.signals)
        scores = [s.score if s.score is not None else float(s.ok) for s in measured]
        if not scores:
            return 1.0 if self.status is Status.PASS else 0.0
        return sum(scores) / len(scores)

    def better_than(self, other: Verdict) -> bool:
        """Whether this verdict's candidate should replace `other`'s as best-so-far: a pass beats any
        failure (a failing signal can score as high as a pass: a command that printed "5 passed" and
        exited 1), then the higher score."""
        return (self.status is Status.PASS, self.score) > (other.status is Status.PASS, other.score)


LESSON_FIELD_CHARS = 300
"""Each lesson field is cut to this many characters, whatever the model wrote."""


def cap(text: str, limit: int) -> str:
    """Cut text to `limit` characters, marking the cut."""
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


TAIL_SHARE = 4
"""Text cut to keep both ends keeps its last 1/TAIL_SHARE of the limit: what a tool or a step returns often
ends with its result (a query's rows after diagnostics, a test run's summary after its log)."""


def cap_ends(text: str, limit: int) -> str:
    """Cut text to `limit` characters keeping its start and its end (TAIL_SHARE), marking the cut."""
    text = text.strip()
    if len(text) <= limit:
        return text
    tail = limit // TAIL_SHARE
    return text[: limit - tail - 1].rstrip() + "…" + text[-tail:].lstrip()


def valid_text(text: str) -> str:
    """`text` with every lone surrogate (half of a UTF-16 pair: a JSON reply's "\\ud800", a cut-off emoji)
    replaced by U+FFFD, so it can be encoded, stored and printed: model replies, tool output and evidence
    pass through here before anything encodes them."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


_CONTROLS = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[PX^_][^\x1b]*(?:\x1b\\)?|.?)"
                       r"|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\x80-\x9f]")
"""Terminal control: escape sequences (CSI, OSC, DCS and the rest) and every other C0 or C1 control character
but tab, newline and carriage return."""


def strip_controls(text: str) -> str:
    """`text` without terminal control sequences: a tool's output or a model's reply that clears the screen or
    sets the window title does nothing when a terminal shows it."""
    return _CONTROLS.sub("", text)


_DELIMITER_RUN = re.compile(r"<{3,}|>{3,}")


def fence_untrusted(text: str) -> str:
    """Untrusted text (a tool's output, evidence, a candidate) made safe to put between the `<<<` and `>>>`
    that prompts mark data with: its own runs of angle brackets are broken up, so it cannot close the block
    and write "instructions" after it."""
    return _DELIMITER_RUN.sub(lambda run: " ".join(run.group(0)), text)  # ">>>" becomes "> > >"


@dataclass(frozen=True, slots=True)
class Control:
    """A control signal a lesson may carry: force the next action, or block a tool or one argument value.
    The tool registry enforces blocks."""

    kind: str  # "force_action" | "block_tool" | "block_value"
    tool: str
    arg: str = ""
    value: str = ""
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Lesson:
    """A short structured lesson from one failure. Every field is length-capped in code."""

    failure_step: str
    observed_mismatch: str
    root_cause: str
    correction: str
    control: Control | None = None

    def __post_init__(self) -> None:
        for name in ("failure_step", "observed_mismatch", "root_cause", "correction"):
            object.__setattr__(self, name, cap(getattr(self, name), LESSON_FIELD_CHARS))

    def render(self) -> str:
        return (f"- At {self.failure_step}: {self.observed_mismatch}\n  Cause: {self.root_cause}\n"
                f"  Correction: {self.correction}")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Lesson:
        control = data.get("control")
        return cls(data["failure_step"], data["observed_mismatch"], data["root_cause"], data["correction"],
                   Control(**control) if control else None)


@dataclass(slots=True)
class Usage:
    """Tokens and calls spent, for one role or in total."""

    input_tokens: int = 0
    output_tokens: int = 0
    calls: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def add(self, other: Usage) -> None:
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.calls += other.calls

    @classmethod
    def total(cls, usages: Iterable[Usage]) -> Usage:
        """The sum of several usages, e.g. over every role."""
        total = cls()
        for usage in usages:
            total.add(usage)
        return total


@dataclass(frozen=True, slots=True)
class Budget:
    """Hard resource limits for one run. `None` means unlimited. A limit is checked before each model call.

    A loop's own bound (refine's attempts, react's steps, research's rounds) is the loop's parameter, not
    part of the budget."""

    max_tokens: int | None = None
    """Input plus output tokens over all roles. Overshoot is at most one call's input tokens."""
    max_calls: int | None = None
    """Model calls over all roles, re-asks included."""
    max_seconds: float | None = None
    """Wall-clock seconds from the start of the run. A resumed run goes on counting from the time its stored
    steps took before (not the time it lay stopped)."""
    max_reflections: int | None = None
    """Reflector calls; None means the engine's default quota (2). Past it, retries use raw signals."""


class Serial:
    """A dataclass with a plain-data form: `to_dict` gives JSON-ready data, `from_dict` rebuilds the
    dataclass with its nested dataclasses and enums (pydantic does the typed reading)."""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data, exactly as the store keeps it."""
        return dict(_adapter(type(self)).dump_python(self, mode="json"))

    @classmethod
    def from_dict(cls: type[P], data: dict[str, Any]) -> P:
        """The dataclass back from plain data (pydantic rebuilds nested dataclasses and enums)."""
        return _adapter(cls).validate_python(data)


class Payload(Serial):
    """What one trace step says: a small dataclass per step kind, kept next to the code that writes it.

    Subclasses are dataclasses registered with `@payload("kind")`; `from_dict` reads a stored step back,
    so a renamed field breaks a round-trip test rather than `reflexa show` at run time."""

    KIND: ClassVar[str] = ""


P = TypeVar("P", bound=Serial)
PAYLOADS: dict[str, type[Payload]] = {}
"""Every step kind, by name: what `Step.payload()` reads a stored step back into."""


_ADAPTERS: dict[type, Any] = {}
"""One pydantic TypeAdapter per Serial class. A dict, not functools.cache: mypy does not accept a class
object as a Hashable key."""


def _adapter(cls: type) -> Any:
    adapter = _ADAPTERS.get(cls)
    if adapter is None:
        from pydantic import TypeAdapter  # deferred: `import reflexa` stays free of pydantic

        adapter = _ADAPTERS[cls] = TypeAdapter(cls)
    return adapter


Q = TypeVar("Q", bound=Payload)


def payload(kind: str) -> Callable[[type[Q]], type[Q]]:
    """Register a payload dataclass under its step kind."""

    def register(cls: type[Q]) -> type[Q]:
        if kind in PAYLOADS and PAYLOADS[kind] is not cls:
            raise ValueError(f"step kind {kind!r} is registered twice")
        cls.KIND = kind
        PAYLOADS[kind] = cls
        return cls

    return register


@dataclass(slots=True)
class Step:
    """One row of the trace: a model call, a check, a verdict, a lesson or a flag.

    `output` is the step's payload as plain data; `input` holds a model call's messages only."""

    run_id: str
    step_id: int
    kind: str
    role: str | None = None
    input: Any = None
    output: Any = None
    usage: Usage = field(default_factory=Usage)
    started_at: float = 0.0
    ended_at: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def payload(self) -> Payload | None:
        """The typed payload, or None for a kind this version does not know (or an older shape)."""
        if isinstance(self.output, Payload):  # a live step, before the store turned it into data
            return self.output
        cls = PAYLOADS.get(self.kind)
        if cls is None or not isinstance(self.output, dict):
            return None
        try:
            return cls.from_dict(self.output)
        except ValueError:  # pydantic's ValidationError: a step written by an older version
            return None


@dataclass(slots=True)
class Result:
    """What a loop returns.

    `output` is the last candidate; `best` the highest-scoring one (the passing one when a run passed);
    `verdict` belongs to `best`. `error` explains a StopReason.ERROR or UNRECOVERABLE.
    """

    output: str | None
    best: str | None
    verdict: Verdict | None
    stop_reason: StopReason
    usage: dict[str, Usage]
    run_id: str
    steps: int = 0
    iterations: int = 0
    error: str | None = None
    counters: dict[str, Any] = field(default_factory=dict)
    """Per-module counts from the reflection engine: gate calls, classifier decisions, experience hits,
    reflector calls, steps from error to recovery."""
    notes: list[str] = field(default_factory=list)
    """What the engine decided on the run's behalf, e.g. the ROI governor cutting retries, and why."""
    details: dict[str, Any] = field(default_factory=dict)
    """Loop-specific results, e.g. research's evidence items and queries with their status."""

    @property
    def passed(self) -> bool:
        """True only when an objective check passed."""
        return self.stop_reason is StopReason.PASSED

    @property
    def total_usage(self) -> Usage:
        return Usage.total(self.usage.values())

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["usage"] = {role: asdict(u) | {"total_tokens": u.total_tokens} for role, u in self.usage.items()}
        data["total_usage"] = asdict(self.total_usage)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Result:
        """A result back from `to_dict`'s data (a stored run's result)."""
        return _adapter(cls).validate_python(data)
