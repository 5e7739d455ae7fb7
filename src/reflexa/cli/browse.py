"""Browsing stored runs from the terminal: `reflexa runs` and `reflexa show`."""

from __future__ import annotations

import json
import re
import time
from datetime import datetime
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..errors import ConfigError
from ..trace.store import RunRecord, Store, shown_status, under_parents
from ..types import StopReason
from .render import View, counters_line, last_plan_tree, usage_table

STATUSES = ("running", "stale", "finished", "interrupted", "awaiting")
"""What `runs --status` takes besides a stop reason. "stale": stored as running, but its process is gone."""

_AGO = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_since(text: str, now: float | None = None) -> float:
    """A start time from `--since`: an age (`30m`, `2h`, `3d`, `1w`) or a date or time (`2026-11-30`,
    `2026-11-30T14:00`, local time). Anything else is a ConfigError."""
    now = time.time() if now is None else now
    value = text.strip()
    if match := _AGO.fullmatch(value):
        return now - float(match.group(1)) * _UNIT[match.group(2)]
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        raise ConfigError(f"--since must be an age like 30m, 2h, 3d or a date like 2026-11-30, not {text!r}") from None


def parse_status(text: str) -> str:
    """A `--status` value: running, stale, finished, interrupted, or a stop reason in any case."""
    value = text.strip()
    if value.lower() in STATUSES:
        return value.lower()
    if value.upper() in StopReason.__members__:
        return value.upper()
    reasons = ", ".join(r.value for r in StopReason)
    raise ConfigError(f"unknown status {text!r}",
                      hint=f"use one of: {', '.join(STATUSES)}, or a stop reason: {reasons}")


def select_runs(store: Store, *, limit: int, loop: str | None, status: str | None,
                since: float | None) -> list[tuple[RunRecord, str]]:
    """`limit` runs newest first, each with the status a reader should see (see `shown_status`), and under
    each the runs of its sub-goals or trials (`under_parents`), which the limit does not count. "running"
    and "stale" are told apart here, by the lease, since the store keeps both as running."""
    stored = "running" if status in ("running", "stale") else status
    now = time.time()
    picked: dict[str, tuple[RunRecord, str]] = {}
    # Children and a live/stale filter take rows from the limit, so read a bounded window beyond it.
    for record in store.runs(limit * WINDOW, loop=loop, status=stored, since=since):
        shown = shown_status(record, store.lease(record.run_id), now)
        if status not in ("running", "stale") or shown == status:
            picked[record.run_id] = (record, shown)
    out: list[tuple[RunRecord, str]] = []
    tops = 0
    for record, child in under_parents([record for record, _ in picked.values()]):
        if not child:
            if tops == limit:
                break
            tops += 1
        out.append(picked[record.run_id])
    return out


WINDOW = 10
"""`runs` reads up to WINDOW × --limit runs to find the children of the ones it lists."""


def is_child(record: RunRecord, listed: set[str]) -> bool:
    """A run listed under its parent (a plan's sub-goal, a trial)."""
    return record.meta.get("parent") in listed


def duration(record: RunRecord, now: float | None = None) -> float | None:
    """Seconds the run took (so far, while it runs); None for a stale run, whose end is unknown."""
    if record.ended_at is not None:
        return record.ended_at - record.started_at
    if record.status == "running":
        return (time.time() if now is None else now) - record.started_at
    return None


def human_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"


def _tokens(record: RunRecord) -> dict[str, int]:
    total = (record.result or {}).get("total_usage") or {}
    return {k: int(total.get(k, 0)) for k in ("input_tokens", "output_tokens", "calls")}


def _first_line(text: str) -> str:
    stripped = text.strip()
    return stripped.splitlines()[0] if stripped else ""


def run_data(record: RunRecord, status: str) -> dict[str, Any]:
    """One run as `runs --json` prints it."""
    took = duration(record) if status != "stale" else None
    return {
        "run_id": record.run_id, "loop": record.loop, "status": status, "stop_reason": record.stop_reason,
        "started_at": datetime.fromtimestamp(record.started_at).astimezone().isoformat(timespec="seconds"),
        "ended_at": (datetime.fromtimestamp(record.ended_at).astimezone().isoformat(timespec="seconds")
                     if record.ended_at is not None else None),
        "duration_seconds": round(took, 3) if took is not None else None,
        "model": record.meta.get("model"), **_tokens(record), "task": record.task,
        "parent": record.meta.get("parent"),
    }


SHORT_LABELS = {"ANSWERED_UNVERIFIED": "UNVERIFIED", "AWAITING_APPROVAL": "AWAITING"}
"""Stop reasons shortened in the table, so it fits 80 columns (--json and `show` keep the full name)."""
STATUS_STYLE = {"PASSED": "green", "UNVERIFIED": "yellow", "INTERRUPTED": "yellow", "AWAITING": "yellow",
                "running": "cyan",
                "stale": "magenta", "ERROR": "red"}


def runs_table(rows: list[tuple[RunRecord, str]], width: int) -> Table:
    """The `runs` table for a terminal `width` columns wide. Every column but model and task is as wide
    as its widest cell; model and task share what is left and are cut with an ellipsis, so a row never
    wraps. On a narrow terminal the model column is left out (see TASK_MIN_WIDTH)."""
    cells = []
    listed = {record.run_id for record, _ in rows}
    for record, status in rows:
        ended = status in ("finished", "interrupted", "awaiting") and record.stop_reason is not None
        label = str(record.stop_reason) if ended else status
        label = SHORT_LABELS.get(label, label)
        tokens = _tokens(record)
        cells.append((record.run_id[:12], record.loop, label,
                      datetime.fromtimestamp(record.started_at).strftime("%m-%d %H:%M"),
                      human_duration(duration(record) if status != "stale" else None),
                      str(record.meta.get("model") or "-"), str(tokens["input_tokens"] + tokens["output_tokens"]),
                      ("└ " if is_child(record, listed) else "") + _first_line(record.task)))
    names = ("run", "loop", "status", "started", "took", "model", "tokens", "task")
    fits = dict(zip(names, (max([len(name)] + [len(row[i]) for row in cells]) for i, name in enumerate(names)),
                    strict=True))
    # Columns are two spaces apart, no edges. What the fixed columns leave goes to the task, and to the
    # model as well when the task still keeps TASK_MIN_WIDTH.
    fixed = [n for n in names if n not in ("model", "task")]
    room = width - sum(fits[n] for n in fixed) - 2 * len(fixed)
    model_width = min(fits["model"], MODEL_WIDTH)
    with_model = room - model_width - 2 >= TASK_MIN_WIDTH
    task_width = max(min(fits["task"], room - (model_width + 2 if with_model else 0)), 10)
    shown = [n for n in names if with_model or n != "model"]
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True, padding=(0, 1),
                  expand=False)
    for name in shown:
        size = {"model": model_width, "task": task_width}.get(name, fits[name])
        table.add_column(name, justify="right" if name in ("took", "tokens") else "left", no_wrap=True,
                         overflow="ellipsis", width=size, min_width=size)
    for row in cells:
        values = [escape(v) for i, v in enumerate(row) if with_model or i != 5]
        style = STATUS_STYLE.get(row[2], "bold")
        values[2] = f"[{style}]{values[2]}[/]"
        table.add_row(*values)
    return table


MODEL_WIDTH = 24
"""The model column's widest: a long spec (a server URL) is cut."""
TASK_MIN_WIDTH = 24
"""The model column is shown only when the task column keeps at least this much room."""


def _waiting(console: Console, store: Store, record: RunRecord) -> None:
    """The call a run waits on, and how to decide on it."""
    from ..tools.approval import waiting

    for call in waiting(store, record.run_id):
        console.print(f"[yellow]waiting for approval:[/yellow] step {call.step} calls {escape(call.tool)}"
                      f"({escape(json.dumps(call.args, ensure_ascii=False))})", highlight=False, soft_wrap=True)
    short = record.run_id[:12]
    console.print(f"decide with: reflexa approve {short} [--deny WHY]; then: reflexa resume {short}",
                  highlight=False, soft_wrap=True, markup=False)


def show_run(console: Console, store: Store, record: RunRecord, *, full: bool) -> None:
    """One run, step by step with timestamps, then its answer, usage and how to go on."""
    status = shown_status(record, store.lease(record.run_id), time.time())
    console.print(f"[bold]run {record.run_id}[/bold]", highlight=False)
    # A reflector on a model of its own is named: a resume from Python must be given the same one.
    reflector = f" · reflector {record.meta['reflector_model']}" if record.meta.get("reflector_model") else ""
    console.print(f"{escape(record.loop)} · model {escape(str(record.meta.get('model')))}{escape(reflector)} · "
                  f"{escape(record.stop_reason or status)}", highlight=False, soft_wrap=True)
    ended = f", ended {datetime.fromtimestamp(record.ended_at):%Y-%m-%d %H:%M:%S}" if record.ended_at else ""
    took = human_duration(duration(record)) if status != "stale" else "unknown"
    console.print(f"started {datetime.fromtimestamp(record.started_at):%Y-%m-%d %H:%M:%S}{ended}, took {took}",
                  highlight=False, soft_wrap=True)
    console.print("task: " + escape(record.task.strip() if full else record.task.strip()[:500]), highlight=False)
    if "parent" in record.meta:
        console.print(f"sub-goal {escape(str(record.meta.get('subgoal')))} of plan run "
                      f"{str(record.meta['parent'])[:12]}", highlight=False)
    view = View(console, verbose=True, full=full, timestamps=True)
    steps = store.steps(record.run_id)
    for step in steps:
        view.step(step)
    if record.loop == "plan" and (tree := last_plan_tree(steps)) is not None:
        console.print(tree)
    result = record.result or {}
    if record.loop in ("research", "react", "trials", "plan") and result.get("output"):
        console.rule("answer")  # research's output carries its references, built from the evidence
        console.print(result["output"], highlight=False, markup=False)
    if result:
        console.print(usage_table(result["usage"]))
        for note in result.get("notes", []):
            console.print(f"[yellow]{escape(note)}[/yellow]")
        if line := counters_line(result.get("counters", {})):
            console.print(escape(line))
    if status == "stale":
        console.print("[magenta]this run is stored as running, but no live process holds it[/magenta] (killed?); "
                      f"continue it with: {escape(resume_hint(record))}", highlight=False, soft_wrap=True)
    elif status == "running":
        console.print("[cyan]this run is in progress in another process[/cyan]", highlight=False)
    elif status == "awaiting":
        _waiting(console, store, record)
    elif status != "finished":
        console.print(f"[yellow]this run is {escape(status)}[/yellow]; continue it with: "
                      f"{escape(resume_hint(record))}", highlight=False, soft_wrap=True)


BATCH_RESUME = "run the same `reflexa batch` command again: it resumes the batch's interrupted tasks"


def cli_resumes(record: RunRecord) -> bool:
    """Whether `reflexa resume` can rebuild this run: it stored its task spec (every run the CLI starts
    does) and is no part of a batch, a plan or a trials run, which resume their parts themselves."""
    return "spec" in record.meta and "batch" not in record.meta and "parent" not in record.meta


def resume_hint(record: RunRecord) -> str:
    """How to continue an unfinished run: `reflexa resume` takes the runs the CLI can rebuild (see its
    command), the rest are resumed from Python."""
    meta, short = record.meta, record.run_id[:12]
    if "parent" in meta:
        return f"reflexa resume {str(meta['parent'])[:12]} (the run this one is part of)"
    if "batch" in meta:
        return BATCH_RESUME
    if cli_resumes(record):
        return f"reflexa resume {short}"
    return f"{record.loop}(..., resume={short!r}) from Python"
