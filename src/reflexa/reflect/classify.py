"""The classifier: repair by rule when a template is sound, stop when nothing can help, else reflect.

An ambiguous case always goes to reflection, never to a rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ..types import ErrorCode, Signal

TIMEOUT_BACKOFF = 0.5
"""Seconds to wait before the single rule-based retry of a timed-out call (and before the first retry of a
transient error; each later one waits twice as long)."""
TRANSIENT_RETRIES = 2
"""Rule-based retries of one call whose error says it is transient, before it goes to reflection."""
TRANSIENT = re.compile(r"\b(busy|(database|table|file|resource) is locked|try (again|later)|call again|"
                       r"temporar(il)?y|(service|server) unavailable|rate.?limit(ed)?|too many requests|"
                       r"(http|status|error|code)[ :]*(503|429)|(503|429) (from|error|service|too))\b",
                       re.IGNORECASE)
"""A tool error that says waiting may fix it (a lock, an overloaded upstream, a rate limit): retrying with a
pause is the textbook repair, and asking a model why costs more than the retry. A bare number is no such
sign ("no customer with id 503"), nor is "locked" alone ("account is locked by policy")."""


class Route(StrEnum):
    """Where the classifier sends a failure: a rule repairs it, nothing can help, or it needs reflection."""

    RULE = "rule"
    UNRECOVERABLE = "unrecoverable"
    REFLECT = "reflect"


@dataclass(frozen=True, slots=True)
class Repair:
    """A fix applied with no model call: retry the same action, call it with repaired args, or page."""

    kind: str  # "retry" | "args" | "page" | "answer" | "search" | "revise"
    """retry the same call; call with `args` instead (they replace the failing call's arguments); show the
    next page; ask for the final answer from what is known; search for a named gap; revise with the
    signal's feedback."""
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
    answer_asked: bool = False
    """The final answer was already asked for after this same repeated call: ask the reflector instead."""
    human: bool = False
    """A human denied the call: the tool is blocked, and the agent may still reach the task's answer another way."""


def classify(signal: Signal, facts: Facts = Facts()) -> Classification:
    code = signal.code
    if code is ErrorCode.PERMISSION and not facts.human:
        return Classification(Route.UNRECOVERABLE, f"permission denied: {signal.message}")
    if facts.fatal:
        reason = "the target does not exist" if code is ErrorCode.NOT_FOUND else "the tool says retrying cannot help"
        return Classification(Route.UNRECOVERABLE, f"{reason}: {signal.message}")
    if code in (ErrorCode.NOT_FOUND, ErrorCode.SCHEMA) and facts.suggestion:
        return Classification(Route.RULE, "close match for a wrong name or value", Repair("args", facts.suggestion))
    if code is ErrorCode.TIMEOUT and facts.retryable and facts.retries_before == 0:
        return Classification(Route.RULE, "first timeout: retry once after a pause",
                              Repair("retry", delay=TIMEOUT_BACKOFF))
    if code is ErrorCode.TOOL_ERROR and facts.retryable and facts.retries_before < TRANSIENT_RETRIES \
            and TRANSIENT.search(signal.message):
        return Classification(Route.RULE, "a transient error: retry after a pause",
                              Repair("retry", delay=TIMEOUT_BACKOFF * 2**facts.retries_before))
    if code is ErrorCode.TOO_LONG and facts.can_page:
        return Classification(Route.RULE, "truncated observation: show the next page", Repair("page"))
    if code is ErrorCode.REPEATED and signal.message.startswith("repeated action") and facts.retryable \
            and not facts.answer_asked:
        # A read-only call repeated returns what it returned before: the agent is circling an answer it
        # already holds. Asking for the answer now costs one call; a wrong one meets the validator.
        return Classification(Route.RULE, "a repeated read-only call: answer from what is known",
                              Repair("answer"))
    if code is ErrorCode.GAP:
        return Classification(Route.RULE, "a named gap: search for it", Repair("search"))
    if signal.pinpointed:
        # Such a signal says what a lesson would, whatever check wrote it. On the default model a lesson on a
        # failing assert that names the value converts no more HumanEval problems than the signal alone, for
        # 1.3x the tokens per solved problem, and lessons on crashes that name their line convert none
        # (bench/HISTORY.md).
        return Classification(Route.RULE, "the failure names its cause: revise with it", Repair("revise"))
    if code is ErrorCode.UNCITED:
        return Classification(Route.RULE, "citations fail the audit: revise with its feedback", Repair("revise"))
    return Classification(Route.REFLECT, f"{code or 'failure'} needs judgement")
