"""The reflection engine every loop shares: gate, classify, experience, reflector, progress.

    signals ─gate─> nothing failed? ── continue (no reflection call)
               └─> classify ─ rule ───────────> Repair (no model call)
                            ─ unrecoverable ──> stop UNRECOVERABLE
                            ─ stalled ────────> stop NO_PROGRESS (a repeated call already pointed out)
                            ─ reflect ─> recurs after a reflection? ─> block that tool if others are open,
                                                                       else stop NO_PROGRESS
                                       ─> experience hit? ─> reuse its lesson (no model call)
                                       ─> quota left? ─> reflector ─> lesson, unless discarded
                                                                    ─> repeats the failing action? ─> stop NO_PROGRESS
                            (the same action failing the same way 3 times in a row ─> stop NO_PROGRESS)
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from ..types import Control, ErrorCode, Lesson, Payload, Signal, StopReason, cap, payload
from .classify import Facts, Repair, Route, classify
from .experience import ExperienceLibrary
from .gate import failing
from .progress import REPEATED_FAILURES, RepeatWatch
from .reflector import reflect

if TYPE_CHECKING:
    from ..runtime import Run

DEFAULT_QUOTA = 2
"""Reflector calls per run when the budget sets no max_reflections."""
NO_FACTS = Facts()
"""The classifier's facts when the caller knows nothing beyond the signal (Facts is frozen: one is enough)."""
TOOL_BOUND = frozenset({ErrorCode.TIMEOUT, ErrorCode.SCHEMA, ErrorCode.EMPTY, ErrorCode.TOOL_ERROR,
                        ErrorCode.NOT_FOUND, ErrorCode.INVALID_ARGUMENT, ErrorCode.PERMISSION, ErrorCode.BLOCKED,
                        ErrorCode.TOO_LONG, ErrorCode.RESOURCE_LIMIT})
"""Failures that describe a tool's behaviour: repaired alike whatever the task, so their experience entries
are shared across tasks. Every other failure judges the answer to one task or the agent's conduct on it (a
validator's "does not match", a repeated thought, low confidence, an empty final answer, failed tests) and
reads the same for every task, so a repair learnt on one task is no repair for another: its entry is keyed
to the task as well."""


def experience_key(signal: Signal, task: str) -> str:
    """The experience library's key for a failure: its fingerprint, plus the task's unless it is a tool's
    own failure (TOOL_BOUND, from a tool other than the final answer)."""
    if signal.code in TOOL_BOUND and signal.source.startswith("tool:") and signal.source != "tool:final_answer":
        return signal.fingerprint
    digest = hashlib.sha256(" ".join(task.lower().split()).encode()).hexdigest()[:16]
    return f"{signal.fingerprint}|goal:{digest}"


def blocked_lesson(tool: str, signal: Signal) -> Lesson:
    """The rule's lesson for a tool that failed the same way after a reflection on it: block it, say why."""
    return Lesson(f"calls of {tool}", cap(signal.message, 300), f"{tool} fails this way whatever the lesson",
                  f"{tool} is blocked for this run: reach the goal with the other tools", Control("block_tool", tool))


@dataclass(slots=True)
class Counters:
    """What each module of the engine did in one run."""

    gate_calls: int = 0
    gate_signals: int = 0
    rule_repairs: int = 0
    unrecoverable: int = 0
    sent_to_reflection: int = 0
    experience_hits: int = 0
    experience_misses: int = 0
    reflector_calls: int = 0
    lessons_discarded: int = 0
    quota_skips: int = 0
    no_progress: int = 0
    recovery_steps: list[int] = field(default_factory=list)
    """For each error that was recovered from: steps from the error to the next clean step."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@payload("engine")
@dataclass(slots=True)
class Decided(Payload):
    """The engine's decision on one failing signal, as the trace keeps it."""

    signal: Signal
    action: str
    decision: str
    reason: str
    lesson: Lesson | None = None
    repair: Repair | None = None
    reused: bool = False
    stop: StopReason | None = None


@dataclass(frozen=True, slots=True)
class Handling:
    """What the engine tells the loop to do about one failure (a loop's own end is `loops.session.Outcome`)."""

    kind: str  # "repair" | "lesson" | "none" | "stop"
    reason: str = ""
    repair: Repair | None = None
    lesson: Lesson | None = None
    stop: StopReason | None = None
    reused: bool = False


class Engine:
    """One run's reflection engine: the loop hands it each step's signals and each failure."""

    def __init__(self, run: Run, *, experience: ExperienceLibrary | None = None, quota: int | None = None) -> None:
        self.run = run
        self.experience = experience
        self.quota = DEFAULT_QUOTA if quota is None else quota
        self.progress = RepeatWatch()
        self.counters = Counters()
        self._error_since: int | None = None
        self._pending: set[str] = set()  # experience entries used since the last clean step

    def gate(self, step: int, signals: Sequence[Signal]) -> list[Signal]:
        """The failing signals of a step; a clean step closes an error-to-recovery span."""
        self.counters.gate_calls += 1
        bad = failing(signals)
        if bad:
            self.counters.gate_signals += 1
            if self._error_since is None:
                self._error_since = step
        else:
            self.progress.succeeded()
            if self._error_since is not None:
                self.counters.recovery_steps.append(step - self._error_since)
                self._error_since = None
                self._settle(True)
        return bad

    def handle(self, signal: Signal, *, task: str, facts: Sequence[str], action: str, snippet: str,
               rule_facts: Facts = NO_FACTS) -> Handling:
        outcome = self._decide(signal, task, facts, action, snippet, rule_facts)
        self.run.record(Decided(signal, action[:300], outcome.kind, outcome.reason, outcome.lesson, outcome.repair,
                                outcome.reused, outcome.stop))
        return outcome

    def _decide(self, signal: Signal, task: str, facts: Sequence[str], action: str, snippet: str,
                rule_facts: Facts) -> Handling:
        fingerprint = signal.fingerprint
        verdict = classify(signal, rule_facts)
        if verdict.route is Route.UNRECOVERABLE:
            self.counters.unrecoverable += 1
            return Handling("stop", verdict.reason, stop=StopReason.UNRECOVERABLE)
        if verdict.route is Route.RULE:
            self.counters.rule_repairs += 1
            return Handling("repair", verdict.reason, repair=verdict.repair)
        if verdict.route is Route.STALLED:
            self.counters.no_progress += 1
            return Handling("stop", verdict.reason, stop=StopReason.NO_PROGRESS)
        if self.progress.failed(action, fingerprint):
            self.counters.no_progress += 1
            return Handling("stop", f"the same action failed the same way {REPEATED_FAILURES} times in a row",
                            stop=StopReason.NO_PROGRESS)
        self.counters.sent_to_reflection += 1
        if self.progress.recurs(fingerprint):
            tool = signal.source.removeprefix("tool:")
            if rule_facts.alternatives and signal.source.startswith("tool:") and tool != "final_answer":
                # The tool fails the same way after a lesson on it, while others are there: a dead end to leave,
                # as a person would stop calling a broken endpoint, rather than a run to end.
                self.counters.rule_repairs += 1
                return Handling("lesson", "the same error came back after a reflection on it: the tool is blocked "
                                "for this run", lesson=blocked_lesson(tool, signal))
            self.counters.no_progress += 1
            return Handling("stop", "the same error came back after a reflection on it", stop=StopReason.NO_PROGRESS)
        key = experience_key(signal, task) if self.experience is not None else ""  # no library, no key
        if self.experience is not None:
            if (lesson := self.experience.lookup(key)) is not None:
                self.counters.experience_hits += 1
                self._pending.add(key)
                self.progress.note_reflection(fingerprint)
                return Handling("lesson", "repair reused from the experience library", lesson=lesson, reused=True)
            self.counters.experience_misses += 1
        if self.counters.reflector_calls >= self.quota:
            self.counters.quota_skips += 1
            return Handling("none", f"reflection quota ({self.quota}) spent")
        self.counters.reflector_calls += 1
        lesson, why = reflect(self.run, task=task, facts=facts, failing_action=action, signal=signal, snippet=snippet)
        if lesson is None:
            self.counters.lessons_discarded += 1
            return Handling("none", f"lesson discarded: {why}")
        if self.progress.correction_repeats(lesson, action):
            self.counters.no_progress += 1
            return Handling("stop", "the correction repeats the failing action", lesson=lesson,
                           stop=StopReason.NO_PROGRESS)
        self.progress.note_reflection(fingerprint)
        if self.experience is not None:
            self.experience.learn(key, lesson)
            self._pending.add(key)
        return Handling("lesson", "new lesson", lesson=lesson)

    def _settle(self, success: bool) -> None:
        if self.experience is not None:
            for key in self._pending:
                self.experience.outcome(key, success)
        self._pending.clear()

    def snapshot(self) -> dict[str, Any]:
        """What a resumed run needs to carry on: counters (the quota among them), the error_handled marks."""
        last = self.progress.last_fingerprints
        return {"counters": self.counters.to_dict(), "reflected": list(self.progress.reflected),
                "error_since": self._error_since, "pending": sorted(self._pending),
                "last_fingerprints": sorted(last) if last is not None else None,
                "last_failure": self.progress.last_failure, "failure_streak": self.progress.failure_streak}

    def restore(self, data: dict[str, Any]) -> None:
        self.counters = Counters(**data["counters"])
        self.progress.reflected = dict.fromkeys(data["reflected"])
        self._error_since = data["error_since"]
        self._pending = set(data["pending"])
        last = data.get("last_fingerprints")
        self.progress.last_fingerprints = frozenset(last) if last is not None else None
        # Absent from a checkpoint written before the streak was kept: it starts again.
        self.progress.last_failure = data.get("last_failure")
        self.progress.failure_streak = data.get("failure_streak", 0)

    def finish(self, success: bool | None) -> dict[str, Any]:
        """Settle the experience entries still pending and return the counters for the result. `success`
        None (an interrupted run) settles nothing: the resume settles them when the run really ends."""
        if success is not None:
            self._settle(success)
        return self.counters.to_dict()
