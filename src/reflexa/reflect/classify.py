"""The classifier: repair by rule when a template is sound, stop when nothing can help, else reflect.

An ambiguous case always goes to reflection, never to a rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ..tools.transient import transient_text
from ..types import ErrorCode, Signal

TIMEOUT_BACKOFF = 0.5
"""Seconds to wait before the single rule-based retry of a timed-out call (and before the first retry of a
transient error; each later one waits twice as long)."""
TRANSIENT_RETRIES = 2
"""Rule-based retries of one call whose failure is transient (tools/transient.py: a dropped connection, a 429,
a 503, a lock), before it goes to reflection: retrying with a pause is the textbook repair, and asking a model
why costs more than the retry."""


class Route(StrEnum):
    """Where the classifier sends a failure: a rule repairs it, nothing can help, or it needs reflection."""

    RULE = "rule"
    UNRECOVERABLE = "unrecoverable"
    STALLED = "stalled"
    """The agent repeats itself with nothing new to learn: the run stops NO_PROGRESS."""
    REFLECT = "reflect"


@dataclass(frozen=True, slots=True)
class Repair:
    """A fix applied with no model call: retry the same action, call it with repaired args, or page."""

    kind: str  # "retry" | "args" | "page" | "notice" | "answer" | "search" | "revise" | "shorter"
    """retry the same call; call with `args` instead (they replace the failing call's arguments); show the
    next page; point out a repeated call (its result is in the facts); ask for the answer from the facts (the
    next step may only answer); search for a named gap; revise with the signal's feedback; ask again for a
    shorter reply (the last one was cut at its token cap)."""
    args: dict[str, Any] = field(default_factory=dict)
    delay: float = 0.0


@dataclass(frozen=True, slots=True)
class Classification:
    route: Route
    reason: str
    repair: Repair | None = None


@dataclass(frozen=True, slots=True)
class Facts:
    """What the classifier may know about the failure besides the signal itself."""

    suggestion: dict[str, Any] | None = None
    """Repaired arguments offered by the tool (a close match for an unknown column or argument)."""
    fatal: bool = False
    """The tool says no retry can help (the target does not exist, an effect's state is unknown)."""
    retryable: bool = True
    """Whether repeating the same call could succeed (a tool call can; a candidate's own timeout cannot)."""
    retries_before: int = 0
    """Earlier rule-based retries of this same action in this run."""
    can_page: bool = False
    """A truncated observation has another page to show."""
    repeat_noted: bool = False
    """This same repeated call was pointed out already: calling it again learns nothing new."""
    answer_asked: bool = False
    """The agent was already asked, once, to answer from the facts after circling on one call."""
    human: bool = False
    """A human denied the call: the tool is blocked, and the agent may still reach the task's answer another way."""
    transient: bool = False
    """The tool says the failure is one waiting may fix, by its exception's type or status (tools/transient.py)."""
    alternatives: bool = False
    """Other tools than the failing one are open to the agent: a tool that keeps failing can be left."""
    retry_after: float | None = None
    """Seconds the failure asked to wait before a retry."""


def classify(signal: Signal, facts: Facts = Facts()) -> Classification:
    code = signal.code
    if code is ErrorCode.PERMISSION and not facts.human:
        return Classification(Route.UNRECOVERABLE, f"permission denied: {signal.message}")
    if facts.fatal:
        reason = "the target does not exist" if code is ErrorCode.NOT_FOUND else "the tool says retrying cannot help"
        return Classification(Route.UNRECOVERABLE, f"{reason}: {signal.message}")
    if facts.suggestion:  # the tool offers the repaired call: a close match, a join, a qualified column
        return Classification(Route.RULE, "the tool's repair of a wrong name or value",
                              Repair("args", facts.suggestion))
    transient = facts.transient or transient_text(signal.message)
    if code in (ErrorCode.TOOL_ERROR, ErrorCode.TIMEOUT) and transient and facts.retryable \
            and facts.retries_before < TRANSIENT_RETRIES:
        delay = facts.retry_after if facts.retry_after is not None else TIMEOUT_BACKOFF * 2**facts.retries_before
        return Classification(Route.RULE, "a transient failure: retry after a pause", Repair("retry", delay=delay))
    if code is ErrorCode.TIMEOUT and facts.retryable and facts.retries_before == 0:
        return Classification(Route.RULE, "first timeout: retry once after a pause",
                              Repair("retry", delay=TIMEOUT_BACKOFF))
    if code is ErrorCode.TOO_LONG and facts.can_page:
        return Classification(Route.RULE, "truncated observation: show the next page", Repair("page"))
    if code is ErrorCode.REPEATED and signal.message.startswith("repeated action") and facts.retryable:
        # A read-only call repeated returns what it returned before: the agent is circling. Pointing that out
        # costs nothing; the model may answer from the facts or call something else (a different tool is never
        # refused). The same call once more after that learns nothing new: the run stops.
        if facts.repeat_noted and facts.answer_asked:
            return Classification(Route.STALLED, "the same call again after its repeat was pointed out and an "
                                  "answer was asked for: nothing new to learn from it")
        if facts.repeat_noted:
            # Its result is in the facts, and the agent circles back to it: the one step it gets now may only
            # answer from them (then, the same call once more stops the run).
            return Classification(Route.RULE, "the same call again after its repeat was pointed out: answer "
                                  "from the facts now", Repair("answer"))
        return Classification(Route.RULE, "a repeated read-only call: its result is in the facts",
                              Repair("notice"))
    if code is ErrorCode.GAP:
        return Classification(Route.RULE, "a named gap: search for it", Repair("search"))
    if code is ErrorCode.REPLY_CUT:
        return Classification(Route.RULE, "the reply was cut at its token cap: ask for a shorter one",
                              Repair("shorter"))
    if signal.pinpointed:
        # Such a signal says what a lesson would, whatever check wrote it. On the default model a lesson on a
        # failing assert that names the value converts no more HumanEval problems than the signal alone, for
        # 1.3x the tokens per solved problem, and lessons on crashes that name their line convert none
        # (bench/HISTORY.md).
        return Classification(Route.RULE, "the failure names its cause: revise with it", Repair("revise"))
    if code is ErrorCode.UNCITED:
        return Classification(Route.RULE, "citations fail the audit: revise with its feedback", Repair("revise"))
    return Classification(Route.REFLECT, f"{code or 'failure'} needs judgement")
