"""The `reflexa` command line. Bad input gets one clear line, a hint and a non-zero exit, never a traceback.

The commands that run a loop are in run.py (one way to run a task spec), batch in batch.py, the browsing
commands' rendering in browse.py; this module is the app and the commands that read what is stored."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from ..errors import ConfigError
from ..types import LOOPS
from . import approve, batch, run
from .browse import STATUSES
from .common import clean_errors, console, errors, find_run, open_store
from .eval import eval_command
from .mcp import mcp_command
from .options import JsonOpt, TraceOpt, path_arg

app = typer.Typer(
    name="reflexa",
    help="Self-correcting LLM agents: check each attempt against objective signals, learn from failures, "
    "retry within a hard budget.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,  # click's own help: readable at 80 columns, no metavar column
)
SHORT_HELP = {
    "refine": "Generate, check and revise until the checks pass.",
    "react": "Answer a question with tools, reflecting on failures.",
    "trials": "Run react trials, each starting from the lessons so far.",
    "research": "Answer from evidence: every claim cited [n] or uncertain.",
    "plan": "Break a goal into sub-goals and run each in order.",
    "run": "Run a task spec file, of any loop.",
    "resume": "Continue a killed or interrupted run.",
    "approve": "Approve or deny the call a run is waiting on.",
    "batch": "Run a JSON Lines file of tasks with concurrent workers.",
    "eval": "Compare strategies on every task of a dataset.",
    "mcp": "Serve reflexa to an MCP client over stdio.",
    "index": "Build or update a folder's local search corpus.",
    "experience": "List the repairs the experience library has learned.",
    "runs": "List stored runs, newest first.",
    "show": "Print one run step by step.",
    "ui": "A read-only web viewer over the trace store.",
    "models": "Which model backends are usable here.",
}
"""Each command's line in `reflexa --help`: whole at 80 columns, where click would cut the docstring's."""

_COMMANDS: dict[str, Callable[..., Any]] = {**run.COMMANDS, "resume": run.resume, "approve": approve.approve,
                                            "batch": batch.batch, "eval": eval_command, "mcp": mcp_command}
for _name, _command in _COMMANDS.items():
    app.command(_name, short_help=SHORT_HELP[_name])(_command)



@app.command("index", short_help=SHORT_HELP["index"])
def index(
    folder: Annotated[Path, typer.Argument(parser=path_arg, metavar="FOLDER", help="A folder of .md, .txt and .html "
                                           "files.")],
) -> None:
    """Build or update the local search corpus of a folder (incremental: only changed files are re-read)."""
    with clean_errors():
        from ..search import LocalCorpus

        report = LocalCorpus.for_folder(folder).index(folder)
        pdfs = report.skipped - len(report.unreadable)
        skipped = (f"; {pdfs} PDF(s) skipped (PDF needs: pip install 'reflexa[pdf]')" if pdfs else "") + (
            f"; could not read {len(report.unreadable)}: {', '.join(report.unreadable[:5])}" if report.unreadable
            else "")
        console.print(f"indexed {folder}: {report.added} added, {report.updated} updated, {report.unchanged} "
                      f"unchanged, {report.removed} removed; {report.passages} passages{skipped}", markup=False,
                      highlight=False)


@app.command("experience", short_help=SHORT_HELP["experience"])
def experience_cmd(
    as_json: JsonOpt = False,
    trace: TraceOpt = None,
) -> None:
    """The repairs the experience library has learned: trigger, repair, hits, success rate."""
    with clean_errors():
        from datetime import datetime

        from rich.table import Table

        from ..reflect import ExperienceLibrary

        entries = sorted(ExperienceLibrary(open_store(trace, reader=True)).entries(), key=lambda e: -e.last_used)
        if as_json:
            print(json.dumps([dataclasses.asdict(e) for e in entries], default=str, indent=2))
            return
        table = Table("trigger", "repair", "hits", "success rate", "created", "last used")
        for entry in entries:
            tried = entry.successes + entry.failures
            rate = f"{entry.successes / tried:.0%} of {tried}" if tried else "untried"
            table.add_row(escape(entry.fingerprint[:70]), escape(entry.lesson["correction"][:70]), str(entry.hits),
                          rate + (" (demoted)" if entry.demoted else ""),
                          datetime.fromtimestamp(entry.created_at).strftime("%Y-%m-%d %H:%M"),
                          datetime.fromtimestamp(entry.last_used).strftime("%Y-%m-%d %H:%M"))
        console.print(table)


@app.command("runs", short_help=SHORT_HELP["runs"])
def runs(
    limit: Annotated[int, typer.Option(min=1, metavar="N", help="How many runs.")] = 20,
    loop: Annotated[str | None, typer.Option("--loop", metavar="LOOP", show_default=False,
                                             help=f"Only runs of this loop: {', '.join(LOOPS)}.")] = None,
    status: Annotated[str | None, typer.Option("--status", metavar="STATUS", help="Only runs with this status "
                      f"({', '.join(STATUSES)}) or stop reason (PASSED, ...). stale: stored as running, but its "
                      "process is gone.", show_default=False)] = None,
    since: Annotated[str | None, typer.Option("--since", metavar="WHEN", help="Only runs started since: an age (30m, "
                     "2h, 3d, 1w) or a date (2026-11-30, 2026-11-30T14:00).", show_default=False)] = None,
    as_json: JsonOpt = False,
    trace: TraceOpt = None,
) -> None:
    """List stored runs, newest first: status, start, duration, model, tokens and task."""
    with clean_errors():
        from .browse import parse_since, parse_status, run_data, runs_table, select_runs

        if loop is not None and loop.lower() not in LOOPS:
            raise ConfigError(f"--loop must be one of {', '.join(LOOPS)}, not {loop!r}")
        loop = loop.lower() if loop is not None else None
        wanted = parse_status(status) if status is not None else None
        start = parse_since(since) if since is not None else None
        rows = select_runs(open_store(trace, reader=True), limit=limit, loop=loop, status=wanted, since=start)
        if as_json:
            print(json.dumps([run_data(record, shown) for record, shown in rows], indent=2))
        elif not rows:
            filtered = loop is not None or status is not None or since is not None
            console.print("no runs match" if filtered else "no runs stored yet", highlight=False)
        else:
            console.print(runs_table(rows, console.width))


@app.command("show", short_help=SHORT_HELP["show"])
def show(
    run_id: Annotated[str, typer.Argument(metavar="RUN_ID", help="A run id or a unique prefix of one.")],
    as_json: JsonOpt = False,
    full: Annotated[bool, typer.Option("--full", help="Show whole candidates, check output, observations, "
                                       "passages and the task.")] = False,
    save_spec: Annotated[Path | None, typer.Option(
        "--save-spec", parser=path_arg, metavar="FILE", show_default=False,
        help="Write the spec the run started from and stop; `reflexa run FILE` runs its task again.")] = None,
    trace: TraceOpt = None,
) -> None:
    """Print one run step by step, with timestamps, its answer and how to continue it if unfinished."""
    with clean_errors():
        from .browse import show_run

        store = open_store(trace, reader=True)
        record = find_run(store, run_id)
        if save_spec is not None:
            from ..tasks import TaskSpec

            run.save_spec(TaskSpec.from_run(record), save_spec)
            return
        if as_json:
            print(json.dumps({"run": dataclasses.asdict(record),
                              "steps": [s.to_dict() for s in store.steps(record.run_id)]}, default=str, indent=2))
            return
        show_run(console, store, record, full=full)


@app.command("ui", short_help=SHORT_HELP["ui"])
def ui_cmd(
    trace: Annotated[str | None, typer.Option("--trace", metavar="FILE", show_default=False, help="The SQLite "
                     "trace file to show. Default: $REFLEXA_TRACE, else trace.db in the user data folder.")] = None,
    host: Annotated[str, typer.Option(metavar="ADDRESS", help="Address to listen on. Anything but a loopback address "
                                      "shows every prompt and answer in the trace to the network, with no "
                                      "password.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, metavar="PORT", help="Port; 0 picks a free one.")] = 8765,
) -> None:
    """A web trace viewer over the store, read-only: runs, steps, diffs, lessons, citations, live runs."""
    with clean_errors():
        from ..trace.open import sqlite_path
        from ..ui.server import is_loopback, serve

        if not is_loopback(host):
            errors.print(f"[bold yellow]warning:[/bold yellow] serving on {escape(host)}: anyone who can reach it "
                         "reads the whole trace", highlight=False)
        path = sqlite_path(trace)
        if path is None:
            raise ConfigError("reflexa ui reads a SQLite trace file; a PostgreSQL store is not supported yet")
        serve(path, host=host, port=port,
              on_ready=lambda url: print(f"reflexa ui: {url} (trace {path}, read-only; Ctrl-C stops)", flush=True))


@app.command("models", short_help=SHORT_HELP["models"])
def models(
    as_json: JsonOpt = False,
) -> None:
    """Which model backends are usable here (and why not for the others), and the named local models."""
    with clean_errors():
        from rich.table import Table

        from ..models.spec import availability
        from ..models.weights import inventory

        rows, local = availability(), inventory()
        if as_json:
            print(json.dumps({"backends": [dataclasses.asdict(r) for r in rows],
                              "local_models": [m.to_dict() for m in local]}, indent=2))
            return
        table = Table("backend", "usable", "detail")
        for row in rows:
            table.add_row(row.backend, "[green]yes[/green]" if row.usable else "[red]no[/red]", row.detail)
        console.print(table)
        named = Table("local model", "weights", "size", "installed", "hash")
        for m in local:
            named.add_row(m.spec, m.description, f"{m.size / 1e6:.0f} MB", "yes" if m.installed else "no", m.state)
        console.print(named)


def _version(value: bool) -> None:
    if value:
        from .._version import __version__

        print(f"reflexa {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    pass


def main() -> None:
    # Model text may hold a lone surrogate (a JSON reply's "\ud800"), which UTF-8 cannot encode: print a
    # replacement character rather than fail the live view or --jsonl halfway through a run.
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="replace")
    try:
        app()
    except KeyboardInterrupt:  # typer turns Ctrl-C into exit 130 itself; this is for an interrupt it misses
        errors.print("interrupted")
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - a bug in reflexa: one line, not a traceback; the run is stored as ERROR
        errors.print(f"internal error (a bug in reflexa, please report it): {type(exc).__name__}: {exc}",
                     markup=False, highlight=False)
        sys.exit(1)
