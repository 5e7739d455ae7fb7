"""What the benchmark harnesses share: where a run's files go, rows that resume, reports, stored traces, the
shop database with its answer check, the shared data sets, and the coding benches' strategies and loop.

A run's files: each harness writes under bench/results/<bench>/ (--results), named by --name: rows.jsonl,
report.json and traces.db for the latest run, NAME-rows.jsonl, NAME-report.json and NAME-traces.db for a
named one (a recheck, another model). Rows are appended as they finish, and a rerun skips the ones already
there, so a run that is stopped loses nothing. Trace databases are not committed (a run writes them again);
one that a figure needs is kept compressed as NAME-traces.db.xz, and `trace_db` reads either.

Coding strategies (bench/humaneval.py, bench/mbpp.py), side by side on the same problems and the same model:
  single            one attempt with reflexa's generator prompt, no retry (refine with max_attempts=1)
  refine            reflexa `refine`: up to 3 attempts, test signals, the reflection engine
  refine-noexplain  refine with reflection off (reflect=False): no reflector call at all
  refine-full       refine whose revisions see every earlier attempt (context="full")
  refine-latest     refine whose revisions see the latest candidate and its feedback (context="latest");
                    refine's own default shows the feedback without the code
  refine-reflector  refine with the reflector's calls on the model --reflector-model names
  n1                the cookbook evaluator-optimizer: an LLM judge answers a free-text verdict and feedback,
                    the generator sees every earlier attempt with its feedback; at most 3 attempts
  n2                a naive test-driven loop: plain prompt, every earlier attempt re-sent with its test errors;
                    at most 3 attempts
Every strategy is scored by all the problem's tests (hidden ones included); the loop sees only its check.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import lzma
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from reflexa import CheckContext, MemoryStore, Model, Session, Usage, refine, resolve_model
from reflexa.eval.naive import EVAL as _EVAL
from reflexa.eval.naive import EVALUATOR
from reflexa.eval.naive import FEEDBACK as _FEEDBACK
from reflexa.loops.refine_prompts import split_reply

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
RESULTS = BENCH / "results"
DATA = Path(os.environ.get("REFLEXA_DATA", ROOT.parent / "shared" / "data"))
"""The shared data sets (MBPP, HotpotQA): ../shared/data beside the checkout, or $REFLEXA_DATA."""


# A run's files --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Output:
    """Where one run's files go: FOLDER/[NAME-]rows.jsonl, [NAME-]report.json, [NAME-]traces.db."""

    folder: Path
    name: str = ""

    def file(self, kind: str) -> Path:
        return self.folder / (f"{self.name}-{kind}" if self.name else kind)

    @property
    def rows(self) -> Path:
        return self.file("rows.jsonl")

    @property
    def report(self) -> Path:
        return self.file("report.json")

    @property
    def traces(self) -> Path:
        return self.file("traces.db")


def output_args(parser: argparse.ArgumentParser, bench: str) -> None:
    parser.add_argument("--results", type=Path, default=RESULTS / bench,
                        help=f"folder for the run's files (default: bench/results/{bench})")
    parser.add_argument("--name", default="", help="the run's name: NAME-rows.jsonl, NAME-report.json "
                        "(default: none, the latest run: rows.jsonl, report.json)")


def suite_args(parser: argparse.ArgumentParser, bench: str, strategies: Iterable[str], unit: str,
               limit: int = 0) -> None:
    """The options faults.py, hotpotqa.py and plan.py share: which strategies, which of the suite's items, and
    where the run's files go."""
    parser.add_argument("--strategies", default=",".join(strategies), help=", ".join(strategies))
    parser.add_argument("--limit", type=int, default=limit, help=f"only the first N {unit} (0: all)")
    parser.add_argument("--skip", type=int, default=0, help=f"start after this many {unit} (a second process on "
                        "the other core can take the later ones; both append to the same rows file)")
    output_args(parser, bench)


def output(args: argparse.Namespace) -> Output:
    args.results.mkdir(parents=True, exist_ok=True)
    return Output(args.results, args.name)


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows a run has written so far (none when it has not started)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def append_row(path: Path, row: dict[str, Any]) -> None:
    """One finished row, appended at once: a run that is stopped keeps it, and a rerun skips it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        handle.write(json.dumps(row, default=str) + "\n")


def write_report(path: Path, report: dict[str, Any]) -> dict[str, Any]:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, default=str) + "\n")
    return report


def chosen_strategies(text: str, known: Iterable[str]) -> list[str]:
    """The strategies a comma-separated option names, refused at once when one is unknown."""
    names, known = text.split(","), tuple(known)
    if unknown := [name for name in names if name not in known]:
        raise SystemExit(f"unknown strategies {unknown}; choose from {', '.join(known)}")
    return names


@contextmanager
def trace_db(path: Path) -> Iterator[Path]:
    """A stored trace database, to read: PATH itself, else PATH.xz (how a figure's traces are kept in git),
    decompressed to a temporary file for as long as it is read."""
    if path.suffix != ".xz" and path.is_file():
        yield path
        return
    packed = path if path.suffix == ".xz" else path.with_name(path.name + ".xz")
    if not packed.is_file():
        raise SystemExit(f"no traces at {path} (nor {packed.name}): run the bench that writes them, or give --db")
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / packed.stem
        with lzma.open(packed) as source, plain.open("wb") as target:
            shutil.copyfileobj(source, target)
        yield plain


# The shop database (bench/faults.py, bench/plan.py) --------------------------------------------------------


def load_shop(path: Path) -> Path:
    """The generated shop database of examples/shop, built at `path`."""
    spec = importlib.util.spec_from_file_location("make_shop", ROOT / "examples" / "shop" / "make_shop.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.build(path)


def correct(answer: str | None, expected: str) -> bool:
    """An answer matches the key: a number equal to a numeric key appears in it, or it contains the key's text."""
    if not answer:
        return False
    if re.fullmatch(r"-?\d+(\.\d+)?", expected):
        return any(float(n) == float(expected) for n in re.findall(r"-?\d+(?:\.\d+)?", answer))
    return expected.lower() in answer.lower()


# The coding benches (bench/humaneval.py, bench/mbpp.py) ----------------------------------------------------

ATTEMPTS = 3
CODING_STRATEGIES = ("single", "refine", "refine-noexplain", "refine-full", "refine-latest", "refine-reflector",
                     "n1", "n2")
REFINE_OPTIONS: dict[str, dict[str, Any]] = {
    "refine-noexplain": {"reflect": False}, "refine-full": {"context": "full"}, "refine-latest": {"context": "latest"}}
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


def run_strategy(name: str, model: Model, p: Problem, max_tokens: int, reflector: Model | None = None) -> Row:
    started = time.monotonic()
    if name == "n1":
        candidates, final, usage, stop = evaluator_optimizer(model, p, max_tokens)
    elif name == "n2":
        candidates, final, usage, stop = test_driven(model, p, max_tokens)
    else:
        store = MemoryStore()
        result = refine(
            p.task,
            [p.check],
            session=Session(model=model, store=store,
                            reflector_model=reflector if name == "refine-reflector" else None),
            max_attempts=1 if name == "single" else ATTEMPTS,
            max_reply_tokens=max_tokens,
            family="coding",
            **REFINE_OPTIONS.get(name, {}),
        )
        candidates = [s.payload().candidate for s in store.steps(result.run_id) if s.kind == "attempt"]
        final, usage, stop = result.best or result.output or "", result.total_usage, result.stop_reason.value
    seconds = time.monotonic() - started  # the loop's own time, model calls and visible checks; scoring excluded
    first = p.score(candidates[0]) if candidates else False
    passed = first if final == (candidates[0] if candidates else "") else p.score(final)
    visible = p.check.run(final, CheckContext(p.task)).ok if final else False
    return Row(name, p.id, first, passed, visible, usage.total_tokens, usage.calls, len(candidates), seconds, stop)


def load_rows(path: Path) -> list[Row]:
    return [Row(**row) for row in read_rows(path)]


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


def coding_report(rows: list[Row], problems: list[Problem], strategies: list[str], meta: dict[str, Any]
                  ) -> dict[str, Any]:
    ids = {p.id for p in problems}
    single = {r.id: r.passed for r in rows if r.strategy == "single"}
    return {
        **meta,
        "strategies": {
            name: summarise([r for r in rows if r.strategy == name and r.id in ids], single or None)
            for name in strategies
        },
    }


def run_problems(problems: list[Problem], model: Model, strategies: list[str], out: Output, max_tokens: int,
                 meta: dict[str, Any], reflector: Model | None = None) -> dict[str, Any]:
    """Run every strategy on every problem (skipping rows already on disk): one problem at a time, each
    strategy on it in turn, in reverse order on every other problem, so that wall seconds compare the
    strategies on the same machine. One strategy's problems all before the next one's did not: a machine's
    speed drifts over a run (two runs of refine's 40 HumanEval problems, then n2's, timed the same 32 first
    attempts, the same prompt and the same tokens, 8% and 17% faster for n2), and the strategy that runs
    second on a problem may find its first prompt in llama.cpp's prefix cache. Alternating puts both on
    every strategy alike. The report is rewritten after every row."""
    rows = load_rows(out.rows)
    done = {(r.strategy, r.id) for r in rows}
    for index, p in enumerate(problems):
        for name in strategies if index % 2 == 0 else strategies[::-1]:
            if (name, p.id) in done:
                continue
            row = run_strategy(name, model, p, max_tokens, reflector)
            append_row(out.rows, asdict(row))
            rows.append(row)
            write_report(out.report, coding_report(rows, problems, strategies, meta))
            print(
                f"{name:10s} {p.id:28s} first={row.first_passed!s:5} final={row.passed!s:5} "
                f"tokens={row.tokens:5d} calls={row.calls} {row.seconds:6.1f}s {row.stop}",
                flush=True,
            )
    return write_report(out.report, coding_report(rows, problems, strategies, meta))


def merge_recheck(full: Output, recheck: Output, strategy: str) -> dict[str, Any]:
    """A strategy's figure over a whole bench on newer code, from a recheck of the problems that code can move.

    A recheck (--strategies refine --ids IDS --name NAME) re-runs the problems whose first attempt fails its
    visible check. On every other problem `refine` stops after that first attempt, one generator call on a
    prompt the newer code leaves as it was, so the full run's row stands for it. This takes the recheck's
    rows where it has them and the full run's elsewhere, refuses a full-run row that is not such a one-call
    pass, and writes the summary beside the single attempt's to NAME-merged.json."""
    rows = load_rows(full.rows)
    rechecked = {r.id: r for r in load_rows(recheck.rows) if r.strategy == strategy}
    kept = [r for r in rows if r.strategy == strategy and r.id not in rechecked]
    if moved := [r.id for r in kept if r.calls != 1 or r.stop != "PASSED"]:
        raise SystemExit(f"{len(moved)} problems not rechecked could move on newer code: {', '.join(moved[:5])}")
    single = [r for r in rows if r.strategy == "single"]
    baseline = {r.id: r.passed for r in single}
    report = {"full": full.rows.name, "recheck": recheck.rows.name, "rechecked": len(rechecked), "kept": len(kept),
              "strategies": {"single": summarise(single, baseline),
                             strategy: summarise(kept + list(rechecked.values()), baseline)}}
    return write_report(recheck.file("merged.json"), report)


def coding_args(parser: argparse.ArgumentParser, bench: str, problems: int) -> None:
    """The options humaneval.py and mbpp.py share."""
    parser.add_argument("--problems", type=int, default=problems, help="the first N problems")
    parser.add_argument("--skip", type=int, default=0, help="start after this many problems (the confirming split; "
                        "or a second process on the other core, appending to the same rows file)")
    parser.add_argument("--ids", default="", help="only these problem ids, comma-separated (a recheck, a subset)")
    parser.add_argument("--model", default="local")
    parser.add_argument("--reflector-model", default=None, help="the reflector's own model, for refine-reflector")
    parser.add_argument("--strategies", default="single,refine,n1,n2", help=", ".join(CODING_STRATEGIES))
    parser.add_argument("--max-tokens", type=int, default=512, help="tokens per model reply")
    parser.add_argument("--merge", action="store_true", help="run nothing: merge this run's rows (a recheck, "
                        "--name, one strategy) over the full run's (--full) into NAME-merged.json")
    parser.add_argument("--full", default="", help="with --merge: the full run's name (default: the latest run)")
    output_args(parser, bench)


def run_coding(args: argparse.Namespace, problems: Callable[[], list[Problem]], meta: dict[str, Any]) -> None:
    """A coding bench's main: the chosen problems under every chosen strategy, or --merge."""
    out = output(args)
    strategies = chosen_strategies(args.strategies, CODING_STRATEGIES)
    if args.merge:
        if len(strategies) != 1 or not args.name:
            raise SystemExit("--merge takes the recheck's --name and its one strategy (--strategies refine)")
        report = merge_recheck(Output(args.results, args.full), out, strategies[0])
    else:
        if "refine-reflector" in strategies and not args.reflector_model:
            raise SystemExit("refine-reflector needs --reflector-model")
        model = resolve_model(args.model)
        reflector = resolve_model(args.reflector_model) if args.reflector_model else None
        chosen = [p for p in problems()[args.skip:] if not args.ids or p.id in args.ids.split(",")]
        meta = {"model": model.name, **meta, **({"reflector_model": reflector.name} if reflector else {})}
        report = run_problems(chosen, model, strategies, out, args.max_tokens, meta, reflector)
    print(json.dumps(report, indent=2))
