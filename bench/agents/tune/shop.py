"""The shop fault suite's questions (bench/faults.py) as eval tasks (a tuning domain): the generated shop
database of examples/shop, asked with the bundled SQL tools, and over MCP through bench/faults_server.py with
each of its faults (the first two calls fail, the first call outlives its timeout, noisy output)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from kit import Question  # noqa: E402

BENCH = Path(__file__).resolve().parents[2]
SERVER = "python3 ../../../../faults_server.py --db domain.sqlite --fault {fault}"
"""Run in the built domain's folder, bench/results/eval/agents-tune/shop/: the fault suite's MCP server."""


def build_db(path: Path) -> None:
    spec = importlib.util.spec_from_file_location("make_shop", BENCH.parent / "examples" / "shop" / "make_shop.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    module.build(path)



sys.path.insert(0, str(BENCH))
from faults import QUESTIONS as SUITE  # noqa: E402 - the fault suite's questions and answer keys

NAMES = ["orders", "lisbon", "tent", "refunds", "top-city", "cancelled", "priciest", "top-customer"]
KINDS = ["count", "filter", "lookup", "count", "argmax", "filter", "argmax", "join"]
QUESTIONS = [Question(f"{name}-{fault}", text, sql, kind, **({"tools": "sql"} if fault == "none" else
                                                           {"tools": "mcp", "fault": fault,
                                                            "server": SERVER.format(fault=fault)}))
             for fault in ("none", "flaky", "slow", "verbose")
             for name, kind, (text, sql) in zip(NAMES, KINDS, SUITE, strict=True)]
