"""A change to `refine`, measured against the eval's stored `refine` rows: `refine` as the code now runs it, on
the tasks whose first attempt failed its visible check (on the others both stop after the same first attempt).

    REFLEXA_THREADS=1 .venv/bin/python bench/experiments/refine_change.py humaneval --limit 40 --name NAME -c 2
    REFLEXA_THREADS=1 .venv/bin/python bench/experiments/refine_change.py mbpp --limit 100 --name NAME -c 2

Make the change, then run the script: the stored rows are the code before it, this run the code after. It runs
`refine` on those tasks as an eval of its own (bench/results/experiments/refine_change/NAME/BENCH/, resumable;
other options pass through to the bench; `--report-only` compares what has run), checks that both runs' first
attempts are the same (when the eval's traces.db is present), and compares solved, visible only, tokens and
calls, with the exact McNemar p-value.

The equal-cost baseline moves with refine's tokens: `resample@=refine` draws fresh samples until it has spent
what refine spent on the task. Its samples are the same whatever the budget (fixed seeds; a reply cut at what is
left of the budget is no answer), so its result at refine's new tokens follows from its stored samples: the
script first replays every stored row at the budget it ran at and says how many it reproduces, then replays
them at refine's new tokens. A task whose new budget reaches past the stored samples is undecided, and named.
The replay reads the eval's traces.db, which is not committed: without it, `--baseline` runs `resample@=refine`
on the same tasks at refine's new tokens instead (twice the time).
"""

from __future__ import annotations

import argparse
import inspect
import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # _common, in bench/

from _common import RESULTS, eval_split, open_traces, read_rows, run_subset, split_args
from attempts import candidates

from reflexa import refine
from reflexa.eval.stats import mcnemar
from reflexa.eval.strategies import MAX_SAMPLES

MATCHED = "resample@=refine"
REPLY_CAP: int = inspect.signature(refine).parameters["max_reply_tokens"].default
"""A reply cut at this cap is the same whatever budget is left above it."""


def samples(db: sqlite3.Connection, row: dict[str, Any]) -> list[tuple[int, int, bool, bool]]:
    """A stored resample row's samples in order: (prompt tokens, reply tokens, passed its visible check, whole:
    its reply was not cut by the budget)."""
    found = []
    for run_id in row["run_ids"]:
        steps = db.execute("SELECT kind, input_tokens, output_tokens, output FROM steps WHERE run_id = ? "
                           "ORDER BY step_id", (run_id,)).fetchall()
        calls = [(i, o, json.loads(out)["finish_reason"]) for kind, i, o, out in steps if kind == "model_call"]
        verdicts = [json.loads(out)["verdict"]["status"] for kind, _, _, out in steps if kind == "verdict"]
        prompt, reply, finish = calls[0]
        found.append((prompt, reply, verdicts == ["PASS"], finish != "length" or reply >= REPLY_CAP))
    return found


def matched(db: sqlite3.Connection, row: dict[str, Any], budget: int) -> tuple[bool | None, int]:
    """Whether `resample@=refine` solves the task at `budget` tokens, and its tokens, from its stored samples
    (drawn at another budget): the samples are the same, in the same order, each cut at what is left of the
    budget (a cut reply is no answer, docs/eval.md). None when the budget reaches past what was stored."""
    spent = 0
    stored = samples(db, row)
    for index, (prompt, reply, visible, whole) in enumerate(stored):
        if spent >= budget:
            return False, spent
        left = budget - spent
        if reply >= left:  # cut here: no answer, and the budget is spent
            return (False if whole or reply == left else None), spent + prompt + left
        if not whole:
            return None, spent  # the stored reply was cut shorter than what is left now
        spent += prompt + reply
        if visible:
            return bool(row["passed"]) and index == len(stored) - 1, spent
    return (False if spent >= budget or len(stored) == MAX_SAMPLES else None), spent


def replayed(db: sqlite3.Connection, rows: dict[tuple[str, str], dict[str, Any]]) -> tuple[int, int]:
    """`matched` at the budgets the stored rows ran at: how many of them it reproduces (solved and tokens)."""
    pairs = [(row, rows[(task, "refine")]["tokens"]) for (task, strategy), row in rows.items()
             if strategy == MATCHED and (task, "refine") in rows]
    return sum(matched(db, row, budget) == (row["passed"], row["tokens"]) for row, budget in pairs), len(pairs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    split_args(parser)
    parser.add_argument("--name", required=True, help="the change's name: its run goes to "
                        "bench/results/experiments/refine_change/NAME/BENCH")
    parser.add_argument("--run-out", type=Path, help="this run's eval folder instead")
    parser.add_argument("--report-only", action="store_true", help="compare the tasks that have run; run none")
    parser.add_argument("--baseline", action="store_true", help=f"also run {MATCHED} on those tasks, at refine's "
                        "new tokens (what the replay derives from the eval's traces.db, when it is there)")
    args, passed_on = parser.parse_known_args()
    folder, split, rows = eval_split(args)
    db = open_traces(folder / "traces.db") if (folder / "traces.db").is_file() else None
    stored = {task: rows[(task, "refine")] for task in split if (task, "refine") in rows}
    # A first attempt that passes its visible check ends the run after one call.
    failed = [task for task, row in stored.items() if not row["visible"] or row["calls"] > 1]
    if not failed:
        sys.exit(f"{args.bench}: no task of the split has a stored refine row and a failed first attempt")
    out = args.run_out or RESULTS / "experiments" / "refine_change" / args.name / args.bench
    if not args.report_only:
        strategies = f"refine,{MATCHED}" if args.baseline else "refine"
        run_subset(args.bench, strategies, failed, out, passed_on)
    new_rows = {(r["task"], r["strategy"]): r for r in read_rows(out / "rows.jsonl")}
    after = {task: row for (task, strategy), row in new_rows.items() if strategy == "refine"}
    ran = [task for task in failed if task in after]
    before = {task: rows[(task, "refine")] for task in ran}
    db_after = open_traces(out / "traces.db") if (out / "traces.db").is_file() else None
    same_first = "" if db is None or db_after is None else "; the first attempt is the same in both runs on " + str(
        sum(candidates(db, before[t]["run_ids"][0])[:1] == candidates(db_after, after[t]["run_ids"][0])[:1]
            for t in ran))
    print(f"{args.bench} tasks {args.skip + 1}-{args.skip + len(split)}: {len(failed)} whose first attempt failed its "
          f"visible check, {len(ran)} of them run{same_first}")
    solved, tokens = {}, {}
    for name, got in (("stored refine (before)", before), ("refine now (after)", after)):
        solved[name] = {t for t in ran if got[t]["passed"]}
        tokens[name], calls = sum(got[t]["tokens"] for t in ran), sum(got[t]["calls"] for t in ran)
        visible_only = sum(got[t]["visible"] and not got[t]["passed"] for t in ran)
        print(f"  {name}: {len(solved[name])} solved, {visible_only} visible only, {tokens[name]} tokens "
              f"({tokens[name] / len(ran):.1f} per task), {calls} calls")
    was, now = solved.values()
    spent_before, spent_after = tokens.values()
    ratio = spent_after / max(spent_before, 1)
    print(f"  only before: {len(was - now)}, only after: {len(now - was)}, exact McNemar "
          f"p = {mcnemar(len(was - now), len(now - was)):.3g}; tokens after/before {ratio:.2f}x")
    complete = len(ran) == len(failed)
    if complete:
        whole = sum(row["passed"] for row in stored.values())
        print(f"  the whole split: before {whole} solved, after {whole - len(was) + len(now)}")
    whole_split = split if complete else None
    if all((t, MATCHED) in new_rows for t in ran):
        report_baseline(rows, new_rows, whole_split, ran, now)
    elif db is not None and all((t, MATCHED) in rows for t in ran):
        report_matched(db, rows, whole_split, ran, after, now)
    else:
        print(f"  {MATCHED}: neither the eval's traces.db to replay it nor a run of it here (--baseline)")


def report_baseline(rows: dict[tuple[str, str], dict[str, Any]], new_rows: dict[tuple[str, str], dict[str, Any]],
                    split: list[str] | None, ran: list[str], now: set[str]) -> None:
    """`resample@=refine` as this run ran it at refine's new tokens (`--baseline`), beside refine; with the whole
    `split` when every task whose first attempt failed has run (else `split` is None)."""
    wins = {t for t in ran if new_rows[(t, MATCHED)]["passed"]}
    spent = sum(new_rows[(t, MATCHED)]["tokens"] for t in ran)
    print(f"  {MATCHED} run at refine's tokens now: {len(wins)} solved, {spent} tokens; only refine "
          f"{len(now - wins)}, only {MATCHED} {len(wins - now)}, exact McNemar p = "
          f"{mcnemar(len(now - wins), len(wins - now)):.3g}")
    if split is not None:
        print_whole_split(rows, split, ran, wins)


def print_whole_split(rows: dict[tuple[str, str], dict[str, Any]], split: list[str], ran: list[str],
                      wins: set[str]) -> None:
    """The split's `resample@=refine` figure with the tasks that `ran` swapped for their new results (`wins`)."""
    whole = sum(row["passed"] for (task, strategy), row in rows.items() if strategy == MATCHED and task in split)
    print(f"  the whole split: {MATCHED} at refine's tokens now "
          f"{whole - sum(rows[(t, MATCHED)]['passed'] for t in ran) + len(wins)} solved")


def report_matched(db: sqlite3.Connection, rows: dict[tuple[str, str], dict[str, Any]], split: list[str] | None,
                   ran: list[str], after: dict[str, dict[str, Any]], now: set[str]) -> None:
    """`resample@=refine` at the tokens refine now spends on each task that `ran`, from its stored samples, beside
    refine; with the whole `split` when every task whose first attempt failed has run (else `split` is None)."""
    agree, stored = replayed(db, rows)
    print(f"  {MATCHED} replayed from its stored samples at the budgets they ran at: {agree} of {stored} rows "
          "reproduced (solved and tokens)")
    derived = {t: matched(db, rows[(t, MATCHED)], after[t]["tokens"]) for t in ran}
    solved = {t: got for t, (got, _) in derived.items()}
    open_ = [t for t, got in solved.items() if got is None]
    wins = {t for t, got in solved.items() if got}
    decided = set(ran) - set(open_)
    only_refine = now & decided - wins
    print(f"  {MATCHED} at refine's tokens now, from its stored samples: {len(wins)} solved, "
          f"{sum(tokens for _, tokens in derived.values())} tokens"
          + (f", {len(open_)} undecided (the budget reaches past the stored samples: {', '.join(open_)})"
             if open_ else "")
          + f"; refine now against it on the {len(decided)} decided: only refine {len(only_refine)}, "
          f"only {MATCHED} {len(wins - now)}, exact McNemar p = {mcnemar(len(only_refine), len(wins - now)):.3g}")
    if split is not None:
        print_whole_split(rows, split, ran, wins)


if __name__ == "__main__":
    main()
