"""`research`: draft, critique with search queries, gather evidence, revise with audited citations."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict

from ..errors import ModelError
from ..evaluate.citations import audit, cited, remove_unknown, strip_references
from ..models.base import Model
from ..runtime import Observer, Run
from ..search.base import Evidence, SearchBackend, SearchError, SearchOutcome
from ..search.cache import SearchCache
from ..search.distill import distill
from ..trace.store import Store
from ..types import Budget, Result, Role, Status, StopReason, Usage, Verdict
from . import research_prompts as prompts

RESULTS_PER_QUERY = 3
ROUNDS = 2
"""Search-and-revise rounds unless the budget says otherwise (Budget.max_iterations)."""


def research(
    question: str,
    backend: SearchBackend,
    *,
    model: Model | None = None,
    budget: Budget = Budget(),
    store: Store | None = None,
    observer: Observer | None = None,
    cache: SearchCache | None = None,
    k: int = RESULTS_PER_QUERY,
) -> Result:
    """Answer `question` from evidence. Draft, then up to budget.max_iterations rounds of search and
    revision. The answer cites retrieved evidence as [n] and ends with its references; a claim with no
    evidence keeps an [UNCERTAIN: ...] marker; a failed search is named in the answer. The output's
    references are built in code from retrieved evidence only."""
    if model is None:
        from ..models.spec import resolve

        model = resolve()
    budget = budget.with_default_iterations(ROUNDS)
    run = Run("research", question, model, budget=budget, store=store, observer=observer,
              meta={"backend": backend.name})
    numbered: dict[str, tuple[int, Evidence]] = {}
    failed: dict[str, str] = {}
    ran: set[str] = set()
    notes: list[str] = []
    signals = []
    rounds = 0

    def finish(reason: StopReason, answer: str | None, error: str | None = None) -> Result:
        final = _with_references(answer, numbered, failed, notes) if answer is not None else None
        verdict = Verdict(Status.PASS if reason is StopReason.PASSED else Status.FAIL, tuple(signals))
        details = {"evidence": [{"n": n, **asdict(e)} for n, e in sorted(numbered.values(), key=lambda p: p[0])],
                   "queries": [{"query": q, "status": "failed" if q in failed else "ok", "error": failed.get(q)}
                               for q in sorted(ran)]}
        return run.finish(reason, output=final, best=final, verdict=verdict, iterations=rounds, error=error,
                          notes=notes, details=details,
                          counters={"evidence": len(numbered), "failed_queries": len(failed),
                                    "cache_hits": cache.hits if cache else 0, "cache_misses": cache.misses if cache else 0})

    try:
        reply = run.call(Role.GENERATOR, prompts.draft(question), schema=prompts.Draft, max_tokens=512)
        if reply is None or reply.value is None:
            return finish(run.budget_stop or StopReason.ERROR, None, reply.error if reply else None)
        current: prompts.Draft = reply.value
        anchor = prompts.concrete_gaps(current.reflection)  # named before any evidence was read
        while rounds < budget.max_iterations:
            gaps = prompts.concrete_gaps(current.reflection)
            if not gaps:
                notes.append("no new evidence was sought: the draft named no concrete gap")
                break
            queries, rejected = prompts.clean_queries(current.search_queries, question, gaps, ran, anchor)
            run.record("queries", None, {"proposed": current.search_queries, "gaps": gaps},
                       {"run": queries, "rejected": rejected})
            if not queries:
                notes.append("no new evidence was sought: no usable query")
                break
            rounds += 1
            outcome = _search(run, backend, queries, cache, k)
            ran.update(queries)
            failed.update(outcome.failed_queries)
            for e in outcome.evidence:
                numbered.setdefault(e.id, (len(numbered) + 1, e))
            revised = _revise(run, question, current, numbered, failed)
            if revised is None:
                return finish(run.budget_stop or StopReason.ERROR, current.answer)
            current = revised
        signals.append(audit(current.answer, {n for n, _ in numbered.values()}))
        return finish(StopReason.PASSED, current.answer)
    except ModelError as exc:
        return finish(StopReason.ERROR, None, exc.explained())


def _search(run: Run, backend: SearchBackend, queries: Sequence[str], cache: SearchCache | None, k: int) -> SearchOutcome:
    """Run each query (from the cache when fresh); a failure is recorded by name, never dropped."""
    outcome = SearchOutcome("success")
    for query in queries:
        started = time.time()
        hits = cache.get(backend.name, query) if cache else None
        from_cache = hits is not None
        if hits is None and (spent := run.meter.check()) is not None:
            outcome.failed_queries[query] = f"not run: budget spent ({spent})"
            continue
        if hits is None:
            run.meter.record(Role.SEARCH, Usage(calls=1))
            try:
                hits = [distill(e, query) for e in backend.search(query, k)]
            except (SearchError, OSError, TimeoutError) as exc:
                outcome.failed_queries[query] = str(exc) or type(exc).__name__
                run.record("search", Role.SEARCH, {"query": query}, {"status": "failed", "error": str(exc)},
                           Usage(calls=1), started)
                continue
            if cache:
                cache.put(backend.name, query, hits)
        outcome.evidence.extend(hits)
        run.record("search", Role.SEARCH, {"query": query},
                   {"status": "ok", "cached": from_cache, "evidence": [e.id for e in hits]},
                   Usage(calls=0 if from_cache else 1), started)
    if outcome.failed_queries:
        outcome.status = "failed" if len(outcome.failed_queries) == len(queries) else "partial"
    return outcome


def _revise(run: Run, question: str, current: prompts.Draft, numbered: dict[str, tuple[int, Evidence]],
            failed: dict[str, str]) -> prompts.Draft | None:
    """One revision; if its citations fail the audit, one more with the audit's feedback; if that still
    fails, the offending citations are removed and their claims marked uncertain."""
    evidence = sorted(numbered.values(), key=lambda pair: pair[0])
    valid = {n for n, _ in evidence}
    feedback = ""
    for attempt in (1, 2):
        reply = run.call(Role.GENERATOR, prompts.revise(question, current, evidence, failed, feedback),
                         schema=prompts.Revision, max_tokens=700)
        if reply is None:
            return None
        if reply.value is None:
            return current  # an unusable revision keeps the last good draft
        revision: prompts.Revision = reply.value
        revision.answer = strip_references(revision.answer)
        signal = audit(revision.answer, valid)
        run.record("audit", Role.EVALUATOR, {"attempt": attempt}, signal)
        if signal.ok:
            return revision
        feedback = signal.message
    revision.answer = remove_unknown(revision.answer, valid)
    return revision


def _with_references(answer: str, numbered: dict[str, tuple[int, Evidence]], failed: dict[str, str],
                     notes: list[str]) -> str:
    by_number = {n: e for n, e in numbered.values()}
    refs = [f"[{n}] {by_number[n].title}: {by_number[n].source}" for n in cited(answer) if n in by_number]
    parts = [answer.strip()] + [note[0].upper() + note[1:] + "." for note in notes if note.startswith("no new evidence")]
    if failed:
        parts.append("Could not verify: " + "; ".join(f'search "{q}" failed ({why})' for q, why in failed.items()))
    if refs:
        parts.append("References:\n" + "\n".join(refs))
    return "\n\n".join(parts)
