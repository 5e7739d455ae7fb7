"""What every loop shares: the Session (model, store, observer, experience, governor) and the one entry
that opens a run from it and closes it.

A loop keeps only its own control flow. `run_loop` does the rest, the same way for every loop: plan the
run with the governor, open (or reopen) the trace, build the engine, restore a resumed state, call the
loop's body, and finish: best-so-far, counters, the governor's record, `ModelError` -> ERROR, Ctrl-C ->
INTERRUPTED, and a program bug -> ERROR in the store before the exception goes on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

from .. import observe
from ..errors import ConfigError, ModelError, RunInterrupted
from ..models.base import Model
from ..reflect import Engine, ExperienceLibrary, Governor
from ..reflect.governor import Plan
from ..reflect.repairs import RepairPolicy
from ..runtime import Checkpoint, Observer, Run, Stop
from ..tools.approval import Approver
from ..trace.store import MemoryStore, RunRecord, Store
from ..types import UNFINISHED, Budget, Result, StopReason, Usage, Verdict


@dataclass(slots=True)
class Session:
    """The plumbing a run needs and no loop should rebuild. One session can serve many runs.

    `model` None means the configured default (`--model`, $REFLEXA_MODEL, reflexa.toml, else the first
    run's loop's own: `local:qwen1.5b` for react, trials and plan, `local` for the others), resolved when the
    first run opens; the configured reflector ($REFLEXA_REFLECTOR_MODEL, reflexa.toml's
    `reflector_model`) is then resolved with it. A session given its model reflects on that model unless
    it is given a `reflector_model` too."""

    model: Model | None = None
    store: Store = field(default_factory=MemoryStore)
    observer: Observer | None = None
    experience: ExperienceLibrary | None = None
    governor: Governor | None = None
    repairs: RepairPolicy | None = None
    """refine's repair policy learned from the store's record (reflect/repairs.py); None: the fixed rule."""
    reflector_model: Model | None = None
    """The model the reflector's calls go to; None is `model`. A small generator can be given a larger
    reflector: its calls are few and short, and a lesson that names the cause is what converts a failure."""
    approver: Approver | None = None
    """Decides on every side-effecting tool call before it runs (tools/approval.py: approve, deny with a
    reason, or defer, which stops the run AWAITING_APPROVAL); None runs them unasked."""

    def resolved_model(self, loop: str | None = None) -> Model:
        """The session's model; unset, the configured one (the default of `loop` when nothing is configured)."""
        if self.model is None:
            from ..models.spec import resolve, resolve_reflector

            self.model = resolve(loop=loop)
            if self.reflector_model is None:
                self.reflector_model = resolve_reflector(model=self.model)
        return self.model


@dataclass(slots=True)
class Outcome:
    """What a loop's state says about the run so far: the answer and the best-so-far."""

    output: str | None
    best: str | None = None
    verdict: Verdict | None = None
    iterations: int = 0
    notes: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    """The loop's own counts, shown beside the engine's (e.g. research's cache hits)."""
    retried: bool = False
    """For the governor: the run failed its first attempt and paid for reflected retries."""
    retry_tokens: int = 0
    """For the governor: what those retries cost."""


S = TypeVar("S", bound="LoopState")


class LoopState(Protocol):
    """A loop's whole per-run state: one owner, with a serialised form that resume reads back."""

    def to_dict(self) -> dict[str, Any]: ...

    @classmethod
    def from_dict(cls: type[S], data: dict[str, Any]) -> S: ...

    def outcome(self, episode: Episode) -> Outcome: ...


@dataclass(slots=True)
class Episode:
    """One open run, as a loop's body sees it: the trace and budget (`run`), the engine, and the plan."""

    run: Run
    engine: Engine
    plan: Plan
    session: Session
    family: str
    roi_model: str
    """The model a record of what pays is kept for (the generator's, with the reflector's when it has one)."""

    @property
    def bound(self) -> int:
        """The loop's own bound for this run (attempts, steps, rounds), after the governor's plan."""
        return self.plan.bound

    def snapshot(self, state: LoopState) -> Checkpoint:
        """The loop's state and the engine's, as plain data."""
        return Checkpoint(state.to_dict(), self.engine.snapshot())

    def checkpoint(self, state: LoopState) -> None:
        """Store the loop's state and the engine's, so a killed run resumes from here."""
        self.run.record(self.snapshot(state))


Body = Callable[[Episode, S], Stop]
"""A loop's control flow: it works on the state and returns how the run stopped."""


def run_loop(session: Session, loop: str, task: str, state: S, body: Body[S], *, budget: Budget, bound: int,
             family: str | None = None, cut: str = "retries", reflect: bool = True,
             meta: dict[str, Any] | None = None, resume: str | None = None) -> Result:
    """Open a run of `loop` from `session`, run `body` on `state`, and close the run; never raises for a
    spent budget or a model failure. `bound` is the loop's own limit (attempts, steps or rounds); the
    governor, when the session has one, may cut it or the reflections for the task `family`. `reflect`
    False makes no reflector call at all."""
    model = session.resolved_model(loop)
    family = family or loop
    reflector = session.reflector_model if session.reflector_model is not model else None
    # Whether retries pay depends on who reflects too: a reflector on its own model keeps its own record.
    roi_model = f"{model.name}+{reflector.name}" if reflector else model.name
    plan = (session.governor.plan(roi_model, family, task, bound, budget.max_reflections, cut=cut)
            if session.governor else Plan(bound, budget.max_reflections))
    run = Run(loop, task, model, budget=budget, store=session.store, observer=observe.attach(session.observer),
              meta={"family": family, "bound": bound, "experience": session.experience is not None, **(meta or {})},
              resume=resume,
              reflector_model=reflector)
    engine = Engine(run, experience=session.experience, quota=plan.reflections if reflect else 0)
    if resume is not None:
        state = _restored(run, engine, state)
    episode = Episode(run, engine, plan, session, family, roi_model)

    def finish(reason: StopReason, error: str | None = None) -> Result:
        outcome = state.outcome(episode)
        notes = ([plan.note] if plan.note else []) + outcome.notes
        result = run.finish(reason, output=outcome.output, best=outcome.best, verdict=outcome.verdict,
                            iterations=outcome.iterations, error=error, notes=notes, details=outcome.details,
                            counters={**engine.finish(None if reason in UNFINISHED
                                                      else reason is StopReason.PASSED), **outcome.counters})
        # An interrupted or waiting run has not ended, and an answer nothing checked cannot tell a conversion
        # from a failure: neither says anything about whether retries pay.
        if session.governor and reason not in (*UNFINISHED, StopReason.ANSWERED_UNVERIFIED):
            session.governor.record(roi_model, family, task, retried=outcome.retried, converted=result.passed,
                                    retry_tokens=outcome.retry_tokens)
        return result

    try:
        run.announce()  # inside the try: an interrupt or an observer's bug still closes the run
        stop = body(episode, state)
    except ModelError as exc:
        return finish(StopReason.ERROR, exc.explained())
    except KeyboardInterrupt:
        finish(StopReason.INTERRUPTED, "interrupted by the user")
        raise RunInterrupted(run.run_id) from None
    except ConfigError as exc:  # a user's input found wrong only as it ran (a check that returns a number)
        finish(StopReason.ERROR, str(exc)[:500])
        raise
    except (Exception, SystemExit) as exc:
        # A bug in reflexa, or a user's tool or check that raised (even sys.exit): the run still ends in the
        # store, never "running". Run.finish releases the lease last, so the run never looks abandoned
        # while it is being closed (a SIGKILL leaves a lease whose process is gone: a resume takes it over).
        finish(StopReason.ERROR, f"internal error: {type(exc).__name__}: {exc}"[:500])
        raise
    except BaseException:
        # Anything else (a task's CancelledError, a simulated kill) leaves the run as it is, to be resumed;
        # this process lets go of it.
        session.store.release_lease(run.run_id, run.owner)
        raise
    return finish(stop.stop_reason, stop.error)


CHILD_SCAN = 1000
"""Runs `find_child` looks through (newest first, since the parent started)."""


def find_child(run: Run, **labels: Any) -> RunRecord | None:
    """The stored child run of `run` whose meta holds `labels` (e.g. parent=..., trial=2): a child may have
    started, or finished, in a process that was killed before the parent recorded it."""
    parent = run.store.get_run(run.run_id)
    for record in run.store.runs(CHILD_SCAN, since=parent.started_at if parent else None):
        if all(record.meta.get(key) == value for key, value in labels.items()):
            return record
    return None


def widened(budget: Budget, spent: Usage) -> Budget:
    """`budget` raised by what a resumed child spent before the kill: the child counts that itself."""
    return replace(budget, max_tokens=None if budget.max_tokens is None else budget.max_tokens + spent.total_tokens,
                   max_calls=None if budget.max_calls is None else budget.max_calls + spent.calls)


def awaiting(child_error: str | None, child_id: str, parent_id: str) -> str:
    """A child run's AWAITING_APPROVAL message, naming its parent: `reflexa approve` and `resume` take that."""
    return (child_error or "a tool call waits for approval").replace(child_id[:12], parent_id[:12])


def _restored(run: Run, engine: Engine, fresh: S) -> S:
    """The state of the last checkpoint of a resumed run (the fresh state when there is none); a checkpoint
    this version cannot read is a ConfigError, and the run is let go."""
    try:
        return _checkpointed(run, engine, fresh)
    except (ValueError, TypeError, KeyError) as exc:  # pydantic's ValidationError is a ValueError
        run.store.release_lease(run.run_id, run.owner)
        raise ConfigError(f"run {run.run_id[:12]}'s checkpoint cannot be read by this version of reflexa",
                          hint=f"{type(exc).__name__}: {str(exc)[:200]}") from None


def _checkpointed(run: Run, engine: Engine, fresh: S) -> S:
    """The state of the last checkpoint; the steps after it are replayed (`Run.replay`): what they stored
    is read back (a reflector call among them counts against the quota as it did), and only a call that
    was in flight when the run stopped is made again."""
    state, after = fresh, 0
    for index in range(len(run.resumed_steps) - 1, -1, -1):
        data = run.resumed_steps[index].payload()
        # A checkpoint of its own, or one a step carries in its own row (react's steps do).
        checkpoint = data if isinstance(data, Checkpoint) else getattr(data, "checkpoint", None)
        if isinstance(checkpoint, Checkpoint):
            engine.restore(checkpoint.engine)
            state, after = type(fresh).from_dict(checkpoint.state), index + 1
            break
    run.replay(run.resumed_steps[after:])
    return state
