"""The agent benchmark through `reflexa eval`: react, trials and plan on databases and tools nobody tuned them
on, against the tutorial loop and one react.

    .venv/bin/python bench/agents.py --split tune [any `reflexa eval` option]
    .venv/bin/python bench/agents.py --split confirm [any `reflexa eval` option]
    .venv/bin/python bench/agents.py --split tune --build-only      # write the dataset, run nothing
    .venv/bin/python bench/agents.py --split confirm --every 3 -s react,tutorial   # every third react task

Each split is a set of domains (bench/agents/tune/, bench/agents/confirm/), each a database whose names a
model does not guess, an API of @tools over it (lookups by name, lists by id) and the same API served over
MCP, with questions of every kind (a count, a filtered count, a lookup by name, an argmax, a join, chains of
two or three tool calls, composite ones for plan) and faults as real services raise them (a connection
reset, a 502, a 429, a stalled call, noisy output, raw driver errors). The tuning split also holds the shop
fault suite's questions. The script writes every domain's folder and the dataset to
bench/results/eval/agents-SPLIT/ (dataset.jsonl: a task spec a line, paths relative to it), then runs
`reflexa eval` on it with the agent strategies; rows, report and traces go there too. An option given here
replaces the bench's own (`--strategies react,tutorial`); the rest pass through (`--report-only`, `-c 2`,
`-m local:qwen1.5b`, `--ids`). The tuning domains were read while reflexa's agent rules were chosen; the
confirming ones were not.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

from _common import RESULTS, eval_bench

AGENTS = Path(__file__).resolve().parent / "agents"
sys.path.insert(0, str(AGENTS))
import kit  # noqa: E402 - beside this file

STRATEGIES = "react,react:reflect=off,tutorial,trials,plan,one-react"
"""react with and without reflection, the tutorial loop (every step in the prompt, no reflection), trials of
react on the react tasks, plan and one react on the composite ones."""


def domains(split: str) -> list[Path]:
    return sorted(p for p in (AGENTS / split).glob("*.py") if not p.name.startswith("_"))


def build(split: str, out: Path) -> Path:
    """Write every domain of `split` under OUT/ and the dataset OUT/dataset.jsonl; return the dataset."""
    lines = []
    for path in domains(split):
        spec = importlib.util.spec_from_file_location(f"agents_{split}_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        spec.loader.exec_module(module)  # type: ignore[union-attr]
        lines += kit.build(module, out / path.stem)
    ids = [line["id"] for line in lines]
    if len(set(ids)) != len(ids):
        raise SystemExit("two tasks share an id")
    dataset = out / "dataset.jsonl"
    text = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
    if not dataset.exists() or dataset.read_text(encoding="utf-8") != text:
        dataset.write_text(text, encoding="utf-8")
    return dataset


def main(argv: list[str]) -> None:
    split = "tune"
    if "--split" in argv:
        i = argv.index("--split")
        split, argv = argv[i + 1], argv[:i] + argv[i + 2:]
    if split not in ("tune", "confirm"):
        raise SystemExit("--split takes tune or confirm")
    out = RESULTS / "eval" / f"agents-{split}"
    out.mkdir(parents=True, exist_ok=True)
    dataset = build(split, out)
    if "--build-only" in argv:
        print(dataset)
        return
    if "--every" in argv:  # a systematic sample of the react tasks, for a run shorter than the whole split
        i = argv.index("--every")
        given, argv = argv[i + 1:i + 2], argv[:i] + argv[i + 2:]
        if not given or not given[0].isdigit() or int(given[0]) < 1:
            raise SystemExit("--every takes a whole number of at least 1")
        every = int(given[0])
        lines = [json.loads(line) for line in dataset.read_text(encoding="utf-8").splitlines()]
        argv += ["--ids", ",".join([line["id"] for line in lines if line["loop"] == "react"][::every])]
    # The tasks' validators and MCP servers run `python3`: this interpreter, whose environment has reflexa.
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    eval_bench(str(dataset), f"agents-{split}", argv, strategies=STRATEGIES)


if __name__ == "__main__":
    main(sys.argv[1:])
