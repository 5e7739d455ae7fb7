"""The learned repair policy: after a failed attempt, revise it or sample afresh, by what has converted.

A refine run that fails an attempt has two ways to spend its next one: revise the candidate with the
failure's signal (and a lesson, when the engine buys one), or sample a fresh attempt that sees only the task.
Which one converts depends on the model and the tasks, so a fixed rule fits whatever set it was chosen on.
The policy keeps, in the store, per model, task family and failure class, each repair's tries, conversions
(the attempt it bought passed) and tokens, and chooses the repair with more conversions per token. Until
both repairs have MIN_TRIES in a class, it tries the one tried less (the revision on a tie). A frozen policy
reads the record and never writes it: a policy learned on a tuning split is carried, unchanged, to a
confirming one.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from typing import Literal

from ..trace.store import Store
from ..types import ErrorCode, Signal

NAMESPACE = "repairs"
RepairKind = Literal["revise", "sample"]
REPAIRS: tuple[RepairKind, ...] = ("revise", "sample")
MIN_TRIES = 4
"""Tries of each repair in a failure class before the record decides between them."""
PROBE_EVERY = 10
"""A learning policy that has decided still tries the other repair on one failure in this many (chosen by
the task's hash, so a rerun chooses alike): a repair that starts paying (a better model, other tasks) is
noticed."""


@dataclass(slots=True)
class Tally:
    """One repair's record in one failure class."""

    tries: int = 0
    conversions: int = 0
    tokens: int = 0
    """Tokens the repaired attempts spent (with any reflection bought for them)."""

    def value(self) -> float:
        """Conversions per thousand tokens, smoothed so that few tries neither win nor lose outright."""
        return 1000 * (self.conversions + 1) / (self.tries + 2) / max(self.tokens / max(self.tries, 1), 1)


AttemptKind = Literal["first", "revision", "sample"]
"""What the failing attempt was: a greedy fresh one (the first), a revision, or a sampled fresh one."""


def failure_class(signal: Signal, attempt: AttemptKind) -> str:
    """The class a failure is recorded under: what kind of failure, and what the attempt that failed was
    (what converts a first failure need not convert a failed revision, nor a failed sample)."""
    message = signal.message
    if signal.code is ErrorCode.TEST_FAILED:
        if message.startswith(("SyntaxError", "IndentationError")):
            kind = "syntax"
        elif message.startswith("AssertionError"):
            kind = "assert-value" if signal.pinpointed else "assert"
        elif " tests failed" in message.split(":", 1)[0]:
            kind = "pytest"
        else:
            kind = "crash-line" if signal.pinpointed else "crash"
    else:
        kind = (signal.code or "failure").lower()
    return f"{kind}/{attempt}"


@dataclass(frozen=True, slots=True)
class Choice:
    """The repair chosen for one failure, and why: the repair, the class and the record (the trace keeps it)."""

    repair: RepairKind
    klass: str
    why: str


class RepairPolicy:
    """Chooses refine's repair per failure class from the record of earlier runs in `store`."""

    def __init__(self, store: Store, *, frozen: bool = False) -> None:
        self.store = store
        self.frozen = frozen
        """Read the record, never write it (a policy carried from a tuning split)."""

    @staticmethod
    def _key(model: str, family: str, klass: str, repair: str) -> str:
        return f"{model}|{family}|{klass}|{repair}"

    def tally(self, model: str, family: str, klass: str, repair: RepairKind) -> Tally:
        data = self.store.get(NAMESPACE, self._key(model, family, klass, repair))
        return Tally(**data) if data else Tally()

    def choose(self, model: str, family: str, klass: str, task: str) -> Choice:
        tallies = {repair: self.tally(model, family, klass, repair) for repair in REPAIRS}
        if min(t.tries for t in tallies.values()) < MIN_TRIES:
            repair: RepairKind = "revise" if self.frozen else min(REPAIRS, key=lambda r: tallies[r].tries)
            why = "too few tries recorded" if self.frozen else "learning, it has the fewest tries"
            return Choice(repair, klass, f"{repair} after {klass}: {why}")
        best = max(REPAIRS, key=lambda r: tallies[r].value())
        record = ", ".join(f"{r} {t.conversions}/{t.tries} at {t.tokens // t.tries} tokens" for r, t in tallies.items())
        if not self.frozen and int(hashlib.sha256(f"{task}|{klass}".encode()).hexdigest(), 16) % PROBE_EVERY == 0:
            other: RepairKind = "sample" if best == "revise" else "revise"
            return Choice(other, klass, f"{other} after {klass}: a probe ({record})")
        return Choice(best, klass, f"{best} after {klass}: it converts more per token ({record})")

    def record(self, model: str, family: str, klass: str, repair: RepairKind, *, converted: bool,
               tokens: int) -> None:
        """Count one repaired attempt (nothing when frozen)."""
        if self.frozen:
            return
        self.store.incr(NAMESPACE, self._key(model, family, klass, repair),
                        {"tries": 1, "conversions": int(converted), "tokens": tokens}, defaults=asdict(Tally()))
