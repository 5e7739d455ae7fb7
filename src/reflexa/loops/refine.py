"""`refine`: generate, check against objective signals, and revise or restart, within a budget."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, get_args

from ..errors import ConfigError
from ..evaluate.checks import Check, CheckContext, CheckLike, as_checks, preluded, run_checks, verdict_from
from ..reflect import Facts
from ..reflect.progress import same
from ..reflect.repairs import AttemptKind, RepairKind, failure_class
from ..runtime import Stop
from ..types import (
    Budget,
    ErrorCode,
    Lesson,
    Payload,
    Result,
    Role,
    Serial,
    Signal,
    Status,
    StopReason,
    Verdict,
    fence_untrusted,
    payload,
)
from . import refine_prompts as prompts
from . import select as select_by
from .session import Episode, Outcome, Session, run_loop

ContextStrategy = Literal["feedback", "latest", "full"]
CONTEXTS: tuple[ContextStrategy, ...] = ("feedback", "latest", "full")
Repairs = Literal["fixed", "revise", "learn", "frozen"]
"""How a failed attempt is repaired (the spec's `repairs`, the CLI's --repairs): `fixed` revises it, and follows
a failed revision with a fresh attempt sampled at RESAMPLE_TEMPERATURE (the default); `revise` revises every
time, sampling once only when a revision repeats itself (the fixed rule's ablation); `learn` chooses between
revising and sampling by what converted at what cost, from the store's record (reflect/repairs.py), and
records what it sees; `frozen` reads that record and leaves it unchanged. On Qwen2.5-Coder-0.5B the two
retries convert different problems: a greedy revision told how the attempt failed (HumanEval), a sampled
fresh attempt (MBPP); bench/experiments/retry_ab.py measures both."""
REPAIRS: tuple[str, ...] = get_args(Repairs)
MAX_ATTEMPTS = 3
"""Attempts a refine run makes by default."""
MAX_SELECT = 16
"""select=K draws at most this many candidates."""
RESAMPLE_TEMPERATURE = 0.7
"""When a revision repeats itself, one fresh attempt is sampled at this temperature before the run stops.
"Repeats itself" folds numbers ("got 3" after "got 4" is the same failure), and the sampled attempt is not
shown the revision's lesson: on MBPP each way round lost the conversions this attempt makes on a small
model (bench/HISTORY.md)."""
MAX_LESSONS = 5
"""Lessons a run keeps (the newest) and shows a fresh attempt: a long run's prompt and checkpoint stay bounded."""
RECENT = 3
"""Candidates a run keeps: the latest three show a repeat (the last two) and an undone revision (the third)."""


@payload("attempt")
@dataclass(slots=True)
class Attempt(Payload):
    """One candidate the generator wrote, with the plan it wrote before it."""

    iteration: int
    revising: bool
    plan: str
    candidate: str


@payload("verdict")
@dataclass(slots=True)
class Checked(Payload):
    """What the checks said about the latest candidate."""

    verdict: Verdict


@payload("flag")
@dataclass(slots=True)
class Flag(Payload):
    """Something worth a reader's eye that changes nothing: e.g. a revision that undoes the previous one."""

    why: str


@payload("repair")
@dataclass(slots=True)
class RepairChosen(Payload):
    """The session's repair policy chose how the next attempt repairs a failure, and why."""

    failure_class: str
    repair: str
    why: str


@payload("selected")
@dataclass(slots=True)
class Selected(Payload):
    """Selection by behaviour (`select=K`): the candidates that passed, the calls they ran, the clusters of
    equal outputs (largest first) and the chosen attempt."""

    passing: list[int]
    calls: list[str]
    clusters: list[int]
    chosen: int

    @property
    def why(self) -> str:
        """The selection in one line."""
        ran = f" ran {len(self.calls)} calls: clusters of {self.clusters}" if self.calls else ""
        return f"attempts {self.passing} passed;{ran} attempt {self.chosen} chosen"


@payload("no_progress")
@dataclass(slots=True)
class NoProgress(Payload):
    """Why the run stopped repeating itself."""

    why: str


@dataclass(slots=True)
class RefineState(Serial):
    """Everything a refine run knows; a checkpoint after each attempt stores it for a resume."""

    task: str
    lessons: list[Lesson] = field(default_factory=list)
    attempts: int = 0
    recent: list[str] = field(default_factory=list)
    """The latest RECENT candidates, the last one the output: enough to see a repeat or an undone revision,
    and a checkpoint stays the same size however long the run is."""
    history: list[tuple[str, str]] = field(default_factory=list)
    """(candidate, feedback) for every checked attempt, kept only for the `full` context strategy (which
    shows them all)."""
    revising: tuple[str, str] | None = None
    """The candidate to revise next and its feedback; None after a FAIL (start fresh)."""
    best: tuple[str, Verdict] | None = None
    first_attempt_tokens: int = 0
    resampled: bool = False
    """The run already spent its one sampled attempt on a revision that repeated itself."""
    sample_next: bool = False
    samples: int = 0
    """Sampled attempts so far: each one after the first is drawn at another seed."""
    repairing: tuple[str, RepairKind, int] | None = None
    """The next attempt's repair, for the session's repair policy to record: failure class, repair, and the
    run's tokens before it."""
    cut_at: int = 0
    """The token cap the last reply was cut at (REPLY_CUT), told to the next attempt; 0 when it was not cut."""
    selecting: list[tuple[str, Verdict]] = field(default_factory=list)
    """select=K: the candidates drawn so far, with their verdicts, until the selection is made."""
    selected: bool = False
    """select=K: the K candidates were drawn (and one chosen if any passed): the loop goes on as usual."""

    def outcome(self, episode: Episode) -> Outcome:
        total = episode.run.meter.total.total_tokens
        return Outcome(self.recent[-1] if self.recent else None, self.best[0] if self.best else None,
                       self.best[1] if self.best else None, self.attempts,
                       retried=self.attempts > 1, retry_tokens=total - self.first_attempt_tokens)


def refine(task: str, checks: CheckLike | Iterable[CheckLike], *, session: Session | None = None,
           budget: Budget = Budget(), max_attempts: int = MAX_ATTEMPTS, context: ContextStrategy = "feedback",
           lessons: Sequence[Lesson] = (), max_reply_tokens: int = 512, temperature: float = 0.0,
           repairs: Repairs = "fixed", select: int = 1, prelude: str = "", family: str = "refine",
           meta: dict[str, Any] | None = None, resume: str | None = None) -> Result:
    """Attempt `task` until every check passes or `max_attempts` or the budget is spent; never raises for
    a spent budget. `checks` is one check or a list; a check is a `Check` or a plain function
    `candidate -> bool | str | Signal` (a string says what is wrong).

    The checks decide PASS, NEEDS_IMPROVEMENT (revise the latest candidate with its feedback) or FAIL
    (start fresh from the task plus the lessons so far). A failure goes through the reflection engine: the
    reflector turns it into a lesson (within budget.max_reflections, default 2; 0 turns reflection off);
    when the quota is spent, the raw signals are the feedback. `context` says what a revision
    sees: "feedback" (the default) the task and how the latest candidate failed, without its code (a small
    model shown its failed code copies it); "latest" that candidate and its feedback, to revise; "full"
    every earlier attempt (a fresh start shows the task and the lessons under each). `lessons` are carried in
    from earlier trials. `repairs` says how a failure is repaired (see `Repairs`): with "fixed" (the default)
    a failed revision is followed by a fresh attempt sampled at RESAMPLE_TEMPERATURE, and no lesson is
    bought for it (it would not be shown one); with "revise", only a revision that repeats itself is, once,
    before the run stops NO_PROGRESS; "learn" and "frozen" choose by the store's record of what converted
    (a session's own `repairs` policy wins). The session's governor may cut retries for a `family` of tasks
    where they have not paid. `select=K` (K > 1) first draws K candidates (the first greedy, the others
    sampled) and checks each; of those that pass, the one whose behaviour on calls the model writes most
    others share is chosen (loops/select.py; `prelude` goes before each candidate there, as in the checks);
    when none passes, the best is revised and the loop goes on with `max_attempts - 1` attempts more.
    `meta` is stored with the run. `resume=RUN_ID` continues a stored run from its last checkpoint.
    """
    checking = as_checks(checks)
    if not checking:
        raise ConfigError("refine needs at least one check", hint="give tests, a command, a schema or a judge")
    if context not in CONTEXTS:
        raise ConfigError(f"context must be one of {', '.join(CONTEXTS)}, not {context!r}")
    if repairs not in REPAIRS:
        raise ConfigError(f"repairs must be one of {', '.join(REPAIRS)}, not {repairs!r}")
    if not 1 <= select <= MAX_SELECT:
        raise ConfigError(f"select must be 1 to {MAX_SELECT}, not {select}")
    session = session or Session()
    if repairs in ("learn", "frozen") and session.repairs is None:
        from ..reflect.repairs import RepairPolicy

        session = replace(session, repairs=RepairPolicy(session.store, frozen=repairs == "frozen"))
    state = RefineState(task, list(lessons))

    def body(ep: Episode, s: RefineState) -> Stop:
        selecting = select > 1 and not s.selected
        if selecting and (stop := _select(ep, s, checking, select, prelude, max_reply_tokens, temperature)):
            return stop
        return _attempts(ep, s, checking, context, max_reply_tokens, temperature, repairs)

    return run_loop(session, "refine", task, state, body, budget=budget, bound=max_attempts + select - 1,
                    family=family, resume=resume,
                    meta={"context": context, "checks": [c.name for c in checking], **(meta or {})})


def _select(ep: Episode, s: RefineState, checks: Sequence[Check], k: int, prelude: str, reply_tokens: int,
            temperature: float) -> Stop | None:
    """Draw K candidates, then choose among those that pass by behaviour; a Stop when one passed (or the
    budget ran out). Otherwise the best one is left to revise and the usual loop goes on."""
    run = ep.run
    check_context = CheckContext(s.task, ask=run.call)
    while len(s.selecting) < k:
        s.sample_next = bool(s.selecting)  # the first greedy, the others sampled at their own seeds
        tried = _attempt(ep, s, checks, check_context, "feedback", reply_tokens, temperature)
        if tried is None:
            return Stop(run.budget_stop or StopReason.ERROR)
        s.selecting.append(tried)
        if s.best is None or tried[1].better_than(s.best[1]):
            s.best = tried
        ep.checkpoint(s)
    s.selected = True
    passing = [i for i, (_, verdict) in enumerate(s.selecting) if not verdict.failing]
    if not passing:
        # The best is revised next, with its feedback: the usual loop, from a failed attempt.
        candidate, verdict = s.best  # type: ignore[misc]
        s.revising = (candidate, f"{verdict.feedback}\n{_evidence(verdict)}")
        ep.checkpoint(s)
        return None
    codes = [preluded(prelude, s.selecting[i][0]) for i in passing]
    name = select_by.entry_name(s.task, codes) if len(passing) > 1 else None
    calls = select_by.probe_calls(run, s.task, name) if name else []
    chosen, clusters = select_by.choose(codes, calls) if calls else (0, [])
    run.record(Selected([i + 1 for i in passing], calls, clusters, passing[chosen] + 1))
    s.best = s.selecting[passing[chosen]]
    ep.checkpoint(s)
    verdict = s.best[1]
    return Stop(StopReason.PASSED if verdict.objective else StopReason.ANSWERED_UNVERIFIED)


def _attempts(ep: Episode, s: RefineState, checks: Sequence[Check], context: ContextStrategy, reply_tokens: int,
              temperature: float, repairs: Repairs) -> Stop:
    """The loop itself: attempt, check, then stop, revise or restart."""
    run, engine = ep.run, ep.engine
    check_context = CheckContext(s.task, ask=run.call)
    while s.attempts < ep.bound:
        revised = s.revising is not None
        kind: AttemptKind = "revision" if revised else "sample" if s.sample_next else "first"
        tried = _attempt(ep, s, checks, check_context, context, reply_tokens, temperature)
        if tried is None:
            return Stop(run.budget_stop or StopReason.ERROR)
        candidate, verdict = tried
        if s.attempts == 1:
            s.first_attempt_tokens = run.meter.total.total_tokens
        if s.best is None or verdict.better_than(s.best[1]):
            s.best = (candidate, verdict)
        failing = engine.gate(s.attempts, verdict.signals)
        _record_repair(ep, s, converted=not failing)
        if not failing:
            return Stop(StopReason.PASSED if verdict.objective else StopReason.ANSWERED_UNVERIFIED)
        if failing[0].code is ErrorCode.REPLY_CUT:  # nothing to learn about the code: ask for a shorter reply
            if (stop := _ask_shorter(ep, s, failing[0], candidate, reply_tokens)) is not None:
                return stop
            continue
        klass = failure_class(failing[0], kind)
        if why := engine.progress.stalled(s.recent, frozenset(x.fingerprint for x in verdict.failing)):
            if s.resampled or s.attempts == ep.bound:
                run.record(NoProgress(why))
                return Stop(StopReason.NO_PROGRESS)
            _resample_after_stall(ep, s, why, klass)
            continue
        if len(s.recent) >= 3 and same(candidate, s.recent[-3]):
            run.record(Flag("this revision undoes the previous one"))
        if s.attempts == ep.bound:
            break  # no attempt left to use a lesson: reflecting now would waste tokens
        failure = verdict.failing[0]
        evidence = _evidence(verdict)
        if verdict.status is not Status.FAIL and _repair(ep, klass, revised, repairs, s.task) == "sample":
            # A fresh, sampled attempt follows, and it is not shown a revision's lesson (see
            # RESAMPLE_TEMPERATURE), so none is bought.
            s.history += [(candidate, f"{verdict.feedback}\n{evidence}")] if context == "full" else []
            s.revising, s.sample_next, s.repairing = None, True, (klass, "sample", run.meter.total.total_tokens)
            ep.checkpoint(s)
            continue
        tokens_before = run.meter.total.total_tokens  # a reflection bought for the revision is part of its cost
        outcome = engine.handle(failure, task=s.task, facts=[], action=candidate, snippet=evidence,
                                rule_facts=Facts(retryable=False))
        if outcome.stop is not None:
            return Stop(outcome.stop, outcome.reason)
        lesson = outcome.lesson or signal_lesson(s.attempts, failure)
        feedback = f"{verdict.feedback}\n{evidence}\n{lesson.render()}"
        s.history += [(candidate, feedback)] if context == "full" else []  # only `full` shows them
        if verdict.status is Status.FAIL:
            s.lessons = [*s.lessons, lesson][-MAX_LESSONS:]
            s.revising = None
        else:
            s.revising = (candidate, feedback)
            s.repairing = (klass, "revise", tokens_before)
        ep.checkpoint(s)
    return Stop(StopReason.MAX_ITERATIONS)


def _ask_shorter(ep: Episode, s: RefineState, failure: Signal, candidate: str, reply_tokens: int) -> Stop | None:
    """After a reply cut at the token cap: the next attempt is fresh and asked to be shorter. A stop when
    no attempt is left or the engine stops the run, else None."""
    if s.attempts == ep.bound:
        return Stop(StopReason.MAX_ITERATIONS)
    outcome = ep.engine.handle(failure, task=s.task, facts=[], action=candidate, snippet="",
                               rule_facts=Facts(retryable=False))
    if outcome.stop is not None:
        return Stop(outcome.stop, outcome.reason)
    s.cut_at, s.revising = reply_tokens, None
    ep.checkpoint(s)
    return None


def _resample_after_stall(ep: Episode, s: RefineState, why: str, klass: str) -> None:
    """Greedy decoding would repeat itself again: one fresh attempt, sampled, is cheaper than giving up."""
    ep.run.record(Flag(f"{why}: one fresh attempt, sampled at temperature {RESAMPLE_TEMPERATURE}"))
    s.resampled = s.sample_next = True
    s.revising, s.repairing = None, (klass, "sample", ep.run.meter.total.total_tokens)
    ep.checkpoint(s)


def _repair(ep: Episode, klass: str, revised: bool, repairs: Repairs, task: str) -> RepairKind:
    """How the next attempt repairs a failure that can be revised: by the session's repair policy, else by
    the fixed rule (a fresh sample after a failed revision) or, with `revise`, by revising."""
    policy = ep.session.repairs
    if policy is None:
        return "sample" if revised and repairs == "fixed" else "revise"
    choice = policy.choose(ep.roi_model, ep.family, klass, task)
    ep.run.record(RepairChosen(choice.klass, choice.repair, choice.why))
    return choice.repair


def _record_repair(ep: Episode, s: RefineState, *, converted: bool) -> None:
    """Tell the session's repair policy what the attempt just checked, if a repair bought it, came to. A run
    killed between this and its next checkpoint counts the attempt again when resumed: the record is a rate,
    and one try more or less moves it little."""
    if s.repairing is not None and ep.session.repairs is not None:
        klass, repair, before = s.repairing
        ep.session.repairs.record(ep.roi_model, ep.family, klass, repair, converted=converted,
                                  tokens=ep.run.meter.total.total_tokens - before)
    s.repairing = None


def _attempt(ep: Episode, s: RefineState, checks: Sequence[Check], check_context: CheckContext,
             context: ContextStrategy, reply_tokens: int, temperature: float) -> tuple[str, Verdict] | None:
    """One attempt, recorded and checked: the candidate and its verdict, or None when the model call was
    refused (a spent budget) or failed."""
    run = ep.run
    sampled, s.sample_next = s.sample_next, False
    attempt_at = time.time()  # the attempt step spans its model call and the parsing of the reply
    note = prompts.SHORTER.format(tokens=s.cut_at) if s.cut_at else ""
    reply = run.call(Role.GENERATOR, prompts.messages(s.task, s.lessons, s.revising, s.history, context, note),
                     max_tokens=reply_tokens, temperature=RESAMPLE_TEMPERATURE if sampled else temperature,
                     seed_offset=s.samples)
    s.samples += sampled
    if reply is None:
        return None
    s.cut_at = 0
    plan_text, candidate = prompts.split_reply(reply.text)
    s.attempts, s.recent = s.attempts + 1, [*s.recent[1 - RECENT:], candidate]
    run.record(Attempt(s.attempts, s.revising is not None, plan_text, candidate), Role.GENERATOR,
               started_at=attempt_at)
    checked_at = time.time()  # the verdict step spans the checks: a trace (and a tracer) shows their time
    stored = run.stored(Checked.KIND)  # a resumed run reads a stored verdict back, never checks again
    if isinstance(stored, Checked):
        verdict = stored.verdict
    elif prompts.cut_off(reply.text, reply.truncated):  # a half-written candidate is not worth checking
        verdict = verdict_from([Signal("reply", False, ErrorCode.REPLY_CUT, f"the reply was cut off at "
                                       f"{reply_tokens} tokens before its code ended", score=0.0)])
    else:
        run.status("running checks")
        verdict = run_checks(checks, candidate, check_context)
    run.record(Checked(verdict), Role.EVALUATOR, started_at=checked_at)
    return candidate, verdict


def signal_lesson(attempt: int, failure: Signal) -> Lesson:
    """The lesson an attempt gets when the engine keeps none (no reflection, or a lesson discarded): the
    failure itself."""
    return Lesson(f"attempt {attempt}", failure.message, failure.code or "check failed", f"make {failure.source} pass")


def _evidence(verdict: Verdict, limit: int = 600) -> str:
    evidence = "\n".join(s.evidence for s in verdict.failing if s.evidence)
    return f"Output:\n<<<\n{fence_untrusted(evidence[-limit:])}\n>>>" if evidence else ""
