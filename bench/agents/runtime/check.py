"""The answer check of a built agent domain: `python3 check.py TASK_ID` reads the answer from $REFLEXA_ANSWER
(as `validate` gives it) or from `--file F`, and exits 0 when every gold value of the task is in it.

It says only "does not match": a validator that told the model what it expected would be an oracle. A gold
number matches a number in the answer that equals it (1,234 and 1234.0 are 1234); a gold text matches when the
answer holds it, compared without case, punctuation or spacing.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


def _numbers(text: str) -> list[float]:
    found = []
    for raw in NUMBER.findall(text):
        try:
            found.append(float(raw.replace(",", "")))
        except ValueError:
            continue
    return found


def _plain(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.casefold()).split())


def holds(answer: str, gold: str) -> bool:
    """Whether `answer` holds the gold value `gold`."""
    try:
        wanted = float(gold)
    except ValueError:
        return f" {_plain(gold)} " in f" {_plain(answer)} "
    return any(abs(n - wanted) <= 0.01 * max(1.0, abs(wanted)) / 100 + 1e-9 for n in _numbers(answer))


def main() -> int:
    args = sys.argv[1:]
    task = args[0]
    answer = Path(args[2]).read_text(encoding="utf-8") if args[1:2] == ["--file"] else os.environ.get(
        "REFLEXA_ANSWER", "")
    golds = json.loads((Path(__file__).parent / "answers.json").read_text(encoding="utf-8"))[task]
    if answer.strip() and all(holds(answer, gold) for gold in golds):
        return 0
    print("does not match")
    return 1


if __name__ == "__main__":
    sys.exit(main())
