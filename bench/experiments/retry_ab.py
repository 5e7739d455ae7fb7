"""What a retry should be: pass rates of retry prompts after a failed first attempt, over several seeds.

    .venv/bin/python bench/experiments/retry_ab.py mbpp --skip 100 --problems 160 --seeds 4
    .venv/bin/python bench/experiments/retry_ab.py humaneval --ids HumanEval/9,HumanEval/10 --seeds 4

For each problem whose greedy first attempt fails its visible check, each retry prompt is sampled at
--temperature with seeds 1..N (a greedy row, seed -1, too), and each reply is scored on the visible check
and on every test. One process, one model; rows append to bench/results/experiments/retry_ab-rows.jsonl as
they finish and a rerun skips them. No reflector call: this measures what the generator does with each prompt.

Retry prompts (reflexa's refine_prompts where they exist):
  fresh    the task alone, as refine's sampled fresh attempt
  revise   refine's revision: the conversation goes on with the failed code and the check's output
  note     the task, then the check's output for the failed attempt, without its code
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # _common, in bench/

from _common import MBPP, RESULTS, Output, append_row, read_rows

from reflexa import CheckContext, resolve_model
from reflexa.eval.dataset import EvalTask, read_dataset
from reflexa.eval.score import scored
from reflexa.loops import refine_prompts
from reflexa.loops.refine_prompts import split_reply
from reflexa.tasks.run import checks


@dataclass(slots=True)
class Problem:
    """One problem as `reflexa eval` reads it: the task, the check the loop sees, and the score."""

    id: str
    task: str
    check: Any
    eval_task: EvalTask

    def score(self, candidate: str) -> bool:
        """Every test: the task's score, else (HumanEval) its visible check."""
        return scored(self.eval_task, candidate, self.check.run(candidate, CheckContext(self.task)).ok)


def problems(bench: str, skip: int, limit: int) -> list[Problem]:
    source = "humaneval" if bench == "humaneval" else f"mbpp:{MBPP}"
    with tempfile.TemporaryDirectory() as out:
        tasks = read_dataset(source, Path(out), skip=skip, limit=max(limit - skip, 0))
    return [Problem(t.id, t.spec.task, checks(t.spec)[0], t) for t in tasks]


def feedback(signal: Any) -> str:
    """What refine shows a revision of the failed attempt, without a lesson: the message and the output."""
    out = signal.message
    if signal.evidence:
        out += f"\nOutput:\n<<<\n{signal.evidence[-600:]}\n>>>"
    return out


def prompt(variant: str, p: Problem, candidate: str, said: str) -> list[dict[str, str]]:
    if variant == "fresh":
        return refine_prompts.fresh(p.task, [])
    if variant == "revise":
        return refine_prompts.revise(p.task, [], candidate, said)
    if variant == "note":
        return [{"role": "user", "content": f"{p.task}\n\nAn earlier answer failed its check:\n{said}"}]
    raise SystemExit(f"unknown variant {variant!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bench", choices=["mbpp", "humaneval"])
    parser.add_argument("--problems", type=int, default=40)
    parser.add_argument("--skip", type=int, default=0)
    parser.add_argument("--ids", default="")
    parser.add_argument("--variants", default="fresh,revise,note")
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--model", default="local")
    parser.add_argument("--name", default="retry_ab", help="the rows file: bench/results/experiments/NAME-rows.jsonl")
    args = parser.parse_args()
    chosen = problems(args.bench, args.skip, args.problems)
    chosen = [p for p in chosen if not args.ids or p.id in args.ids.split(",")]
    model = resolve_model(args.model)
    llama = model.llama  # type: ignore[attr-defined]
    path = Output(RESULTS / "experiments", args.name).rows
    done = {(r["id"], r["variant"], r["seed"]) for r in read_rows(path)}

    def ask(messages: list[dict[str, str]], temperature: float, seed: int) -> tuple[str, int]:
        out = llama.create_chat_completion(messages=messages, max_tokens=512, temperature=temperature, seed=seed)
        return out["choices"][0]["message"].get("content") or "", out["usage"]["total_tokens"]

    for p in chosen:
        text, _ = ask(refine_prompts.fresh(p.task, []), 0.0, 0)
        first = split_reply(text)[1]
        signal = p.check.run(first, CheckContext(p.task))
        if signal.ok:
            continue
        said = feedback(signal)
        for variant in args.variants.split(","):
            for seed in [-1, *range(1, args.seeds + 1)]:
                if (p.id, variant, seed) in done or (variant == "fresh" and seed == -1):
                    continue  # greedy fresh is the first attempt again
                started = time.monotonic()
                reply, tokens = ask(prompt(variant, p, first, said), 0.0 if seed < 0 else args.temperature,
                                    max(seed, 0))
                candidate = split_reply(reply)[1]
                row = {"bench": args.bench, "id": p.id, "variant": variant, "seed": seed,
                       "visible": p.check.run(candidate, CheckContext(p.task)).ok, "hidden": p.score(candidate),
                       "same_as_first": candidate.strip() == first.strip(), "tokens": tokens,
                       "seconds": round(time.monotonic() - started, 1)}
                append_row(path, row)
                print(json.dumps(row), flush=True)
    summarise(path)


def summarise(path: Path) -> None:
    rows = read_rows(path)
    for bench in sorted({r["bench"] for r in rows}):
        for variant in sorted({r["variant"] for r in rows}):
            for greedy in (True, False):
                sel = [r for r in rows if r["bench"] == bench and r["variant"] == variant
                       and (r["seed"] < 0) == greedy]
                if not sel:
                    continue
                ids = {r["id"] for r in sel}
                converted = {r["id"] for r in sel if r["hidden"]}
                print(f"{bench:9s} {variant:7s} {'greedy' if greedy else 'sampled':7s} problems={len(ids):3d} "
                      f"samples={len(sel):4d} visible={sum(r['visible'] for r in sel):4d} "
                      f"hidden={sum(r['hidden'] for r in sel):4d} problems_any_hidden={len(converted):3d} "
                      f"copies={sum(r['same_as_first'] for r in sel):4d} tokens/sample="
                      f"{sum(r['tokens'] for r in sel) / len(sel):.0f}", file=sys.stderr)


if __name__ == "__main__":
    main()
