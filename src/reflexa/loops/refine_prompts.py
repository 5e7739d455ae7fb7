"""Prompts for `refine`. The generator gets the task as it is (no system message, no plan): on
Qwen2.5-Coder-0.5B a plain prompt solved HumanEval problems that a "Plan:" prompt lost (the plan chose a
wrong method and the code followed it). A revision continues the same conversation, so its prompt starts
with the first one and llama.cpp reuses that prefix."""

from __future__ import annotations

import re

from ..structured import Message
from ..types import Lesson

REVISE = "Write a corrected, complete answer in one fenced code block."
RETRY = "An earlier answer failed its check:"

_FENCE = re.compile(r"(`{3,})(?:[\w+-]*\n)?(.*?)\1(?!`)", re.DOTALL)
"""A fenced block, closed by a fence as long as the one that opened it: a markdown answer in a ```` fence
may hold ``` blocks of its own. A language tag is one only when a line break follows it (```42``` is 42)."""
_OPEN_FENCE = re.compile(r"`{3,}[\w+-]*\n(.*)\Z", re.DOTALL)


def split_reply(text: str) -> tuple[str, str]:
    """(plan, answer): the answer is the first fenced block (later ones are usually usage examples), or an
    unclosed one cut off by max_tokens; with no fence, the reply minus its 'Plan:' lines."""
    if first := _FENCE.search(text):
        return text[: first.start()].strip(), first.group(2).strip("\n")
    if match := _OPEN_FENCE.search(text):
        return text[: match.start()].strip(), match.group(1).strip("\n")
    lines = text.strip().splitlines()
    plan = [line for line in lines if line.lower().startswith("plan:")]
    answer = [line for line in lines if not line.lower().startswith("plan:")]
    return "\n".join(plan), "\n".join(answer).strip()


def _lessons(lessons: list[Lesson]) -> str:
    if not lessons:
        return ""
    rendered = "\n".join(lesson.render() for lesson in lessons)
    return f"\n\nLessons from earlier failed attempts (avoid repeating them):\n{rendered}"


def fresh(task: str, lessons: list[Lesson]) -> list[Message]:
    """A new attempt from the task plus the lessons so far (after FAIL, and the first attempt)."""
    return [{"role": "user", "content": f"{task}{_lessons(lessons)}"}]


def revise(task: str, lessons: list[Lesson], candidate: str, feedback: str) -> list[Message]:
    """Revise the latest candidate with its feedback (after NEEDS_IMPROVEMENT): the conversation goes on."""
    return [*fresh(task, lessons), {"role": "assistant", "content": f"```\n{candidate}\n```"},
            {"role": "user", "content": f"Checking it failed:\n{feedback}\n\n{REVISE}"}]


def retry(task: str, lessons: list[Lesson], feedback: str) -> list[Message]:
    """Start again from the task, told how the latest candidate failed its checks but not shown its code
    (the `feedback` context strategy): a small model shown its failed code copies it (bench/experiments/retry_ab.py)."""
    return [{"role": "user", "content": f"{task}{_lessons(lessons)}\n\n{RETRY}\n{feedback}"}]


def full_history(task: str, lessons: list[Lesson], history: list[tuple[str, str]]) -> list[Message]:
    """Every earlier attempt with its feedback, as a conversation (the `full` context strategy)."""
    messages: list[Message] = fresh(task, lessons)
    for candidate, feedback in history:
        messages.append({"role": "assistant", "content": f"```\n{candidate}\n```"})
        messages.append({"role": "user", "content": f"Checking it failed:\n{feedback}\n\n{REVISE}"})
    return messages


SHORTER = ("Your previous reply was cut off at {tokens} tokens, before its code ended. Reply with the code "
           "alone, complete and shorter: no explanation, no examples.")
"""Appended to the next attempt's prompt after a reply cut at its token cap (REPLY_CUT)."""


def cut_off(text: str, truncated: bool) -> bool:
    """Whether a reply the model ended at its token cap (`truncated`) was cut inside its answer: no fenced
    block was closed. A reply whose block closed before the cap holds a whole candidate."""
    return truncated and _FENCE.search(text) is None


def messages(task: str, lessons: list[Lesson], revising: tuple[str, str] | None,
             history: list[tuple[str, str]], context: str, note: str = "") -> list[Message]:
    """The generator's prompt for the next attempt: a revision shows how the latest candidate failed
    (`feedback`), that candidate too (`latest`) or every earlier attempt (`full`); a fresh start (after a
    FAIL, or a sampled attempt) shows the task and the lessons, whatever the context strategy. `note` ends
    the last message (SHORTER)."""
    if note:
        given = messages(task, lessons, revising, history, context)
        return [*given[:-1], {**given[-1], "content": f"{given[-1]['content']}\n\n{note}"}]
    if revising is None:
        return fresh(task, lessons)
    if context == "feedback":
        return retry(task, lessons, revising[1])
    if context == "full" and history:
        return full_history(task, lessons, history)
    return revise(task, lessons, *revising)
