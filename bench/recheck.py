"""A strategy's row over a whole bench on newer code, from a recheck of the problems that code can change.

    .venv/bin/python bench/recheck.py --full mbpp --recheck mbpp-recheck-final --strategy refine

A recheck (`bench/mbpp.py --strategies refine --ids IDS --name NAME`) re-runs the problems whose first
attempt fails its visible check. On every other problem `refine` stops after that first attempt, one
generator call on a prompt the recheck's code leaves as it was, so the full run's row stands for it. This
takes the recheck's rows where it has them and the full run's elsewhere, refuses a full-run row that is not
such a one-call pass, and writes the summary beside the single attempt's to bench/results/RECHECK-merged.json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from coding import load_rows, summarise

RESULTS = Path(__file__).parent / "results"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", default="mbpp", help="file stem of the full run's rows")
    parser.add_argument("--recheck", required=True, help="file stem of the recheck's rows")
    parser.add_argument("--strategy", default="refine")
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args()
    full = load_rows(args.results / f"{args.full}-rows.jsonl")
    rechecked = {r.id: r for r in load_rows(args.results / f"{args.recheck}-rows.jsonl") if r.strategy == args.strategy}
    kept = [r for r in full if r.strategy == args.strategy and r.id not in rechecked]
    if moved := [r.id for r in kept if r.calls != 1 or r.stop != "PASSED"]:
        raise SystemExit(f"{len(moved)} problems not rechecked could move on newer code: {', '.join(moved[:5])}")
    single = [r for r in full if r.strategy == "single"]
    baseline = {r.id: r.passed for r in single}
    merged = kept + list(rechecked.values())
    report = {"full": args.full, "recheck": args.recheck, "rechecked": len(rechecked), "kept": len(kept),
              "strategies": {"single": summarise(single, baseline), args.strategy: summarise(merged, baseline)}}
    (args.results / f"{args.recheck}-merged.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
