"""The `reflexa` command line. Bad input gets one clear line, a hint and a non-zero exit, never a traceback."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from ..errors import ConfigError, ReflexaError

app = typer.Typer(
    name="reflexa",
    help="Self-correcting LLM agents: check each attempt against objective signals, learn from failures, "
    "retry within a hard budget.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
console = Console()
errors = Console(stderr=True)

ModelOpt = Annotated[Optional[str], typer.Option("--model", "-m", help="Model spec: local (Qwen2.5-Coder-0.5B), "
                     "local:smollm2, local:PATH.gguf, openai:MODEL, openai:http://HOST:PORT/v1#MODEL, anthropic:MODEL, "
                     "scripted:FILE, or a plugin's. Default: $REFLEXA_MODEL, reflexa.toml, then local.",
                     show_default=False)]
TraceOpt = Annotated[Optional[Path], typer.Option("--trace", help="Trace store file. Default: $REFLEXA_TRACE, else "
                     "trace.db in the user data directory.", show_default=False)]


@contextmanager
def clean_errors() -> Iterator[None]:
    """Turn reflexa's own errors into one line plus a hint, exit code 2."""
    try:
        yield
    except ReflexaError as exc:
        errors.print(f"[bold red]error:[/bold red] {exc}", highlight=False)
        if exc.hint:
            errors.print(f"[dim]hint:[/dim] {exc.hint}", highlight=False)
        raise typer.Exit(2) from None


def open_store(path: Path | None):  # noqa: ANN201 - SQLiteStore, imported lazily
    from ..trace.sqlite import SQLiteStore

    return SQLiteStore(path)


def read_task(task: str) -> str:
    """--task is a file when such a file exists, else the task text itself. A lone word ending in .md or
    .txt that names no file is taken for a mistyped path."""
    try:
        path = Path(task)
        if path.is_file():
            return path.read_text()
    except OSError:  # e.g. a long one-line task: too long to be a file name, so it is text
        return task
    if " " not in task.strip() and path.suffix in (".md", ".txt"):
        raise ConfigError(f"task file not found: {task}", hint="give an existing file or the task text in quotes")
    return task


@app.command()
def refine(
    task: Annotated[str, typer.Option("--task", "-t", help="The task: a file (.md, .txt) or the text itself.")],
    tests: Annotated[Optional[Path], typer.Option("--tests", help="A pytest file that imports the candidate "
                     "from module `solution` (or from the --out file's module).", show_default=False)] = None,
    check: Annotated[Optional[str], typer.Option("--check", help="A shell command run in a scratch copy of "
                     "this directory with the candidate written to --out; exit 0 passes.", show_default=False)] = None,
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Where the candidate goes for --check, "
                   "and where the best candidate is written at the end.", show_default=False)] = None,
    judge: Annotated[bool, typer.Option("--judge", help="Opt in to an LLM judge (subjective).")] = False,
    model: ModelOpt = None,
    max_iterations: Annotated[int, typer.Option(min=1, help="Attempts at most.")] = 3,
    max_tokens: Annotated[Optional[int], typer.Option(min=1, help="Token budget (input + output).")] = None,
    max_calls: Annotated[Optional[int], typer.Option(min=1, help="Model-call budget.")] = None,
    max_seconds: Annotated[Optional[float], typer.Option(min=0.1, help="Wall-clock budget.")] = None,
    context: Annotated[str, typer.Option(help="What the generator sees when revising: latest or full.")] = "latest",
    explain: Annotated[bool, typer.Option(help="Let the model turn failing signals into a lesson.")] = True,
    timeout: Annotated[float, typer.Option(min=0.1, help="Seconds each check may run.")] = 10.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the whole result as JSON.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show every model call.")] = False,
    trace: TraceOpt = None,
) -> None:
    """Generate, check against objective signals, and revise until the checks pass or a bound is hit."""
    with clean_errors():
        from ..evaluate import CommandCheck, LLMJudge, Limits, PytestCheck, Sandbox
        from ..loops.refine import refine as run_refine
        from ..models.spec import resolve
        from ..types import Budget
        from .render import LiveView

        if context not in ("latest", "full"):
            raise ConfigError(f"--context must be latest or full, not {context!r}")
        if out is not None and out.suffix == "":
            raise ConfigError(f"--out needs a file name with a suffix, got {out}")
        if out is not None and check is not None and (out.is_absolute() or ".." in out.parts):
            raise ConfigError(f"--out must be a path inside this directory for --check, got {out}")
        if out is not None and not out.parent.is_dir():
            raise ConfigError(f"--out directory does not exist: {out.parent}")
        text = read_task(task)
        sandbox = Sandbox(Limits(timeout=timeout, cpu_seconds=max(1, int(timeout))))
        checks: list = []
        if tests is not None:
            if not tests.is_file():
                raise ConfigError(f"tests file not found: {tests}", hint="give a pytest file with --tests")
            checks.append(PytestCheck(tests, module=out.stem if out else "solution", sandbox=sandbox))
        if check is not None:
            checks.append(CommandCheck(check, out=str(out or "solution.py"), workdir=Path.cwd(), sandbox=sandbox))
        if judge:
            checks.append(LLMJudge())
        if not checks:
            raise ConfigError("nothing to check the answer against", hint="give --tests FILE, --check CMD or --judge")
        llm = resolve(model)
        store = open_store(trace)
        view = None if as_json else LiveView(console, verbose=verbose)
        budget = Budget(max_tokens=max_tokens, max_calls=max_calls, max_seconds=max_seconds,
                        max_iterations=max_iterations)
        try:
            result = run_refine(text, checks, model=llm, budget=budget, context=context,  # type: ignore[arg-type]
                                explain=explain, store=store, observer=view)
        finally:
            if view:
                view.stop_spinner()
        if out is not None and result.best is not None:
            out.write_text(result.best if result.best.endswith("\n") else result.best + "\n")
            if not as_json:
                console.print(f"best candidate written to {out}")
        _finish_cli(result, as_json=as_json)


def _finish_cli(result, *, as_json: bool) -> None:  # noqa: ANN001 - Result, imported lazily
    """Print a result and exit with the code that says how it ended."""
    from ..types import StopReason
    from .render import print_summary

    if as_json:
        print(json.dumps(result.to_dict(), default=str, indent=2))
    else:
        print_summary(console, result)
    if result.stop_reason is StopReason.ERROR:
        if not as_json:
            errors.print(f"[bold red]error:[/bold red] {result.error}", highlight=False)
        raise typer.Exit(1)
    if not result.passed:
        raise typer.Exit(3)


def _react_run(goal: str, *, db: Path, write: bool, model: str | None, budget, trials_count: int,  # noqa: ANN001
               experience: bool, as_json: bool, verbose: bool, trace: Path | None, resume: str | None = None):
    from ..loops import react as run_react
    from ..loops import trials as run_trials
    from ..models.spec import resolve
    from ..reflect import ExperienceLibrary
    from ..tools import sql_tools
    from .render import LiveView

    tools = sql_tools(db, write=write)
    llm = resolve(model)
    store = open_store(trace)
    library = ExperienceLibrary(store) if experience else None
    view = None if as_json else LiveView(console, verbose=verbose)
    meta = {"toolset": "sql", "db": str(db.resolve()), "write": write}
    try:
        if trials_count <= 1 or resume:
            return run_react(goal, tools, model=llm, budget=budget, store=store, observer=view,
                             experience=library, meta=meta, resume=resume)
        return run_trials(goal, lambda lessons: run_react(goal, tools, model=llm, budget=budget, lessons=lessons,
                                                         store=store, observer=view, experience=library, meta=meta),
                          model=llm, max_trials=trials_count, store=store, observer=view, experience=library)
    finally:
        if view:
            view.stop_spinner()


@app.command()
def react(
    goal: Annotated[str, typer.Argument(help="The question or goal.")],
    db: Annotated[Path, typer.Option("--db", help="The SQLite database the SQL tools work on.")],
    write: Annotated[bool, typer.Option("--write", help="Allow changes (adds a side-effecting execute tool).")] = False,
    model: ModelOpt = None,
    max_steps: Annotated[int, typer.Option(min=1, help="Steps at most.")] = 8,
    max_tokens: Annotated[Optional[int], typer.Option(min=1, help="Token budget (input + output).")] = None,
    max_calls: Annotated[Optional[int], typer.Option(min=1, help="Model-call budget.")] = None,
    max_seconds: Annotated[Optional[float], typer.Option(min=0.1, help="Wall-clock budget.")] = None,
    max_reflections: Annotated[int, typer.Option(min=0, help="Reflector calls per run.")] = 2,
    trials_count: Annotated[int, typer.Option("--trials", min=1, help="Whole attempts, each learning from the "
                            "last one's failure.")] = 1,
    experience: Annotated[bool, typer.Option(help="Reuse and record repairs in the experience library.")] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print the whole result as JSON.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show every model call.")] = False,
    trace: TraceOpt = None,
) -> None:
    """Answer a question with tools (the bundled SQL toolset), reflecting only on failure signals."""
    with clean_errors():
        from ..types import Budget

        budget = Budget(max_tokens=max_tokens, max_calls=max_calls, max_seconds=max_seconds,
                        max_iterations=max_steps, max_reflections=max_reflections)
        result = _react_run(goal, db=db, write=write, model=model, budget=budget, trials_count=trials_count,
                            experience=experience, as_json=as_json, verbose=verbose, trace=trace)
        _finish_cli(result, as_json=as_json)


@app.command()
def resume(
    run_id: Annotated[str, typer.Argument(help="The killed react run: its id or a unique prefix.")],
    model: ModelOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the whole result as JSON.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show every model call.")] = False,
    trace: TraceOpt = None,
) -> None:
    """Continue a killed react run from its last stored step, without repeating a side-effecting tool."""
    with clean_errors():
        from ..types import Budget

        record = open_store(trace).get_run(run_id)
        if record is None:
            raise ConfigError(f"no single run matches {run_id!r}", hint="list runs with `reflexa runs`")
        if record.loop != "react" or record.meta.get("toolset") != "sql":
            raise ConfigError(f"run {record.run_id[:12]} is a {record.loop} run; the CLI resumes react runs",
                              hint="resume other loops from Python with resume=RUN_ID")
        budget = Budget(**record.meta["budget"])
        result = _react_run(record.task, db=Path(record.meta["db"]), write=record.meta["write"], model=model,
                            budget=budget, trials_count=1, experience=True, as_json=as_json, verbose=verbose,
                            trace=trace, resume=record.run_id)
        _finish_cli(result, as_json=as_json)


@app.command()
def index(folder: Annotated[Path, typer.Argument(help="A folder of .md, .txt and .html files.")]) -> None:
    """Build or update the local search corpus of a folder (incremental: only changed files are re-read)."""
    with clean_errors():
        from ..search import LocalCorpus

        report = LocalCorpus.for_folder(folder).index(folder)
        console.print(f"indexed {folder}: {report.added} added, {report.updated} updated, {report.unchanged} "
                      f"unchanged, {report.removed} removed; {report.passages} passages"
                      + (f"; {report.skipped} skipped (PDF needs: pip install 'reflexa[pdf]')" if report.skipped else ""))


@app.command("research")
def research_cmd(
    question: Annotated[str, typer.Argument(help="The question to answer from evidence.")],
    corpus: Annotated[Optional[Path], typer.Option("--corpus", help="Folder of documents (indexed on the fly).")] = None,
    search: Annotated[str, typer.Option("--search", help="Search backend: local (default, needs --corpus), tavily, "
                      "ddgs or wikipedia.")] = "local",
    model: ModelOpt = None,
    max_iterations: Annotated[int, typer.Option(min=1, help="Search-and-revise rounds at most.")] = 2,
    max_tokens: Annotated[Optional[int], typer.Option(min=1, help="Token budget (input + output).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the whole result as JSON.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show every model call.")] = False,
    trace: TraceOpt = None,
) -> None:
    """Answer a question from evidence: every claim cited [n] or marked [UNCERTAIN: ...]."""
    with clean_errors():
        from ..loops.research import research
        from ..models.spec import resolve
        from ..search import LocalCorpus, SearchCache
        from ..types import Budget
        from .render import LiveView

        if search == "local":
            if corpus is None:
                raise ConfigError("--corpus is required for the local search backend", hint="give a folder of documents")
            backend = LocalCorpus.for_folder(corpus)
            backend.index(corpus)
        else:
            from ..search.web import backend as web_backend

            backend = web_backend(search)
        llm = resolve(model)
        store = open_store(trace)
        view = None if as_json else LiveView(console, verbose=verbose)
        try:
            result = research(question, backend, model=llm, budget=Budget(max_iterations=max_iterations,
                              max_tokens=max_tokens), store=store, observer=view, cache=SearchCache(store))
        finally:
            if view:
                view.stop_spinner()
        if not as_json and result.output:
            console.rule("answer")
            console.print(result.output, highlight=False, markup=False)
        _finish_cli(result, as_json=as_json)


@app.command("experience")
def experience_cmd(trace: TraceOpt = None) -> None:
    """The repairs the experience library has learned: trigger, repair, hits, success rate."""
    with clean_errors():
        from datetime import datetime

        from rich.table import Table

        from ..reflect import ExperienceLibrary

        table = Table("trigger", "repair", "hits", "success rate", "created", "last used")
        for entry in sorted(ExperienceLibrary(open_store(trace)).entries(), key=lambda e: -e.last_used):
            tried = entry.successes + entry.failures
            rate = f"{entry.successes / tried:.0%} of {tried}" if tried else "untried"
            table.add_row(entry.fingerprint[:70], entry.lesson["correction"][:70], str(entry.hits),
                          rate + (" (demoted)" if entry.demoted else ""),
                          datetime.fromtimestamp(entry.created_at).strftime("%Y-%m-%d %H:%M"),
                          datetime.fromtimestamp(entry.last_used).strftime("%Y-%m-%d %H:%M"))
        console.print(table)


@app.command()
def runs(limit: Annotated[int, typer.Option(min=1, help="How many runs.")] = 20, trace: TraceOpt = None) -> None:
    """List stored runs, newest first."""
    with clean_errors():
        from datetime import datetime

        from rich.table import Table

        table = Table("run", "loop", "started", "stop reason", "tokens", "task")
        for record in open_store(trace).runs(limit):
            tokens = (record.result or {}).get("total_usage", {})
            table.add_row(record.run_id[:12], record.loop,
                          datetime.fromtimestamp(record.started_at).strftime("%Y-%m-%d %H:%M:%S"),
                          record.stop_reason or record.status,
                          str(tokens.get("input_tokens", 0) + tokens.get("output_tokens", 0)),
                          record.task.strip().splitlines()[0][:60] if record.task.strip() else "")
        console.print(table)


@app.command()
def show(
    run_id: Annotated[str, typer.Argument(help="A run id or a unique prefix of one.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the run and its steps as JSON.")] = False,
    trace: TraceOpt = None,
) -> None:
    """Print one run step by step."""
    with clean_errors():
        from .render import counters_line, print_step, usage_table

        store = open_store(trace)
        record = store.get_run(run_id)
        if record is None:
            raise ConfigError(f"no single run matches {run_id!r}", hint="list runs with `reflexa runs`")
        steps = store.steps(record.run_id)
        if as_json:
            print(json.dumps({"run": dataclasses.asdict(record), "steps": [s.to_dict() for s in steps]},
                             default=str, indent=2))
            return
        console.print(f"[bold]run {record.run_id}[/bold] ({record.loop}, model {record.meta.get('model')})")
        console.print(f"task: {record.task.strip()[:500]}")
        for step in steps:
            print_step(console, step, verbose=True)
        if record.result:
            console.print(usage_table(record.result["usage"]))
            for note in record.result.get("notes", []):
                console.print(f"[yellow]{note}[/yellow]")
            if line := counters_line(record.result.get("counters", {})):
                console.print(line)
        else:
            console.print("[yellow]this run did not finish[/yellow]")


@app.command()
def models(
    as_json: Annotated[bool, typer.Option("--json", help="Print backends and local models as JSON.")] = False,
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


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        errors.print("interrupted; the steps so far are in the trace store")
        sys.exit(130)
