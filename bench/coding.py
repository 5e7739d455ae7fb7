"""What the coding benches share: strategies (reflexa's and the naive baselines), resumable rows, the report.

Strategies, side by side on the same problems and the same model:
  single    one attempt: reflexa's generator prompt, no retry (refine with max_attempts=1)
  refine    reflexa `refine`: up to 3 attempts, test signals, the reflection engine
            (variants: refine-full, refine-latest and refine-feedback (the context strategies: every earlier
            attempt; the latest candidate and its feedback; the task and the feedback without the code),
            refine-noexplain, refine-sample: a failed revision is followed by a
            fresh sampled attempt; refine-qa: the reflector's prompt opens with a QA-engineer role line and
            asks for a defect report, the A/B the seeds report raised root-cause accuracy;
            refine-reflector: the reflector's calls go to the model --reflector-model names)
  n1        the cookbook evaluator-optimizer: an LLM judge answers a free-text verdict and feedback, the
            generator sees every earlier attempt with its feedback; at most 3 attempts; scored by the tests
  n2        a naive test-driven loop: plain prompt, every earlier attempt re-sent with its test errors; at most 3
Every row is appended to a JSONL file as soon as it is done; a rerun skips the rows already there, so a
session that ends mid-run loses nothing. The report is rewritten after every row.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from reflexa import CheckContext, MemoryStore, Model, Session, Usage, refine
from reflexa.loops.refine_prompts import split_reply
from reflexa.reflect import reflector

ATTEMPTS = 3
Scorer = Callable[[str], bool]
"""Runs a candidate against the tests that decide the score (all of them, hidden ones included)."""


@dataclass(slots=True)
class Problem:
    id: str
    task: str
    check: Any
    """What the loop may see: a Check (the visible tests)."""
    score: Scorer
    """What decides the row: every test."""


@dataclass(slots=True)
class Row:
    strategy: str
    id: str
    first_passed: bool
    passed: bool
    visible_passed: bool
    tokens: int
    calls: int
    attempts: int
    seconds: float
    stop: str


def _fenced(text: str) -> str:
    return split_reply(text)[1]


def test_driven(model: Model, p: Problem, max_tokens: int) -> tuple[list[str], str, Usage, str]:
    """n2: plain prompt, no system message, every earlier attempt and its test errors re-sent."""
    messages = [{"role": "user", "content": p.task}]
    usage, candidates = Usage(), []
    for _ in range(ATTEMPTS):
        reply = model.complete(messages, max_tokens=max_tokens)
        usage.add(reply.usage)
        candidates.append(_fenced(reply.text))
        signal = p.check.run(candidates[-1], CheckContext(p.task))
        if signal.ok:
            return candidates, candidates[-1], usage, "PASSED"
        messages += [
            {"role": "assistant", "content": reply.text},
            {
                "role": "user",
                "content": f"The code failed the tests:\n{signal.message}\n\n"
                f"{signal.evidence[-600:]}\n\nWrite the corrected, complete function.",
            },
        ]
    return candidates, candidates[-1], usage, "MAX_ITERATIONS"


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


def evaluator_optimizer(model: Model, p: Problem, max_tokens: int) -> tuple[list[str], str, Usage, str]:
    """n1: the cookbook's evaluator-optimizer: generate, let an LLM judge it in free text, regenerate with
    every earlier attempt and its feedback in the prompt, until the judge says PASS or 3 attempts."""
    usage, candidates, memory = Usage(), [], []
    for _ in range(ATTEMPTS):
        context = ("\n\nPrevious attempts:\n" + "\n".join(memory)) if memory else ""
        reply = model.complete([{"role": "user", "content": p.task + context}], max_tokens=max_tokens)
        usage.add(reply.usage)
        candidates.append(_fenced(reply.text))
        judged = model.complete(
            [
                {
                    "role": "user",
                    "content": f"{EVALUATOR}\n\nOriginal task: {p.task}\n\nContent to evaluate: {candidates[-1]}",
                }
            ],
            max_tokens=256,
        )
        usage.add(judged.usage)
        verdict = _EVAL.search(judged.text)
        if verdict and verdict.group(1).upper() == "PASS":
            return candidates, candidates[-1], usage, "JUDGED_PASS"
        feedback = _FEEDBACK.search(judged.text)
        said = (feedback.group(1) if feedback else judged.text).strip()[:600]
        memory.append(f"```python\n{candidates[-1]}\n```\nFeedback: {said}")
    return candidates, candidates[-1], usage, "MAX_ITERATIONS"


QA_ROLE = "You are a senior QA engineer; write the reflection as a defect report. "


@contextmanager
def reflector_role(line: str) -> Iterator[None]:
    """The reflector's system prompt with `line` in front, for the length of one run (the A/B variant)."""
    plain = reflector.SYSTEM
    reflector.SYSTEM = line + plain
    try:
        yield
    finally:
        reflector.SYSTEM = plain


def run_strategy(name: str, model: Model, p: Problem, max_tokens: int, reflector: Model | None = None) -> Row:
    started = time.monotonic()
    if name in ("single", "refine", "refine-full", "refine-latest", "refine-feedback", "refine-noexplain",
                "refine-sample", "refine-qa", "refine-reflector"):
        if name == "refine-reflector" and reflector is None:
            raise SystemExit("refine-reflector needs --reflector-model")
        attempts = 1 if name == "single" else ATTEMPTS
        options = {"refine-full": {"context": "full"}, "refine-latest": {"context": "latest"},
                   "refine-feedback": {"context": "feedback"}, "refine-noexplain": {"explain": False},
                   "refine-sample": {"resample": "revision"}}.get(name, {})
        store = MemoryStore()
        with reflector_role(QA_ROLE if name == "refine-qa" else ""):
            result = refine(
                p.task,
                [p.check],
                session=Session(model=model, store=store,
                                reflector_model=reflector if name == "refine-reflector" else None),
                max_attempts=attempts,
                max_tokens=max_tokens,
                family="coding",
                **options,
            )
        candidates = [s.payload().candidate for s in store.steps(result.run_id) if s.kind == "attempt"]
        final, usage, stop = result.best or result.output or "", result.total_usage, result.stop_reason.value
    elif name == "n1":
        candidates, final, usage, stop = evaluator_optimizer(model, p, max_tokens)
    elif name == "n2":
        candidates, final, usage, stop = test_driven(model, p, max_tokens)
    else:
        raise SystemExit(f"unknown strategy {name!r}")
    seconds = time.monotonic() - started  # the loop's own time, model calls and visible checks; scoring excluded
    first = p.score(candidates[0]) if candidates else False
    passed = first if final == (candidates[0] if candidates else "") else p.score(final)
    visible = p.check.run(final, CheckContext(p.task)).ok if final else False
    return Row(name, p.id, first, passed, visible, usage.total_tokens, usage.calls, len(candidates), seconds, stop)


def load_rows(path: Path) -> list[Row]:
    if not path.exists():
        return []
    return [Row(**json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


def summarise(rows: Iterable[Row], baseline: dict[str, bool] | None = None) -> dict[str, Any]:
    rows = list(rows)
    solved = sum(r.passed for r in rows)
    tokens = sum(r.tokens for r in rows)
    seconds = sum(r.seconds for r in rows)
    out = {
        "problems": len(rows),
        "solved": solved,
        "first_attempt_solved": sum(r.first_passed for r in rows),
        "fail_to_pass": sum(r.passed and not r.first_passed for r in rows),
        "pass_to_fail": sum(r.first_passed and not r.passed for r in rows),
        "visible_pass": sum(r.visible_passed for r in rows),
        "visible_pass_hidden_fail": sum(r.visible_passed and not r.passed for r in rows),
        "tokens_per_problem": round(tokens / len(rows), 1) if rows else None,
        "tokens_per_solved": round(tokens / solved, 1) if solved else None,
        "calls_per_problem": round(sum(r.calls for r in rows) / len(rows), 2) if rows else None,
        "seconds_per_solved": round(seconds / solved, 2) if solved else None,
        "seconds": round(seconds, 1),
    }
    if baseline is not None:
        out["lost_vs_single"] = sum(baseline.get(r.id, False) and not r.passed for r in rows)
    return out


def bench(
    problems: list[Problem],
    model: Model,
    strategies: list[str],
    rows_path: Path,
    report_path: Path,
    max_tokens: int,
    meta: dict[str, Any],
    reflector: Model | None = None,
) -> dict[str, Any]:
    """Run every strategy on every problem (skipping rows already on disk): one problem at a time, each
    strategy on it in turn, in reverse order on every other problem, so that wall seconds compare the
    strategies on the same machine. One strategy's problems all before the next one's did not: a machine's
    speed drifts over a run (two runs of refine's 40 HumanEval problems, then n2's, timed the same 32 first
    attempts, the same prompt and the same tokens, 8% and 17% faster for n2), and the strategy that runs
    second on a problem may find its first prompt in llama.cpp's prefix cache. Alternating puts both on
    every strategy alike."""
    rows = load_rows(rows_path)
    done = {(r.strategy, r.id) for r in rows}
    rows_path.parent.mkdir(parents=True, exist_ok=True)
    for index, p in enumerate(problems):
        for name in strategies if index % 2 == 0 else strategies[::-1]:
            if (name, p.id) in done:
                continue
            row = run_strategy(name, model, p, max_tokens, reflector)
            with rows_path.open("a") as handle:
                handle.write(json.dumps(asdict(row)) + "\n")
            rows.append(row)
            write_report(rows, problems, strategies, report_path, meta)
            print(
                f"{name:10s} {p.id:28s} first={row.first_passed!s:5} final={row.passed!s:5} "
                f"tokens={row.tokens:5d} calls={row.calls} {row.seconds:6.1f}s {row.stop}",
                flush=True,
            )
    return write_report(rows, problems, strategies, report_path, meta)


def write_report(
    rows: list[Row], problems: list[Problem], strategies: list[str], path: Path, meta: dict[str, Any]
) -> dict[str, Any]:
    ids = {p.id for p in problems}
    single = {r.id: r.passed for r in rows if r.strategy == "single"}
    report = {
        **meta,
        "strategies": {
            name: summarise([r for r in rows if r.strategy == name and r.id in ids], single or None)
            for name in strategies
        },
    }
    path.write_text(json.dumps(report, indent=2) + "\n")
    return report
