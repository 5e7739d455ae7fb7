"""The `reflexa` command line. Bad input gets one clear line, a hint and a non-zero exit, never a traceback."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

from ..errors import ConfigError, ReflexaError
from .inputs import check_database, check_out, read_task, read_text_file, sql_validator, write_out

if TYPE_CHECKING:
    from ..types import Budget, Result

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

ModelOpt = Annotated[str | None, typer.Option("--model", "-m", help="Model spec: local (Qwen2.5-Coder-0.5B), "
                     "local:smollm2, local:PATH.gguf, openai:MODEL, openai:http://HOST:PORT/v1#MODEL, anthropic:MODEL, "
                     "scripted:FILE, or a plugin's. Default: $REFLEXA_MODEL, reflexa.toml, then local.",
                     show_default=False)]
TraceOpt = Annotated[str | None, typer.Option("--trace", help="Trace store: a SQLite file, or a postgresql:// URL "
                     "(pip install 'reflexa[postgres]'). Default: $REFLEXA_TRACE, else trace.db in the user data "
                     "directory.", show_default=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the whole result as JSON.")]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="Show every model call.")]


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


def open_store(target: str | None):  # noqa: ANN201 - a Store, imported lazily
    from ..trace.open import open_store as open_trace

    return open_trace(target)


EXIT_CODES = {"PASSED": 0, "ERROR": 1, "ANSWERED_UNVERIFIED": 4, "INTERRUPTED": 130}
"""How a run's stop reason maps to the exit status; every other reason (a run stopped without passing) is 3.
2 is bad input."""






def session_for(model: str | None, trace: str | None, *, as_json: bool, verbose: bool, experience: bool = False):  # noqa: ANN201
    """The Session a command runs in: the model, the store, a live view unless --json."""
    from ..loops import Session
    from ..models.spec import resolve
    from ..reflect import ExperienceLibrary
    from .render import LiveView

    store = open_store(trace)
    return Session(model=resolve(model), store=store, observer=None if as_json else LiveView(console, verbose=verbose),
                   experience=ExperienceLibrary(store) if experience else None)


def run_cli(session, run):  # noqa: ANN001, ANN201
    """Run a loop under the live view; Ctrl-C says how to resume."""
    from ..errors import RunInterrupted

    try:
        return run()
    except RunInterrupted as exc:
        _stop_view(session)
        errors.print(f"interrupted: run {exc.run_id[:12]} is stored as interrupted. Continue it with:\n"
                     f"  reflexa resume {exc.run_id[:12]}", highlight=False)
        raise typer.Exit(130) from None
    finally:
        _stop_view(session)


def _stop_view(session) -> None:  # noqa: ANN001
    if session.observer is not None:
        session.observer.stop_spinner()


def refine_checks(*, tests: Path | None, check: str | None, out: str | None, judge: bool, timeout: float) -> list:
    from ..evaluate import CommandCheck, Limits, LLMJudge, PytestCheck, Sandbox

    sandbox = Sandbox(Limits(timeout=timeout, cpu_seconds=max(1, int(timeout))))
    checks: list = []
    if tests is not None:
        read_text_file(tests, "tests file")
        checks.append(PytestCheck(tests, module=Path(out).stem if out else "solution", sandbox=sandbox))
    if check is not None:
        checks.append(CommandCheck(check, out=out or "solution.py", workdir=Path.cwd(), sandbox=sandbox))
    if judge:
        checks.append(LLMJudge())
    if not checks:
        raise ConfigError("nothing to check the answer against", hint="give --tests FILE, --check CMD or --judge")
    return checks


@app.command()
def refine(
    task: Annotated[str, typer.Option("--task", "-t", help="The task: a file (.md, .txt) or the text itself.")],
    tests: Annotated[Path | None, typer.Option("--tests", help="A pytest file that imports the candidate "
                     "from module `solution` (or from the --out file's module).", show_default=False)] = None,
    check: Annotated[str | None, typer.Option("--check", help="A shell command run in a scratch copy of "
                     "this directory with the candidate written to --out; exit 0 passes.", show_default=False)] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Where the candidate goes for --check, "
                   "and where the best candidate is written at the end.", show_default=False)] = None,
    force_out: Annotated[bool, typer.Option("--force-out", help="Allow --out outside the working directory.")] = False,
    judge: Annotated[bool, typer.Option("--judge", help="Opt in to an LLM judge (subjective).")] = False,
    model: ModelOpt = None,
    max_attempts: Annotated[int, typer.Option("--max-attempts", "--max-iterations", min=1,
                            help="Attempts at most.")] = 3,
    max_tokens: Annotated[int | None, typer.Option(min=1, help="Token budget (input + output).")] = None,
    max_calls: Annotated[int | None, typer.Option(min=1, help="Model-call budget.")] = None,
    max_seconds: Annotated[float | None, typer.Option(min=0.1, help="Wall-clock budget.")] = None,
    context: Annotated[str, typer.Option(help="What the generator sees when revising: latest or full.")] = "latest",
    explain: Annotated[bool, typer.Option(help="Let the model turn failing signals into a lesson.")] = True,
    timeout: Annotated[float, typer.Option(min=0.1, max=3600, help="Seconds each check may run.")] = 10.0,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = False,
    trace: TraceOpt = None,
) -> None:
    """Generate, check against objective signals, and revise until the checks pass or a bound is hit."""
    with clean_errors():
        from ..loops.refine import refine as run_refine
        from ..types import Budget

        if context not in ("latest", "full"):
            raise ConfigError(f"--context must be latest or full, not {context!r}")
        if out is not None and check is not None and (out.is_absolute() or ".." in out.parts):
            raise ConfigError(f"--out must be a path inside this directory for --check (relative, no ..), got {out}")
        target = check_out(out, force=force_out) if out is not None else None
        text = read_task(task)
        out_name = str(out) if out else None
        cli = {"tests": str(tests.resolve()) if tests else None, "check": check, "out": out_name,
               "judge": judge, "timeout": timeout, "cwd": str(Path.cwd())}
        checks = refine_checks(tests=tests, check=check, out=out_name, judge=judge, timeout=timeout)
        session = session_for(model, trace, as_json=as_json, verbose=verbose)
        budget = Budget(max_tokens=max_tokens, max_calls=max_calls, max_seconds=max_seconds)
        result = run_cli(session, lambda: run_refine(text, checks, session=session, budget=budget,
                                                     max_attempts=max_attempts, context=context,  # type: ignore[arg-type]
                                                     explain=explain, meta={"cli": cli}))
        if target is not None and result.best is not None:
            write_out(target, result.best)
            if not as_json:
                console.print(f"best candidate written to {out}")
        _finish_cli(result, as_json=as_json)


def _finish_cli(result, *, as_json: bool) -> None:  # noqa: ANN001 - Result, imported lazily
    """Print a result and exit with the code that says how it ended."""
    from .render import print_summary

    if as_json:
        print(json.dumps(result.to_dict(), default=str, indent=2))
    else:
        print_summary(console, result)
        if result.error:
            errors.print(f"[bold red]error:[/bold red] {escape(result.error)}", highlight=False)
    code = EXIT_CODES.get(str(result.stop_reason), 3)
    if code:
        raise typer.Exit(code)



def _react_run(goal: str, *, db: Path, write: bool, model: str | None, budget: Budget, max_steps: int,
               trials_count: int, validate: str | None, experience: bool, as_json: bool, verbose: bool,
               trace: str | None, resume: str | None = None) -> Result:
    from ..loops import react as run_react
    from ..loops import trials as run_trials
    from ..tools import ToolRegistry, sql_tools

    registry = ToolRegistry(sql_tools(db, write=write))
    validator = sql_validator(db, validate) if validate is not None else None
    session = session_for(model, trace, as_json=as_json, verbose=verbose, experience=experience)
    meta = {"toolset": "sql", "db": str(db.resolve()), "write": write, "validate": validate}

    def one(lessons=(), left=budget, resumed=None):  # noqa: ANN001, ANN202
        return run_react(goal, registry, session=session, budget=left, max_steps=max_steps, validator=validator,
                         lessons=lessons, meta=meta, resume=resumed)

    if trials_count <= 1 or resume:
        return run_cli(session, lambda: one(resumed=resume))
    return run_cli(session, lambda: run_trials(goal, lambda lessons, left: one(lessons, left), session=session,
                                               max_trials=trials_count, budget=budget))


@app.command()
def react(
    goal: Annotated[str, typer.Argument(help="The question or goal.")],
    db: Annotated[Path, typer.Option("--db", help="The SQLite database the SQL tools work on.")],
    validate: Annotated[str | None, typer.Option("--validate", help="Check the final answer: an SQL query "
                        "that must return a row (the answer is :answer), or a shell command that must exit 0 (the "
                        "answer is $REFLEXA_ANSWER). Without it an answer ends ANSWERED_UNVERIFIED.",
                        show_default=False)] = None,
    write: Annotated[bool, typer.Option("--write", help="Allow changes (adds a side-effecting execute "
                     "tool).")] = False,
    model: ModelOpt = None,
    max_steps: Annotated[int, typer.Option(min=1, help="Steps at most.")] = 8,
    max_tokens: Annotated[int | None, typer.Option(min=1, help="Token budget (input + output), over all "
                          "trials.")] = None,
    max_calls: Annotated[int | None, typer.Option(min=1, help="Model-call budget, over all trials.")] = None,
    max_seconds: Annotated[float | None, typer.Option(min=0.1, help="Wall-clock budget.")] = None,
    max_reflections: Annotated[int, typer.Option(min=0, help="Reflector calls per run.")] = 2,
    trials_count: Annotated[int, typer.Option("--trials", min=1, help="Whole attempts, each learning from the "
                            "last one's failure; one budget covers them all.")] = 1,
    experience: Annotated[bool, typer.Option(help="Reuse and record repairs in the experience library.")] = True,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = False,
    trace: TraceOpt = None,
) -> None:
    """Answer a question with tools (the bundled SQL toolset), reflecting only on failure signals."""
    with clean_errors():
        from ..types import Budget

        check_database(db)
        budget = Budget(max_tokens=max_tokens, max_calls=max_calls, max_seconds=max_seconds,
                        max_reflections=max_reflections)
        result = _react_run(goal, db=db, write=write, model=model, budget=budget, max_steps=max_steps,
                            trials_count=trials_count, validate=validate, experience=experience, as_json=as_json,
                            verbose=verbose, trace=trace)
        _finish_cli(result, as_json=as_json)



@app.command()
def resume(
    run_id: Annotated[str, typer.Argument(help="The unfinished run: its id or a unique prefix.")],
    model: ModelOpt = None,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = False,
    trace: TraceOpt = None,
) -> None:
    """Continue a killed or interrupted run (refine, react or research) from its last stored step, without
    repeating a side-effecting tool."""
    with clean_errors():
        from ..types import Budget

        record = find_run(open_store(trace), run_id)
        if record.status == "finished":
            raise ConfigError(f"run {record.run_id[:12]} already finished ({record.stop_reason})")
        meta = record.meta
        budget_data = {k: v for k, v in (meta.get("budget") or {}).items() if k in Budget.__dataclass_fields__}
        budget = Budget(**budget_data)
        if record.loop == "react" and meta.get("toolset") == "sql":
            result = _react_run(record.task, db=Path(meta["db"]), write=meta["write"], model=model or meta.get("model"),
                                budget=budget, max_steps=meta.get("bound", 8), trials_count=1,
                                validate=meta.get("validate"), experience=True, as_json=as_json, verbose=verbose,
                                trace=trace, resume=record.run_id)
        elif record.loop == "refine" and "cli" in meta:
            result = _resume_refine(record, model, budget, as_json=as_json, verbose=verbose, trace=trace)
        elif record.loop == "research" and "cli" in meta:
            result = _resume_research(record, model, budget, as_json=as_json, verbose=verbose, trace=trace)
        else:
            raise ConfigError(f"run {record.run_id[:12]} is a {record.loop} run started from Python",
                              hint=f"resume it from Python: {record.loop}(..., resume={record.run_id[:12]!r})")
        _finish_cli(result, as_json=as_json)


def _resume_refine(record, model, budget, *, as_json: bool, verbose: bool, trace: str | None):  # noqa: ANN001, ANN202
    import os

    from ..loops.refine import refine as run_refine

    cli = record.meta["cli"]
    os.chdir(cli["cwd"])  # --check and --tests were given relative to where the run started
    checks = refine_checks(tests=Path(cli["tests"]) if cli["tests"] else None, check=cli["check"], out=cli["out"],
                           judge=cli["judge"], timeout=cli["timeout"])
    session = session_for(model or record.meta.get("model"), trace, as_json=as_json, verbose=verbose)
    return run_cli(session, lambda: run_refine(record.task, checks, session=session, budget=budget,
                                               max_attempts=record.meta.get("bound", 3),
                                               context=record.meta.get("context", "latest"),
                                               meta={"cli": cli}, resume=record.run_id))


def _resume_research(record, model, budget, *, as_json: bool, verbose: bool, trace: str | None):  # noqa: ANN001, ANN202
    from ..loops.research import research as run_research
    from ..search import SearchCache

    cli = record.meta["cli"]
    session = session_for(model or record.meta.get("model"), trace, as_json=as_json, verbose=verbose)
    backend = search_backend(cli["search"], Path(cli["corpus"]) if cli["corpus"] else None)
    result = run_cli(session, lambda: run_research(record.task, backend, session=session, budget=budget,
                                                   max_rounds=record.meta.get("bound", 2),
                                                   cache=SearchCache(session.store), meta={"cli": cli},
                                                   resume=record.run_id))
    _print_answer(result, as_json=as_json)
    return result


def find_run(store, run_id: str):  # noqa: ANN001, ANN201
    """A run by id or unique prefix; distinct errors for an unknown id and an ambiguous prefix."""
    matches = store.find_runs(run_id)
    if not matches:
        raise ConfigError(f"no run has an id starting with {run_id!r}", hint="list runs with `reflexa runs`")
    if len(matches) > 1:
        raise ConfigError(f"{run_id!r} matches more than one run", hint="give more characters of the id")
    return matches[0]


@app.command()
def index(folder: Annotated[Path, typer.Argument(help="A folder of .md, .txt and .html files.")]) -> None:
    """Build or update the local search corpus of a folder (incremental: only changed files are re-read)."""
    with clean_errors():
        from ..search import LocalCorpus

        report = LocalCorpus.for_folder(folder).index(folder)
        skipped = f"; {report.skipped} skipped (PDF needs: pip install 'reflexa[pdf]')" if report.skipped else ""
        console.print(f"indexed {folder}: {report.added} added, {report.updated} updated, {report.unchanged} "
                      f"unchanged, {report.removed} removed; {report.passages} passages{skipped}")


def search_backend(search: str, corpus: Path | None):  # noqa: ANN201
    from ..search import LocalCorpus

    if search == "local":
        if corpus is None:
            raise ConfigError("--corpus is required for the local search backend", hint="give a folder of documents")
        if not corpus.is_dir():
            raise ConfigError(f"--corpus must be a folder of documents: {corpus}")
        backend = LocalCorpus.for_folder(corpus)
        backend.index(corpus)
        return backend
    from ..search.web import backend as web_backend

    return web_backend(search)


def _print_answer(result, *, as_json: bool) -> None:  # noqa: ANN001
    if not as_json and result.output:
        console.rule("answer")
        console.print(result.output, highlight=False, markup=False)


@app.command("research")
def research_cmd(
    question: Annotated[str, typer.Argument(help="The question to answer from evidence.")],
    corpus: Annotated[Path | None, typer.Option("--corpus", help="Folder of documents (indexed on the fly).")] = None,
    search: Annotated[str, typer.Option("--search", help="Search backend: local (default, needs --corpus), tavily, "
                      "ddgs or wikipedia.")] = "local",
    model: ModelOpt = None,
    max_rounds: Annotated[int, typer.Option("--max-rounds", "--max-iterations", min=1,
                                            help="Search-and-revise rounds at most.")] = 2,
    max_tokens: Annotated[int | None, typer.Option(min=1, help="Token budget (input + output).")] = None,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = False,
    trace: TraceOpt = None,
) -> None:
    """Answer a question from evidence: every claim cited \\[n] or marked \\[UNCERTAIN: ...]."""
    with clean_errors():
        from ..loops.research import research
        from ..search import SearchCache
        from ..types import Budget

        if not question.strip():
            raise ConfigError("the question is empty")
        backend = search_backend(search, corpus)
        session = session_for(model, trace, as_json=as_json, verbose=verbose)
        cli = {"search": search, "corpus": str(corpus.resolve()) if corpus else None}
        result = run_cli(session, lambda: research(question, backend, session=session, max_rounds=max_rounds,
                                                   budget=Budget(max_tokens=max_tokens),
                                                   cache=SearchCache(session.store), meta={"cli": cli}))
        _print_answer(result, as_json=as_json)
        _finish_cli(result, as_json=as_json)


@app.command("batch")
def batch_cmd(
    tasks: Annotated[Path, typer.Argument(help="A JSONL file, one task a line (see the README's task-line schema).")],
    loop: Annotated[str, typer.Option("--loop", "-l", help="The loop every task runs: refine, react or research.")],
    concurrency: Annotated[int, typer.Option("--concurrency", "-c", min=1, max=1024, help="Tasks at once.")] = 4,
    executor: Annotated[str, typer.Option(help="local (threads; processes for the embedded model) or ray.")] = "local",
    address: Annotated[str | None, typer.Option(help="A Ray cluster to run on (default: a local Ray).",
                       show_default=False)] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="The results file (JSONL). Default: "
                   "TASKS.results.jsonl beside the tasks file.", show_default=False)] = None,
    model: ModelOpt = None,
    connections: Annotated[int | None, typer.Option(min=1, help="Model calls in flight at most per backend in one "
                           "process (default: as many as --concurrency).", show_default=False)] = None,
    experience: Annotated[bool, typer.Option(help="Tasks share the experience library.")] = True,
    governor: Annotated[bool, typer.Option(help="Let the ROI governor cut retries that do not pay.")] = False,
    max_tokens: Annotated[int | None, typer.Option(min=1, help="Token budget of each task.")] = None,
    max_calls: Annotated[int | None, typer.Option(min=1, help="Model-call budget of each task.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="No progress bar; print the summary as JSON.")] = False,
    trace: TraceOpt = None,
) -> None:
    """Run every task of a JSONL file with concurrent workers on one store. Results go to the store and the
    results file; the same command again skips finished tasks and resumes interrupted ones."""
    import os

    from ..trace.sqlite import default_path
    from .batch import run as run_batch_cli

    with clean_errors():
        if executor not in ("local", "ray"):
            raise ConfigError(f"--executor must be local or ray, not {executor!r}")
        if address is not None and executor != "ray":
            raise ConfigError("--address needs --executor ray")
        budget = {k: v for k, v in (("max_tokens", max_tokens), ("max_calls", max_calls)) if v is not None}
        store = trace or os.environ.get("REFLEXA_TRACE") or str(default_path())
        code = run_batch_cli(tasks, loop, store=store, out=out, console=console, errors=errors, as_json=as_json,
                             model=model, concurrency=concurrency, executor=executor, address=address,
                             connections=connections, experience=experience, governor=governor, budget=budget)
    raise typer.Exit(code)


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
    full: Annotated[bool, typer.Option("--full", help="Show whole candidates and observations.")] = False,
    trace: TraceOpt = None,
) -> None:
    """Print one run step by step."""
    with clean_errors():
        from .render import View, counters_line, usage_table

        store = open_store(trace)
        record = find_run(store, run_id)
        steps = store.steps(record.run_id)
        if as_json:
            print(json.dumps({"run": dataclasses.asdict(record), "steps": [s.to_dict() for s in steps]},
                             default=str, indent=2))
            return
        console.print(f"[bold]run {record.run_id}[/bold] ({record.loop}, model {record.meta.get('model')})")
        console.print(f"task: {record.task.strip()[:500]}")
        view = View(console, verbose=True, full=full, timestamps=True)
        for step in steps:
            view.step(step)
        if record.result:
            console.print(usage_table(record.result["usage"]))
            for note in record.result.get("notes", []):
                console.print(f"[yellow]{note}[/yellow]")
            if line := counters_line(record.result.get("counters", {})):
                console.print(line)
        if record.status != "finished":
            console.print(f"[yellow]this run is {record.status}[/yellow]; continue it with: "
                          f"reflexa resume {record.run_id[:12]}", highlight=False)


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
    except Exception as exc:  # noqa: BLE001 - a bug in reflexa: one line, not a traceback; the run is stored as ERROR
        errors.print(f"internal error (a bug in reflexa, please report it): {type(exc).__name__}: {exc}")
        sys.exit(1)
