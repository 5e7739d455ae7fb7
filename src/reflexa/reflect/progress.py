"""Progress: stop a run that repeats itself instead of letting it spin to its step limit."""

from __future__ import annotations

import hashlib
import json

from ..types import Lesson


def _words(text: str) -> list[str]:
    return text.lower().split()


def same(a: str, b: str) -> bool:
    """Equal up to whitespace."""
    return a.split() == b.split()


REMEMBERED = 64
"""Fingerprints reflected on that a run remembers (the newest): they go into every checkpoint, so a run
with a large reflection budget keeps its per-step cost flat instead of growing with every new failure."""


REPEATED_FAILURES = 3
"""The same action failing the same way this many times in a row stops the run NO_PROGRESS, whether or not
a reflection was made on it (the quota spent, a lesson discarded): a model that repeated a failing call after
being shown its error once repeats it again. Failures a rule repairs (a retry of a transient error) do not
count."""


class RepeatWatch:
    """Remembers what was reflected on, so the same failure twice after a reflection stops the run, and
    the last failing action, so the same failing call three times in a row stops it too."""

    def __init__(self) -> None:
        self.reflected: dict[str, None] = {}
        """Fingerprints already reflected on (the `error_handled` marks), oldest first, at most REMEMBERED:
        never reflected on twice while remembered."""
        self.last_fingerprints: frozenset[str] | None = None
        self.last_failure: str | None = None
        """A digest of the last failing action and its failure's fingerprint (a candidate can be long, and
        this goes into every checkpoint), with how many times in a row they came together."""
        self.failure_streak = 0

    def failed(self, action: str, fingerprint: str) -> bool:
        """Count one failure sent to reflection: whether the same action has now failed the same way
        REPEATED_FAILURES times in a row."""
        digest = hashlib.sha256(json.dumps([action, fingerprint]).encode()).hexdigest()[:16]
        if self.last_failure == digest:
            self.failure_streak += 1
        else:
            self.last_failure, self.failure_streak = digest, 1
        return self.failure_streak >= REPEATED_FAILURES

    def succeeded(self) -> None:
        """A clean step: a failure after it starts a new streak."""
        self.last_failure, self.failure_streak = None, 0

    def note_reflection(self, fingerprint: str) -> None:
        self.reflected.pop(fingerprint, None)
        self.reflected[fingerprint] = None
        if len(self.reflected) > REMEMBERED:
            del self.reflected[next(iter(self.reflected))]

    def recurs(self, fingerprint: str) -> bool:
        """The same error came back after a reflection on it."""
        return fingerprint in self.reflected

    @staticmethod
    def correction_repeats(lesson: Lesson, failing_action: str) -> bool:
        """The lesson's next action is the action that just failed (actions in the `tool({json args})` form
        that react's `describe_action` writes)."""
        # Compared up to case and spacing, numbers kept: get_order(id=8) after get_order(id=7) is a change.
        if lesson.control is not None and lesson.control.kind == "force_action":
            forced = f"{lesson.control.tool}({json.dumps(lesson.control.args, sort_keys=True)})"
            return _words(forced) == _words(failing_action)
        return _words(lesson.correction) == _words(failing_action)

    def stalled(self, candidates: list[str], fingerprints: frozenset[str]) -> str | None:
        """For attempt loops: an identical candidate, or the same failures twice in a row."""
        previous, self.last_fingerprints = self.last_fingerprints, fingerprints
        if len(candidates) >= 2 and same(candidates[-1], candidates[-2]):
            return "the candidate is identical to the previous one"
        if previous is not None and previous == fingerprints:
            return "the same checks failed the same way twice in a row"
        return None
