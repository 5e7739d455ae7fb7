"""`trials`: Reflexion across attempts. Each trial is a whole inner run (react or refine); a failed trial
is reflected on into an episodic memory of the last few lessons, which the next trial starts from.
All trials share one budget: each trial gets what the earlier ones left."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..runtime import Run, Stop
from ..trace.store import RunRecord
from ..types import (
    Budget,
    ErrorCode,
    Lesson,
    Payload,
    Result,
    Serial,
    Signal,
    StopReason,
    Usage,
    Verdict,
    cap,
    payload,
)
from .session import Episode, Outcome, Session, awaiting, find_child, run_loop, widened

MAX_TRIALS = 3
"""Trials by default."""
EPISODIC_LESSONS = 3
"""Lessons the episodic memory keeps: a ring buffer, the oldest drops out."""
TRIAL_TEMPERATURE = 0.7
"""The temperature of every trial after the first (see TrialCall.temperature)."""



@dataclass(frozen=True, slots=True)
class TrialCall:
    """What one trial runs with. Pass `meta` and `resume` on to the trial's loop: a trials run that is
    killed and resumed then resumes the trial that was under way instead of starting it again (so a
    side effect it made is not repeated)."""

    number: int
    lessons: list[Lesson]
    """The episodic memory: lessons of the trials before."""
    budget: Budget
    """What the earlier trials left of the budget."""
    meta: dict[str, Any]
    """The trial's labels (its parent run and its number), for its run's record."""
    resume: str | None = None
    """The trial's own unfinished run, when the trials run is resumed."""
    temperature: float = 0.0
    """The trial's sampling temperature: 0 for the first (greedy), TRIAL_TEMPERATURE for the later ones, so a
    trial whose lessons changed little is still a new attempt, not the last one again. Pass it on with
    `seed`, as the runner a task spec builds does."""
    seed: int = 0
    """The seed offset of the trial's sampled calls: its number, so two trials draw two samples."""


TrialRunner = Callable[[TrialCall], Result]
"""Runs one trial, e.g. `lambda t: react(task, tools, lessons=t.lessons, budget=t.budget, meta=t.meta,
resume=t.resume, session=session)`."""


@payload("trial")
@dataclass(slots=True)
class Trial(Payload):
    """One whole trial: the lessons it started from, and how its own run ended."""

    trial: int
    lessons: list[Lesson]
    run_id: str
    stop_reason: StopReason
    output: str | None = None


@dataclass(slots=True)
class TrialsState(Serial):
    """The episodic memory and the last trial's result; checkpointed after each trial."""

    memory: list[Lesson] = field(default_factory=list)
    trials: int = 0
    output: str | None = None
    best: str | None = None
    verdict: Verdict | None = None
    last_stop: StopReason | None = None
    last_error: str | None = None
    spent: dict[str, Usage] = field(default_factory=dict)
    """What the finished trials spent, per role (a resume adds it back to the meter, as a plan does)."""

    def outcome(self, episode: Episode) -> Outcome:
        return Outcome(self.output, self.best, self.verdict, self.trials, retried=self.trials > 1)


def trials(task: str, trial: TrialRunner, *, session: Session | None = None, max_trials: int = MAX_TRIALS,
           budget: Budget = Budget(), meta: dict[str, Any] | None = None, resume: str | None = None) -> Result:
    """Run up to `max_trials` trials until one passes. One budget covers them all and this run's own
    reflections: usage adds up every trial's usage, and each trial is handed the budget left. Each trial
    is also stored as a run of its own, named in this run's `trial` steps. `meta` is stored with the run;
    `resume=RUN_ID` continues a stored trials run, resuming the trial that was under way."""
    return run_loop(session or Session(), "trials", task, TrialsState(),
                    lambda ep, s: _trials(ep, s, task, trial), budget=budget, bound=max_trials,
                    reflect=max_trials > 1, meta=meta, resume=resume)


def _trials(ep: Episode, s: TrialsState, task: str, trial: TrialRunner) -> Stop:
    run, engine = ep.run, ep.engine
    for role, usage in s.spent.items():  # a resumed run: what its finished trials spent
        run.meter.record(role, usage)
    while s.trials < ep.bound:
        if (spent := run.meter.check()) is not None:
            return Stop(spent)
        s.trials += 1
        child = find_child(run, parent=run.run_id, trial=s.trials) if run.resumed else None
        if child is not None and child.status == "finished" and child.result is not None:
            last = Result.from_dict(child.result)  # it ended before the kill: read back, not run again
        else:
            last = trial(_call(run, s, child))
        if last.stop_reason is StopReason.AWAITING_APPROVAL:  # a resume resumes this trial's run
            return Stop(last.stop_reason, awaiting(last.error, last.run_id, run.run_id))
        for role, usage in last.usage.items():
            run.meter.record(role, usage)
            s.spent.setdefault(role, Usage()).add(usage)
        s.output, s.best, s.verdict = last.output, last.best, last.verdict
        s.last_stop, s.last_error = last.stop_reason, last.error
        run.record(Trial(s.trials, list(s.memory), last.run_id, last.stop_reason, last.output),
                   usage=Usage.total(last.usage.values()))
        if not engine.gate(s.trials, [_signal(last)]):
            return Stop(last.stop_reason)  # PASSED, or ANSWERED_UNVERIFIED: a trial nothing could check
        if last.stop_reason in (StopReason.UNRECOVERABLE, StopReason.ERROR):
            return Stop(last.stop_reason, last.error)
        if s.trials == ep.bound:
            break  # no trial left to use a lesson
        outcome = engine.handle(_signal(last), task=task, facts=[], action=f"trial {s.trials}: {last.output or ''}",
                                snippet=last.error or _feedback(last))
        if outcome.stop is not None:
            return Stop(outcome.stop, outcome.reason)
        # A lesson the engine kept, else the trial's failure itself: the next trial is told what ended this one
        # (a rejected answer, a stop), as refine tells a revision its failing signal.
        s.memory = [*s.memory, outcome.lesson or trial_lesson(s.trials, last)][-EPISODIC_LESSONS:]
        ep.checkpoint(s)
    return Stop(StopReason.MAX_ITERATIONS)


def _call(run: Run, s: TrialsState, child: RunRecord | None) -> TrialCall:
    """The next trial's call; `child` is that trial's own unfinished run, found on a resume."""
    labels = {"parent": run.run_id, "trial": s.trials}
    budget = run.meter.remaining()
    if child is not None:  # the resumed trial counts what it spent before the kill itself
        budget = widened(budget, Usage.total(step.usage for step in run.store.steps(child.run_id) if step.role))
    return TrialCall(s.trials, list(s.memory), budget, labels, child.run_id if child is not None else None,
                     temperature=TRIAL_TEMPERATURE if s.trials > 1 else 0.0, seed=s.trials)


def trial_lesson(number: int, result: Result) -> Lesson:
    """What a failed trial teaches when the reflector gives no lesson: how it ended, and its answer (or the
    answers its validator rejected)."""
    answers = [result.output] if result.output else list(result.details.get("rejected", []))
    said = (f"; it answered {', '.join(repr(cap(a, 80)) for a in answers[-3:])}, which was not accepted"
            if answers else "")
    return Lesson(f"trial {number}", cap(f"trial {number} ended {result.stop_reason}: "
                                         f"{result.error or _feedback(result)}", 300),
                  "its approach did not reach an accepted answer",
                  cap(f"take another approach than trial {number}{said}", 300))


def _signal(result: Result) -> Signal:
    if result.stop_reason in (StopReason.PASSED, StopReason.ANSWERED_UNVERIFIED):
        return Signal("trial", True)
    return Signal("trial", False, ErrorCode.TEST_FAILED, f"trial ended {result.stop_reason}: "
                  f"{result.error or _feedback(result)}"[:300], evidence=(result.output or "")[:300])


def _feedback(result: Result) -> str:
    if result.verdict is not None and result.verdict.feedback:
        return result.verdict.feedback
    return f"no passing answer (output: {(result.output or '')[:200]})"
