"""Peak memory of a `react` run: the scripted model over the bundled SQL toolset on the generated shop
database, in a fresh process, against a process that only imports reflexa (and a bare interpreter).

    .venv/bin/python bench/speed/react_memory.py [--steps 20] [--out bench/results/speed/react_memory.json]

Each figure is the peak RSS of its own fresh process (`resource.getrusage(RUSAGE_SELF).ru_maxrss`, KiB
on Linux), with VmHWM from /proc beside it. Linux folds the image before exec (this parent, as forked)
into ru_maxrss, so a process smaller than this parent reads as the parent's size there; VmHWM counts the
new image only. The database is built here, not in the measured process, and the run stores its trace
in SQLite, as the CLI does. Target: < 150 MB without embeddings,
and nothing loads torch: embedding similarity is opt-in, so the run must end with neither `torch` nor
`sentence_transformers` imported.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
TARGET_MB = 150
HEAVY = ("torch", "sentence_transformers")
"""Modules the run must not load (the embeddings extra's)."""
REPORTED = ("pydantic", "jsonschema", "numpy", "llama_cpp", "openai", "anthropic", "typer", "rich")
"""Modules worth knowing about when a figure moves: which of them the process ended up with."""


def figures() -> dict:
    """This process's peak RSS both ways, and which of the modules of interest it loaded."""
    hwm = None
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                hwm = int(line.split()[1])  # kB
    except OSError:
        pass  # not Linux: ru_maxrss alone
    return {"peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "vm_hwm_kib": hwm,
            "modules": {name: name in sys.modules for name in (*HEAVY, *REPORTED)}}


def build_shop(path: Path) -> Path:
    # Not bench/_common.load_shop: importing _common loads reflexa into this parent, whose image Linux counts
    # in a fresh child's ru_maxrss, so the bare and import figures would read the parent's size.
    spec = importlib.util.spec_from_file_location("make_shop", ROOT / "examples" / "shop" / "make_shop.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build(path)


QUERIES = [
    "SELECT COUNT(*) FROM orders",
    "SELECT status, COUNT(*) FROM orders GROUP BY status",
    "SELECT city, COUNT(*) FROM customers GROUP BY city ORDER BY 2 DESC",
    "SELECT category, COUNT(*) FROM products GROUP BY category",
    "SELECT substr(ordered_at, 1, 4) AS year, COUNT(*) FROM orders GROUP BY year",
    "SELECT p.name, SUM(i.quantity) FROM order_items i JOIN products p ON p.id = i.product_id GROUP BY p.name",
    "SELECT ROUND(SUM(quantity * unit_price), 2) FROM order_items",
    "SELECT COUNT(*), ROUND(SUM(amount), 2) FROM refunds",
    "SELECT customer_id, COUNT(*) FROM orders GROUP BY customer_id ORDER BY 2 DESC LIMIT 5",
    "SELECT name, price FROM products ORDER BY price DESC LIMIT 3",
    "SELECT MIN(joined), MAX(joined) FROM customers",
    "SELECT MIN(ordered_at), MAX(ordered_at) FROM orders",
    "SELECT o.status, ROUND(AVG(i.quantity), 2) FROM orders o JOIN order_items i ON i.order_id = o.id "
    "GROUP BY o.status",
]


def replies(steps: int) -> list[dict]:
    """`steps - 1` distinct tool calls (no repeat for the gate to flag), then a final answer."""
    calls: list[tuple[str, dict]] = [("list_tables", {})]
    calls += [("describe_table", {"table": t}) for t in ("customers", "products", "orders", "order_items", "refunds")]
    calls += [("query", {"sql": sql}) for sql in QUERIES]
    n = 0
    while len(calls) < steps - 1:  # more steps than the list: distinct counting queries
        n += 1
        calls.append(("query", {"sql": f"SELECT COUNT(*) FROM orders WHERE id % {n + 1} = 0"}))
    out = [{"action": {"thought": f"step {i}: look at {tool} {json.dumps(args)}", "tool": tool, "args": args}}
           for i, (tool, args) in enumerate(calls[: steps - 1], start=1)]
    out.append({"action": {"thought": "I have what I need", "tool": "final_answer", "args": {"answer": "400"}}})
    return out


def child_react(steps: int, work: Path) -> dict:
    from reflexa import ScriptedModel, Session, SQLiteStore, react
    from reflexa.tools import ToolRegistry, sql_tools

    session = Session(model=ScriptedModel(replies(steps)), store=SQLiteStore(work / "trace.db"))
    started = time.perf_counter()
    tools = ToolRegistry(sql_tools(work / "shop.sqlite", discovery=True))  # the scripted calls use discovery
    result = react("How many orders are there?", tools, session=session, max_steps=steps)
    seconds = time.perf_counter() - started
    return {"steps": result.iterations, "stop_reason": str(result.stop_reason), "seconds": round(seconds, 3),
            **figures()}


def child_import() -> dict:
    import reflexa  # noqa: F401

    return figures()


def measure(kind: str, steps: int, work: Path) -> dict:
    """One figure from its own fresh process."""
    out = subprocess.run([sys.executable, __file__, "--child", kind, "--steps", str(steps), "--work", str(work)],
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        sys.exit(f"the {kind} process failed:\n{out.stderr}")
    return json.loads(out.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "speed" / "react_memory.json")
    parser.add_argument("--child", choices=("react", "import", "bare"), help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run = {"react": lambda: child_react(args.steps, args.work), "import": child_import, "bare": figures}
        print(json.dumps(run[args.child]()))
        return

    with tempfile.TemporaryDirectory() as tmp:
        build_shop(Path(tmp) / "shop.sqlite")
        runs = {kind: measure(kind, args.steps, Path(tmp)) for kind in ("bare", "import", "react")}
    react_run = runs["react"]
    assert react_run["steps"] == args.steps, react_run  # the run really took every step
    heavy = [name for name in HEAVY if react_run["modules"][name]]
    mb = {kind: r["peak_rss_kib"] / 1024 for kind, r in runs.items()}
    hwm = {kind: (r["vm_hwm_kib"] or 0) / 1024 for kind, r in runs.items()}
    report = {
        "command": f"python bench/speed/react_memory.py --steps {args.steps}",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "unit": "peak RSS of a fresh process, MiB (ru_maxrss KiB / 1024)",
        "target_mb": TARGET_MB,
        "bare_python_mb": round(mb["bare"], 1),
        "import_reflexa_mb": round(mb["import"], 1),
        "react_mb": round(mb["react"], 1),
        "react_over_import_mb": round(mb["react"] - mb["import"], 1),
        "vm_hwm_mb": {kind: round(v, 1) for kind, v in hwm.items()},
        "within_target": mb["react"] < TARGET_MB,
        "heavy_modules_loaded": heavy,
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    labels = {"bare": "python, no reflexa (this script, stdlib only)", "import": "import reflexa",
              "react": f"react, {args.steps} steps, scripted model, SQL tools"}
    print(f"{'fresh process':46s} {'ru_maxrss MiB':>14s} {'VmHWM MiB':>10s}")
    for kind, label in labels.items():
        print(f"{label:46s} {mb[kind]:14.1f} {hwm[kind]:10.1f}")
    print(f"target < {TARGET_MB} MB: {'met' if report['within_target'] else 'MISSED'}; "
          f"torch / sentence_transformers loaded: {', '.join(heavy) or 'neither'}")
    print(f"stop reason {react_run['stop_reason']} after {react_run['steps']} steps; saved {args.out}")
    if heavy:
        sys.exit(f"the run loaded {', '.join(heavy)} without asking for embeddings")


if __name__ == "__main__":
    main()
