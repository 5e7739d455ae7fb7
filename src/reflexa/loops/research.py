"""`research`: draft, critique with search queries, gather evidence, revise with audited citations.

It goes through the same engine as the other loops: a named gap is a GAP signal (the rule repair is a
search), a failed citation audit an UNCITED signal (the rule repair is a revision with the audit's
feedback); the gate, the counters, NO_PROGRESS and the governor apply as everywhere.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Annotated, Any

from pydantic import AliasChoices, Field

from ..evaluate.checks import redact_secrets
from ..evaluate.citations import audit, cited, clean, references, strip_references, verified
from ..runtime import Run, Stop
from ..search.base import Evidence, SearchBackend, SearchError
from ..search.cache import SearchCache, normalise_query
from ..search.distill import distill
from ..types import (
    Budget,
    ErrorCode,
    Payload,
    Result,
    Role,
    Serial,
    Signal,
    Status,
    StopReason,
    Usage,
    Verdict,
    payload,
)
from . import research_prompts as prompts
from .session import Episode, Outcome, Session, run_loop

RESULTS_PER_QUERY = 3
"""Evidence items kept per query."""
ROUNDS = 2
"""Search-and-revise rounds by default."""
REQUOTES = 1
"""Revisions asked again because their quote was in no passage: a model that copies a sentence it made up
once may copy the real one when told; asked more, it spends tokens on the same miss."""
NO_SEARCH = "no new evidence was sought"


@payload("queries")
@dataclass(slots=True)
class Queries(Payload):
    """The searches a draft proposed, and which of them the query rules let through."""

    proposed: list[str]
    gaps: list[str]
    run: list[str]
    rejected: list[str]


@payload("search")
@dataclass(slots=True)
class Searched(Payload):
    """One query: ok (with the evidence it found) or failed (with why)."""

    query: str
    status: str
    cached: bool = False
    evidence: list[str] = field(default_factory=list)
    """The ids of the passages found."""
    error: str | None = None
    passages: list[Evidence] = field(default_factory=list)
    """The passages themselves, as the backend returned them."""


@payload("audit")
@dataclass(slots=True)
class Audited(Payload):
    """The citation audit of one revision."""

    signal: Signal


@dataclass(slots=True)
class ResearchState(Serial):
    """Everything a research run knows; a checkpoint after each round stores it for a resume."""

    task: Annotated[str, Field(validation_alias=AliasChoices("task", "question"))]
    """The question (a checkpoint written before the field was named so holds it as `question`)."""
    draft: prompts.Revision | None = None
    anchor: list[str] = field(default_factory=list)
    """Gaps named before any evidence was read: later queries must relate to these or to the question."""
    evidence: list[Evidence] = field(default_factory=list)
    """Retrieved evidence; item i is cited as [i + 1]."""
    failed: dict[str, str] = field(default_factory=dict)
    ran: list[str] = field(default_factory=list)
    """Queries already run: never run twice, compared normalised."""
    rounds: int = 0
    feedback: str = ""
    unsupported: str = ""
    """The last revision's quote, when no passage it named holds it: its answer then cites nothing, and the
    next revision is told so (once: REQUOTES)."""
    requotes: int = 0
    notes: list[str] = field(default_factory=list)
    cache_hits: int = 0
    cache_misses: int = 0

    def sources(self) -> dict[int, str]:
        return {n: e.source for n, e in enumerate(self.evidence, start=1)}

    def answer(self) -> str | None:
        """The answer as the run returns it: the model's own references section dropped, unknown citations
        and links that are no cited evidence's source cut out."""
        return clean(strip_references(self.draft.answer), self.sources()) if self.draft else None

    def checked(self) -> bool:
        """The returned answer cites evidence, and the audit passes: what PASSED means for research."""
        answer = self.answer()
        return answer is not None and verified(answer, self.sources().keys())

    def outcome(self, episode: Episode) -> Outcome:
        answer, checked = self.answer(), self.checked()
        verdict = Verdict(Status.PASS if checked else Status.FAIL, (audit(answer or "", self.sources().keys()),))
        details = {"answer": answer,
                   "evidence": [{"n": n, **asdict(e)} for n, e in enumerate(self.evidence, start=1)],
                   "queries": [{"query": q, "status": "failed" if q in self.failed else "ok",
                                "error": self.failed.get(q)} for q in self.ran]}
        final = _with_references(answer, self) if answer is not None else None
        counters = {"evidence": len(self.evidence), "failed_queries": len(self.failed),
                    "cache_hits": self.cache_hits, "cache_misses": self.cache_misses}
        return Outcome(final, final if checked else None, verdict if answer is not None else None, self.rounds,
                       notes=list(self.notes), details=details, counters=counters, retried=self.rounds > 0)


def research(task: str, backend: SearchBackend, *, session: Session | None = None, budget: Budget = Budget(),
             max_rounds: int = ROUNDS, cache: SearchCache | None = None, k: int = RESULTS_PER_QUERY,
             meta: dict[str, Any] | None = None, resume: str | None = None) -> Result:
    """Answer the question `task` from evidence: a draft, then up to `max_rounds` rounds of search and revision.

    The answer cites retrieved evidence as [n]; a claim with no evidence keeps an [UNCERTAIN: ...] marker;
    a failed search is named in the answer; references are built in code from retrieved evidence only.
    The run PASSES only when the citation audit passes over a non-empty set of citations; an answer that
    cites nothing ends ANSWERED_UNVERIFIED. Unknown citations never leave the loop."""

    def body(ep: Episode, s: ResearchState) -> Stop:
        return _rounds(ep, s, backend, cache, k)

    return run_loop(session or Session(), "research", task, ResearchState(task), body, budget=budget,
                    bound=max_rounds, meta={"backend": backend.name, **(meta or {})}, resume=resume)


def _rounds(ep: Episode, s: ResearchState, backend: SearchBackend, cache: SearchCache | None, k: int) -> Stop:
    """The loop itself: draft, then let the engine turn gaps into searches and audit failures into revisions."""
    run, engine = ep.run, ep.engine
    if s.draft is None:
        reply = run.call(Role.GENERATOR, prompts.draft(s.task), schema=prompts.Draft, max_tokens=512)
        if reply is None:
            return Stop(run.budget_stop or StopReason.ERROR)
        if reply.value is None:  # even after the re-ask; a cut-off draft may still hold its answer
            s.draft = prompts.salvage(reply.text)
            s.notes.append(f"the draft was unusable: {reply.error}")
            if s.draft:
                return Stop(StopReason.ANSWERED_UNVERIFIED)
            # A model that cannot write the draft's JSON when asked again is no fault of a server or of
            # reflexa (ERROR): another round would fail the same way. A budget that refused the re-ask is
            # the budget's stop.
            return Stop(run.budget_stop or StopReason.UNRECOVERABLE, f"the draft was unusable: {reply.error}")
        s.draft = prompts.Revision.model_validate(reply.value.model_dump())
        s.anchor = prompts.concrete_gaps(s.draft.reflection)
        ep.checkpoint(s)
    while True:
        signals = _signals(s, ep.bound)
        bad = engine.gate(s.rounds + 1, signals)
        if not bad:
            break
        if why := engine.progress.stalled([], frozenset(x.fingerprint for x in bad)):
            s.notes.append(f"stopped revising: {why}")
            # A gap left open does not undo an answer whose citations the audit passed.
            return Stop(StopReason.PASSED if s.checked() else StopReason.NO_PROGRESS)
        outcome = engine.handle(bad[0], task=s.task, facts=[], action=s.draft.answer[:300], snippet=bad[0].message)
        if outcome.stop is not None:
            return Stop(outcome.stop, outcome.reason)
        searching = outcome.repair is not None and outcome.repair.kind == "search"
        if searching and not _search_round(run, s, backend, cache, k):
            break
        s.feedback = bad[0].message if bad[0].code is ErrorCode.UNCITED else ""
        s.requotes += bool(s.unsupported) and bad[0].message.startswith("your quote")
        if not _revise(ep, s):
            return Stop(run.budget_stop or StopReason.ERROR)
        ep.checkpoint(s)
    if not s.ran and NO_SEARCH not in " ".join(s.notes):
        s.notes.append(f"{NO_SEARCH}: the draft named no concrete gap")
    # Judged on the answer as returned, after `clean` (a citation it cut, e.g. a markdown link, is no citation).
    return Stop(StopReason.PASSED if s.checked() else StopReason.ANSWERED_UNVERIFIED)


def _signals(s: ResearchState, bound: int) -> list[Signal]:
    """The draft's failing signals: each concrete gap while rounds are left, a quote no passage holds (once),
    and the citation audit."""
    assert s.draft is not None
    gaps = prompts.concrete_gaps(s.draft.reflection) if s.rounds < bound else []
    signals = [Signal("research", False, ErrorCode.GAP, f"missing: {gap}") for gap in gaps[:1]]
    if s.unsupported and s.requotes < REQUOTES:
        signals.append(Signal("citation-audit", False, ErrorCode.UNCITED,
                              "your quote is in no passage you named, so the answer "
                              "cites nothing: copy, word for word, the sentence of one numbered passage that "
                              "states the answer, and cite that passage as [n]; if no passage states it, mark "
                              "the answer [UNCERTAIN: ...]"))
    return [*signals, audit(s.draft.answer, s.sources().keys())]


def _search_round(run: Run, s: ResearchState, backend: SearchBackend, cache: SearchCache | None,
                  k: int) -> bool:
    """Run the draft's usable queries; False when none was usable (then research is over)."""
    assert s.draft is not None
    gaps = prompts.concrete_gaps(s.draft.reflection)
    seen = {normalise_query(q) for q in s.ran}
    queries, rejected = prompts.clean_queries(s.draft.search_queries, s.task, gaps, seen, s.anchor)
    if not s.ran and not prompts.holds_secret(s.task):
        # The first round searches the question itself too: the draft's queries follow the draft, and a wrong
        # draft's queries find passages that agree with it; the question names what the answer is about.
        asked = normalise_query(s.task)
        queries = [s.task, *(q for q in queries if normalise_query(q) != asked)][:prompts.MAX_QUERIES]
    run.record(Queries([redact_secrets(q) for q in s.draft.search_queries], gaps, queries, rejected))
    if not queries:
        s.notes.append(f"{NO_SEARCH}: no usable query" if not s.ran else "no further usable query")
        return False
    s.rounds += 1
    known = {e.id for e in s.evidence}
    for query in queries:
        s.ran.append(query)
        for item in _search(run, backend, query, cache, k, s):
            if item.id not in known:
                known.add(item.id)
                s.evidence.append(item)
    return True


def _search(run: Run, backend: SearchBackend, query: str, cache: SearchCache | None, k: int,
            s: ResearchState) -> list[Evidence]:
    """One query, from the cache when fresh; a failure is recorded by name, never dropped."""
    started = time.time()
    stored = run.stored(Searched.KIND)  # a resumed run reads a stored search back, never searches again
    if isinstance(stored, Searched) and stored.query == query:
        return _stored_search(run, stored, s, cache is not None)
    # A backend whose results depend on more than its name (a local corpus: its documents) says so.
    source = getattr(backend, "cache_key", backend.name)
    hits = cache.get(source, query) if cache else None
    if cache:
        s.cache_hits, s.cache_misses = s.cache_hits + (hits is not None), s.cache_misses + (hits is None)
    if hits is not None:
        run.record(Searched(query, "ok", True, [e.id for e in hits], passages=hits), Role.SEARCH, started_at=started)
        return hits
    if (spent := run.meter.check()) is not None:
        s.failed[query] = f"not run: budget spent ({spent})"
        return []
    run.meter.record(Role.SEARCH, Usage(calls=1))
    run.status(f"searching: {query}")
    try:
        hits = [distill(e, query) for e in backend.search(query, k)]
    except Exception as exc:  # noqa: BLE001 - a backend's odd reply (a row without a field) is a failed query
        if not isinstance(exc, (SearchError, OSError, TimeoutError)):
            exc = SearchError(f"{backend.name} gave an unusable result: {type(exc).__name__}: {exc}")
        s.failed[query] = str(exc) or type(exc).__name__
        run.record(Searched(query, "failed", error=str(exc)), Role.SEARCH, usage=Usage(calls=1), started_at=started)
        return []
    if cache:
        cache.put(source, query, hits)
    run.record(Searched(query, "ok", False, [e.id for e in hits], passages=hits), Role.SEARCH, usage=Usage(calls=1),
               started_at=started)
    return hits


def _stored_search(run: Run, stored: Searched, s: ResearchState, cached: bool) -> list[Evidence]:
    """A search a resumed run replays: its passages (or its failure) as they were stored."""
    if cached:
        s.cache_hits, s.cache_misses = s.cache_hits + stored.cached, s.cache_misses + (not stored.cached)
    if stored.status != "ok":
        s.failed[stored.query] = stored.error or "failed"
    run.record(stored, Role.SEARCH)
    return list(stored.passages)


def _revise(ep: Episode, s: ResearchState) -> bool:
    """One revision from the evidence so far (and the audit's feedback); False when the budget is spent.
    An unusable revision keeps the last good draft."""
    assert s.draft is not None
    numbered = list(enumerate(s.evidence, start=1))
    reply = ep.run.call(Role.GENERATOR, prompts.revise(s.task, s.draft, numbered, s.failed, s.feedback,
                                                       unsupported=bool(s.unsupported)),
                        schema=prompts.Revision, max_tokens=700)
    if reply is None:
        return False
    if reply.value is not None:
        revision: prompts.Revision = reply.value
        revision.answer = prompts.with_citations(strip_references(revision.answer), revision.evidence_used,
                                                 s.evidence, s.task, revision.quote)
        s.unsupported = revision.quote.strip() if revision.quote.strip() and s.evidence and not cited(
            revision.answer) else ""
        s.draft = revision
        ep.run.record(Audited(audit(revision.answer, s.sources().keys())), Role.EVALUATOR)
    return True


def _with_references(answer: str, s: ResearchState) -> str:
    """The answer, the run's notes, its failed searches and its references, built from evidence only."""
    parts = [answer.strip()] + [note[0].upper() + note[1:] + "." for note in s.notes if note.startswith(NO_SEARCH)]
    if s.failed:
        parts.append("Could not verify: " + "; ".join(f'search "{q}" failed ({why})' for q, why in s.failed.items()))
    if refs := references(answer, s.evidence):
        parts.append(refs)
    return "\n\n".join(parts)

