"""A longer soak of SIGKILL-and-resume (tests/reliability/test_kill_every_loop.py) over refine, react,
research and plan: more points, two kills in a row, and kills at random moments (inside a model call, a
check, a tool or a store write) as well as at step boundaries.

    .venv/bin/python bench/soak/kill_soak.py [--seeds 25] [--out bench/results/soak/kill_soak.jsonl]

Each case runs the test's child process on its deterministic model: killed once or twice, then resumed
until it ends. Compared with an uninterrupted run's ledger it counts the model calls, checks and searches
done beyond it (a kill at a boundary leaves nothing in flight, so none may be added; a kill at a random
moment may add the one in flight) and the side effects done twice (never allowed). A row is written per
case as it ends; a rerun skips the cases already written. The summary goes to
stdout and to --out's `-report.json`.
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "reliability"))

from _common import append_row, read_rows, write_report  # noqa: E402
from test_kill_every_loop import child, ledger  # noqa: E402

LOOPS = ("refine", "react", "research", "plan")
MODES = ("boundary-twice", "random-moment", "random-moment-twice")
MAX_RESUMES = 5
"""Resumes a case gets to end after its kills (one is enough unless a resume is killed again)."""


def clean_run(folder: Path, loop: str) -> tuple[collections.Counter[str], int, float]:
    """The uninterrupted run's ledger, its step count and its time."""
    done = child(folder, loop, 0)
    report = json.loads(done.stdout)
    return ledger(folder), report["steps"], report["seconds"]


def one_case(folder: Path, loop: str, mode: str, rng: random.Random, steps: int, seconds: float) -> dict:
    """Kill, resume, and tell what was done beyond the uninterrupted run."""
    kills: list[str] = []
    final = None
    for _ in range(2 if mode.endswith("twice") else 1):
        kill = str(rng.randint(1, steps)) if mode.startswith("boundary") else f"t{rng.uniform(0, seconds):.4f}"
        run = child(folder, loop, kill)
        if run.returncode != -9:  # it ended before the kill came: the case is over
            final = json.loads(run.stdout)["stop"] if run.returncode == 0 else f"exit {run.returncode}"
            break
        kills.append(kill)
    for _ in range(MAX_RESUMES if final is None else 0):
        run = child(folder, loop, 0)
        if run.returncode == 0:
            final = json.loads(run.stdout)["stop"]
            break
    return {"loop": loop, "mode": mode, "kills": kills, "final": final or "did not end",
            "ledger": dict(ledger(folder))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=25, help="cases per loop and mode")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/soak/kill_soak.jsonl")
    args = parser.parse_args()
    done = {(r["loop"], r["mode"], r["seed"]) for r in read_rows(args.out)}
    with tempfile.TemporaryDirectory(prefix="reflexa-kill-soak-") as tmp:
        for loop in LOOPS:
            clean = Path(tmp) / f"{loop}-clean"
            clean.mkdir()
            expected, steps, seconds = clean_run(clean, loop)
            for mode in MODES:
                for seed in range(args.seeds):
                    if (loop, mode, seed) in done:
                        continue
                    folder = Path(tmp) / f"{loop}-{mode}-{seed}"
                    folder.mkdir()
                    row = one_case(folder, loop, mode, random.Random(f"{loop}-{mode}-{seed}"), steps, seconds)
                    got = collections.Counter(row.pop("ledger"))
                    row.update(seed=seed, extra=dict(got - expected), missing=dict(expected - got),
                               repeated_effects=sum(n - 1 for what, n in got.items()
                                                    if what.startswith("effect:") and n > 1))
                    append_row(args.out, row)
    report = write_report(args.out.with_name(args.out.stem + "-report.json"), summarise(read_rows(args.out)))
    print(json.dumps(report, indent=2))


def summarise(rows: list[dict]) -> dict:
    """Per loop and mode: cases, kills that landed, final stop reasons, work redone beyond what the kills
    left in flight, and side effects repeated."""
    summary: dict[str, dict] = {}
    for row in rows:
        entry = summary.setdefault(f"{row['loop']} {row['mode']}", {
            "cases": 0, "kills": 0, "final": collections.Counter(), "redone_calls": 0, "redone_checks": 0,
            "redone_searches": 0, "cases_redoing_more_than_in_flight": 0, "repeated_effects": 0})
        entry["cases"] += 1
        entry["kills"] += len(row["kills"])
        entry["final"][row["final"]] += 1
        extra = row["extra"]
        calls = sum(n for what, n in extra.items() if what.startswith("call:"))
        entry["redone_calls"] += calls
        entry["redone_checks"] += extra.get("check", 0)
        entry["redone_searches"] += extra.get("search", 0)
        # In flight at a kill: nothing at a step boundary; at most one call, check or search at a random moment.
        allowed = 0 if row["mode"].startswith("boundary") else len(row["kills"])
        if calls + extra.get("check", 0) + extra.get("search", 0) > allowed:
            entry["cases_redoing_more_than_in_flight"] += 1
        entry["repeated_effects"] += row["repeated_effects"]
    return {key: {**value, "final": dict(value["final"])} for key, value in sorted(summary.items())}


if __name__ == "__main__":
    main()
