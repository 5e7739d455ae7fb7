"""`plan` against a single `react` on composite questions over the generated shop database.

    .venv/bin/python bench/plan.py [--model local] [--steps 4] [--limit N] [--skip N] [--name NAME]
    .venv/bin/python bench/plan.py --model smoke --results /tmp/plan-smoke     # the plumbing, no real model

24 tasks, each needing 2 to 4 dependent lookups with one checkable final answer (6 kinds x 4 instances).
A third of them carry a fault in one helper tool: "fatal" (it says it can never work) or "flaky" (it
fails every call with a 503 that invites a retry). Strategies, in one run, on the same tasks:
  react         one `react` with the whole task, max_steps = the tree's (sub-goals x --steps)
  plan          `plan` with the task's own goal tree (as a --plan file would give it), --steps per unit
  plan-planner  `plan` with the model writing the tree (at most 4 sub-goals)
No strategy gets a validator: the answer key is used only to score. Reported per strategy: tasks right,
tokens, model calls, and, for the plan strategies, how often a later unit ran a tool (or an argument value)
that an earlier unit had blocked (must be 0: read from the trace, every executed call counted). Rows go to
bench/results/plan/rows.jsonl as they finish and a rerun resumes from them; the report goes to report.json
beside them (NAME-... with --name).
"""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import append_row, chosen_strategies, correct, load_shop, output, read_rows, suite_args, write_report

from reflexa import Model, Result, Session, SQLiteStore, Tool, ToolError, ToolRegistry, plan, react, resolve_model, tool
from reflexa.loops.plan import Propagated
from reflexa.loops.react import Acted
from reflexa.models.base import Generation
from reflexa.types import ErrorCode

STRATEGIES = ("react", "plan", "plan-planner")
FAULTS = ("none", "none", "fatal", "flaky")
"""Per instance of each kind, in turn: two clean tasks, one fatal fault, one flaky fault."""


def sub(name, task, depends_on=()):
    return {"name": name, "task": task, "depends_on": list(depends_on)}


# kind -> (question, goal tree's sub-goals, answer key SQL, the helper a fault goes into, instances)
KINDS: dict[str, tuple[str, list[dict[str, Any]], str, str, list[Any]]] = {
    "order_city": (
        "Which city does the customer who placed order {p} live in?",
        [sub("buyer", "Which customer id placed order {p}?"),
         sub("city", "Which city does the customer with that id live in?", ["buyer"])],
        "SELECT c.city FROM orders o JOIN customers c ON c.id = o.customer_id WHERE o.id = {p}",
        "order_info", [5, 42, 117, 256]),
    "neighbours": (
        "How many customers live in the same city as {p} (counting {p})?",
        [sub("city", "Which city does the customer named {p} live in?"),
         sub("count", "How many customers live in that city?", ["city"])],
        "SELECT count(*) FROM customers WHERE city = (SELECT city FROM customers WHERE name = '{p}')",
        "find_customer", ["Iris Larsen", "Dev Rossi", "Kemal Okafor", "Quinn Weber"]),
    "top_item_units": (
        "How many units of the most expensive product in order {p} were sold across all orders?",
        [sub("items", "Which products are in order {p}? Give their names and prices."),
         sub("top", "Which of those products is the most expensive? Give its name.", ["items"]),
         sub("units", "How many units of that product were sold across all orders (sum of quantity)?", ["top"])],
        "SELECT sum(quantity) FROM order_items WHERE product_id = (SELECT i.product_id FROM order_items i JOIN "
        "products p ON p.id = i.product_id WHERE i.order_id = {p} ORDER BY p.price DESC LIMIT 1)",
        "order_info", [5, 42, 117, 300]),
    "refund_city": (
        "Which city does the customer who received refund {p} live in?",
        [sub("order", "Which order id did refund {p} refund?"),
         sub("buyer", "Which customer id placed that order?", ["order"]),
         sub("city", "Which city does the customer with that id live in?", ["buyer"])],
        "SELECT c.city FROM refunds r JOIN orders o ON o.id = r.order_id JOIN customers c ON c.id = o.customer_id "
        "WHERE r.id = {p}",
        "order_info", [1, 2, 3, 4]),
    "top_buyer_city": (
        "Which city does the customer who bought the most units of the {p} live in?",
        [sub("product", "What is the id of the product named {p}?"),
         sub("top", "Which customer id bought the most units of that product (sum of quantity)?", ["product"]),
         sub("name", "What is the name of the customer with that id?", ["top"]),
         sub("city", "Which city does that customer live in?", ["top", "name"])],
        "SELECT c.city FROM order_items i JOIN orders o ON o.id = i.order_id JOIN customers c ON c.id = o.customer_id "
        "JOIN products p ON p.id = i.product_id WHERE p.name = '{p}' GROUP BY c.id ORDER BY sum(i.quantity) DESC "
        "LIMIT 1",
        "product_info", ["kettle", "tent", "yoga mat", "headlamp"]),
    "city_orders": (
        "How many orders were placed by customers who live in the same city as {p}?",
        [sub("city", "Which city does the customer named {p} live in?"),
         sub("orders", "How many orders were placed by customers who live in that city?", ["city"])],
        "SELECT count(*) FROM orders o JOIN customers c ON c.id = o.customer_id WHERE c.city = "
        "(SELECT city FROM customers WHERE name = '{p}')",
        "find_customer", ["Ben Larsen", "Ben Rossi", "Iris Larsen", "Dev Rossi"]),
}


@dataclass
class Task:
    id: str
    question: str
    tree: dict[str, Any]
    answer: str
    fault: str
    fault_tool: str


def tasks(db: Path) -> list[Task]:
    found = []
    with sqlite3.connect(db) as conn:
        for kind, (question, subgoals, key, fault_tool, params) in KINDS.items():
            for i, p in enumerate(params):
                text = question.format(p=p)
                tree = {"goal": kind, "subgoals": [{**s, "task": s["task"].format(p=p)} for s in subgoals]}
                answer = str(conn.execute(key.format(p=p)).fetchone()[0])
                found.append(Task(f"{kind}-{i + 1}", text, tree, answer, FAULTS[i], fault_tool))
    return found


def shop_tools(db: Path, fault: str, fault_tool: str) -> list[Tool]:
    """The SQL tools plus four helpers; with a fault, `fault_tool` fails every call, fatally or not."""

    def read(sql: str, *args: Any) -> list[sqlite3.Row]:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            conn.row_factory = sqlite3.Row
            return conn.execute(sql, args).fetchall()

    def guard(name: str) -> None:
        if fault == "fatal" and name == fault_tool:
            raise ToolError(ErrorCode.TOOL_ERROR, f"{name} endpoint decommissioned: 410 gone", fatal=True)
        if fault == "flaky" and name == fault_tool:
            raise ToolError(ErrorCode.TOOL_ERROR, f"{name} endpoint unstable: 503 from upstream, try later")

    def one(rows: list[sqlite3.Row], what: str) -> dict[str, Any]:
        if not rows:
            raise ToolError(ErrorCode.NOT_FOUND, f"no such {what}")
        return dict(rows[0])

    @tool
    def order_info(order_id: int) -> dict:
        """An order: its customer id, date, status and items (product id, quantity, unit price)."""
        guard("order_info")
        order = one(read("SELECT * FROM orders WHERE id = ?", order_id), "order")
        order["items"] = [dict(r) for r in read("SELECT product_id, quantity, unit_price FROM order_items "
                                               "WHERE order_id = ?", order_id)]
        return order

    @tool
    def customer_info(customer_id: int) -> dict:
        """A customer by id: name, city, date joined."""
        guard("customer_info")
        return one(read("SELECT * FROM customers WHERE id = ?", customer_id), "customer")

    @tool
    def find_customer(name: str) -> dict:
        """A customer by full name: id and city."""
        guard("find_customer")
        return one(read("SELECT id, city FROM customers WHERE name = ?", name), "customer")

    @tool
    def product_info(name: str) -> dict:
        """A product by name: id, category, price."""
        guard("product_info")
        return one(read("SELECT * FROM products WHERE name = ?", name), "product")

    from reflexa import sql_tools

    return [order_info, customer_info, find_customer, product_info, *sql_tools(db)]


def blocked_uses(store: SQLiteStore, result: Result) -> tuple[int, int]:
    """(calls a later unit ran that an earlier unit had blocked, blocks propagated), from the trace."""
    units = [u for u in result.details.get("subgoals", []) if u.get("run_id")]
    children = sorted((store.get_run(u["run_id"]) for u in units), key=lambda r: r.started_at)
    blocks: list[tuple[float, Any]] = []
    for step in store.steps(result.run_id):
        data = step.payload()
        if isinstance(data, Propagated) and data.lesson.control is not None:
            blocks.append((step.ended_at, data.lesson.control))
    uses = 0
    for child in children:
        active = [c for at, c in blocks if at < child.started_at]
        for step in store.steps(child.run_id):
            acted = step.payload()
            if not isinstance(acted, Acted) or acted.code in (ErrorCode.BLOCKED, ErrorCode.SCHEMA):
                continue  # refused before the tool ran
            name, _, rest = acted.action.partition("(")
            args = json.loads(rest[:-1]) if rest.endswith(")") and rest[:-1].startswith("{") else {}
            uses += any(c.tool == name and (c.kind == "block_tool" or str(args.get(c.arg)) == c.value)
                        for c in active if c.kind in ("block_tool", "block_value"))
    return uses, len(blocks)


class Smoke(Model):
    """A stand-in policy for checking the bench end to end without a real model: it plans with the task's
    own tree, calls the first tool it is offered once with dummy arguments, then answers "0"."""

    name = "smoke"

    def __init__(self, trees: dict[str, dict[str, Any]]) -> None:
        self.trees = trees

    def _generate(self, messages, json_schema, max_tokens, temperature):
        props = (json_schema or {}).get("properties", {})
        user = messages[-1]["content"]
        if "subgoals" in props:
            reply: Any = next((t for q, t in self.trees.items() if q in user), {"goal": "x", "subgoals": []})
        elif "failure_step" in props:
            tool_name = re.search(r"tool:(\w+)", user)
            reply = {"failure_step": "1", "observed_mismatch": "503 from upstream", "root_cause": "unstable endpoint",
                     "correction": "use query instead", "control": "block_tool" if tool_name else "none",
                     "control_tool": tool_name.group(1) if tool_name else ""}
        elif "task" in props:
            reply = {"task": "Answer with the query tool", "tools": ["query"]}
        else:
            branches = props["action"]["anyOf"]
            first = branches[0]["properties"]
            if "Recent steps" in user or first["tool"]["const"] == "final_answer":
                action = {"tool": "final_answer", "args": {"answer": "0"}}
            else:
                args = {k: 1 if v.get("type") == "integer" else "x"
                        for k, v in first["args"].get("properties", {}).items()}
                action = {"tool": first["tool"]["const"], "args": args}
            reply = {"action": {"thought": f"smoke {action['tool']}", **action}}
        text = json.dumps(reply)
        return Generation(text, sum(len(m["content"]) for m in messages) // 4, len(text) // 4)


def run_task(name: str, task: Task, db: Path, model: Model, store: SQLiteStore, steps: int) -> dict[str, Any]:
    registry = ToolRegistry(shop_tools(db, task.fault, task.fault_tool))
    session = Session(model=model, store=store)
    n = len(task.tree["subgoals"])
    if name == "react":
        result = react(task.question, registry, session=session, max_steps=n * steps)
    else:
        result = plan(task.question, registry, session=session, max_steps=steps, max_subgoals=4,
                      tree=task.tree if name == "plan" else None)
    usage = result.total_usage
    uses, blocks = blocked_uses(store, result) if name != "react" else (0, 0)
    return {"strategy": name, "task": task.id, "question": task.question, "fault": task.fault,
            "answer": result.output, "expected": task.answer, "right": correct(result.output, task.answer),
            "stop": result.stop_reason.value, "tokens": usage.total_tokens, "calls": usage.calls,
            "subgoals": n, "blocks_propagated": blocks, "blocked_uses": uses,
            "units": [(u["name"], u["status"]) for u in result.details.get("subgoals", [])]}


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(rows) or 1
    return {"tasks": len(rows), "right": sum(r["right"] for r in rows),
            "right_by_fault": {f: sum(r["right"] for r in rows if r["fault"] == f) for f in ("none", "fatal", "flaky")},
            "tokens_per_task": sum(r["tokens"] for r in rows) / n, "calls_per_task": sum(r["calls"] for r in rows) / n,
            "blocks_propagated": sum(r["blocks_propagated"] for r in rows),
            "blocked_uses": sum(r["blocked_uses"] for r in rows)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="local", help="a model spec, or `smoke` for the plumbing check")
    parser.add_argument("--steps", type=int, default=4, help="steps per sub-goal (react gets sub-goals x steps)")
    suite_args(parser, "plan", STRATEGIES, "tasks")
    args = parser.parse_args()
    names = chosen_strategies(args.strategies, STRATEGIES)
    out = output(args)
    done = read_rows(out.rows)
    with tempfile.TemporaryDirectory() as tmp:
        db = load_shop(Path(tmp) / "shop.sqlite")
        suite = tasks(db)[: args.limit or None]
        model = Smoke({t.question: t.tree for t in suite}) if args.model == "smoke" else resolve_model(args.model)
        store = SQLiteStore(Path(tmp) / "trace.db")
        report: dict[str, Any] = {"model": model.name, "tasks": len(suite), "steps": args.steps, "strategies": {}}
        for name in names:
            rows = [r for r in done if r["strategy"] == name and any(t.id == r["task"] for t in suite)]
            for task in suite[args.skip:]:
                if any(r["task"] == task.id for r in rows):
                    continue
                rows.append(run_task(name, task, db, model, store, args.steps))
                append_row(out.rows, rows[-1])
            summary = summarise(rows)
            report["strategies"][name] = {**summary, "rows": rows}
            print(f"{name:13s} right {summary['right']:2d}/{summary['tasks']}  by fault {summary['right_by_fault']}  "
                  f"tokens/task {summary['tokens_per_task']:7.0f}  calls/task {summary['calls_per_task']:5.2f}  "
                  f"blocks propagated {summary['blocks_propagated']}  blocked tools used later "
                  f"{summary['blocked_uses']}", flush=True)
    write_report(out.report, report)
    print(f"written to {out.report}")


if __name__ == "__main__":
    main()
