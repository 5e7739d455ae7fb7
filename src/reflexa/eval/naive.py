"""The naive self-correction loops an eval can set `refine` against, on refine tasks. Each stores its run
(loop name `naive`) like any loop, so a row links to what it did.

    test-driven   a plain prompt with no system message; each failed attempt is re-sent with its check's
                  error, and the whole conversation grows; at most ATTEMPTS attempts
    cookbook      the evaluator-optimizer of the common cookbooks: an LLM judge answers a free-text verdict
                  (PASS, NEEDS_IMPROVEMENT, FAIL) and feedback, the generator sees every earlier attempt with
                  its feedback; it stops when the judge says PASS (it never runs the visible checks, which
                  the eval runs on its final answer afterwards), at most ATTEMPTS attempts
"""

from __future__ import annotations

import re
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
NAIVE = ("test-driven", "cookbook")

_EVAL = re.compile(r"<evaluation>\s*(PASS|NEEDS_IMPROVEMENT|FAIL)\s*</evaluation>", re.I)
_FEEDBACK = re.compile(r"<feedback>(.*?)(?:</feedback>|\Z)", re.S | re.I)
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
    visible = checks(spec)
    loop = _test_driven if name == "test-driven" else _cookbook
    try:
        final, passed, attempts = loop(run, spec, visible)
    except KeyboardInterrupt:
        run.finish(StopReason.INTERRUPTED, output=None, best=None, verdict=None, iterations=0)
        raise
    except Exception as exc:  # noqa: BLE001 - a bug in a check or in a reply's handling: the run says so
        return run.finish(StopReason.ERROR, output=None, best=None, verdict=None, iterations=0,
                          error=f"{type(exc).__name__}: {exc}"[:500])
    if name == "cookbook":  # its loop never ran the checks: the eval's visible column still needs them
        passed_checks = final is not None and all(c.run(final, CheckContext(spec.task)).ok for c in visible)
    else:
        passed_checks = passed
    stop = (StopReason.PASSED if passed and name == "test-driven" else
            StopReason.ANSWERED_UNVERIFIED if passed else run.budget_stop or StopReason.MAX_ITERATIONS)
    return run.finish(stop, output=final, best=final, verdict=None, iterations=attempts,
                      details={"visible": passed_checks})


def _attempt(run: Run, messages: list[Message], iteration: int) -> tuple[str, str] | None:
    """(reply, candidate), recorded; None when the budget is spent."""
    reply = run.call(Role.GENERATOR, messages)
    if reply is None:
        return None
    plan, candidate = split_reply(reply.text)
    run.record(Attempt(iteration, iteration > 1, plan, candidate))
    return reply.text, candidate


def _test_driven(run: Run, spec: TaskSpec, visible: list[Any]) -> tuple[str | None, bool, int]:
    messages: list[Message] = [{"role": "user", "content": spec.task}]
    candidate = None
    for iteration in range(1, (spec.max_attempts or ATTEMPTS) + 1):
        made = _attempt(run, messages, iteration)
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
        made = _attempt(run, [{"role": "user", "content": spec.task + context}], iteration)
        if made is None:
            return candidate, False, iteration - 1
        candidate = made[1]
        judged = run.call(Role.EVALUATOR, [{"role": "user", "content": f"{EVALUATOR}\n\nOriginal task: {spec.task}"
                                                                        f"\n\nContent to evaluate: {candidate}"}],
                          max_tokens=256)
        if judged is None:
            return candidate, False, iteration
        verdict = _EVAL.search(judged.text)
        if verdict and verdict.group(1).upper() == "PASS":
            return candidate, True, iteration
        feedback = _FEEDBACK.search(judged.text)
        said = (feedback.group(1) if feedback else judged.text).strip()[:FEEDBACK_CHARS]
        memory.append(f"```python\n{candidate}\n```\nFeedback: {said}")
    return candidate, False, spec.max_attempts or ATTEMPTS
