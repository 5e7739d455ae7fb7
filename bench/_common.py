"""What the benchmark harnesses share: where a run's files go, rows that resume, reports, stored traces, the
shop database with its answer check, the shared data sets, and the evals' way into `reflexa eval`.

A run's files: each harness writes under bench/results/<bench>/ (--results), named by --name: rows.jsonl,
report.json and traces.db for the latest run, NAME-rows.jsonl, NAME-report.json and NAME-traces.db for a
named one (a recheck, another model). Rows are appended as they finish, and a rerun skips the ones already
there, so a run that is stopped loses nothing. Trace databases are not committed (a run writes them again);
one that a figure needs is kept compressed as NAME-traces.db.xz, and `trace_db` reads either.

HumanEval, MBPP and HotpotQA (bench/humaneval.py, bench/mbpp.py, bench/hotpotqa.py) are `reflexa eval` with
their dataset and strategies: `eval_bench` below.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import lzma
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
RESULTS = BENCH / "results"
DATA = Path(os.environ.get("REFLEXA_DATA", ROOT.parent / "shared" / "data"))
"""The shared data sets (MBPP, HotpotQA): ../shared/data beside the checkout, or $REFLEXA_DATA."""
MBPP = DATA / "mbpp" / "mbpp-py-dev.jsonl"
HOTPOTQA = DATA / "hotpotqa" / "hotpotqa-distractor-dev.jsonl"


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


def suite_args(parser: argparse.ArgumentParser, bench: str, strategies: Iterable[str], unit: str,
               limit: int = 0) -> None:
    """The options faults.py and plan.py share: which strategies, which of the suite's items, and where the
    run's files go."""
    parser.add_argument("--strategies", default=",".join(strategies), help=", ".join(strategies))
    parser.add_argument("--limit", type=int, default=limit, help=f"only the first N {unit} (0: all)")
    parser.add_argument("--skip", type=int, default=0, help=f"start after this many {unit} (a second process on "
                        "the other core can take the later ones; both append to the same rows file)")
    parser.add_argument("--results", type=Path, default=RESULTS / bench,
                        help=f"folder for the run's files (default: bench/results/{bench})")
    parser.add_argument("--name", default="", help="the run's name: NAME-rows.jsonl, NAME-report.json "
                        "(default: none, the latest run: rows.jsonl, report.json)")


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


# The benches that are evals (bench/humaneval.py, bench/mbpp.py, bench/hotpotqa.py) ----------------------

CODING_STRATEGIES = "single,resample@3,refine,resample@=refine,refine:reflect=off"
"""One attempt; three fresh samples filtered by the visible check; refine; fresh samples on refine's tokens for
each problem; refine with no reflector call (docs/eval.md describes each)."""


def eval_bench(dataset: str, bench: str, argv: list[str], strategies: str = CODING_STRATEGIES,
               splits: dict[str, tuple[str, ...]] | None = None) -> None:
    """`reflexa eval DATASET` as a bench: its strategies, rows and traces in bench/results/eval/BENCH, the
    report as Markdown. An option in `argv` replaces the bench's own; the others pass through. `--split
    NAME` stands for the options `splits` gives NAME (the tuning split, the confirming one)."""
    from reflexa.cli.app import main

    argv = _split(argv, splits or {})
    given = {arg.split("=", 1)[0] for arg in argv if arg.startswith("-")}
    out = _value(argv, "--out", "-o") or str(RESULTS / "eval" / bench)
    args = ["eval", dataset]
    if not given & {"--strategies", "-s"}:
        args += ["--strategies", strategies]
    if not given & {"--out", "-o"}:
        args += ["--out", out]
    if "--trace" not in given:
        args += ["--trace", str(Path(out) / "traces.db")]
    if not given & {"--json", "--markdown"}:
        args.append("--markdown")
    sys.argv = ["reflexa", *args, *argv]
    main()


def run_subset(bench: str, strategies: str, tasks: list[str], out: Path, passed_on: list[str]) -> None:
    """Run a coding bench's `strategies` on `tasks` alone, as an eval of its own in `out` (resumable; the
    options in `passed_on` go to the bench): how an experiment measures a change on the tasks it moves."""
    subprocess.run([sys.executable, str(BENCH / f"{bench}.py"), "-s", strategies, "--ids", ",".join(tasks),
                    "--out", str(out), "--json", *passed_on], check=True, stdout=subprocess.DEVNULL)


def open_traces(path: Path) -> sqlite3.Connection:
    """A run's trace database, read-only; an exit that says to run the bench first when it is not there
    (trace databases are not committed)."""
    if not path.is_file():
        raise SystemExit(f"no traces at {path}: run the bench that writes them first")
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def split_args(parser: argparse.ArgumentParser) -> None:
    """The options of a script that reads a coding eval's rows: the bench, the part of its dataset
    (--skip, --limit), the eval's folder (--out)."""
    parser.add_argument("bench", choices=["humaneval", "mbpp"])
    parser.add_argument("--skip", type=int, default=0)
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--out", type=Path, help="the eval's folder (default: bench/results/eval/BENCH)")


def eval_split(args: argparse.Namespace) -> tuple[Path, list[str], dict[tuple[str, str], dict[str, Any]]]:
    """For `split_args`' options: the eval's folder, the split's tasks in the dataset's order, and the eval's
    rows by (task, strategy)."""
    folder = args.out or RESULTS / "eval" / args.bench
    tasks = [json.loads(line)["id"] for line in (folder / "dataset.jsonl").open()]
    split = tasks[args.skip:args.skip + args.limit] if args.limit else tasks[args.skip:]
    return folder, split, {(r["task"], r["strategy"]): r for r in read_rows(folder / "rows.jsonl")}


def _split(argv: list[str], splits: dict[str, tuple[str, ...]]) -> list[str]:
    """`argv` with `--split NAME` replaced by that split's options."""
    name = _value(argv, "--split")
    if name is None:
        return argv
    if name not in splits:
        sys.exit(f"error: --split takes {' or '.join(splits) or 'nothing here'}, not {name!r}")
    i = next(i for i, arg in enumerate(argv) if arg.partition("=")[0] == "--split")
    rest = argv[:i] + argv[i + (1 if "=" in argv[i] else 2):]
    return [*rest, *splits[name]]


def _value(argv: list[str], *flags: str) -> str | None:
    """The value `argv` gives one of `flags` (`--out DIR` or `--out=DIR`), if any."""
    for i, arg in enumerate(argv):
        name, eq, value = arg.partition("=")
        if name in flags:
            return value if eq else (argv[i + 1] if i + 1 < len(argv) else None)
    return None
