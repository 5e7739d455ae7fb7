"""Writes bench/data/humanevalplus.jsonl.gz, the HumanEval+ inputs `reflexa eval humaneval+:PATH` scores on.

    .venv/bin/python bench/humanevalplus_data.py EVALPLUS_GIT_DIR

EVALPLUS_GIT_DIR is a clone of github.com/evalplus/evalplus (Apache-2.0); the data is read from its commit
COMMIT, whose HumanEvalPlusInputs.jsonl holds 100 extra inputs for each of 161 problems (not 39, 55 and 95)
and HumanEvalPlus.jsonl each problem's reference solution and input contract. An input is kept when the
reference, with its contract, accepts it within a second, and HumanEval's own canonical solution returns
the same on it (compared as the score compares); the script prints how many each rule dropped.
"""

from __future__ import annotations

import copy
import gzip
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from reflexa.eval.dataset import humaneval_problems, same_result  # noqa: E402

COMMIT = "8939a533d9fba07b4ae77e645a9b1a2c2e4b335e"
OUT = Path(__file__).parent / "data" / "humanevalplus.jsonl.gz"
SECONDS = 1


def blob(repo: Path, name: str) -> list[dict[str, Any]]:
    text = subprocess.run(["git", "-C", str(repo), "show", f"{COMMIT}:{name}"], check=True, capture_output=True,
                          text=True).stdout
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def function(source: str, name: str) -> Any:
    namespace: dict[str, Any] = {}
    exec(compile(source, name, "exec"), namespace)
    return namespace[name]


def timed(fn: Any, args: list[Any]) -> Any:
    def expire(*_: Any) -> None:
        raise TimeoutError

    signal.signal(signal.SIGALRM, expire)
    signal.alarm(SECONDS)
    try:
        return fn(*copy.deepcopy(args))
    finally:
        signal.alarm(0)


def main(repo: Path) -> None:
    problems = {p["task_id"]: p for p in humaneval_problems()}
    references = blob(repo, "HumanEvalPlus.jsonl")
    inputs = {row["task_id"].replace("_", "/"): row["inputs"] for row in blob(repo, "HumanEvalPlusInputs.jsonl")}
    dropped = {"refused by the contract or failing in the reference": 0, "canonical solution disagrees": 0}
    rows = []
    for index, ref in enumerate(references):
        task_id = f"HumanEval/{index}"
        if task_id not in inputs:
            continue
        p = problems[task_id]
        entry = p["entry_point"]
        guarded = function(p["prompt"] + ref["contract"] + ref["reference"], entry)
        canonical = function(p["prompt"] + p["canonical_solution"], entry)
        kept = []
        for args in inputs[task_id]:
            try:
                want = timed(guarded, args)
            except BaseException:  # noqa: BLE001 - a contract's refusal, a crash or the alarm: the input goes
                dropped["refused by the contract or failing in the reference"] += 1
                continue
            try:
                agrees = same_result(timed(canonical, args), want, ref["atol"])
            except BaseException:  # noqa: BLE001
                agrees = False
            if not agrees:
                dropped["canonical solution disagrees"] += 1
                continue
            kept.append(args)
        rows.append({"task_id": task_id, "inputs": kept, "reference": p["prompt"] + ref["reference"],
                     "atol": ref["atol"], "source": f"evalplus/evalplus@{COMMIT[:7]}"})
    OUT.parent.mkdir(exist_ok=True)
    text = "".join(json.dumps(row) + "\n" for row in rows)
    OUT.write_bytes(gzip.compress(text.encode(), mtime=0))
    kept_total = sum(len(row["inputs"]) for row in rows)
    print(f"{len(rows)} problems, {kept_total} inputs kept; dropped: {dropped}; wrote {OUT}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]))
