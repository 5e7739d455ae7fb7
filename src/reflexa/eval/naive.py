"""The naive loops an eval can set reflexa's against: the common ways of doing what each loop does. Each
stores its run (loop name `naive`) like any loop, so a row links to what it did.

refine tasks:
    test-driven   a plain prompt with no system message; each failed attempt is re-sent with its check's
                  error, and the whole conversation grows; at most ATTEMPTS attempts
    cookbook      the evaluator-optimizer of the common cookbooks: an LLM judge answers a free-text verdict
                  (PASS, NEEDS_IMPROVEMENT, FAIL) and feedback, the generator sees every earlier attempt with
                  its feedback; it stops when the judge says PASS (it never runs the visible checks, which
                  the eval runs on its final answer afterwards), at most ATTEMPTS attempts
react tasks:
    tutorial      the tutorial agent loop: every earlier step in the prompt, the validator's rejection of
                  a final answer as one more step, no reflection; at most the spec's max_steps
    reflect-every-step
                  the same with a reflection call after every step, its corrections added to the prompt
research tasks:
    always-search search with the question every time, the top SEARCH_K passages whole as evidence, one
                  revision
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from functools import partial
from typing import Any

from ..evaluate.checks import CheckContext
from ..loops import Session
from ..loops.refine import Attempt
from ..loops.refine_prompts import split_reply
from ..runtime import Run
from ..structured import Message
from ..tasks import TaskSpec
from ..tasks.run import checks
from ..types import Result, Role, StopReason

ATTEMPTS = 3
"""Attempts at most, as refine's default."""
FEEDBACK_CHARS = 600
"""Of a check's evidence or a judge's feedback, what a naive loop passes on."""
SEARCH_K = 3
"""Passages `always-search` passes to its revision."""
NAIVE = {"test-driven": "refine", "cookbook": "refine", "tutorial": "react", "reflect-every-step": "react",
         "always-search": "research"}
"""Each naive loop, and the loop of the tasks it runs."""
Loop = Callable[..., tuple[str | None, bool, int]]
"""(run, spec, visible checks) -> (final answer, passed, attempts or steps)."""

EVAL = re.compile(r"<evaluation>\s*(PASS|NEEDS_IMPROVEMENT|FAIL)\s*</evaluation>", re.I)
FEEDBACK = re.compile(r"<feedback>(.*?)(?:</feedback>|\Z)", re.S | re.I)
EVALUATOR = (
    "Evaluate this code implementation for code correctness, time complexity, and style.\n"
    "You should be evaluating only and not attempting to solve the task.\n"
    'Only output "PASS" if all criteria are met and you have no further suggestions for improvements.\n'
    "Output your evaluation concisely in the following format.\n\n"
    "<evaluation>PASS, NEEDS_IMPROVEMENT, or FAIL</evaluation>\n<feedback>\n"
    "What needs improvement and why.\n</feedback>"
)


def run_naive(name: str, spec: TaskSpec, session: Session, meta: dict[str, Any]) -> Result:
    """Run the naive loop `name` on a refine spec; its Result, with details["visible"]: the final answer
    passed the spec's checks."""
    run = Run("naive", spec.task, session.resolved_model(), budget=spec.budget, store=session.store,
              meta={"strategy": name, **meta})
    run.announce()
    visible = checks(spec) if spec.loop == "refine" else []
    loops: dict[str, Loop] = {"test-driven": _test_driven, "cookbook": _cookbook, "tutorial": _tutorial,
                              "reflect-every-step": partial(_tutorial, reflect=True), "always-search": _always_search}
    loop = loops[name]
    try:
        final, passed, attempts = loop(run, spec, visible)
    except KeyboardInterrupt:
        run.finish(StopReason.INTERRUPTED, output=None, best=None, verdict=None, iterations=0)
        raise
    except Exception as exc:  # noqa: BLE001 - a bug in a check or in a reply's handling: the run says so
        return run.finish(StopReason.ERROR, output=None, best=None, verdict=None, iterations=0,
                          error=f"{type(exc).__name__}: {exc}"[:500])
    checked = name in ("test-driven", "tutorial", "reflect-every-step") and (spec.loop == "refine" or
                                                                           spec.validate_ is not None)
    if name == "cookbook":  # its loop never ran the checks: the eval's visible column still needs them
        passed_checks = final is not None and all(c.run(final, CheckContext(spec.task)).ok for c in visible)
    else:  # a check the loop ran itself (tests, a validator), or none
        passed_checks = passed and checked
    stop = (StopReason.PASSED if passed and checked else
            StopReason.ANSWERED_UNVERIFIED if passed else run.budget_stop or StopReason.MAX_ITERATIONS)
    return run.finish(stop, output=final, best=final, verdict=None, iterations=attempts,
                      details={"visible": passed_checks})


def _attempt(run: Run, spec: TaskSpec, messages: list[Message], iteration: int) -> tuple[str, str] | None:
    """(reply, candidate), recorded; None when the budget is spent. The reply has refine's cap."""
    reply = run.call(Role.GENERATOR, messages, max_tokens=spec.max_reply_tokens)
    if reply is None:
        return None
    plan, candidate = split_reply(reply.text)
    run.record(Attempt(iteration, iteration > 1, plan, candidate))
    return reply.text, candidate


def _test_driven(run: Run, spec: TaskSpec, visible: list[Any]) -> tuple[str | None, bool, int]:
    messages: list[Message] = [{"role": "user", "content": spec.task}]
    candidate = None
    for iteration in range(1, (spec.max_attempts or ATTEMPTS) + 1):
        made = _attempt(run, spec, messages, iteration)
        if made is None:
            return candidate, False, iteration - 1
        text, candidate = made
        failed = [s for s in (c.run(candidate, CheckContext(spec.task)) for c in visible) if not s.ok]
        if not failed:
            return candidate, True, iteration
        errors = "\n".join(f"{s.message}\n{s.evidence[-FEEDBACK_CHARS:]}" for s in failed)
        messages += [{"role": "assistant", "content": text},
                     {"role": "user", "content": f"The code failed the tests:\n{errors}\n\n"
                                                 "Write the corrected, complete function."}]
    return candidate, False, spec.max_attempts or ATTEMPTS


def _cookbook(run: Run, spec: TaskSpec, visible: list[Any]) -> tuple[str | None, bool, int]:
    memory: list[str] = []
    candidate = None
    for iteration in range(1, (spec.max_attempts or ATTEMPTS) + 1):
        context = ("\n\nPrevious attempts:\n" + "\n".join(memory)) if memory else ""
        made = _attempt(run, spec, [{"role": "user", "content": spec.task + context}], iteration)
        if made is None:
            return candidate, False, iteration - 1
        candidate = made[1]
        judged = run.call(Role.EVALUATOR, [{"role": "user", "content": f"{EVALUATOR}\n\nOriginal task: {spec.task}"
                                                                        f"\n\nContent to evaluate: {candidate}"}],
                          max_tokens=256)
        if judged is None:
            return candidate, False, iteration
        verdict = EVAL.search(judged.text)
        if verdict and verdict.group(1).upper() == "PASS":
            return candidate, True, iteration
        feedback = FEEDBACK.search(judged.text)
        said = (feedback.group(1) if feedback else judged.text).strip()[:FEEDBACK_CHARS]
        memory.append(f"```python\n{candidate}\n```\nFeedback: {said}")
    return candidate, False, spec.max_attempts or ATTEMPTS


def _tutorial(run: Run, spec: TaskSpec, visible: list[Any], reflect: bool = False) -> tuple[str | None, bool, int]:
    """The tutorial agent loop (faults.py's baseline): the whole history in each prompt."""
    from ..errors import ConfigError
    from ..tasks.run import tools

    if spec.approve != "off":  # this baseline calls tools with no approver: it must not act unasked
        raise ConfigError(f"task {spec.id or spec.task[:40]!r}: the tutorial baselines take no approval",
                          hint="run them on tasks with approve off, or leave them out of --strategies")
    with tools(spec) as registry:
        return _tutorial_steps(run, spec, registry, reflect)


def _tutorial_steps(run: Run, spec: TaskSpec, registry: Any, reflect: bool) -> tuple[str | None, bool, int]:
    from ..loops import react_prompts as prompts
    from ..loops.react import MAX_STEPS
    from ..reflect.reflector import Reflection
    from ..tasks.run import validator
    from ..tools import ToolSession

    check = validator(spec)
    session, schema = ToolSession(registry), prompts.action_schema(registry)
    history: list[str] = []
    lessons: list[str] = []
    steps = spec.max_steps or MAX_STEPS
    for step in range(1, steps + 1):
        user = (f"Goal: {spec.task}\n\nSteps so far:\n" + "\n".join(history)
                + ("\n\nReflections:\n" + "\n".join(lessons) if lessons else ""))
        reply = run.call(Role.GENERATOR, [{"role": "system", "content": prompts.SYSTEM + registry.describe()},
                                          {"role": "user", "content": user}], schema=schema, max_tokens=256)
        if reply is None:
            return None, False, step - 1
        if reply.value is None:
            history.append(f"{step}. invalid reply")
            continue
        tool, args = reply.value["action"]["tool"], reply.value["action"]["args"]
        if tool == prompts.FINAL:
            answer = str(args.get("answer", ""))
            problem = check(answer) if check is not None else None
            if problem is None:
                return answer, True, step
            history.append(f"{step}. {tool}({json.dumps(args)}) -> rejected: {problem}")
            continue
        observation = session.call(tool, args, step=step)
        history.append(f"{step}. {tool}({json.dumps(args)}) -> {observation.shown()}")
        if reflect:
            critique = run.call(Role.REFLECTOR, [{"role": "user", "content": user + "\n" + history[-1]
                                                  + "\n\nReflect on the last step as JSON: failure_step, "
                                                  "observed_mismatch, root_cause, correction."}],
                                schema=Reflection, max_tokens=256, reask=False)
            if critique is not None and critique.value is not None:
                lessons.append(f"- {critique.value.correction}")
    return None, False, steps


def _always_search(run: Run, spec: TaskSpec, visible: list[Any]) -> tuple[str | None, bool, int]:
    """Search with the question every time, whole passages as evidence, one revision (the common way)."""
    from ..evaluate.citations import references, strip_references
    from ..loops import research_prompts as prompts
    from ..tasks.run import search_backend

    reply = run.call(Role.GENERATOR, prompts.draft(spec.task), schema=prompts.Draft, max_tokens=512)
    if reply is None:
        return None, False, 0
    draft = reply.value if reply.value is not None else prompts.salvage(reply.text)  # as research salvages it
    if draft is None:
        return None, False, 0
    evidence = search_backend(spec).search(spec.task, SEARCH_K)
    numbered = list(enumerate(evidence, 1))
    revised = run.call(Role.GENERATOR, prompts.revise(spec.task, draft, numbered, {}),
                       schema=prompts.Revision, max_tokens=700)
    if revised is None or revised.value is None:
        return draft.answer, True, 1
    answer = prompts.with_citations(strip_references(revised.value.answer), revised.value.evidence_used, evidence,
                                    spec.task, revised.value.quote)
    # Its references as research lists them, so a score's citations read both alike.
    return "\n\n".join(part for part in (answer.strip(), references(answer, evidence)) if part), True, 1
