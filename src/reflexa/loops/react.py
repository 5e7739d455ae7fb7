"""`react`: tool calls as a state machine, with reflection only on failure signals."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import ModelError
from ..models.base import Model
from ..reflect import Engine, ExperienceLibrary, Facts, Governor, Outcome, Workspace
from ..reflect.governor import Plan
from ..reflect import embeddings
from ..reflect.gate import Similarity, step_signals
from ..runtime import Observer, Run
from ..tools.registry import Observation, Tool, ToolRegistry, effect_key, interrupted_effects
from ..trace.store import Store
from ..types import Budget, ErrorCode, Lesson, Result, Role, StopReason, Usage
from . import react_prompts as prompts

MAX_STEPS = 8
"""Steps a react run may take unless its budget says otherwise (Budget.max_iterations)."""

Validator = Callable[[str], str | None]
"""Checks a final answer against the world: None when it holds, else what is wrong."""


def react(
    goal: str,
    tools: ToolRegistry | Sequence[Tool],
    *,
    model: Model | None = None,
    budget: Budget = Budget(),
    validator: Validator | None = None,
    lessons: Sequence[Lesson] = (),
    store: Store | None = None,
    observer: Observer | None = None,
    experience: ExperienceLibrary | None = None,
    governor: Governor | None = None,
    family: str = "react",
    similarity: Similarity | None = None,
    meta: dict[str, Any] | None = None,
    resume: str | None = None,
) -> Result:
    """Pursue `goal` with `tools` for at most budget.max_iterations steps (default 8).

    Each step the model picks one action with structured output bound to the tools' schemas; a final
    answer is the `final_answer` action, never a phrase in text. `similarity` judges repeated thoughts
    (default: all-MiniLM-L6-v2 when installed, else normalised text). A step's failure signals go through
    the reflection engine: a rule repair, a stop, a reused or new lesson, or nothing. Every step is
    stored with a snapshot of the loop's state, so `resume=RUN_ID` continues a killed run from its last
    step without repeating a side-effecting tool.
    """
    if model is None:
        from ..models.spec import resolve

        model = resolve()
    registry = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools)
    budget = budget.with_default_iterations(MAX_STEPS)
    plan = governor.plan(model.name, family, goal, budget, cut="reflections") if governor else Plan(budget)
    budget = plan.budget
    run = Run("react", goal, model, budget=budget, store=store, observer=observer, meta=meta, resume=resume)
    engine = Engine(run, experience=experience, quota=budget.max_reflections)
    similarity = similarity or embeddings.similarity()  # embedding-based repeat detection when installed
    state = _restore(run, goal, lessons, registry, engine)
    ws: Workspace = state["workspace"]
    schema = prompts.action_schema(registry)
    answer: str | None = None

    def finish(reason: StopReason, error: str | None = None) -> Result:
        notes = [plan.note] if plan.note else []
        if reason is StopReason.PASSED and validator is None:
            notes.append("the final answer was not validated: no validator was given")
        result = run.finish(reason, output=answer, best=answer if reason is StopReason.PASSED else None,
                            verdict=None, iterations=state["step"], error=error,
                            counters=engine.finish(reason is StopReason.PASSED), notes=notes)
        if governor:
            lessons = result.counters["reflector_calls"] + result.counters["experience_hits"]
            governor.record(model.name, family, goal, retried=lessons > 0, converted=result.passed,
                            retry_tokens=result.usage.get("reflector", Usage()).total_tokens)
        return result

    if resume and (unknown := interrupted_effects(run.store, run.run_id)):
        # Whatever the model would choose next, an effect of unknown outcome needs a human first.
        return finish(StopReason.UNRECOVERABLE, f"side-effecting call {unknown[0].split(':', 1)[1]} was interrupted "
                      "midway; not repeated, check its effect by hand")
    try:
        while state["step"] < budget.max_iterations:
            state["step"] += 1
            step = state["step"]
            tool, args, thought, confidence = _next_action(run, registry, ws, state, schema)
            if tool is None:
                return finish(run.budget_stop or StopReason.ERROR)
            action, observation = _observe(run, registry, step, tool, args, validator)
            if tool == prompts.FINAL:
                answer = observation.output
            signals = [] if tool == "(page)" else step_signals(
                source=f"tool:{observation.tool}", ok=observation.ok, code=observation.code,
                message=observation.message, truncated=observation.truncated, action=action, thought=thought,
                earlier_actions=state["actions"], earlier_thoughts=state["thoughts"], confidence=confidence,
                evidence=observation.shown()[:300], similarity=similarity)
            if observation.ok:
                # Only successful actions count as repeats: a failed one that recurs is the engine's to judge.
                state["actions"].append(action)
            state["thoughts"].append(thought)
            ws.add_step({"step": step, "action": action, "observation": observation.shown()})
            if tool == prompts.FINAL and observation.ok:
                # An answer the validator accepts (or that has no validator) ends the run, repeated or not.
                engine.gate(step, [])
                _record(run, state, step, thought, action, observation, True, engine)
                return finish(StopReason.PASSED)
            bad = engine.gate(step, signals)
            if observation.ok and not bad:
                ws.add_fact(f"{action} -> {observation.output}")
            _record(run, state, step, thought, action, observation, tool == prompts.FINAL, engine)
            if not bad:
                continue
            if step >= budget.max_iterations:
                break  # no step left to use a repair or a lesson
            outcome = engine.handle(bad[0], goal=goal, facts=ws.facts, action=action, snippet=observation.shown(),
                                    rule_facts=_facts(observation, state, action, registry))
            if outcome.stop is not None:
                return finish(outcome.stop, outcome.reason)
            _apply(outcome, registry, ws, state, tool, args, observation)
            # The engine changed the state after the step was stored: checkpoint it for a resume.
            run.record("checkpoint", None, None, {"state": _snapshot(state, engine)})
        return finish(StopReason.MAX_ITERATIONS)
    except ModelError as exc:
        return finish(StopReason.ERROR, exc.explained())


def _observe(run: Run, registry: ToolRegistry, step: int, tool: str, args: dict[str, Any],
             validator: Validator | None) -> tuple[str, Observation]:
    """Carry out one action: (its text form, what came back)."""
    if tool == "(page)":
        return f"page {args['page']} of {args['observation'].tool}", args["observation"]
    action = prompts.describe_action(tool, args)
    if tool == prompts.FINAL:
        answer = str(args.get("answer", ""))
        problem = validator(answer) if validator else None
        return action, Observation(tool, args, problem is None, answer,
                                   ErrorCode.VALIDATION_FAILED if problem else None, problem or "")
    if tool == "(invalid)":
        return action, Observation("model", args, False, code=ErrorCode.SCHEMA,
                                   message=f"invalid action: {args.get('error')}")
    return action, registry.call(tool, args, effect_key=effect_key(run.run_id, step, tool), effects=run.store)


def _next_action(run: Run, registry: ToolRegistry, ws: Workspace, state: dict[str, Any],
                 schema: dict[str, Any]) -> tuple[str | None, dict[str, Any], str, float | None]:
    """The step's action: a queued rule repair, an action a lesson forced, else the model's choice."""
    if (queued := state.pop("queued", None)) is not None:
        return queued["tool"], queued["args"], queued["why"], None
    if ws.forced is not None:
        forced, ws.forced = ws.forced, None
        return forced["tool"], forced["args"], "(forced by a lesson)", None
    reply = run.call(Role.GENERATOR, prompts.messages(registry, ws), schema=schema, max_tokens=256)
    if reply is None:
        return None, {}, "", None
    if reply.value is not None:
        value = reply.value["action"]
        return value["tool"], value["args"], value.get("thought", ""), value.get("confidence")
    # Still invalid after the re-ask: let the registry name the argument problem, if there is a call at all.
    if (loose := prompts.loose_action(reply.text)) is not None:
        return loose[0], loose[1], "(invalid action)", None
    return "(invalid)", {"reply": reply.text[:200], "error": reply.error}, "(invalid action)", None


def _facts(observation: Observation, state: dict[str, Any], action: str, registry: ToolRegistry) -> Facts:
    # A side-effecting call that timed out may still complete: never retry it by rule.
    tool = registry.tools.get(observation.tool)
    return Facts(suggestion=observation.suggestion, fatal=observation.fatal,
                 retryable=tool is not None and not tool.side_effect,
                 timeouts_before=state["timeouts"].get(action, 0), can_page=observation.truncated)


def _apply(outcome: Outcome, registry: ToolRegistry, ws: Workspace, state: dict[str, Any], tool: str,
           args: dict[str, Any], observation: Observation) -> None:
    """Carry out the engine's decision for the next step."""
    if outcome.repair is not None:
        repair = outcome.repair
        if repair.kind == "retry":
            key = prompts.describe_action(tool, args)
            state["timeouts"][key] = state["timeouts"].get(key, 0) + 1
            time.sleep(repair.delay)
            state["queued"] = {"tool": tool, "args": args, "why": "(rule: retry after timeout)"}
        elif repair.kind == "args":
            state["queued"] = {"tool": tool, "args": {**args, **repair.args}, "why": "(rule: close match)"}
        elif repair.kind == "page" and (page := registry.page(observation, 1)) is not None:
            state["queued"] = {"tool": "(page)", "args": {"observation": page, "page": 1}, "why": "(rule: next page)"}
    if outcome.lesson is not None:
        ws.apply(outcome.lesson)
        if outcome.lesson.control is not None:
            registry.blocks.apply(outcome.lesson.control)
            state["blocks"] = {"tools": sorted(registry.blocks.tools),
                               "values": sorted(list(v) for v in registry.blocks.values)}


def _snapshot(state: dict[str, Any], engine: Engine) -> dict[str, Any]:
    """Everything a resumed run needs, as plain data. A queued rule repair is carried too."""
    snapshot = {k: v for k, v in state.items() if k != "queued"}
    snapshot["workspace"] = state["workspace"].to_dict()
    snapshot["engine"] = engine.snapshot()
    queued = state.get("queued")
    if queued is not None and queued["tool"] != "(page)":  # a page is cheap to lose; an Observation is not data
        snapshot["queued"] = queued
    return snapshot


def _record(run: Run, state: dict[str, Any], step: int, thought: str, action: str, observation: Observation,
            is_final: bool, engine: Engine) -> None:
    run.record("react", Role.GENERATOR, {"step": step, "thought": thought, "action": action},
               {"observation": observation.shown(), "ok": observation.ok, "code": observation.code,
                "is_final": is_final, "replayed": observation.replayed, "state": _snapshot(state, engine)})


def _restore(run: Run, goal: str, lessons: Sequence[Lesson], registry: ToolRegistry, engine: Engine) -> dict[str, Any]:
    """The loop's state: fresh, or the last snapshot (react step or checkpoint) of a resumed run."""
    for step in reversed(run.resumed_steps):
        if step.kind in ("react", "checkpoint"):
            state = dict(step.output["state"])
            state["workspace"] = Workspace.from_dict(state["workspace"])
            state["timeouts"] = dict(state["timeouts"])
            engine.restore(state.pop("engine"))
            blocks = state.get("blocks") or {"tools": [], "values": []}
            registry.blocks.tools.update(blocks["tools"])
            registry.blocks.values.update(tuple(v) for v in blocks["values"])
            return state
    ws = Workspace(goal)
    for lesson in lessons:
        ws.apply(lesson)
    return {"workspace": ws, "step": 0, "actions": [], "thoughts": [], "timeouts": {}, "blocks": None}

