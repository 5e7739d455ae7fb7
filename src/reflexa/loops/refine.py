"""`refine`: generate, check against objective signals, and revise or restart, within a budget."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from ..errors import ConfigError, ModelError
from ..evaluate.checks import Check, CheckContext, run_checks
from ..models.base import Model
from ..reflect import Engine, ExperienceLibrary, Facts, Governor
from ..reflect.governor import Plan
from ..reflect.progress import same
from ..runtime import Observer, Run
from ..trace.store import Store
from ..types import Budget, Lesson, Result, Role, Status, StopReason, Verdict
from . import refine_prompts as prompts

ContextStrategy = Literal["latest", "full"]
MAX_ATTEMPTS = 3
"""Attempts a refine run makes unless its budget says otherwise (Budget.max_iterations)."""


def refine(
    task: str,
    checks: Sequence[Check],
    *,
    model: Model | None = None,
    budget: Budget = Budget(),
    context: ContextStrategy = "latest",
    explain: bool = True,
    lessons: Sequence[Lesson] = (),
    max_tokens: int = 512,
    temperature: float = 0.0,
    store: Store | None = None,
    observer: Observer | None = None,
    experience: ExperienceLibrary | None = None,
    governor: Governor | None = None,
    family: str = "refine",
) -> Result:
    """Attempt `task` until every check passes or a bound is hit; never raises for a spent budget.

    The checks decide PASS, NEEDS_IMPROVEMENT (revise the latest candidate with its feedback) or FAIL
    (start fresh from the task plus the lessons so far). A failure goes through the reflection engine:
    with `explain`, the reflector turns it into a lesson (within the budget's max_reflections, default 2);
    otherwise, or when the quota is spent, the raw signals are the feedback. `context` "latest" shows the
    generator the latest candidate and feedback; "full" shows every earlier attempt. `lessons` are
    carried in from earlier trials. A `governor` may cut retries for a `family` of tasks where they have
    not paid; `experience` reuses repairs across runs.
    """
    if not checks:
        raise ConfigError("refine needs at least one check", hint="give tests, a command, a schema or a judge")
    if model is None:
        from ..models.spec import resolve

        model = resolve()
    budget = budget.with_default_iterations(MAX_ATTEMPTS)
    plan = governor.plan(model.name, family, task, budget) if governor else Plan(budget)
    budget = plan.budget
    run = Run("refine", task, model, budget=budget, store=store, observer=observer,
              meta={"context": context, "checks": [c.name for c in checks], "family": family})
    engine = Engine(run, experience=experience, quota=budget.max_reflections if explain else 0)
    check_context = CheckContext(task, ask=run.call)
    learned: list[Lesson] = list(lessons)
    history: list[tuple[str, str]] = []
    revising: tuple[str, str] | None = None
    candidates: list[str] = []
    best: tuple[str, Verdict] | None = None
    first_attempt_tokens = 0

    def finish(reason: StopReason, error: str | None = None) -> Result:
        result = run.finish(reason, output=candidates[-1] if candidates else None, best=best[0] if best else None,
                            verdict=best[1] if best else None, iterations=len(candidates), error=error,
                            counters=engine.finish(reason is StopReason.PASSED),
                            notes=[plan.note] if plan.note else [])
        if governor:
            governor.record(model.name, family, task, retried=len(candidates) > 1, converted=result.passed,
                            retry_tokens=result.total_usage.total_tokens - first_attempt_tokens)
        return result

    try:
        while len(candidates) < budget.max_iterations:
            if context == "full" and history:
                messages = prompts.full_history(task, learned, history)
            elif revising:
                messages = prompts.revise(task, learned, *revising)
            else:
                messages = prompts.fresh(task, learned)
            reply = run.call(Role.GENERATOR, messages, max_tokens=max_tokens, temperature=temperature)
            if reply is None:
                return finish(run.budget_stop or StopReason.ERROR)
            plan_text, candidate = prompts.split_reply(reply.text)
            candidates.append(candidate)
            run.record("attempt", Role.GENERATOR, {"iteration": len(candidates), "revising": bool(revising)},
                       {"plan": plan_text, "candidate": candidate})

            verdict = run_checks(checks, candidate, check_context)
            run.record("verdict", Role.EVALUATOR, None, verdict)
            if len(candidates) == 1:
                first_attempt_tokens = run.meter.total.total_tokens
            if best is None or verdict.score > best[1].score:
                best = (candidate, verdict)
            if not engine.gate(len(candidates), verdict.signals):
                return finish(StopReason.PASSED)
            if why := engine.progress.stalled(candidates, frozenset(s.fingerprint for s in verdict.failing)):
                run.record("no_progress", None, None, {"why": why})
                return finish(StopReason.NO_PROGRESS)
            if len(candidates) >= 3 and same(candidate, candidates[-3]):
                run.record("flag", None, None, {"why": "this revision undoes the previous one"})
            if len(candidates) == budget.max_iterations:
                break  # no attempt left to use a lesson: reflecting now would waste tokens

            failure = verdict.failing[0]
            evidence = _evidence(verdict)
            outcome = engine.handle(failure, goal=task, facts=[], action=candidate, snippet=evidence,
                                    rule_facts=Facts(retryable=False))
            if outcome.stop is not None:
                return finish(outcome.stop, outcome.reason)
            lesson = outcome.lesson or Lesson(f"attempt {len(candidates)}", failure.message,
                                              failure.code or "check failed", f"make {failure.source} pass")
            feedback = f"{verdict.feedback}\n{evidence}\n{lesson.render()}"
            history.append((candidate, feedback))
            if verdict.status is Status.FAIL:
                learned.append(lesson)
                revising = None
            else:
                revising = (candidate, feedback)
        return finish(StopReason.MAX_ITERATIONS)
    except ModelError as exc:
        return finish(StopReason.ERROR, exc.explained())


def _evidence(verdict: Verdict, limit: int = 600) -> str:
    evidence = "\n".join(s.evidence for s in verdict.failing if s.evidence)
    return f"Output:\n<<<\n{evidence[-limit:]}\n>>>" if evidence else ""
