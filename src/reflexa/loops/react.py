"""`react`: tool calls as a state machine, with reflection only on failure signals."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .. import aio
from ..evaluate.answer import Validator, as_validator
from ..evaluate.checks import CheckLike
from ..reflect import Facts, Handling, Workspace
from ..reflect.gate import Similarity, step_signals
from ..runtime import Checkpoint, Stop
from ..tools.approval import AwaitingApproval
from ..tools.registry import (
    Blocks,
    Observation,
    Tool,
    ToolRegistry,
    ToolSession,
    ToolSource,
    effect_tool,
    interrupted_effects,
)
from ..types import Budget, ErrorCode, Lesson, Payload, Result, Role, Serial, Signal, StopReason, Usage, payload
from . import react_prompts as prompts
from .session import Episode, Outcome, Session, run_loop

MAX_STEPS = 8
"""Steps a react run takes at most by default."""


@dataclass(slots=True)
class ToolCall(Serial):
    """Call a tool with arguments."""

    tool: str
    args: dict[str, Any]
    kind: Literal["call"] = "call"


@dataclass(slots=True)
class PageAction(Serial):
    """Show the next page of a tool's last truncated output, without running the tool again."""

    tool: str
    page: int
    kind: Literal["page"] = "page"


@dataclass(slots=True)
class Invalid(Serial):
    """A reply that named no usable action, even after the re-ask."""

    error: str
    kind: Literal["invalid"] = "invalid"


@dataclass(slots=True)
class FinalAnswer(Serial):
    """The answer; checked by the validator when there is one."""

    answer: str
    kind: Literal["final"] = "final"


Action = ToolCall | PageAction | Invalid | FinalAnswer


@dataclass(slots=True)
class Chosen(Serial):
    """The next action, who chose it, and the model's own words about it."""

    action: Action
    thought: str = ""
    confidence: float | None = None
    by_model: bool = False
    """The model chose it (else a rule, a lesson or a failed reply did, and `thought` is reflexa's note, which
    never counts as a repeated thought)."""
    repairs: str = ""
    """The failed action a rule repair stands in for (a retry, repaired arguments): once this one succeeds,
    that failure leaves the window, so the model does not act on an error already fixed."""


@dataclass(slots=True)
class Undecided(Serial):
    """A failing step the engine has yet to decide on: what `Engine.handle` needs, and the failed action."""

    signal: Signal
    action: str
    snippet: str
    facts: Facts
    failed: Action


@payload("react")
@dataclass(slots=True)
class Acted(Payload):
    """One react step: the thought, the action in its text form, and what came back."""

    step: int
    thought: str
    action: str
    observation: str
    ok: bool
    code: ErrorCode | None = None
    is_final: bool = False
    replayed: bool = False
    superseded: bool = False
    """Resumed with other arguments than the recorded call: run as a new call, not replayed."""
    checkpoint: Checkpoint | None = None
    """The state after this step, in the same committed row: a kill right after it loses nothing."""


@dataclass(slots=True)
class ReactState(Serial):
    """The whole state of a react run, owned here alone; a checkpoint after each step stores it."""

    workspace: Workspace
    step: int = 0
    actions: list[str] = field(default_factory=list)
    thoughts: list[str] = field(default_factory=list)
    retries: dict[str, int] = field(default_factory=dict)
    """Rule-based retries so far, by action (a timeout is retried once, a transient error twice)."""
    blocks: Blocks = field(default_factory=Blocks)
    queued: Chosen | None = None
    """A rule repair or a forced action, taken next instead of asking the model."""
    resting: str | None = None
    """A tool the next step may not call: the last call repeated an earlier call of it (the rule repair for a
    repeated read-only call), whose result is in the facts. The step's prompt says so; the final answer and
    every other tool stay open."""
    noted: list[str] = field(default_factory=list)
    """Repeated calls already pointed out: the same call once more gets one step that may only answer from
    the facts; after that, once more stops the run NO_PROGRESS."""
    answer_now: bool = False
    """The next step may only answer (the repair for circling back to a call already pointed out)."""
    answer_asked: bool = False
    """An answer-only step was given once already."""
    undecided: Undecided | None = None
    """The step's failure, until the engine's decision on it is carried out. It is in the step's own
    checkpoint, so a run killed between the step and that decision redoes the decision on resume instead
    of losing it (a rule repair, a lesson, a stop). A redone reflection finds its lesson in the experience
    library, or calls the reflector again within the quota that already counts the first call."""
    read: list[str] = field(default_factory=list)
    """The words of every tool output so far (lower case): an argument value none of them, nor the goal and
    the tools' own text, holds is a guess (Workspace.guesses)."""
    rejected: list[str] = field(default_factory=list)
    """Final answers the validator rejected (case and spacing aside): one given again is refused as such,
    without asking the validator, so the model hears that it is a repeat."""
    answer: str | None = None
    validated: bool = False

    def outcome(self, episode: Episode) -> Outcome:
        counters = episode.engine.counters
        notes = ([] if self.validated or self.answer is None
                 else ["the final answer was not validated: no validator was given"])
        return Outcome(self.answer, self.answer if self.validated else None, iterations=self.step, notes=notes,
                       details={"rejected": self.rejected} if self.rejected else {},
                       retried=counters.reflector_calls + counters.experience_hits > 0,
                       retry_tokens=episode.run.meter.by_role.get("reflector", Usage()).total_tokens)


def react(task: str, tools: ToolRegistry | Sequence[Tool | ToolSource], *, session: Session | None = None,
          budget: Budget = Budget(), max_steps: int = MAX_STEPS, validator: Validator | CheckLike | None = None,
          lessons: Sequence[Lesson] = (), similarity: Similarity | None = None, family: str = "react",
          memory: Sequence[str] = (), temperature: float = 0.0, seed: int = 0, meta: dict[str, Any] | None = None,
          resume: str | None = None) -> Result:
    """Pursue `task` with `tools` for at most `max_steps` steps.

    Each step the model picks one action with structured output bound to the tools' schemas; a final
    answer is the `final_answer` action. It ends PASSED only when `validator` accepts it, and
    ANSWERED_UNVERIFIED when there is no validator: a function of the answer returning None or True
    when it holds, else False or what is wrong (a string or a Signal), or an objective `Check`.
    `similarity` judges repeated thoughts (default: normalised text; pass
    `reflexa.reflect.embeddings.similarity()` for an embedding model). A step's failure signals go through
    the reflection engine. Every step is stored with a checkpoint of the
    state, so `resume=RUN_ID` continues a killed run without repeating a side-effecting call. `lessons`
    carried in take effect from the first step, controls included (blocks, a forced first action);
    `memory` is outside facts kept in view (see Workspace.memory). `temperature` samples each step (0:
    greedy), at the model's seed plus `seed` (a trial's number: two trials draw two samples).
    """
    registry = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools)
    validate = as_validator(validator, task)
    state = ReactState(Workspace(task))
    state.workspace.remember(list(memory))
    for lesson in lessons:
        state.workspace.apply(lesson)
        if lesson.control is not None:
            state.blocks.apply(lesson.control)
    if (forced := state.workspace.forced) is not None:
        state.workspace.forced = None
        state.queued = Chosen(_action(forced["tool"], forced["args"]), "(forced by a lesson)")

    def body(ep: Episode, s: ReactState) -> Stop:
        tools = ToolSession(registry, ep.run.store, ep.run.run_id, s.blocks, ep.session.approver)
        return _steps(ep, s, tools, validate, similarity, (temperature, seed))

    return run_loop(session or Session(), "react", task, state, body, budget=budget,
                    bound=max_steps, family=family, cut="reflections", meta=meta, resume=resume)


def _steps(ep: Episode, s: ReactState, tools: ToolSession, validator: Validator | None,
           similarity: Similarity | None, sampling: tuple[float, int] = (0.0, 0)) -> Stop:
    """The loop itself: choose, act, gate, and let the engine repair, reflect or stop."""
    run, engine, ws = ep.run, ep.engine, s.workspace
    if unknown := interrupted_effects(run.store, run.run_id):
        # Whatever the model would choose next, an effect of unknown outcome needs a human first.
        return Stop(StopReason.UNRECOVERABLE, f"side-effecting call {effect_tool(unknown[0])} was interrupted "
                    "midway; not repeated, check its effect by hand")
    if s.answer is not None:  # resumed after its accepted final answer was stored: the run had ended
        return Stop(StopReason.PASSED if s.validated else StopReason.ANSWERED_UNVERIFIED)
    # Killed between a failing step and the engine's decision on it: decide now, before the next step.
    if (failure := s.undecided) is not None and (stop := _decide(ep, s, failure, tools)) is not None:
        return stop
    schema = prompts.action_schema(tools.registry)
    given = words(" ".join([s.workspace.task, *s.workspace.memory, tools.registry.describe(),
                            tools.registry.context()]))
    while s.step < ep.bound:
        s.step += 1
        chosen = _next_action(ep, s, tools, schema, sampling)
        if chosen is None:
            return Stop(run.budget_stop or StopReason.ERROR)
        if isinstance(chosen.action, ToolCall):
            run.status(f"tool {chosen.action.tool} running")  # a live view shows it until the step lands
        acted_at = time.time()  # the step spans the tool call: a trace (and a tracer) shows its time
        try:
            action, observation = _carry_out(chosen.action, tools, s.step, validator, s.rejected)
        except AwaitingApproval as waiting:
            # The same call, at the same step, is the first thing a resume does: it then finds its decision.
            s.step, s.queued = s.step - 1, chosen
            ep.checkpoint(s)
            return Stop(StopReason.AWAITING_APPROVAL, str(waiting))
        thought = chosen.thought if chosen.by_model else ""  # a rule's note is no repeated thought
        signals = [] if isinstance(chosen.action, PageAction) else step_signals(
            source=f"tool:{observation.tool}", ok=observation.ok, code=observation.code,
            message=observation.message, truncated=observation.truncated, action=action, thought=thought,
            earlier_actions=s.actions, earlier_thoughts=s.thoughts, confidence=chosen.confidence,
            evidence=observation.shown()[:300], similarity=similarity)
        if observation.ok:
            s.actions.append(action)  # only successful actions count as repeats; failures are the engine's
        s.thoughts.append(thought)
        ws.add_step({"step": s.step, "action": action, "observation": observation.shown()},
                    fixes=chosen.repairs if observation.ok else "")
        final = isinstance(chosen.action, FinalAnswer)
        if final and observation.ok:
            s.answer, s.validated = observation.output, validator is not None
            engine.gate(s.step, [])
            _record(ep, s, chosen, action, observation, acted_at)
            return Stop(StopReason.PASSED if s.validated else StopReason.ANSWERED_UNVERIFIED)
        bad = engine.gate(s.step, signals)
        if observation.ok:  # tool data even when the step raised a signal: a long output's ends, say
            ws.add_fact(f"{action} -> {observation.output}")
        if isinstance(chosen.action, ToolCall) and observation.ok:
            _note_guesses(s, chosen.action, observation.output, given)
        if bad and s.step < ep.bound:  # with no step left, a repair or a lesson would go unused
            s.undecided = Undecided(bad[0], action, observation.shown(), _facts(observation, s, action, tools),
                                    chosen.action)
        _record(ep, s, chosen, action, observation, acted_at)
        if (failure := s.undecided) is not None and (stop := _decide(ep, s, failure, tools)) is not None:
            return stop
    return Stop(StopReason.MAX_ITERATIONS)


READ_WORDS = 20_000
"""Distinct words of tool output kept for telling a guessed argument from a read one."""


def words(text: str) -> set[str]:
    """The lower-case words of a text as an argument value would be written: ids like B-07, dates, numbers."""
    return {w.strip(".-/:") for w in re.findall(r"[\w.\-/:]+", text.lower())} - {""}


def _note_guesses(s: ReactState, call: ToolCall, output: str, given: set[str]) -> None:
    """After a call that worked: mark its guessed values (a short single-word value, or a number, that
    neither the goal, the tools' text nor any earlier output holds) in the workspace, then learn its output's
    words. A failed call needs no mark: its error says what is wrong. A guess may be right, and only a tool's
    output can say so."""
    read = given | set(s.read)
    guessed = [str(v) for v in call.args.values() if not isinstance(v, bool) and isinstance(v, (str, int, float))
               and 0 < len(str(v).strip()) <= 40 and " " not in str(v).strip()
               and str(v).strip().lower().strip(".-/:") not in read]
    s.read = sorted(set(s.read) | words(output))[:READ_WORDS]
    s.workspace.note_guesses(guessed, given | set(s.read))


def _decide(ep: Episode, s: ReactState, failure: Undecided, tools: ToolSession) -> Stop | None:
    """The engine's decision on a step's failure, carried out and checkpointed; a Stop if it ends the run."""
    outcome = ep.engine.handle(failure.signal, task=s.workspace.task, facts=s.workspace.facts,
                               action=failure.action, snippet=failure.snippet, rule_facts=failure.facts)
    if outcome.stop is not None:
        return Stop(outcome.stop, outcome.reason)
    _apply(outcome, s, failure.failed, tools)
    s.undecided = None
    ep.checkpoint(s)
    return None


def _record(ep: Episode, s: ReactState, chosen: Chosen, action: str, observation: Observation,
            started_at: float) -> None:
    ep.run.record(Acted(s.step, chosen.thought, action, observation.shown(), observation.ok, observation.code,
                        isinstance(chosen.action, FinalAnswer), observation.replayed, observation.superseded,
                        ep.snapshot(s)), Role.GENERATOR, started_at=started_at)


def _next_action(ep: Episode, s: ReactState, tools: ToolSession, schema: dict[str, Any],
                 sampling: tuple[float, int] = (0.0, 0)) -> Chosen | None:
    """The step's action: a queued rule repair or forced action, else the model's choice. On the last step,
    with facts in hand, the model may only answer: no step is left to read a tool's output, so a queued
    tool call (a retry, a page) gives way too."""
    # On the last step a tool called now could never be read; after circling back to one call, the facts
    # are what there is to answer from.
    final_step = s.step == ep.bound and bool(s.workspace.facts)
    circled, s.answer_now = s.answer_now and bool(s.workspace.facts), False
    last = final_step or circled
    if s.queued is not None:
        queued, s.queued = s.queued, None
        if not last or isinstance(queued.action, FinalAnswer):
            return queued
    resting, s.resting = s.resting, None
    note = (prompts.LAST_STEP if final_step else prompts.ANSWER_NOW if circled
            else prompts.REPEATED_CALL if resting else "")
    # A blocked tool is no choice at all (its call would only be refused); a resting one sits out this step.
    if left_out := {*tools.blocks.tools, *([resting] if resting else [])}:
        schema = prompts.action_schema(tools.registry, leave_out=left_out)
    temperature, seed = sampling
    reply = ep.run.call(Role.GENERATOR, prompts.messages(tools.registry, s.workspace, note=note),
                        schema=prompts.answer_schema() if last else schema, max_tokens=256, temperature=temperature,
                        seed_offset=seed * 100 + s.step)
    if reply is None:
        return None
    if reply.value is not None:
        value = reply.value["action"]
        return Chosen(_action(value["tool"], value["args"]), value.get("thought", ""), value.get("confidence"),
                      by_model=True)
    # Still invalid after the re-ask: let the registry name the argument problem, if there is a call at all.
    if (loose := prompts.loose_action(reply.text)) is not None:
        return Chosen(_action(*loose), "(invalid action)")
    return Chosen(Invalid(f"{reply.error}; reply: {reply.text[:200]}"), "(invalid action)")


def _action(tool: str, args: dict[str, Any]) -> Action:
    if tool == prompts.FINAL:
        answer = args.get("answer")
        return FinalAnswer(answer if isinstance(answer, str) else "" if answer is None else str(answer))
    return ToolCall(tool, args)


def _carry_out(action: Action, tools: ToolSession, step: int, validator: Validator | None,
               rejected: list[str]) -> tuple[str, Observation]:
    """Carry out one action: (its text form, what came back). A final answer the validator rejects joins
    `rejected`."""
    if isinstance(action, PageAction):
        page = tools.page(action.tool, action.page)
        observation = page or Observation(action.tool, {}, False, code=ErrorCode.EMPTY, message="no such page")
        return f"page {action.page} of {action.tool}", observation
    if isinstance(action, Invalid):
        return "(invalid action)", Observation("model", {}, False, code=ErrorCode.SCHEMA,
                                               message=f"invalid action: {action.error}")
    if isinstance(action, FinalAnswer):
        text = prompts.describe_action(prompts.FINAL, {"answer": action.answer})
        if not action.answer.strip():
            return text, Observation(prompts.FINAL, {}, False, code=ErrorCode.EMPTY,
                                     message="the final answer is empty")
        key = " ".join(action.answer.lower().split())
        if key in rejected:
            return text, Observation(prompts.FINAL, {"answer": action.answer}, False, code=ErrorCode.VALIDATION_FAILED,
                                     message="this answer was rejected before: find the value another way")
        problem = validator(action.answer) if validator else None
        if problem:
            rejected.append(key)
        return text, Observation(prompts.FINAL, {"answer": action.answer}, problem is None, action.answer,
                                 ErrorCode.VALIDATION_FAILED if problem else None, problem or "")
    return prompts.describe_action(action.tool, action.args), tools.call(action.tool, action.args, step=step)


def _facts(observation: Observation, s: ReactState, action: str, tools: ToolSession) -> Facts:
    # A side-effecting call that failed may still have had its effect: never retry it by rule.
    tool = tools.registry.tools.get(observation.tool)
    return Facts(suggestion=observation.suggestion, fatal=observation.fatal,
                 retryable=tool is not None and not tool.side_effect,
                 retries_before=s.retries.get(action, 0), can_page=observation.truncated,
                 repeat_noted=action in s.noted, answer_asked=s.answer_asked, human=observation.denied,
                 transient=observation.transient,
                 retry_after=observation.retry_after,
                 alternatives=any(name != observation.tool and name not in tools.blocks.tools
                                  for name in tools.registry.tools))


def _apply(outcome: Handling, s: ReactState, failed: Action, tools: ToolSession) -> None:
    """Carry out the engine's decision for the next step: queue a rule repair, apply a lesson."""
    repair = outcome.repair
    if repair is not None and isinstance(failed, ToolCall):
        text = prompts.describe_action(failed.tool, failed.args)  # as the trace and the window name the call
        if repair.kind == "retry":
            s.retries[text] = s.retries.get(text, 0) + 1
            aio.sleep(repair.delay)  # under aio.run, the other sessions go on meanwhile
            s.queued = Chosen(failed, "(rule: retry after a pause)", repairs=text)
        elif repair.kind == "args":  # the repaired arguments replace the failing ones
            s.queued = Chosen(ToolCall(failed.tool, dict(repair.args)), "(rule: close match)", repairs=text)
        elif repair.kind == "notice":
            s.resting = failed.tool
            s.noted.append(text)
        elif repair.kind == "answer":
            s.answer_now = s.answer_asked = True
    if repair is not None and repair.kind == "page" and isinstance(failed, ToolCall | PageAction):
        page = failed.page + 1 if isinstance(failed, PageAction) else 1
        s.queued = Chosen(PageAction(failed.tool, page), "(rule: next page)")
    if outcome.lesson is not None:
        s.workspace.apply(outcome.lesson)
        if (forced := s.workspace.forced) is not None:
            s.workspace.forced = None
            s.queued = Chosen(_action(forced["tool"], forced["args"]), "(forced by a lesson)")
        if outcome.lesson.control is not None:
            tools.blocks.apply(outcome.lesson.control)
