"""The gate: reflect only on a signal. A step with no failure signal costs no reflection call.

The signals of one agent step: an error code or schema failure, an illegal empty result (both already
in the observation), an oversized observation, a failed answer validation, a repeated thought or
action, and low confidence where the model reports it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..types import ErrorCode, Signal

LOW_CONFIDENCE = 0.3
"""Self-reported confidence below this is a signal."""
SIMILAR = 0.85
"""Two thoughts at least this similar (by an embedding model, when one is given) count as a repeat."""

Similarity = Callable[[str, str], float]


def failing(signals: Sequence[Signal]) -> list[Signal]:
    """The signals worth reflecting on."""
    return [s for s in signals if not s.ok]


def _key(text: str) -> str:
    # Case and spacing aside only: numbers and identifiers tell thoughts apart ("refund order 1" and
    # "refund order 2" are two, not one repeated).
    return " ".join(text.lower().split())


def repeated(text: str, earlier: Sequence[str], similarity: Similarity | None = None) -> bool:
    """Equal up to case and spacing, or (with an embedding similarity) at least SIMILAR to an earlier one."""
    key = _key(text)
    if any(key == _key(e) for e in earlier):
        return True
    return similarity is not None and any(similarity(text, e) >= SIMILAR for e in earlier)


def step_signals(*, source: str, ok: bool, code: ErrorCode | None, message: str, truncated: bool,
                 action: str, thought: str, earlier_actions: Sequence[str], earlier_thoughts: Sequence[str],
                 confidence: float | None, evidence: str = "", similarity: Similarity | None = None) -> list[Signal]:
    """Every signal one agent step raised; an empty list means the step went fine."""
    signals = []  # the engine handles the first: the most telling comes first
    if not ok:
        signals.append(Signal(source, False, code, message, evidence))
    # A repeat before a truncation: a call repeated after its long output was shown and paged is circling,
    # and paging it again would show the same pages.
    # An action is a repeat only when equal up to spacing: case tells values apart ('Bob' and 'bob').
    if any(action.split() == earlier.split() for earlier in earlier_actions):
        signals.append(Signal(source, False, ErrorCode.REPEATED, f"repeated action {action}", evidence))
    elif thought.strip() and repeated(thought, earlier_thoughts, similarity):
        signals.append(Signal(source, False, ErrorCode.REPEATED, "repeated thought", thought[:200]))
    if ok and truncated:
        signals.append(Signal(source, False, ErrorCode.TOO_LONG, "observation truncated", evidence))
    if confidence is not None and confidence < LOW_CONFIDENCE:
        signals.append(Signal(source, False, ErrorCode.LOW_CONFIDENCE, f"confidence {confidence:.2f}", evidence))
    return signals
