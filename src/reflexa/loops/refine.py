"""`refine`: generate, check against objective signals, and revise or restart, within a budget."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from ..errors import ConfigError, ModelError
from ..evaluate.checks import Check, CheckContext, run_checks
from ..models.base import Model
from ..runtime import Observer, Run
from ..trace.store import Store
from ..types import Budget, Lesson, Result, Role, Status, StopReason, Verdict
from . import refine_prompts as prompts

ContextStrategy = Literal["latest", "full"]


def refine(
    task: str,
    checks: Sequence[Check],
    *,
    model: Model | None = None,
    budget: Budget = Budget(),
    context: ContextStrategy = "latest",
    explain: bool = True,
    max_tokens: int = 512,
    temperature: float = 0.0,
    store: Store | None = None,
    observer: Observer | None = None,
) -> Result:
    """Attempt `task` until every check passes or a bound is hit; never raises for a spent budget.

    The checks decide PASS, NEEDS_IMPROVEMENT (revise the latest candidate with its feedback) or FAIL
    (start fresh from the task plus the lessons so far). With `explain`, the model turns failing signals
    into a lesson (counted as a reflection); otherwise the raw signals are the feedback. `context`
    "latest" shows the generator the latest candidate and feedback; "full" shows every earlier attempt.
    """
    if not checks:
        raise ConfigError("refine needs at least one check", hint="give tests, a command, a schema or a judge")
    if model is None:
        from ..models.spec import resolve

        model = resolve()
    run = Run("refine", task, model, budget=budget, store=store, observer=observer,
              meta={"context": context, "checks": [c.name for c in checks]})
    check_context = CheckContext(task, ask=run.call)
    lessons: list[Lesson] = []
    history: list[tuple[str, str]] = []
    revising: tuple[str, str] | None = None
    candidates: list[str] = []
    best: tuple[str, Verdict] | None = None
    fingerprints: frozenset[str] | None = None

    def finish(reason: StopReason, error: str | None = None) -> Result:
        return run.finish(reason, output=candidates[-1] if candidates else None, best=best[0] if best else None,
                          verdict=best[1] if best else None, iterations=len(candidates), error=error)

    try:
        while len(candidates) < budget.max_iterations:
            if context == "full" and history:
                messages = prompts.full_history(task, history)
            elif revising:
                messages = prompts.revise(task, lessons, *revising)
            else:
                messages = prompts.fresh(task, lessons)
            reply = run.call(Role.GENERATOR, messages, max_tokens=max_tokens, temperature=temperature)
            if reply is None:
                return finish(run.budget_stop or StopReason.ERROR)
            plan, candidate = prompts.split_reply(reply.text)
            candidates.append(candidate)
            run.record("attempt", Role.GENERATOR, {"iteration": len(candidates), "revising": bool(revising)},
                       {"plan": plan, "candidate": candidate})

            verdict = run_checks(checks, candidate, check_context)
            run.record("verdict", Role.EVALUATOR, None, verdict)
            if best is None or verdict.score > best[1].score:
                best = (candidate, verdict)
            if verdict.status is Status.PASS:
                return finish(StopReason.PASSED)

            if repeat := _no_progress(candidates, fingerprints, verdict):
                run.record("no_progress", None, None, {"why": repeat})
                return finish(StopReason.NO_PROGRESS)
            if len(candidates) >= 3 and same(candidate, candidates[-3]):
                run.record("flag", None, None, {"why": "this revision undoes the previous one"})
            fingerprints = frozenset(s.fingerprint for s in verdict.failing)
            if len(candidates) == budget.max_iterations:
                break  # no attempt left to use a lesson: explaining this failure would be wasted tokens

            lesson = _lesson(run, task, candidate, verdict, explain)
            run.record("lesson", Role.EVALUATOR, None, lesson)
            feedback = f"{verdict.feedback}\n{_evidence(verdict)}\nCause: {lesson.failure_cause}\nNext: {lesson.next_action}"
            history.append((candidate, feedback))
            if verdict.status is Status.FAIL:
                lessons.append(lesson)
                revising = None
            else:
                revising = (candidate, feedback)
        return finish(StopReason.MAX_ITERATIONS)
    except ModelError as exc:
        return finish(StopReason.ERROR, f"{exc}" + (f" ({exc.hint})" if exc.hint else ""))


def same(a: str, b: str) -> bool:
    """Equal up to whitespace."""
    return a.split() == b.split()


def _no_progress(candidates: list[str], previous: frozenset[str] | None, verdict: Verdict) -> str | None:
    if len(candidates) >= 2 and same(candidates[-1], candidates[-2]):
        return "the candidate is identical to the previous one"
    if previous is not None and previous == frozenset(s.fingerprint for s in verdict.failing):
        return "the same checks failed the same way twice in a row"
    return None


def _evidence(verdict: Verdict, limit: int = 600) -> str:
    evidence = "\n".join(s.evidence for s in verdict.failing if s.evidence)
    return f"Output:\n<<<\n{evidence[-limit:]}\n>>>" if evidence else ""


def _lesson(run: Run, task: str, candidate: str, verdict: Verdict, explain: bool) -> Lesson:
    """Turn the failing signals into a lesson: by the evaluator model when allowed, else from the signals."""
    first = verdict.failing[0]
    raw = Lesson(first.message, first.evidence[-300:] or first.message, f"make {first.source} pass")
    if not explain or not run.meter.may_reflect():
        return raw
    run.meter.reflections += 1
    reply = run.call(Role.EVALUATOR, prompts.translate(task, candidate, f"{verdict.feedback}\n{_evidence(verdict)}"),
                     schema=prompts.Feedback, max_tokens=200)
    if reply is None or reply.value is None:
        return raw  # an unusable explanation costs its tokens but never the run
    return Lesson(reply.value.failure_cause, raw.evidence, reply.value.next_action)
