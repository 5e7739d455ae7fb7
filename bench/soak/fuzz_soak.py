"""A longer soak of the reply fuzz suite (tests/reliability/test_fuzz_replies.py): many more examples per
loop than CI runs, with Hypothesis's random seeds instead of CI's fixed ones.

    .venv/bin/python bench/soak/fuzz_soak.py [--examples 5000]

Prints pytest's summary; a failure prints the shrunk reply list that crashed a loop.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=5000, help="examples per loop (refine, react, research)")
    args = parser.parse_args()
    env = {**os.environ, "REFLEXA_FUZZ_EXAMPLES": str(args.examples), "REFLEXA_FUZZ_RANDOM": "1"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--timeout",
            "0",
            "tests/reliability/test_fuzz_replies.py",
        ],
        cwd=ROOT,
        env=env,
    )
    sys.exit(done.returncode)


if __name__ == "__main__":
    main()
