"""The README's loop examples on the default models, as a new user runs them from a fresh clone.

Every `reflexa refine|react|trials|research|plan` line of the README's ```sh blocks runs as written, with
`--json` added, in a copy of examples/ beside the shop database the README makes; each gives a row: the
command, its exit code, stop reason, answer, tokens and seconds (its trace goes to traces.db beside the rows).
Rows are appended as they finish and a rerun skips the commands already there, so a stopped run loses nothing.

    .venv/bin/python bench/readme_examples.py                 # rows in bench/results/readme/rows.jsonl
    .venv/bin/python bench/readme_examples.py --only react    # the lines of one command
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import RESULTS, ROOT, append_row, load_shop, read_rows

LOOPS = ("refine", "react", "trials", "research", "plan")
SECONDS = 1800
"""One example's wall-clock bound: a run past it is recorded as timed out, not waited on."""


def examples(readme: Path) -> list[str]:
    """The README's loop command lines, in order: continuation lines joined, comments left out."""
    found = []
    for block in re.findall(r"```sh\n(.*?)```", readme.read_text(encoding="utf-8"), re.S):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            words = shlex.split(line, comments=True)
            if len(words) > 1 and words[0] == "reflexa" and words[1] in LOOPS:
                found.append(shlex.join(words))
    return found


def run(command: str, workdir: Path, trace: Path, model: str | None = None) -> dict[str, object]:
    """One example run as written (with --json, and `--model` when one is given), traced to `trace`: its row."""
    reflexa = Path(sys.executable).with_name("reflexa")
    argv = [str(reflexa), *shlex.split(command)[1:], "--json", *(["--model", model] if model else [])]
    started = time.monotonic()
    try:
        done = subprocess.run(argv, cwd=workdir, capture_output=True, text=True, timeout=SECONDS,
                              env={**os.environ, "REFLEXA_TRACE": str(trace)})
    except subprocess.TimeoutExpired:
        return {"command": command, "exit": None, "stop_reason": "TIMED_OUT", "seconds": SECONDS}
    seconds = round(time.monotonic() - started, 1)
    try:
        result = json.loads(done.stdout)
    except json.JSONDecodeError:
        return {"command": command, "exit": done.returncode, "stop_reason": None, "seconds": seconds,
                "error": (done.stderr or done.stdout)[-500:]}
    usage = result.get("total_usage") or {}
    return {"command": command, "exit": done.returncode, "stop_reason": result.get("stop_reason"),
            "answer": (result.get("best") or result.get("output") or "")[:300],
            "tokens": usage.get("input_tokens", 0) + usage.get("output_tokens", 0),
            "seconds": seconds, "run_id": result.get("run_id")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=LOOPS, help="Only the lines of this command.")
    parser.add_argument("--model", help="A model spec for every example instead of each loop's default.")
    parser.add_argument("--out", type=Path, default=RESULTS / "readme", help="Where rows.jsonl goes.")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)  # the trace store goes there before the first row does
    rows_file = args.out / "rows.jsonl"
    done = {row["command"] for row in read_rows(rows_file)}
    todo = [c for c in examples(ROOT / "README.md") if c not in done and (not args.only or c.split()[1] == args.only)]
    with tempfile.TemporaryDirectory(prefix="reflexa-readme-") as tmp:
        workdir = Path(tmp)
        shutil.copytree(ROOT / "examples", workdir / "examples")
        load_shop(workdir / "shop.sqlite")
        for command in todo:
            row = run(command, workdir, args.out.resolve() / "traces.db", args.model)
            append_row(rows_file, row)
            print(f"{row['stop_reason']} (exit {row['exit']}, {row.get('tokens', '-')} tokens, {row['seconds']} s): "
                  f"{command}", flush=True)


if __name__ == "__main__":
    main()
