"""HotpotQA through `reflexa eval`: `research` against one round of it and against always searching.

    .venv/bin/python bench/hotpotqa.py [any `reflexa eval` option]

Runs `reflexa eval hotpotqa:../shared/data/hotpotqa/hotpotqa-distractor-dev.jsonl` (or $REFLEXA_DATA/...)
with three strategies: `single` (research with one round), `always-search` (search with the question, the
top passages whole, one revision: the common way) and `research`. Each question's 10 paragraphs are its
corpus, a file per sentence, so a citation names a sentence and is right when that sentence is a supporting
fact. Reports how often the gold answer is in the answer (solved), citation precision and recall, tokens and
calls, in bench/results/eval/hotpotqa/. An option given here replaces the bench's own; the rest pass
through. Rows are written as they finish and the same command resumes from them.
"""

from __future__ import annotations

import sys

from _common import HOTPOTQA, eval_bench

if __name__ == "__main__":
    eval_bench(f"hotpotqa:{HOTPOTQA}", "hotpotqa", sys.argv[1:], strategies="single,always-search,research")
