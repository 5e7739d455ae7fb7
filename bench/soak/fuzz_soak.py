"""A longer soak of the reply fuzz suite (tests/reliability/test_fuzz_replies.py): many more examples per
loop than CI runs, with Hypothesis's random seeds instead of CI's fixed ones, and a count of what ran.

    .venv/bin/python bench/soak/fuzz_soak.py [--examples 2000] [--out bench/results/soak/fuzz_soak.json]

Every run must end with a stop reason in the store (an uncaught exception or a run left `running` fails
the suite). Prints pytest's summary, then per loop: runs, replies given, replies the runs used, and stop
reasons; writes the same as JSON to --out. A failure prints the shrunk reply list that crashed a loop.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=2000, help="examples per loop (five loops)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/soak/fuzz_soak.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        log = Path(scratch) / "runs.jsonl"
        env = {**os.environ, "REFLEXA_FUZZ_EXAMPLES": str(args.examples), "REFLEXA_FUZZ_RANDOM": "1",
               "REFLEXA_FUZZ_LOG": str(log)}
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--timeout", "0",
                               "tests/reliability/test_fuzz_replies.py"], cwd=ROOT, env=env, check=False)
        rows = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    summary = {"examples_per_loop": args.examples, "suite_passed": done.returncode == 0, "loops": {}}
    for loop in sorted({row["loop"] for row in rows}):
        mine = [row for row in rows if row["loop"] == loop]
        summary["loops"][loop] = {
            "runs": len(mine), "replies_given": sum(r["replies"] for r in mine),
            "replies_used": sum(r["used"] for r in mine),
            "stops": dict(collections.Counter(r["stop"] for r in mine).most_common())}
    summary["runs"] = len(rows)
    summary["replies_used"] = sum(r["used"] for r in rows)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    sys.exit(done.returncode)


if __name__ == "__main__":
    main()
