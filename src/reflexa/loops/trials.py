"""`trials`: Reflexion across attempts. Each trial is a whole inner run (react or refine); a failed trial
is reflected on into an episodic memory of the last few lessons, which the next trial starts from."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace

from ..models.base import Model
from ..reflect import Engine, ExperienceLibrary
from ..runtime import Observer, Run
from ..trace.store import Store
from ..types import Budget, ErrorCode, Lesson, Result, Signal, StopReason, Usage

MAX_TRIALS = 3
EPISODIC_LESSONS = 3
"""Lessons the episodic memory keeps: a ring buffer, the oldest drops out."""

Attempt = Callable[[Sequence[Lesson]], Result]
"""Runs one trial with the lessons so far, e.g. `lambda lessons: react(goal, tools, lessons=lessons)`."""


def trials(
    task: str,
    attempt: Attempt,
    *,
    model: Model,
    max_trials: int = MAX_TRIALS,
    budget: Budget = Budget(),
    store: Store | None = None,
    observer: Observer | None = None,
    experience: ExperienceLibrary | None = None,
) -> Result:
    """Run up to `max_trials` trials until one passes. Usage adds up every trial's own usage; each trial is
    also stored as a run of its own, named in this run's `trial` steps. `budget` bounds this run's own
    reflections (tokens, calls, seconds); each trial's budget is the attempt's own."""
    run = Run("trials", task, model, budget=replace(budget, max_iterations=max_trials), store=store, observer=observer)
    engine = Engine(run, experience=experience, quota=max_trials - 1)
    memory: deque[Lesson] = deque(maxlen=EPISODIC_LESSONS)
    last: Result | None = None
    stop: StopReason | None = None
    for number in range(1, max_trials + 1):
        last = attempt(list(memory))
        for role, usage in last.usage.items():
            run.meter.record(role, usage)
        run.record("trial", None, {"trial": number, "lessons": list(memory)},
                   {"run_id": last.run_id, "stop_reason": last.stop_reason, "output": last.output},
                   Usage.total(last.usage.values()))
        if not engine.gate(number, [_signal(last)]):
            break
        if number == max_trials or last.stop_reason is StopReason.UNRECOVERABLE:
            break
        outcome = engine.handle(_signal(last), goal=task, facts=[], action=f"trial {number}: {last.output or ''}",
                                snippet=last.error or _feedback(last))
        if outcome.stop is not None:
            stop = outcome.stop
            break
        if outcome.lesson is not None:
            memory.append(outcome.lesson)
        if (spent := run.meter.check()) is not None:
            stop = spent
            break
    assert last is not None
    if last.passed:
        reason = StopReason.PASSED
    elif stop is not None:
        reason = stop
    elif last.stop_reason in (StopReason.UNRECOVERABLE, StopReason.ERROR):
        reason = last.stop_reason
    else:
        reason = StopReason.MAX_ITERATIONS  # the trials ran out; each trial's own reason is in its step
    return run.finish(reason, output=last.output, best=last.best, verdict=last.verdict, iterations=number,
                      error=last.error, counters=engine.finish(last.passed))


def _signal(result: Result) -> Signal:
    if result.passed:
        return Signal("trial", True)
    return Signal("trial", False, ErrorCode.TEST_FAILED, f"trial ended {result.stop_reason}: "
                  f"{result.error or _feedback(result)}"[:300], evidence=(result.output or "")[:300])


def _feedback(result: Result) -> str:
    if result.verdict is not None and result.verdict.feedback:
        return result.verdict.feedback
    return f"no passing answer (output: {(result.output or '')[:200]})"
