"""Where each strategy's visible-pass-but-hidden-fail answers come from: read from a coding eval's rows, so
nothing is run again and a fresh checkout has all it needs.

    .venv/bin/python bench/experiments/visible_only.py mbpp --skip 100 --limit 200

A strategy that stops at its first visible pass, as `refine` and the resamples do, keeps every answer of
`single` that passes the visible check: its visible-only answers hold single's. What it adds comes from the
tasks where one attempt failed the visible check and the strategy's final answer passes it (its visible
conversions): the script counts those and how many of them fail the hidden asserts, so a strategy that fits
the visible example more than another shows a higher share there. Of those it also counts the ones whose code
names a value of the visible assert outside an assert of its own (a literal of three or more characters, not
True, False or None): the answers a rule that rejects special-casing the visible input could catch.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # _common, in bench/

from _common import eval_split, split_args

STRATEGIES = "refine,resample@3,resample@=refine"


def literals(test_code: str) -> set[str]:
    """The values the first assert of `test_code` names, as source: the ones an answer that special-cases the
    visible input would hold (booleans, None and one- or two-character values name nothing in particular)."""
    first = ast.parse(test_code).body[0]
    return {repr(node.value) for node in ast.walk(first) if isinstance(node, ast.Constant)
            and not isinstance(node.value, bool) and node.value is not None and len(repr(node.value)) >= 3}


def names_a_value(answer: str, values: set[str]) -> bool:
    """Whether the answer's code names one of `values`, its top-level asserts left out: a model often appends
    the test it was given, which names the visible values without special-casing them."""
    code = "\n".join(line for line in answer.splitlines() if not line.startswith("assert "))
    return any(value in code for value in values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    split_args(parser)
    parser.add_argument("-s", "--strategies", default=STRATEGIES, help=f"comma-separated (default {STRATEGIES})")
    args = parser.parse_args()
    folder, split, rows = eval_split(args)
    visible = {task["id"]: literals(task["test_code"]) for task in map(json.loads, (folder / "dataset.jsonl").open())}
    strategies = args.strategies.split(",")
    split = [t for t in split if all((t, s) in rows for s in ["single", *strategies])]  # run by all so far
    once = {t for t in split if rows[(t, "single")]["visible"]}
    print(f"{args.bench} tasks {args.skip + 1}-{args.skip + len(split)} ({len(split)}): one attempt passes the "
          f"visible check on {len(once)}, and {sum(not rows[(t, 'single')]['passed'] for t in once)} of those "
          "fail the hidden asserts")
    for strategy in strategies:
        visible_only = {t for t in split if rows[(t, strategy)]["visible"] and not rows[(t, strategy)]["passed"]}
        converted = [t for t in split if t not in once and rows[(t, strategy)]["visible"]]
        fitted = [t for t in converted if t in visible_only]
        naming = sum(names_a_value(rows[(t, strategy)]["answer"] or "", visible[t]) for t in fitted)
        share = f"{len(fitted) / len(converted):.0%}" if converted else "-"
        print(f"  {strategy}: {len(visible_only)} visible only, {len(visible_only & once)} of them single's; "
              f"{len(converted)} visible conversions, {len(fitted)} of them fail the hidden asserts ({share}), "
              f"{naming} of those naming a value of the visible assert")


if __name__ == "__main__":
    main()
