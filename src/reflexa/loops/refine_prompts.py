"""Prompts for `refine`. The generator plans, then answers; the evaluator sees task and candidate only."""

from __future__ import annotations

import re

from ..structured import Message
from ..types import Lesson

GENERATOR_SYSTEM = (
    "You solve the user's task. First write 'Plan:' and at most three short lines of plan. "
    "Then give your complete answer in one fenced block (```)."
)

_FENCE = re.compile(r"```[\w+-]*\n?(.*?)```", re.DOTALL)
_OPEN_FENCE = re.compile(r"```[\w+-]*\n(.*)\Z", re.DOTALL)


def split_reply(text: str) -> tuple[str, str]:
    """(plan, answer): the answer is the first fenced block (later ones are usually usage examples), or an
    unclosed one cut off by max_tokens; with no fence, the reply minus its 'Plan:' lines."""
    blocks = _FENCE.findall(text)
    if blocks:
        return text[: text.find("```")].strip(), blocks[0].strip("\n")
    if match := _OPEN_FENCE.search(text):
        return text[: match.start()].strip(), match.group(1).strip("\n")
    lines = text.strip().splitlines()
    plan = [line for line in lines if line.lower().startswith("plan:")]
    answer = [line for line in lines if not line.lower().startswith("plan:")]
    return "\n".join(plan), "\n".join(answer).strip()


def _lessons(lessons: list[Lesson]) -> str:
    if not lessons:
        return ""
    return "\n\nLessons from earlier failed attempts (avoid repeating them):\n" + "\n".join(l.render() for l in lessons)


def fresh(task: str, lessons: list[Lesson]) -> list[Message]:
    """A new attempt from the task plus the lessons so far (after FAIL, and the first attempt)."""
    return [{"role": "system", "content": GENERATOR_SYSTEM},
            {"role": "user", "content": f"Task:\n{task}{_lessons(lessons)}"}]


def revise(task: str, lessons: list[Lesson], candidate: str, feedback: str) -> list[Message]:
    """Revise the latest candidate with its feedback (after NEEDS_IMPROVEMENT)."""
    return [{"role": "system", "content": GENERATOR_SYSTEM},
            {"role": "user", "content": f"Task:\n{task}{_lessons(lessons)}\n\nYour latest answer:\n```\n{candidate}\n```\n\n"
             f"Feedback from checking it:\n{feedback}\n\nWrite a corrected, complete answer."}]


def full_history(task: str, lessons: list[Lesson], history: list[tuple[str, str]]) -> list[Message]:
    """Every earlier attempt with its feedback, as a conversation (the `full` context strategy)."""
    messages: list[Message] = fresh(task, lessons)
    for candidate, feedback in history:
        messages.append({"role": "assistant", "content": f"```\n{candidate}\n```"})
        messages.append({"role": "user", "content": f"Feedback from checking it:\n{feedback}\n\nWrite a corrected, complete answer."})
    return messages


def messages(task: str, lessons: list[Lesson], revising: tuple[str, str] | None,
             history: list[tuple[str, str]], context: str) -> list[Message]:
    """The generator's prompt for the next attempt: every earlier attempt (`full`), the latest one to
    revise, or a fresh start from the task and the lessons."""
    if context == "full" and history:
        return full_history(task, lessons, history)
    if revising is not None:
        return revise(task, lessons, *revising)
    return fresh(task, lessons)
