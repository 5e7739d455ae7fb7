"""The workspace: what an agent keeps in view instead of its whole history."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Annotated, Any

from pydantic import AliasChoices, Field

from ..types import Lesson, cap, cap_ends, fence_untrusted

FACT_CARDS = 3
"""Short facts from successful observations, kept whatever the window."""
WINDOW = 4
"""Recent steps shown in full."""
POLICY_SLOTS = 3
"""Corrections from lessons, injected into the next prompt; the oldest drops out."""
FACT_CHARS = 200
GUESS_SLOTS = 3
"""Guessed argument values shown at most (the latest)."""
MEMORY_CARDS = FACT_CARDS
"""Facts handed in from outside the run (a plan's global memory), under the same caps as fact cards; the
run's own facts never push them out."""


@dataclass(slots=True)
class Workspace:
    task: Annotated[str, Field(validation_alias=AliasChoices("task", "goal"))]
    """The task; a checkpoint written before the field was named so holds it as `goal`."""
    facts: list[str] = field(default_factory=list)
    window: list[dict[str, Any]] = field(default_factory=list)
    policies: list[str] = field(default_factory=list)
    forced: dict[str, Any] | None = None
    """An action a lesson forces as the next step: {"tool": ..., "args": {...}}."""
    memory: list[str] = field(default_factory=list)
    """Facts from outside the run (a plan's request and finished sub-goals): MEMORY_CARDS at most."""
    guesses: list[str] = field(default_factory=list)
    """Argument values the agent passed that neither the goal nor any tool output held: guesses, shown as
    such until a tool's output holds them (GUESS_SLOTS at most)."""

    def remember(self, facts: list[str]) -> None:
        """Take in outside facts, first ones first: beyond MEMORY_CARDS the rest are left out."""
        for text in facts:
            fact = cap(" ".join(text.split()), FACT_CHARS)
            if fact and fact not in self.memory and len(self.memory) < MEMORY_CARDS:
                self.memory.append(fact)

    def add_fact(self, text: str) -> None:
        fact = cap_ends(" ".join(text.split()), FACT_CHARS)  # "action -> output": the output comes last
        if fact and fact not in self.facts:
            self.facts = [*self.facts, fact][-FACT_CARDS:]

    def note_guesses(self, values: list[str], read: set[str]) -> None:
        """Add the values a call guessed, and drop those that what has been read (`read`, lower case) holds."""
        kept = [g for g in [*self.guesses, *values] if g.lower() not in read]
        self.guesses = list(dict.fromkeys(kept))[-GUESS_SLOTS:]

    def add_step(self, step: dict[str, Any], *, fixes: str = "") -> None:
        """A step enters the window. One that fixed an earlier failure (`fixes` names the failed action)
        replaces it: a small model that still sees "database is busy" after the retry worked waits again."""
        kept = [s for s in self.window if not fixes or s["action"] != fixes]
        self.window = [*kept, step][-WINDOW:]

    def apply(self, lesson: Lesson) -> None:
        """A lesson's correction becomes a policy slot; a force_action control becomes the next action."""
        self.policies = [*self.policies, lesson.render()][-POLICY_SLOTS:]
        if lesson.control is not None and lesson.control.kind == "force_action":
            self.forced = {"tool": lesson.control.tool, "args": dict(lesson.control.args)}

    def render(self) -> str:
        parts = [f"Goal: {self.task}"]
        if self.memory:
            parts.append("Known from earlier sub-goals and the request:\n" + "\n".join(f"- {f}" for f in self.memory))
        if self.facts:
            # A fact is "action -> output": tool output, so data like the window's, never instructions.
            parts.append("Facts:\n" + "\n".join(f"- <<<{fence_untrusted(f)}>>>" for f in self.facts))
        if self.guesses:
            parts.append("Values you passed that neither the goal nor any tool output holds (guesses, until a "
                         "tool shows them): " + ", ".join(fence_untrusted(cap(g, 60)) for g in self.guesses))
        if self.policies:
            parts.append("Corrections from earlier failures (follow them):\n" + "\n".join(self.policies))
        if self.window:
            parts.append("Recent steps:\n" + "\n".join(
                f"{s['step']}. {s['action']} -> <<<{fence_untrusted(cap_ends(s['observation'], 400))}>>>"
                for s in self.window))
        return "\n\n".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Workspace:
        return cls(**data)
