"""Where each strategy's visible-pass-but-hidden-fail answers come from: read from a coding eval's rows, so
nothing is run again and a fresh checkout has all it needs.

    .venv/bin/python bench/experiments/visible_only.py mbpp --skip 100 --limit 200

A strategy that stops at its first visible pass, as `refine` and the resamples do, keeps every answer of
`single` that passes the visible check: its visible-only answers hold single's. What it adds comes from the
tasks where one attempt failed the visible check and the strategy's final answer passes it (its visible
conversions): the script counts those and how many of them fail the hidden asserts, so a strategy that fits
the visible example more than another shows a higher share there.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # _common, in bench/

from _common import eval_split, split_args

STRATEGIES = "refine,resample@3,resample@=refine"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    split_args(parser)
    parser.add_argument("-s", "--strategies", default=STRATEGIES, help=f"comma-separated (default {STRATEGIES})")
    args = parser.parse_args()
    _, split, rows = eval_split(args)
    strategies = args.strategies.split(",")
    split = [t for t in split if all((t, s) in rows for s in ["single", *strategies])]  # run by all so far
    once = {t for t in split if rows[(t, "single")]["visible"]}
    print(f"{args.bench} tasks {args.skip + 1}-{args.skip + len(split)} ({len(split)}): one attempt passes the "
          f"visible check on {len(once)}, and {sum(not rows[(t, 'single')]['passed'] for t in once)} of those "
          "fail the hidden asserts")
    for strategy in strategies:
        visible_only = {t for t in split if rows[(t, strategy)]["visible"] and not rows[(t, strategy)]["passed"]}
        converted = [t for t in split if t not in once and rows[(t, strategy)]["visible"]]
        hidden_fail = sum(t in visible_only for t in converted)
        share = f"{hidden_fail / len(converted):.0%}" if converted else "-"
        print(f"  {strategy}: {len(visible_only)} visible only, {len(visible_only & once)} of them single's; "
              f"{len(converted)} visible conversions, {hidden_fail} of them fail the hidden asserts ({share})")


if __name__ == "__main__":
    main()
