"""What the pages show, worked out from the stored steps: timeline items, diffs, lesson paths, citations.

The templates only lay these out. One macro per step kind (`RENDERERS`), like the CLI's table of
renderers; a kind this version does not know is shown as its raw data, escaped.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from markupsafe import Markup, escape

from ..loops import steps as step_types
from ..trace.store import RunRecord
from ..types import Payload, Step, StopReason, Usage

RENDERERS: dict[type[Payload], str] = {
    step_types.ModelCall: "model_call", step_types.Attempt: "attempt", step_types.Checked: "checked",
    step_types.Decided: "decided", step_types.Acted: "acted", step_types.Queries: "queries",
    step_types.Searched: "searched", step_types.Audited: "audited", step_types.Trial: "trial",
    step_types.Flag: "note", step_types.NoProgress: "note", step_types.RepairChosen: "note",
    step_types.Selected: "note",
    step_types.Checkpoint: "checkpoint", step_types.Stop: "stop", step_types.PlanMade: "plan_tree",
    step_types.PlanRejected: "plan_rejected", step_types.UnitStatus: "subgoal", step_types.Propagated: "propagated",
}
"""The macro in steps.html that draws each step kind; a test checks every registered kind has one."""
TEXT_LIMIT = 20_000
"""Characters of one text (a prompt, a candidate, an observation) shown inline; the step's JSON has it all."""
DIFF_CONTEXT = 3
"""Unchanged lines kept around each change in an attempt's diff."""


def clip(text: Any, limit: int = TEXT_LIMIT) -> str:
    """Text cut to `limit` characters, saying how much was left out."""
    text = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False, default=str, indent=1)
    return text if len(text) <= limit else f"{text[:limit]}\n… ({len(text) - limit} more characters in the step's JSON)"


@dataclass(slots=True)
class DiffLine:
    kind: str  # "add" | "del" | "ctx" | "hunk"
    text: str


@dataclass(slots=True)
class Item:
    """One step as the timeline shows it."""

    step: Step
    data: Payload | None
    macro: str
    offset: float
    """Seconds from the run's start to the step's start."""
    diff: list[DiffLine] | None = None
    """For an attempt after the first: the change from the previous attempt's candidate."""
    previous: int | None = None
    """The attempt number the diff is against."""
    path: list[tuple[str, str]] = field(default_factory=list)
    """For an engine decision: the stages the failure went through, (stage, outcome)."""

    @property
    def duration(self) -> float:
        return max(0.0, self.step.ended_at - self.step.started_at)


def diff(before: str, after: str) -> list[DiffLine]:
    """A unified diff of two candidates, line by line (headers dropped); empty when they are equal."""
    lines = []
    for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=DIFF_CONTEXT):
        if line.startswith(("---", "+++")):
            continue
        kind = {"@": "hunk", "+": "add", "-": "del"}.get(line[:1], "ctx")
        lines.append(DiffLine(kind, line if kind == "hunk" else line[1:]))
    return lines


def lesson_path(d: step_types.Decided) -> list[tuple[str, str]]:
    """How the engine handled one failing signal: gate, classifier, then experience or reflector."""
    code = f" {d.signal.code}" if d.signal.code else ""
    path = [("gate", f"failing: {d.signal.source}{code}")]
    if d.decision == "repair":
        return [*path, ("classifier", "rule"), ("repair", d.repair.kind if d.repair else "rule")]
    if d.decision == "stop" and d.stop is StopReason.UNRECOVERABLE:
        return [*path, ("classifier", "unrecoverable"), ("stop", "UNRECOVERABLE")]
    path.append(("classifier", "reflect"))
    if d.reused:
        return [*path, ("experience", "hit"), ("lesson", "reused")]
    if d.decision == "stop":
        stage = "reflector" if d.lesson is not None else "progress"
        return [*path, (stage, d.reason), ("stop", str(d.stop or ""))]
    if d.decision == "lesson":
        return [*path, ("reflector", "called"), ("lesson", "new")]
    return [*path, ("reflector", d.reason)]


class Timeline:
    """Turns steps into timeline items in order; it remembers the last candidate, so a live view that
    feeds it the steps it already showed diffs the next attempt correctly."""

    def __init__(self, record: RunRecord) -> None:
        self.start = record.started_at
        self.last: step_types.Attempt | None = None

    def item(self, step: Step) -> Item:
        data = step.payload()
        macro = RENDERERS.get(type(data), "unknown") if data is not None else "unknown"
        item = Item(step, data, macro, max(0.0, step.started_at - self.start))
        if isinstance(data, step_types.Attempt):
            if self.last is not None:
                item.diff, item.previous = diff(self.last.candidate, data.candidate), self.last.iteration
            self.last = data
        elif isinstance(data, step_types.Decided):
            item.path = lesson_path(data)
        return item

    def items(self, steps: list[Step]) -> list[Item]:
        return [self.item(s) for s in steps]


# --- research: the answer's citations and the evidence they name ----------------------------------------

_CITE = re.compile(r"\[(\d+)\]")


@dataclass(slots=True)
class EvidenceView:
    n: int
    title: str
    source: str
    href: str | None
    """The source as a link, only for http(s) URLs: a file path is shown, not linked."""
    snippet: str
    cited: bool


@dataclass(slots=True)
class Citations:
    answer: Markup
    """The answer, escaped, with each [n] linked to evidence n (an [n] naming no evidence is marked)."""
    evidence: list[EvidenceView]
    final: bool
    """From the run's result (False: from the last checkpoint of a run still going)."""


def link_citations(answer: str, known: set[int]) -> Markup:
    """Escape the answer, then link its [n] citations to #ev-n. Only digits from the match go into markup."""

    def link(match: re.Match[str]) -> str:
        n = int(match.group(1))
        if n in known:
            return f'<a class="cite" href="#ev-{n}">[{n}]</a>'
        return f'<span class="cite unknown" title="names no retrieved evidence">[{n}]</span>'

    return Markup(_CITE.sub(link, str(escape(answer))))


def citations(record: RunRecord, steps: list[Step]) -> Citations | None:
    """The research answer and its evidence: from the result of a finished run, else from the last
    checkpoint. None for runs that gathered no evidence and wrote no answer."""
    details = (record.result or {}).get("details") or {}
    final = "evidence" in details
    if final:
        answer, evidence = details.get("answer") or "", details["evidence"]
    else:
        state = next((s.output.get("state") for s in reversed(steps)
                      if s.kind == step_types.Checkpoint.KIND and isinstance(s.output, dict)), None) or {}
        if "evidence" not in state:
            return None
        answer = (state.get("draft") or {}).get("answer") or ""
        evidence = [{"n": n, **e} for n, e in enumerate(state["evidence"], start=1)]
    if not evidence and not answer:
        return None
    used = {int(n) for n in _CITE.findall(answer)}
    views = [EvidenceView(int(e["n"]), str(e.get("title", "")), str(e.get("source", "")),
                          _href(str(e.get("source", ""))), str(e.get("snippet", "")), int(e["n"]) in used)
             for e in evidence]
    return Citations(link_citations(answer, {v.n for v in views}), views, final)


def _href(source: str) -> str | None:
    return source if re.match(r"https?://[^\s\"'<>]+\Z", source, re.IGNORECASE) else None


def usage_of(record: RunRecord, by_steps: dict[str, Usage]) -> dict[str, Usage]:
    """Usage per role: the result's when the run finished, else summed over the stored steps."""
    stored = (record.result or {}).get("usage")
    if not stored:
        return by_steps
    return {role: Usage(u.get("input_tokens", 0), u.get("output_tokens", 0), u.get("calls", 0))
            for role, u in stored.items()}
