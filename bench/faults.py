"""Fault-injection suite for `react`: questions over a generated shop database, with flaky, slow and
verbose tools, each question with a checkable answer.

    .venv/bin/python bench/faults.py [--model local] [--reflector-model SPEC] [--steps 5] [--skip N]
                                     [--limit N] [--name NAME]

Strategies, side by side on the same tasks:
  (a) none        a plain ReAct loop: full history in the prompt, no reflection
  (b) every-step  the same, plus a reflection call after every step over the full history
  (c) reflexa     `react`: gate, classifier, experience library (run twice: pass 2 of a task reuses the
                  library pass 1 learnt on it and on every earlier task)
`--reflector-model` gives reflexa's reflector a model of its own (the baselines' reflections stay on
--model); give it its own --name, so its experience library starts empty. Tasks run one after another,
every strategy in turn on each, so a run stopped part way (or `--limit N` over the tasks already done,
which then only writes the report) compares the strategies on the same tasks.
Reports success rate, tokens, model calls, reflector calls, the experience hit rate on the second pass,
and steps from an error to the next clean step. Every strategy gets the same validator, which checks a final
answer against the database (what the answer key holds) and says only that it does not match; an answer
is never taken on trust. Rows go to bench/results/faults/rows.jsonl as they finish and a rerun resumes
from them; the report goes to report.json, and reflexa's traces and experience library to traces.db
beside them (kept across a resume, so pass 2 still sees pass 1's; not committed). NAME-... with --name.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import append_row, chosen_strategies, correct, load_shop, output, read_rows, suite_args, write_report

from reflexa import (
    Budget,
    ExperienceLibrary,
    MCPClient,
    Result,
    Session,
    SQLiteStore,
    Tool,
    ToolError,
    ToolRegistry,
    react,
    resolve_model,
    sql_tools,
)
from reflexa.loops import react_prompts as prompts
from reflexa.reflect.reflector import Reflection
from reflexa.runtime import Run
from reflexa.tools import ToolSession
from reflexa.tools.registry import TOOL_TIMEOUT
from reflexa.types import ErrorCode, Role, StopReason

QUESTIONS = [
    ("How many orders are there?", "SELECT count(*) FROM orders"),
    ("How many customers live in Lisbon?", "SELECT count(*) FROM customers WHERE city = 'Lisbon'"),
    ("What is the price of the tent?", "SELECT price FROM products WHERE name = 'tent'"),
    ("How many refunds were issued?", "SELECT count(*) FROM refunds"),
    (
        "Which city has the most customers?",
        "SELECT city FROM customers GROUP BY city ORDER BY count(*) DESC, city LIMIT 1",
    ),
    ("How many orders were cancelled?", "SELECT count(*) FROM orders WHERE status = 'cancelled'"),
    ("What is the most expensive product?", "SELECT name FROM products ORDER BY price DESC LIMIT 1"),
    (
        "Which customer placed the most orders?",
        "SELECT c.name FROM customers c JOIN orders o ON o.customer_id = c.id GROUP BY c.id "
        "ORDER BY count(*) DESC, c.name LIMIT 1",
    ),
]
FAULTS = ["none", "flaky", "slow", "verbose"]
STRATEGIES = ("none", "every-step", "reflexa", "reflexa-pass2", "reflexa-mcp")


@dataclass
class Task:
    question: str
    answer: str
    fault: str


def tasks(db: Path) -> list[Task]:
    with sqlite3.connect(db) as conn:
        truth = [(q, str(conn.execute(sql).fetchone()[0])) for q, sql in QUESTIONS]
    return [Task(q, a, fault) for fault in FAULTS for q, a in truth]


def faulty_tools(db: Path, fault: str) -> list[Tool]:
    """The SQL tools with one kind of fault injected: the first two calls fail (flaky), the first call
    hangs past its timeout (slow), or every output drowns in 3,000 characters of noise (verbose)."""
    calls = {"n": 0}
    wrapped = []
    for original in sql_tools(db):

        def function(*args: Any, _fn=original.function, **kwargs: Any) -> Any:
            calls["n"] += 1
            if fault == "flaky" and calls["n"] <= 2:
                raise ToolError(ErrorCode.TOOL_ERROR, "database is busy (lock held by a backup); call again")
            if fault == "slow" and calls["n"] == 1:
                time.sleep(1.5)
            out = _fn(*args, **kwargs)
            return ("-- diagnostics: " + "x" * 3000 + "\n" + out) if fault == "verbose" else out

        wrapped.append(
            Tool(
                original.name,
                original.description,
                function,
                original.args_model,
                timeout=1.0 if fault == "slow" else original.timeout,
            )
        )
    return wrapped


def validator(expected: str) -> Any:
    """The task's objective check: the answer matches the database, or it is rejected (without the answer)."""
    return lambda answer: None if correct(answer, expected) else "the answer does not match the database"


def baseline(goal: str, registry: ToolRegistry, model: Any, *, reflect: bool, steps: int,
             validate: Any) -> tuple[Result, list[int]]:
    """(a) and (b): the common tutorial loop, every earlier step in the prompt."""
    run = Run("baseline", goal, model, budget=Budget())
    tools = ToolSession(registry)
    schema = prompts.action_schema(registry)
    history: list[str] = []
    lessons: list[str] = []
    answer, error_since, recoveries = None, None, []
    for step in range(1, steps + 1):
        user = (
            f"Goal: {goal}\n\nSteps so far:\n"
            + "\n".join(history)
            + ("\n\nReflections:\n" + "\n".join(lessons) if lessons else "")
        )
        reply = run.call(
            Role.GENERATOR,
            [{"role": "system", "content": prompts.SYSTEM + registry.describe()}, {"role": "user", "content": user}],
            schema=schema,
            max_tokens=256,
        )
        if reply is None or reply.value is None:
            history.append(f"{step}. invalid reply")
            continue
        tool, args = reply.value["action"]["tool"], reply.value["action"]["args"]
        if tool == prompts.FINAL:
            answer = str(args.get("answer", ""))
            if (problem := validate(answer)) is None:
                break
            history.append(f"{step}. {tool}({json.dumps(args)}) -> rejected: {problem}")
            answer = None
            continue
        observation = tools.call(tool, args, step=step)
        history.append(f"{step}. {tool}({json.dumps(args)}) -> {observation.shown()}")
        if not observation.ok and error_since is None:
            error_since = step
        elif observation.ok and error_since is not None:
            recoveries.append(step - error_since)
            error_since = None
        if reflect:
            critique = run.call(
                Role.REFLECTOR,
                [
                    {
                        "role": "user",
                        "content": user + "\n" + history[-1] + "\n\nReflect on the last step as JSON: failure_step, "
                        "observed_mismatch, root_cause, correction.",
                    }
                ],
                schema=Reflection,
                max_tokens=256,
                reask=False,
            )
            if critique is not None and critique.value is not None:
                lessons.append(f"- {critique.value.correction}")
    result = run.finish(
        run.budget_stop or (StopReason.PASSED if answer is not None else StopReason.MAX_ITERATIONS),
        output=answer,
        best=answer,
        verdict=None,
        iterations=step,
    )
    return result, recoveries


def run_task(name: str, task: Task, db: Path, model: Any, store: SQLiteStore, library: ExperienceLibrary,
             steps: int, reflector: Any = None) -> dict[str, Any]:
    """One strategy on one task: the row the report is built from."""
    if name == "reflexa-mcp":
        return run_over_mcp(task, db, model, store, steps, reflector)
    registry = ToolRegistry(faulty_tools(db, task.fault))
    if name.startswith("reflexa"):
        session = Session(model=model, store=store, experience=library, reflector_model=reflector)
        result = react(task.question, registry, session=session, max_steps=steps, validator=validator(task.answer))
        recoveries = result.counters["recovery_steps"]
    else:
        result, recoveries = baseline(task.question, registry, model, reflect=name == "every-step", steps=steps,
                                      validate=validator(task.answer))
    return row(name, task, result, recoveries)


def row(name: str, task: Task, result: Result, recoveries: list[int]) -> dict[str, Any]:
    usage = result.total_usage
    return {
        "strategy": name,
        "question": task.question,
        "fault": task.fault,
        "answer": result.output,
        "expected": task.answer,
        "success": correct(result.output, task.answer),
        "stop": result.stop_reason.value,
        "tokens": usage.total_tokens,
        "calls": usage.calls,
        "reflector_calls": result.usage.get("reflector").calls if "reflector" in result.usage else 0,
        "recoveries": recoveries,
        "counters": result.counters,
    }


def run_over_mcp(task: Task, db: Path, model: Any, store: SQLiteStore, steps: int, reflector: Any) -> dict[str, Any]:
    """reflexa's pass 1 with the same faulty tools served by an MCP server process (faults_server.py), with an
    experience library of its own: the row to set beside `reflexa`'s. The server is trusted, so the prompt is
    the in-process one, word for word; what differs is only what crosses the protocol."""
    timeout = 1.0 if task.fault == "slow" else TOOL_TIMEOUT
    server = [sys.executable, str(Path(__file__).with_name("faults_server.py")), "--db", str(db), "--fault", task.fault]
    library = ExperienceLibrary(SQLiteStore(store.path.with_name(store.path.stem + "-mcp.db")))
    with MCPClient(server, timeout=timeout, trusted=True) as mcp:
        session = Session(model=model, store=store, experience=library, reflector_model=reflector)
        result = react(task.question, mcp.tools(), session=session, max_steps=steps, validator=validator(task.answer))
    return row("reflexa-mcp", task, result, result.counters["recovery_steps"])


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(rows)
    recoveries = [r for row in rows for r in row["recoveries"]]
    return {
        "tasks": n,
        "success_rate": sum(r["success"] for r in rows) / n,
        "tokens_per_task": sum(r["tokens"] for r in rows) / n,
        "calls_per_task": sum(r["calls"] for r in rows) / n,
        "reflector_calls": sum(r["reflector_calls"] for r in rows),
        "errors_recovered": len(recoveries),
        "mean_steps_error_to_recovery": sum(recoveries) / len(recoveries) if recoveries else None,
        "by_fault": {f: sum(r["success"] for r in rows if r["fault"] == f) for f in FAULTS},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="local")
    parser.add_argument("--reflector-model", default=None, help="a model of its own for reflexa's reflector")
    parser.add_argument("--steps", type=int, default=5)
    suite_args(parser, "faults", STRATEGIES, "tasks")
    parser.add_argument("--questions", type=int, default=0,
                        help="only the first N of the 8 questions, under every fault (0: all)")
    args = parser.parse_args()
    names = chosen_strategies(args.strategies, STRATEGIES)
    model = resolve_model(args.model)
    reflector = resolve_model(args.reflector_model) if args.reflector_model else None
    out = output(args)
    done = read_rows(out.rows)
    with tempfile.TemporaryDirectory() as tmp:
        db = load_shop(Path(tmp) / "shop.sqlite")
        asked = [q for q, _ in QUESTIONS[: args.questions or None]]
        suite = [t for t in tasks(db) if t.question in asked][: args.limit or None]
        store = SQLiteStore(out.traces)  # the experience library, kept across a resume
        library = ExperienceLibrary(store)
        report: dict[str, Any] = {"model": model.name, "tasks": len(suite), "steps": args.steps, "strategies": {},
                                  **({"reflector_model": reflector.name} if reflector else {})}
        # Task by task, every strategy in turn: a run stopped part way compares the strategies on the same
        # tasks. Pass 2 of a task therefore sees the library pass 1 learnt on it and on every earlier task.
        for task in suite[args.skip:]:
            for name in names:
                if any(r["strategy"] == name and r["question"] == task.question and r["fault"] == task.fault
                       for r in done):
                    continue
                done.append(run_task(name, task, db, model, store, library, args.steps, reflector))
                append_row(out.rows, done[-1])
        in_suite = {(t.question, t.fault) for t in suite}
        for name in names:
            rows = [r for r in done if r["strategy"] == name and (r["question"], r["fault"]) in in_suite]
            summary = summarise(rows)
            if name.startswith("reflexa"):
                hits = sum(r["counters"]["experience_hits"] for r in rows)
                misses = sum(r["counters"]["experience_misses"] for r in rows)
                summary["experience_hit_rate"] = hits / (hits + misses) if hits + misses else None
                summary["rule_repairs"] = sum(r["counters"]["rule_repairs"] for r in rows)
            report["strategies"][name] = {**summary, "rows": rows}
            print(
                f"{name:14s} success {summary['success_rate']:.0%}  tokens/task {summary['tokens_per_task']:6.0f}  "
                f"calls/task {summary['calls_per_task']:.2f}  reflector calls {summary['reflector_calls']:3d}  "
                f"recovered {summary['errors_recovered']} (mean {summary['mean_steps_error_to_recovery']} steps)"
                + (f"  experience hit rate {summary['experience_hit_rate']}" if name.startswith("reflexa") else ""),
                flush=True,
            )
    write_report(out.report, report)
    print(f"written to {out.report}")


if __name__ == "__main__":
    main()
