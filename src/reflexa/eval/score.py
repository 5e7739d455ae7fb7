"""Scoring a row: does the strategy's final answer pass the task's score (its hidden checks, its gold
answer), whatever the loop saw?"""

from __future__ import annotations

import re
import string
from typing import Any

from ..evaluate.checks import CheckContext
from ..evaluate.citations import REFERENCES
from ..tasks import TaskSpec
from ..tasks.run import checks
from .dataset import EvalTask


def scored(task: EvalTask, answer: str | None, visible: bool) -> bool:
    """Whether `answer` solves `task`. With no score, the visible checks decide (`visible`: the run ended
    PASSED)."""
    score = task.score
    if score is None:
        return visible
    if not answer:
        return False
    if task.spec.loop != "refine":
        answer = answer_part(answer)
    if score.checks and not _passes(task.spec, score.checks, answer):
        return False
    if score.answer is not None:
        golds = [score.answer] if isinstance(score.answer, str) else score.answer
        return any(contains(answer_part(answer), gold) for gold in golds)
    return True


def _passes(spec: TaskSpec, values: dict[str, Any], answer: str) -> bool:
    """The answer (a refine candidate, with the spec's prelude) against the score's checks, in the spec's
    sandbox."""
    context = CheckContext(spec.task)
    return all(check.run(answer, context).ok for check in checks(spec, values))


TAILS = ("\n\nNo new evidence was sought", "\n\nCould not verify:", "\n\n" + REFERENCES.rstrip("\n"))
"""What `research` appends to its answer (a note, failed searches, its references): not part of the answer
a gold answer is looked for in (a reference's title may name it)."""


def answer_part(output: str) -> str:
    """The answer without what `research` appends to it."""
    for tail in TAILS:
        output = output.split(tail)[0]
    return output


def cited_documents(output: str) -> set[str]:
    """The documents an answer's references name: each reference's source without its `#passage`. The
    block is the last one: the loop appends it, after anything the model wrote."""
    _, found, block = output.rpartition("\n\n" + REFERENCES)
    if not found:
        return set()
    return {line.rpartition(": ")[2].rsplit("#", 1)[0] for line in block.splitlines()
            if re.match(r"\[\d+\] ", line) and ": " in line}


def citations(task: EvalTask, output: str | None) -> dict[str, int] | None:
    """How the answer's references match the score's `citations`: right (named and gold), cited (named)
    and gold; None when the score lists none."""
    if task.score is None or task.score.citations is None:
        return None
    cited, gold = cited_documents(output or ""), set(task.score.citations)
    return {"right": len(cited & gold), "cited": len(cited), "gold": len(gold)}


def normalise(text: str) -> str:
    """Lower case, citation markers, punctuation and articles out (SQuAD's normalisation)."""
    text = re.sub(r"\[\d+\]", " ", text.lower())
    text = "".join(ch for ch in text if ch not in string.punctuation)
    return " ".join(word for word in text.split() if word not in ("a", "an", "the"))


def contains(answer: str, gold: str) -> bool:
    """The gold answer occurs in the answer, word for word after `normalise`."""
    wanted = normalise(gold)
    return bool(wanted) and f" {wanted} " in f" {normalise(answer)} "
