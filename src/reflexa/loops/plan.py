"""`plan`: a loop over loops. A validated goal tree (from the planner, or given), each sub-goal a child run
(`react` by default, `refine` or `research` where the sub-goal says so) in dependency order, under one
budget and one trace.

    task ─planner─> goal tree ─validate─> (one re-ask with the errors) ─> UNRECOVERABLE
                          │
              for each ready sub-goal:  memory (the task's facts, dependencies' answers) + lessons so far
                          └─> child run ─> passed/answered: its answer becomes a fact of its dependents
                                       └─> failed: one replan of it, else its dependents are skipped
                                       └─> controls its reflection learnt (and unrecoverable tool errors)
                                           block that tool or value in every later unit
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any

from pydantic import AliasChoices, Field

from ..errors import ConfigError
from ..evaluate.answer import Validator, ValidatorCheck, all_of, as_validator
from ..evaluate.checks import CheckLike
from ..reflect.engine import Decided
from ..runtime import Checkpoint, Stop
from ..search.base import SearchBackend
from ..tools.registry import Tool, ToolRegistry, ToolSource, interrupted_effects
from ..trace.store import RunRecord
from ..types import (
    Budget,
    Control,
    ErrorCode,
    Lesson,
    Payload,
    Result,
    Role,
    Serial,
    StopReason,
    Usage,
    payload,
)
from . import goals
from . import plan_prompts as prompts
from .goals import GoalTree, Subgoal
from .react import MAX_STEPS, Acted, react
from .session import Episode, Outcome, Session, awaiting, find_child, run_loop, widened

PLAN_TOKENS = 768
"""The planner's reply is capped at this many tokens: about 8 sub-goals of one sentence each."""
MAX_REPLANS = 1
"""Failed sub-goals a plan asks the planner to rewrite, over the whole tree; each is a model call in the budget."""
DONE = ("passed", "answered")
SPENT = (StopReason.BUDGET_TOKENS, StopReason.BUDGET_CALLS, StopReason.TIMEOUT)
WORST_FIRST = (StopReason.ERROR, StopReason.UNRECOVERABLE, *SPENT, StopReason.NO_PROGRESS, StopReason.MAX_ITERATIONS,
               StopReason.INTERRUPTED, StopReason.ANSWERED_UNVERIFIED, StopReason.PASSED)
"""How a failed tree's stop reason is chosen: the worst of its failed sub-goals' reasons."""
REPLANNABLE = (StopReason.UNRECOVERABLE, StopReason.NO_PROGRESS, StopReason.MAX_ITERATIONS)


@payload("plan_tree")
@dataclass(slots=True)
class PlanMade(Payload):
    """The goal tree as it will run: given (a file, plain data), from the planner, or after a replan."""

    source: str
    tree: dict[str, Any]
    errors: list[str] = field(default_factory=list)
    """What was wrong with the planner's first reply, when the re-ask fixed it."""
    checkpoint: Checkpoint | None = None


@payload("plan_rejected")
@dataclass(slots=True)
class PlanRejected(Payload):
    """The planner's last tree, which cannot run, and why: what a reader needs to see before the stop."""

    tree: dict[str, Any] | None
    """None when the reply held no tree at all."""
    errors: list[str]


@payload("subgoal")
@dataclass(slots=True)
class UnitStatus(Payload):
    """One sub-goal's status change, with the plan's state after it in the same row."""

    name: str
    status: str
    run_id: str | None = None
    stop_reason: StopReason | None = None
    answer: str | None = None
    reason: str = ""
    checkpoint: Checkpoint | None = None


@payload("propagated")
@dataclass(slots=True)
class Propagated(Payload):
    """A control learnt in one unit, now applied to every later unit, with the lesson it came from."""

    origin: str
    run_id: str
    lesson: Lesson


@dataclass(slots=True)
class Unit(Serial):
    """A sub-goal's progress: pending, running, passed, answered (unverified), failed or skipped."""

    name: str
    status: str = "pending"
    run_id: str | None = None
    stop_reason: StopReason | None = None
    answer: str | None = None
    reason: str = ""
    attempts: int = 0


@dataclass(slots=True)
class PlanState(Serial):
    """The plan's whole state: the tree, each unit's progress, the cross-unit memory and lessons."""

    task: Annotated[str, Field(validation_alias=AliasChoices("task", "request"))]
    """The whole task (a checkpoint written before the field was named so holds it as `request`)."""
    facts: list[str] = field(default_factory=list)
    """Global memory: the task's facts; every unit starts with them (and its dependencies' answers)."""
    tree: dict[str, Any] | None = None
    units: list[Unit] = field(default_factory=list)
    lessons: list[Lesson] = field(default_factory=list)
    """Lessons with a control, propagated to every later unit."""
    spent: dict[str, Usage] = field(default_factory=dict)
    """What the finished units spent, per role (a resume adds it back to the meter)."""
    seconds: float = 0.0
    """The time the finished units took (a resume adds it back to the time budget)."""
    replans: int = 0
    budget_stop: StopReason | None = None

    def unit(self, name: str) -> Unit:
        return next(u for u in self.units if u.name == name)

    def outcome(self, episode: Episode) -> Outcome:
        answered = [u for u in self.units if u.answer is not None and u.status in DONE]
        sinks = GoalTree.model_validate(self.tree).sinks() if self.tree else []
        whole = len(sinks) == 1 and any(u.name == sinks[0] for u in answered)
        output = (self.unit(sinks[0]).answer if whole
                  else "\n".join(f"{u.name}: {u.answer}" for u in answered) or None)
        every = bool(self.units) and all(u.status == "passed" for u in self.units)
        details = {"tree": self.tree, "subgoals": [u.to_dict() for u in self.units],
                   "lessons": [asdict(lesson) for lesson in self.lessons]}
        return Outcome(output, output if every else None, iterations=sum(u.attempts for u in self.units),
                       details=details, retried=self.replans > 0)


@dataclass(slots=True)
class Context:
    """What the plan's body needs besides its state: fixed for the run."""

    session: Session
    registry: ToolRegistry
    given: GoalTree | None
    max_steps: int
    validator: Validator | None
    db: Path | None
    search: SearchBackend | None
    replan: bool
    meta: dict[str, Any]


@dataclass(slots=True)
class Ran:
    """How one child run ended (live, or read back from the store on a resume)."""

    run_id: str
    stop_reason: StopReason
    output: str | None
    error: str | None
    usage: dict[str, Usage]

    @classmethod
    def of(cls, result: Result) -> Ran:
        return cls(result.run_id, result.stop_reason, result.output, result.error, dict(result.usage))

    @classmethod
    def stored(cls, record: RunRecord) -> Ran:
        data = record.result or {}
        usage = {role: Usage(u["input_tokens"], u["output_tokens"], u["calls"]) for role, u in data["usage"].items()}
        return cls(record.run_id, StopReason(record.stop_reason or "ERROR"), data.get("output"), data.get("error"),
                   usage)


def plan(task: str, tools: ToolRegistry | Sequence[Tool | ToolSource], *, session: Session | None = None,
         budget: Budget = Budget(), tree: GoalTree | Mapping[str, Any] | Path | None = None,
         max_subgoals: int = goals.MAX_SUBGOALS, max_steps: int = MAX_STEPS,
         validator: Validator | CheckLike | None = None,
         facts: Sequence[str] = (), db: str | Path | None = None, search: SearchBackend | None = None,
         replan: bool = True, meta: dict[str, Any] | None = None, resume: str | None = None) -> Result:
    """Break `task` into a goal tree and run each sub-goal as a child run, in dependency order.

    The planner writes the tree unless `tree` gives it (a GoalTree, plain data or a JSON file: checked
    before any model call, ConfigError when it cannot run). One `budget` covers the planner, every unit
    and the replan; each unit takes at most `max_steps` steps. `facts` are global memory (e.g. "budget
    5,000 EUR"): with the answers of a unit's dependencies they fill its memory slots when it starts.
    `validator` (as react's) checks the answer of every sub-goal no other depends on, besides its own check; `db` is
    the database SQL checks run on, `search` the backend of research units. A failed sub-goal is
    replanned once (`replan`), else its dependents are skipped; independent branches go on. A control
    learnt in one unit (a blocked tool or value, a forced action), and an unrecoverable tool error, are
    applied to every later unit. PASSED only when every sub-goal passed an objective check;
    ANSWERED_UNVERIFIED when all answered and some were unchecked; else the worst unit's reason, with the
    answers so far as the output. `resume=RUN_ID` continues a killed plan: finished sub-goals are skipped,
    an unfinished child run is resumed (so no side effect is repeated)."""
    registry = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools)
    session = session or Session()
    db_path = Path(db) if db is not None else None
    if tree is None and resume is not None and (record := session.store.get_run(resume)) is not None:
        tree = record.meta.get("tree")  # a given tree, in case the plan was killed before it recorded it
    given = None if tree is None else goals.load(tree, registry.tools, max_subgoals=max_subgoals, db=db_path,
                                                 search=search is not None)
    # A unit's run carries the plan's labels (a batch's), not the plan's own spec: it is no plan to resume.
    child_meta = {key: value for key, value in (meta or {}).items() if key != "spec"}
    ctx = Context(session, registry, given, max_steps, as_validator(validator, task), db_path, search, replan,
                  child_meta)
    run_meta = {"max_steps": max_steps, **({"tree": given.model_dump()} if given else {}), **(meta or {})}
    return run_loop(session, "plan", task, PlanState(task, list(facts)), lambda ep, s: _plan(ep, s, ctx),
                    budget=budget, bound=max_subgoals, cut="reflections", reflect=False, meta=run_meta,
                    resume=resume)


def _plan(ep: Episode, s: PlanState, ctx: Context) -> Stop:
    """The loop itself: make the tree, then run each ready sub-goal until none is left or the budget is."""
    run = ep.run
    for role, usage in s.spent.items():  # a resumed plan: what its finished units spent
        run.meter.record(role, usage)
    run.meter.started -= s.seconds
    if s.tree is None:
        made = ctx.given or _planned(ep, s, ctx)
        if isinstance(made, Stop):
            return made
        s.tree, s.units = made.model_dump(), [Unit(name) for name in goals.order(made)]
        s.facts = [*s.facts, *(f for f in made.facts if f not in s.facts)]
        run.record(PlanMade("given" if ctx.given else "planner", s.tree, checkpoint=ep.snapshot(s)))
    while (unit := _ready(s)) is not None:
        if (spent := run.meter.check()) is not None:
            s.budget_stop = spent
            break
        tree = GoalTree.model_validate(s.tree)
        resumed = unit.status == "running"
        if not resumed:
            unit.attempts += 1
            _status(ep, s, unit, "running")
        started = time.monotonic()
        ran = _run_unit(ep, s, tree, unit, ctx, resumed)
        if ran.stop_reason is StopReason.AWAITING_APPROVAL:  # the unit stays running: a resume resumes its run
            return Stop(ran.stop_reason, f"sub-goal {unit.name}: " + awaiting(ran.error, ran.run_id, run.run_id))
        s.seconds += time.monotonic() - started
        for role, usage in ran.usage.items():
            run.meter.record(role, usage)
            s.spent.setdefault(role, Usage()).add(usage)
        _propagate(ep, s, unit.name, ran.run_id)
        _settle(ep, s, tree, unit, ran, ctx)
    return _overall(s)


def _planned(ep: Episode, s: PlanState, ctx: Context) -> GoalTree | Stop:
    """The planner's tree, validated in code, with one re-ask naming every problem."""
    messages = prompts.plan_messages(s.task, ctx.registry.describe())
    first: list[str] = []
    for _ in (1, 2):
        reply = ep.run.call(Role.PLANNER, messages, schema=goals.Planned, max_tokens=PLAN_TOKENS, reask=False)
        if reply is None:
            return Stop(ep.run.budget_stop or StopReason.ERROR)
        tree, errors = goals.parse(reply.value, planned=True) if reply.value is not None else (None, [
            reply.error or "no plan in the reply"])
        mended: list[str] = []
        if tree is not None:
            tree, mended = goals.mend(tree, ctx.registry.tools)
            errors = goals.problems(tree, ctx.registry.tools, max_subgoals=ep.bound, db=ctx.db,
                                    search=ctx.search is not None)
        if tree is not None and not errors:
            if first or mended:
                ep.run.record(PlanMade("planner re-asked" if first else "planner, mended by rule", tree.model_dump(),
                                       first or mended))
            return tree
        first = first or errors
        messages = prompts.reask(messages, reply.text, errors)
    ep.run.record(PlanRejected(tree.model_dump() if tree is not None else None, errors))
    return Stop(StopReason.UNRECOVERABLE, "the planner's plan cannot run: " + "; ".join(errors)[:400])


def _ready(s: PlanState) -> Unit | None:
    """The next sub-goal to run: a running one (a resume), else the first pending one whose dependencies
    all answered. None when nothing is left, or the budget is spent."""
    if s.budget_stop is not None or s.tree is None:
        return None
    tree = GoalTree.model_validate(s.tree)
    for unit in s.units:
        deps = tree.get(unit.name).depends_on
        if unit.status == "running" or (unit.status == "pending" and all(s.unit(d).status in DONE for d in deps)):
            return unit
    return None


def _status(ep: Episode, s: PlanState, unit: Unit, status: str, reason: str = "") -> None:
    unit.status, unit.reason = status, reason or unit.reason
    ep.run.record(UnitStatus(unit.name, status, unit.run_id, unit.stop_reason, unit.answer, unit.reason,
                             ep.snapshot(s)))


def _run_unit(ep: Episode, s: PlanState, tree: GoalTree, unit: Unit, ctx: Context, resumed: bool) -> Ran:
    """One child run for `unit`: a resumed plan resumes the unit's unfinished run, or reads a finished one."""
    sub = tree.get(unit.name)
    child = find_child(ep.run, parent=ep.run.run_id, subgoal=unit.name, attempt=unit.attempts) if resumed else None
    if child is not None and child.status == "finished":
        return Ran.stored(child)
    budget = ep.run.meter.remaining()
    if child is not None:  # the resumed child counts what it spent before the kill itself
        budget = widened(budget, Usage.total(st.usage for st in ep.run.store.steps(child.run_id) if st.role))
    meta = {**ctx.meta, "parent": ep.run.run_id, "subgoal": unit.name, "attempt": unit.attempts}
    checks = [v for v in (goals.validator(sub.check, ctx.db) if sub.check else None,
                          ctx.validator if sub.name in tree.sinks() else None) if v is not None]
    memory = _memory(s, tree, sub)
    resume = child.run_id if child is not None else None
    if sub.loop == "refine":
        from .refine import refine

        check = all_of(checks)
        if check is None:  # the tree's validation requires a check of a refine unit
            raise ConfigError(f"refine sub-goal {sub.name} has no check")
        result = refine(_with_memory(sub.task, memory), [ValidatorCheck(check)], session=ctx.session,
                        budget=budget, lessons=s.lessons, meta=meta, resume=resume)
    elif sub.loop == "research":
        from .research import research

        if ctx.search is None:  # the tree's validation requires it
            raise ConfigError(f"research sub-goal {sub.name} has no search backend")
        result = _checked(research(_with_memory(sub.task, memory), ctx.search, session=ctx.session, budget=budget,
                                   meta=meta, resume=resume), all_of(checks))
    else:
        registry = _unit_tools(s, sub, ctx.registry)
        lessons = [lesson for lesson in s.lessons if lesson.control is None or lesson.control.kind != "force_action"
                   or lesson.control.tool in registry.tools]
        result = react(sub.task, registry, session=ctx.session, budget=budget, max_steps=ctx.max_steps,
                       validator=all_of(checks), lessons=lessons, memory=memory, meta=meta, resume=resume)
    return Ran.of(result)


def _checked(result: Result, check: Validator | None) -> Result:
    """A research unit's result judged by the unit's check (research takes none itself): its answer passes
    the check, or the unit failed, whatever the citation audit said."""
    answer = result.details.get("answer") if result.output is not None else None
    if check is None or answer is None:
        return result
    if (why := check(answer)) is None:
        return replace(result, stop_reason=StopReason.PASSED)
    return replace(result, stop_reason=StopReason.UNRECOVERABLE, error=f"the answer failed its check: {why}")


def _memory(s: PlanState, tree: GoalTree, sub: Subgoal) -> list[str]:
    """The unit's memory slots, most needed first: its dependencies' answers, the task's facts, then
    other finished units' answers (the workspace keeps as many as its caps allow)."""
    def card(name: str) -> str:
        return f"{name} ({tree.get(name).task[:80]}) = {s.unit(name).answer}"

    deps = [card(d) for d in sub.depends_on if s.unit(d).answer is not None]
    others = [card(u.name) for u in s.units if u.status in DONE and u.answer is not None
              and u.name not in sub.depends_on]
    return [*deps, *s.facts, *others]


def _with_memory(task: str, memory: list[str]) -> str:
    """A refine or research unit has no memory slots: the same capped cards go after its task."""
    from ..reflect.workspace import Workspace

    workspace = Workspace(task)
    workspace.remember(memory)
    return task + ("\n\nKnown:\n" + "\n".join(f"- {m}" for m in workspace.memory) if workspace.memory else "")


def _unit_tools(s: PlanState, sub: Subgoal, registry: ToolRegistry) -> ToolRegistry:
    """The sub-goal's tools, less every tool an earlier unit blocked: a later unit is never offered it."""
    blocked = {lesson.control.tool for lesson in s.lessons if lesson.control and lesson.control.kind == "block_tool"}
    names = [n for n in (sub.tools if sub.tools is not None else registry.tools) if n not in blocked]
    return ToolRegistry([registry.tools[n] for n in names])


def _propagate(ep: Episode, s: PlanState, origin: str, run_id: str) -> None:
    """Record at the tree level each control the child learnt, and each unrecoverable tool error."""
    last: Acted | None = None
    for step in ep.run.store.steps(run_id):
        data = step.payload()
        if isinstance(data, Acted):
            last = data
        if not isinstance(data, Decided):
            continue
        lesson = data.lesson if data.lesson is not None and data.lesson.control is not None else None
        if lesson is None and data.stop is StopReason.UNRECOVERABLE and data.signal.source.startswith("tool:"):
            lesson = _unrecoverable(origin, data, last)
        if lesson is not None and lesson.control not in [known.control for known in s.lessons]:
            s.lessons.append(lesson)
            ep.run.record(Propagated(origin, run_id, lesson))


def _unrecoverable(origin: str, decided: Decided, acted: Acted | None) -> Lesson:
    """A lesson for an unrecoverable tool error: block the one argument value a call with one argument was
    refused for (permission, not found), else the whole tool (the tool itself says it cannot work)."""
    tool = decided.signal.source.removeprefix("tool:")
    args: dict[str, Any] = {}
    if acted is not None and acted.action.startswith(f"{tool}("):
        try:
            args = json.loads(acted.action[len(tool) + 1 : -1])
        except ValueError:
            args = {}
    if decided.signal.code is not ErrorCode.TOOL_ERROR and len(args) == 1:
        (arg, value), = args.items()
        control = Control("block_value", tool, arg, str(value))
        correction = f"do not call {tool} with {arg}={str(value)[:120]!r}"
    else:
        control, correction = Control("block_tool", tool), f"do not call {tool}: it failed for good"
    return Lesson(f"sub-goal {origin}: {decided.action}", decided.signal.message, decided.reason, correction, control)


def _settle(ep: Episode, s: PlanState, tree: GoalTree, unit: Unit, ran: Ran, ctx: Context) -> None:
    """A finished unit's status; a failed one is replanned once, or its dependents are skipped (every
    sub-goal left, when the unit was killed inside a side-effecting call)."""
    unit.run_id, unit.stop_reason, unit.answer = ran.run_id, ran.stop_reason, ran.output
    if ran.stop_reason in (StopReason.PASSED, StopReason.ANSWERED_UNVERIFIED):
        _status(ep, s, unit, "passed" if ran.stop_reason is StopReason.PASSED else "answered", "")
        return
    reason = f"{ran.stop_reason}" + (f": {ran.error}" if ran.error else "")
    if ran.stop_reason in SPENT:
        s.budget_stop = ran.stop_reason
    if interrupted_effects(ep.run.store, ran.run_id):
        # A side effect of unknown outcome needs a human before anything else acts (react stops the same way):
        # no replan, and no other sub-goal starts.
        _status(ep, s, unit, "failed", reason)
        for other in s.units:
            if other.status == "pending":
                _status(ep, s, other, "skipped", f"sub-goal {unit.name} has a side effect to check by hand first")
        return
    if ran.stop_reason in REPLANNABLE and ctx.replan and s.replans < MAX_REPLANS and _replan(ep, s, tree, unit,
                                                                                            reason, ctx):
        return
    _status(ep, s, unit, "failed", reason)
    for name in tree.dependents(unit.name):
        if s.unit(name).status == "pending":
            _status(ep, s, s.unit(name), "skipped", f"dependency {unit.name} failed ({ran.stop_reason})")


def _replan(ep: Episode, s: PlanState, tree: GoalTree, unit: Unit, reason: str, ctx: Context) -> bool:
    """Ask the planner once for a new task (and tools) for the failed sub-goal; True when it will run again."""
    s.replans += 1
    sub = tree.get(unit.name)
    blocked = sorted({lesson.control.tool for lesson in s.lessons
                      if lesson.control and lesson.control.kind == "block_tool"})
    messages = prompts.replan_messages(s.task, ctx.registry.describe(), name=sub.name, subgoal=sub.task,
                                       reason=reason, blocked=blocked)
    reply = ep.run.call(Role.PLANNER, messages, schema=prompts.Replanned, max_tokens=256)
    value = reply.value if reply is not None else None
    if value is None or any(t not in ctx.registry.tools or t in blocked for t in value.tools or []):
        return False
    new = sub.model_copy(update={"task": value.task, "tools": value.tools})
    s.tree = tree.model_copy(update={"subgoals": [new if x.name == sub.name else x
                                                  for x in tree.subgoals]}).model_dump()
    unit.answer = None
    _status(ep, s, unit, "pending", f"replanned after {reason}"[:300])
    ep.run.record(PlanMade("replan", s.tree, checkpoint=ep.snapshot(s)))
    return True


def _overall(s: PlanState) -> Stop:
    """PASSED when every sub-goal passed an objective check; ANSWERED_UNVERIFIED when every one answered;
    else the spent budget's reason, or the worst failed sub-goal's."""
    statuses = {u.status for u in s.units}
    skipped = [u.name for u in s.units if u.status == "skipped"]
    left = [u.name for u in s.units if u.status == "pending"]
    if s.budget_stop is not None:
        return Stop(s.budget_stop, f"budget spent; not finished: {', '.join(left) or 'none'}")
    if statuses <= {"passed"}:
        return Stop(StopReason.PASSED)
    if statuses <= set(DONE):
        return Stop(StopReason.ANSWERED_UNVERIFIED)
    failed = sorted((u for u in s.units if u.status == "failed"),
                    key=lambda u: WORST_FIRST.index(u.stop_reason or StopReason.ERROR))
    if not failed:  # cannot happen: a unit is skipped only when one it needs failed
        return Stop(StopReason.ERROR, f"plan ended with sub-goals in {sorted(statuses)}")
    worst = failed[0]
    return Stop(worst.stop_reason or StopReason.ERROR, f"sub-goal {worst.name} failed ({worst.reason})"
                + (f"; skipped: {', '.join(skipped)}" if skipped else ""))
