"""The `reflexa` command line. Bad input gets one clear line, a hint and a non-zero exit, never a traceback."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from ..errors import ConfigError, ReflexaError
from ..trace.store import trace_env
from .inputs import (
    check_database,
    check_not_an_input,
    check_out,
    path_arg,
    read_task,
    read_text_file,
    sql_validator,
    where_best_goes,
    write_out,
)
from .output import Output

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
ReflectorOpt = Annotated[str | None, typer.Option("--reflector-model", help="Model spec for the reflector's calls "
                         "alone (e.g. local:qwen1.5b beside the default model); '' for the run's model. Default: "
                         "$REFLEXA_REFLECTOR_MODEL, reflexa.toml's reflector_model, else the run's model.",
                         show_default=False)]
TraceOpt = Annotated[str | None, typer.Option("--trace", help="Trace store: a SQLite file, or a postgresql:// URL "
                     "(pip install 'reflexa\\[postgres]'). Default: $REFLEXA_TRACE, else trace.db in the user data "
                     "directory.", show_default=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the whole result as one JSON document at the end "
                    "(a live line still shows on stderr when it is a terminal).")]
JsonlOpt = Annotated[bool, typer.Option("--jsonl", help="Stream one JSON object a line to stdout: the run's id, "
                     "each step as it is stored, then the result.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No live line and no steps; one summary line at "
                     "the end.")]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="Show every model call.")]


@contextmanager
def clean_errors() -> Iterator[None]:
    """Turn reflexa's own errors into one line plus a hint, exit code 2."""
    try:
        yield
    except ReflexaError as exc:
        errors.print(f"[bold red]error:[/bold red] {escape(str(exc))}", highlight=False)
        if exc.hint:
            errors.print(f"[dim]hint:[/dim] {escape(exc.hint)}", highlight=False)
        raise typer.Exit(2) from None
    except KeyboardInterrupt:  # outside a run (a run's own Ctrl-C is handled by run_cli)
        errors.print("interrupted")
        raise typer.Exit(130) from None


def open_store(target: str | None, *, reader: bool = False):  # noqa: ANN201 - a Store, imported lazily
    """The store --trace names; a `reader` command opens one it may not write read-only."""
    from ..trace.open import open_store as open_trace

    return open_trace(target, reader=reader)


LOOPS = ("refine", "react", "research", "trials", "plan")
"""The loops a stored run can be of."""

EXIT_CODES = {"PASSED": 0, "ERROR": 1, "ANSWERED_UNVERIFIED": 4, "INTERRUPTED": 130}
"""How a run's stop reason maps to the exit status; every other reason (a run stopped without passing) is 3.
2 is bad input."""


def output(as_json: bool, jsonl: bool, quiet: bool, verbose: bool) -> Output:
    """A command's output flags, checked: --json and --jsonl exclude each other."""
    if as_json and jsonl:
        raise ConfigError("--json and --jsonl exclude each other",
                          hint="--json prints one document at the end, --jsonl a line per step")
    return Output(json=as_json, jsonl=jsonl, quiet=quiet, verbose=verbose)


def session_for(model: str | None, trace: str | None, out: Output, *, experience: bool = False,  # noqa: ANN201
                view: type | None = None, reflector: str | None = None):
    """The Session a command runs in (model, reflector model, store, the observers `out` asks for) and its
    run tracker. `view` is the live view's class (a LiveView; PlanView for plan); `reflector` is a
    --reflector-model value (None: the configured one; '': the run's model)."""
    from ..loops import Session
    from ..models.spec import resolve, resolve_reflector
    from ..reflect import ExperienceLibrary
    from .live import chain, observer_for

    tracker = observer_for(out, console, errors, view=view)
    observer = chain(tracker)
    observer("status", "starting")  # the live line shows up now, not after the model has loaded
    try:
        store = open_store(trace)
        generator = resolve(model)
        session = Session(model=generator, store=store, observer=observer,
                          experience=ExperienceLibrary(store) if experience else None,
                          reflector_model=resolve_reflector(reflector, generator))
    except BaseException:
        _stop_view(tracker)  # a bad model spec or store: the error must not print under a live line
        raise
    return session, tracker


def run_cli(session, tracker, run, out: Output):  # noqa: ANN001, ANN201
    """Run a loop under the live view, in a worker thread; Ctrl-C stops it within a second, stores it as
    interrupted and says how to resume it (exit 130)."""
    from .live import hard_exit, run_in_worker

    def interrupted(run_id: str | None, left_behind: bool) -> NoReturn:
        _stop_view(tracker)
        record = session.store.get_run(run_id) if run_id is not None else None
        if run_id is None:
            errors.print("interrupted before a run started; nothing was stored")
        elif record is not None and record.loop == "trials" and tracker.seen[-1] != run_id:
            # `reflexa resume` takes refine, react and research runs: name the trial that was under way.
            trial = tracker.seen[-1]
            errors.print(f"interrupted: trials run {run_id[:12]} and its current trial, run {trial[:12]}, are stored "
                         f"as interrupted. Continue the trial with:\n  reflexa resume {trial[:12]}",
                         highlight=False, soft_wrap=True)
        else:
            errors.print(f"interrupted: run {run_id[:12]} is stored as interrupted. Continue it with:\n"
                         f"  reflexa resume {run_id[:12]}", highlight=False, soft_wrap=True)
        if record is not None and record.result is not None and (out.json or out.jsonl):
            data = {"event": "result", **record.result} if out.jsonl else record.result  # still one document
            print(json.dumps(data, default=str, indent=None if out.jsonl else 2), flush=True)
        if left_behind:
            hard_exit(130)
        raise typer.Exit(130)

    try:
        return run_in_worker(run, tracker=tracker, store=session.store, on_interrupt=interrupted)
    finally:
        _stop_view(tracker)


def _stop_view(tracker) -> None:  # noqa: ANN001
    if tracker.view is not None:
        tracker.view.close()


def refine_checks(*, tests: Path | None, check: str | None, out: str | None, judge: bool, timeout: float) -> list:
    from ..evaluate import CommandCheck, Limits, LLMJudge, PytestCheck, Sandbox

    sandbox = Sandbox(Limits.within(timeout))
    checks: list = []
    if tests is not None:
        read_text_file(tests, "tests file")
        checks.append(PytestCheck(tests, module=Path(out).stem if out else "solution", sandbox=sandbox))
    if check is not None:
        if not check.strip():
            raise ConfigError("--check is empty", hint="give the shell command that must exit 0")
        checks.append(CommandCheck(check, out=out or "solution.py", workdir=Path.cwd(), sandbox=sandbox))
    if judge:
        checks.append(LLMJudge())
    if not checks:
        raise ConfigError("nothing to check the answer against", hint="give --tests FILE, --check CMD or --judge")
    return checks


@app.command()
def refine(
    task: Annotated[str, typer.Option("--task", "-t", help="The task: a file (.md, .txt) or the text itself.")],
    tests: Annotated[Path | None, typer.Option("--tests", parser=path_arg, help="A pytest file that imports the "
                     "candidate from module `solution` (or from the --out file's module).", show_default=False)] = None,
    check: Annotated[str | None, typer.Option("--check", help="A shell command run in a scratch copy of "
                     "this directory with the candidate written to --out; exit 0 passes.", show_default=False)] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", parser=path_arg, help="Where the candidate goes for "
                   "--check, and where the best candidate is written at the end.", show_default=False)] = None,
    force_out: Annotated[bool, typer.Option("--force-out", help="Allow --out outside the working directory.")] = False,
    judge: Annotated[bool, typer.Option("--judge", help="Opt in to an LLM judge (subjective).")] = False,
    model: ModelOpt = None,
    reflector_model: ReflectorOpt = None,
    max_attempts: Annotated[int, typer.Option("--max-attempts", "--max-iterations", min=1,
                            help="Attempts at most.")] = 3,
    max_tokens: Annotated[int | None, typer.Option(min=1, help="Token budget (input + output).")] = None,
    max_calls: Annotated[int | None, typer.Option(min=1, help="Model-call budget.")] = None,
    max_seconds: Annotated[float | None, typer.Option(min=0.1, help="Wall-clock budget.")] = None,
    context: Annotated[str, typer.Option(
        help="What the generator sees when revising: feedback, latest or full.")] = "feedback",
    explain: Annotated[bool, typer.Option(help="Let the model turn failing signals into a lesson.")] = True,
    timeout: Annotated[float, typer.Option(min=0.1, max=3600, help="Seconds each check may run.")] = 10.0,
    as_json: JsonOpt = False,
    jsonl: JsonlOpt = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
    trace: TraceOpt = None,
) -> None:
    """Generate, check against objective signals, and revise until the checks pass or a bound is hit."""
    with clean_errors():
        from ..loops.refine import CONTEXTS
        from ..loops.refine import refine as run_refine
        from ..types import Budget

        out_mode = output(as_json, jsonl, quiet, verbose)

        if context not in CONTEXTS:
            raise ConfigError(f"--context must be one of {', '.join(CONTEXTS)}, not {context!r}")
        if out is not None and check is not None and (out.is_absolute() or ".." in out.parts):
            raise ConfigError(f"--out must be a path inside this directory for --check (relative, no ..), got {out}")
        target = check_out(out, force=force_out) if out is not None else None
        if target is not None:
            check_not_an_input(target, trace=trace, tests=tests, task=Path(task))
        existed = target is not None and target.exists()
        text = read_task(task)
        out_name = str(out) if out else None
        cli = {"tests": str(tests.resolve()) if tests else None, "check": check, "out": out_name,
               "judge": judge, "timeout": timeout, "explain": explain, "cwd": str(Path.cwd())}
        checks = refine_checks(tests=tests, check=check, out=out_name, judge=judge, timeout=timeout)
        session, tracker = session_for(model, trace, out_mode, reflector=reflector_model)
        budget = Budget(max_tokens=max_tokens, max_calls=max_calls, max_seconds=max_seconds)
        result = run_cli(session, tracker, lambda: run_refine(text, checks, session=session, budget=budget,
                                                              max_attempts=max_attempts, context=context,
                                                              explain=explain, meta={"cli": cli}), out_mode)
        if target is not None and out is not None:
            _write_best(result, target, out, existed=existed, out_mode=out_mode)
        _finish_cli(result, out_mode)


def _write_best(result, target: Path, given: Path, *, existed: bool, out_mode: Output) -> None:  # noqa: ANN001
    """The run's best candidate to --out (`target`, resolved from `given`), or beside it when the run did
    not pass and --out held a file before."""
    if result.best is None:
        return
    written = where_best_goes(target, passed=result.passed, existed=existed)
    write_out(written, result.best)
    if not (out_mode.json or out_mode.jsonl) and (written != target or not out_mode.quiet):
        kept = f"the run did not pass, so {given} is kept as it was; " if written != target else ""
        console.print(f"{kept}best candidate written to {given.with_name(written.name)}", markup=False,
                      highlight=False)


def _finish_cli(result, out: Output) -> None:  # noqa: ANN001 - Result, imported lazily
    """Print a result and exit with the code that says how it ended."""
    from .render import print_summary, summary_line

    if out.json:
        print(json.dumps(result.to_dict(), default=str, indent=2))
    elif out.jsonl:
        print(json.dumps({"event": "result", **result.to_dict()}, default=str), flush=True)
    elif out.quiet:
        console.print(summary_line(result), highlight=False, soft_wrap=True)
    else:
        print_summary(console, result)
    if result.error and not (out.json or out.jsonl):
        errors.print(f"[bold red]error:[/bold red] {escape(result.error)}", highlight=False)
    code = EXIT_CODES.get(str(result.stop_reason), 3)
    if code:
        raise typer.Exit(code)



def _react_run(goal: str, *, db: Path, write: bool, model: str | None, budget: Budget, max_steps: int,
               trials_count: int, validate: str | None, experience: bool, out: Output,
               trace: str | None, resume: str | None = None, reflector: str | None = None) -> Result:
    from ..loops import react as run_react
    from ..loops import trials as run_trials
    from ..tools import ToolRegistry, sql_tools

    registry = ToolRegistry(sql_tools(db, write=write))
    validator = sql_validator(db, validate) if validate is not None else None
    session, tracker = session_for(model, trace, out, experience=experience, reflector=reflector)
    meta = {"toolset": "sql", "db": str(db.resolve()), "write": write, "validate": validate,
            "experience": experience}

    def one(lessons=(), left=budget, resumed=None):  # noqa: ANN001, ANN202
        return run_react(goal, registry, session=session, budget=left, max_steps=max_steps, validator=validator,
                         lessons=lessons, meta=meta, resume=resumed)

    if trials_count <= 1 or resume:
        return run_cli(session, tracker, lambda: one(resumed=resume), out)
    return run_cli(session, tracker, lambda: run_trials(goal, lambda lessons, left: one(lessons, left),
                                                        session=session, max_trials=trials_count, budget=budget), out)


@app.command()
def react(
    goal: Annotated[str, typer.Argument(help="The question or goal.")],
    db: Annotated[Path, typer.Option("--db", parser=path_arg, help="The SQLite database the SQL tools work on.")],
    validate: Annotated[str | None, typer.Option("--validate", help="Check the final answer: an SQL query "
                        "that must return a row (the answer is :answer), or a shell command that must exit 0 (the "
                        "answer is $REFLEXA_ANSWER). Without it an answer ends ANSWERED_UNVERIFIED.",
                        show_default=False)] = None,
    write: Annotated[bool, typer.Option("--write", help="Allow changes (adds a side-effecting execute "
                     "tool).")] = False,
    model: ModelOpt = None,
    reflector_model: ReflectorOpt = None,
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
    jsonl: JsonlOpt = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
    trace: TraceOpt = None,
) -> None:
    """Answer a question with tools (the bundled SQL toolset), reflecting only on failure signals."""
    with clean_errors():
        from ..types import Budget

        out = output(as_json, jsonl, quiet, verbose)
        check_database(db)
        if not goal.strip():
            raise ConfigError("the goal is empty")
        budget = Budget(max_tokens=max_tokens, max_calls=max_calls, max_seconds=max_seconds,
                        max_reflections=max_reflections)
        result = _react_run(goal, db=db, write=write, model=model, budget=budget, max_steps=max_steps,
                            trials_count=trials_count, validate=validate, experience=experience, out=out,
                            trace=trace, reflector=reflector_model)
        _finish_cli(result, out)



# --- plan: a goal tree over react units ------------------------------------------------------------------


def _plan_run(goal: str, *, db: Path, write: bool, model: str | None, budget: Budget, max_steps: int,
              plan_file: Path | None, validate: str | None, replan: bool, out: Output,
              trace: str | None, resume: str | None = None, reflector: str | None = None) -> Result:
    from ..loops.plan import plan as run_plan
    from ..tools import ToolRegistry, sql_tools
    from .render import PlanView

    registry = ToolRegistry(sql_tools(db, write=write))
    if plan_file is not None:
        read_text_file(plan_file, "plan file")
    validator = sql_validator(db, validate) if validate is not None else None
    # The tree and its statuses; the units' own steps with --verbose.
    session, tracker = session_for(model, trace, out, experience=True, view=PlanView, reflector=reflector)
    meta = {"toolset": "sql", "db": str(db.resolve()), "write": write, "validate": validate, "replan": replan}
    return run_cli(session, tracker, lambda: run_plan(goal, registry, session=session, budget=budget, tree=plan_file,
                                                      max_steps=max_steps, validator=validator, db=db, replan=replan,
                                                      meta=meta, resume=resume), out)


@app.command("plan")
def plan_cmd(
    goal: Annotated[str, typer.Argument(help="The top-level goal.")],
    db: Annotated[Path, typer.Option("--db", parser=path_arg, help="The SQLite database the SQL tools work on.")],
    plan_file: Annotated[Path | None, typer.Option("--plan", parser=path_arg, help="A goal tree as JSON (skips the "
                         'planner): {"goal", "facts", "subgoals": [{"name", "task", "depends_on", "tools", "check"}]}.',
                         show_default=False)] = None,
    validate: Annotated[str | None, typer.Option("--validate", help="Check the final answer (of every sub-goal "
                        "no other depends on), as for react --validate.", show_default=False)] = None,
    write: Annotated[bool, typer.Option("--write", help="Allow changes (adds a side-effecting execute "
                     "tool).")] = False,
    model: ModelOpt = None,
    reflector_model: ReflectorOpt = None,
    max_steps: Annotated[int, typer.Option(min=1, help="Steps each sub-goal takes at most.")] = 8,
    max_tokens: Annotated[int | None, typer.Option(min=1, help="Token budget over the whole tree.")] = None,
    max_calls: Annotated[int | None, typer.Option(min=1, help="Model-call budget over the whole tree.")] = None,
    max_seconds: Annotated[float | None, typer.Option(min=0.1, help="Wall-clock budget.")] = None,
    replan: Annotated[bool, typer.Option(help="Rewrite a failed sub-goal once before skipping its "
                      "dependents.")] = True,
    as_json: JsonOpt = False,
    jsonl: JsonlOpt = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
    trace: TraceOpt = None,
) -> None:
    """Break a goal into a tree of sub-goals and run each as a react unit, in dependency order, with one
    budget, shared memory and blocks learnt in one unit applied to the later ones."""
    with clean_errors():
        from ..types import Budget

        out = output(as_json, jsonl, quiet, verbose)
        check_database(db)
        if not goal.strip():
            raise ConfigError("the goal is empty")
        budget = Budget(max_tokens=max_tokens, max_calls=max_calls, max_seconds=max_seconds)
        result = _plan_run(goal, db=db, write=write, model=model, budget=budget, max_steps=max_steps,
                           plan_file=plan_file, validate=validate, replan=replan, out=out, trace=trace,
                           reflector=reflector_model)
        _print_answer(result, out)
        _finish_cli(result, out)



@app.command()
def resume(
    run_id: Annotated[str, typer.Argument(help="The unfinished run: its id or a unique prefix.")],
    model: ModelOpt = None,
    reflector_model: Annotated[str | None, typer.Option("--reflector-model", help="Model spec for the reflector's "
                               "calls; '' for the run's model. Default: the one the run started with.",
                               show_default=False)] = None,
    as_json: JsonOpt = False,
    jsonl: JsonlOpt = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
    trace: TraceOpt = None,
) -> None:
    """Continue a killed or interrupted run (refine, react, research or plan) from its last stored step, without repeating a side-effecting tool."""  # noqa: E501 - one line: rich keeps a docstring's line breaks
    with clean_errors():
        from ..types import Budget
        from .browse import BATCH_RESUME, TRIALS_RESUME, cli_resumes

        out = output(as_json, jsonl, quiet, verbose)
        record = find_run(open_store(trace), run_id)
        if record.status == "finished":
            raise ConfigError(f"run {record.run_id[:12]} already finished ({record.stop_reason})")
        meta = record.meta
        reflector = reflector_model if reflector_model is not None else _reflector_of(record)
        budget_data = {k: v for k, v in (meta.get("budget") or {}).items() if k in Budget.__dataclass_fields__}
        budget = Budget(**budget_data)
        if "parent" in meta:
            raise ConfigError(f"run {record.run_id[:12]} is sub-goal {meta.get('subgoal')} of a plan",
                              hint=f"resume the plan: reflexa resume {str(meta['parent'])[:12]}")
        if "batch" in meta:
            raise ConfigError(f"run {record.run_id[:12]} is task {meta.get('batch_task')} of a batch",
                              hint=BATCH_RESUME)
        if record.loop == "trials":
            raise ConfigError(f"run {record.run_id[:12]} is a trials run, whose trials are runs of their own",
                              hint=f"{TRIALS_RESUME}, or from Python: trials(..., resume={record.run_id[:12]!r})")
        if not cli_resumes(record):
            raise ConfigError(f"run {record.run_id[:12]} is a {record.loop} run started from Python",
                              hint=f"resume it from Python: {record.loop}(..., resume={record.run_id[:12]!r})")
        if record.loop in ("plan", "react"):
            check_database(Path(meta["db"]))  # it may have been moved or replaced since the run stopped
        if record.loop == "plan":
            result = _plan_run(record.task, db=Path(meta["db"]), write=meta["write"], model=model or _spec_of(record),
                               budget=budget, max_steps=meta.get("max_steps", 8), plan_file=None,
                               validate=meta.get("validate"), replan=meta.get("replan", True), out=out,
                               trace=trace, resume=record.run_id, reflector=reflector)
        elif record.loop == "react":
            result = _react_run(record.task, db=Path(meta["db"]), write=meta["write"], model=model or _spec_of(record),
                                budget=budget, max_steps=meta.get("bound", 8), trials_count=1,
                                validate=meta.get("validate"), experience=meta.get("experience", True), out=out,
                                trace=trace, resume=record.run_id, reflector=reflector)
        elif record.loop == "refine":
            result = _resume_refine(record, model, reflector, budget, out=out, trace=trace)
        else:
            result = _resume_research(record, model, reflector, budget, out=out, trace=trace)
        _finish_cli(result, out)


def _spec_of(record) -> str | None:  # noqa: ANN001 - a RunRecord
    """The model spec a run was started with (its files made absolute), else its model's name."""
    return record.meta.get("model_spec") or record.meta.get("model")


def _reflector_of(record) -> str:  # noqa: ANN001 - a RunRecord
    """The reflector model spec a run was started with; '' (the run's own model) when it had none."""
    return record.meta.get("reflector_model_spec") or record.meta.get("reflector_model") or ""


def _resume_refine(record, model, reflector, budget, *, out: Output, trace: str | None):  # noqa: ANN001, ANN202
    import os

    from ..loops.refine import refine as run_refine
    from ..models.spec import absolute_spec
    from ..trace.postgres import is_url

    cli = record.meta["cli"]
    # Files named on this command line (and a relative $REFLEXA_TRACE) are where the user is now, not where
    # the run started.
    model = absolute_spec(model, Path.cwd())
    reflector = absolute_spec(reflector, Path.cwd())
    trace = trace or trace_env()
    trace = trace if trace is None or is_url(trace) else str(Path(trace).resolve())
    if not Path(cli["cwd"]).is_dir():
        raise ConfigError(f"run {record.run_id[:12]} started in {cli['cwd']}, which is gone",
                          hint="its --tests and --check were relative to it")
    os.chdir(cli["cwd"])  # --check, --tests and --out were given relative to where the run started
    given = Path(cli["out"]) if cli["out"] else None
    target = check_out(given, force=True) if given is not None else None  # inside it or forced, at the start
    existed = target is not None and target.exists()
    checks = refine_checks(tests=Path(cli["tests"]) if cli["tests"] else None, check=cli["check"], out=cli["out"],
                           judge=cli["judge"], timeout=cli["timeout"])
    session, tracker = session_for(model or _spec_of(record), trace, out, reflector=reflector)
    result = run_cli(session, tracker, lambda: run_refine(record.task, checks, session=session, budget=budget,
                                                          max_attempts=record.meta.get("bound", 3),
                                                          context=record.meta.get("context", "latest"),
                                                          explain=cli.get("explain", True), meta={"cli": cli},
                                                          resume=record.run_id), out)
    if target is not None and given is not None:
        _write_best(result, target, given, existed=existed, out_mode=out)
    return result


def _resume_research(record, model, reflector, budget, *, out: Output, trace: str | None):  # noqa: ANN001, ANN202
    from ..loops.research import research as run_research
    from ..search import SearchCache

    cli = record.meta["cli"]
    backend = search_backend(cli["search"], Path(cli["corpus"]) if cli["corpus"] else None)
    session, tracker = session_for(model or _spec_of(record), trace, out, reflector=reflector)
    result = run_cli(session, tracker, lambda: run_research(record.task, backend, session=session, budget=budget,
                                                            max_rounds=record.meta.get("bound", 2),
                                                            cache=SearchCache(session.store), meta={"cli": cli},
                                                            resume=record.run_id), out)
    _print_answer(result, out)
    return result


def find_run(store, run_id: str):  # noqa: ANN001, ANN201
    """A run by id or unique prefix; distinct errors for an unknown id and an ambiguous prefix."""
    if not run_id.strip():
        raise ConfigError("no run id given", hint="list runs with `reflexa runs`")
    matches = store.find_runs(run_id)
    if not matches:
        raise ConfigError(f"no run has an id starting with {run_id!r}", hint="list runs with `reflexa runs`")
    if len(matches) > 1:
        raise ConfigError(f"{run_id!r} matches more than one run", hint="give more characters of the id")
    return matches[0]


@app.command()
def index(
    folder: Annotated[Path, typer.Argument(parser=path_arg, help="A folder of .md, .txt and .html files.")],
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


def _print_answer(result, out: Output) -> None:  # noqa: ANN001
    if not (out.json or out.jsonl) and result.output:
        console.rule("answer")
        console.print(result.output, highlight=False, markup=False)


@app.command("research")
def research_cmd(
    question: Annotated[str, typer.Argument(help="The question to answer from evidence.")],
    corpus: Annotated[Path | None, typer.Option("--corpus", parser=path_arg,
                                                     help="Folder of documents (indexed on the fly).")] = None,
    search: Annotated[str, typer.Option("--search", help="Search backend: local (default, needs --corpus), tavily, "
                      "ddgs or wikipedia.")] = "local",
    model: ModelOpt = None,
    reflector_model: ReflectorOpt = None,
    max_rounds: Annotated[int, typer.Option("--max-rounds", "--max-iterations", min=1,
                                            help="Search-and-revise rounds at most.")] = 2,
    max_tokens: Annotated[int | None, typer.Option(min=1, help="Token budget (input + output).")] = None,
    as_json: JsonOpt = False,
    jsonl: JsonlOpt = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
    trace: TraceOpt = None,
) -> None:
    """Answer a question from evidence: every claim cited \\[n] or marked \\[UNCERTAIN: ...]."""
    with clean_errors():
        from ..loops.research import research
        from ..search import SearchCache
        from ..types import Budget

        out = output(as_json, jsonl, quiet, verbose)

        if not question.strip():
            raise ConfigError("the question is empty")
        backend = search_backend(search, corpus)
        session, tracker = session_for(model, trace, out, reflector=reflector_model)
        cli = {"search": search, "corpus": str(corpus.resolve()) if corpus else None}
        result = run_cli(session, tracker, lambda: research(question, backend, session=session, max_rounds=max_rounds,
                                                            budget=Budget(max_tokens=max_tokens),
                                                            cache=SearchCache(session.store), meta={"cli": cli}), out)
        _print_answer(result, out)
        _finish_cli(result, out)


@app.command("batch")
def batch_cmd(
    tasks: Annotated[Path, typer.Argument(parser=path_arg, help="A JSONL file, one task a line (see the "
                                                       "README's task-line schema).")],
    loop: Annotated[str, typer.Option("--loop", "-l", help="The loop every task runs: refine, react or research.")],
    concurrency: Annotated[int, typer.Option("--concurrency", "-c", min=1, max=1024, help="Tasks at once.")] = 4,
    executor: Annotated[str, typer.Option(help="local (threads; processes for the embedded model), async "
                                                "(coroutines on one event loop, for an HTTP model) or ray.")] = "local",
    address: Annotated[str | None, typer.Option(help="A Ray cluster to run on (default: a local Ray).",
                       show_default=False)] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", parser=path_arg, help="The results file (JSONL). Default: "
                   "TASKS.results.jsonl beside the tasks file.", show_default=False)] = None,
    model: ModelOpt = None,
    reflector_model: ReflectorOpt = None,
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
    from ..trace.sqlite import default_path
    from .batch import run as run_batch_cli

    with clean_errors():
        if executor not in ("local", "async", "ray"):
            raise ConfigError(f"--executor must be local, async or ray, not {executor!r}")
        if address is not None and executor != "ray":
            raise ConfigError("--address needs --executor ray")
        budget = {k: v for k, v in (("max_tokens", max_tokens), ("max_calls", max_calls)) if v is not None}
        store = trace or trace_env() or str(default_path())
        code = run_batch_cli(tasks, loop, store=store, out=out, console=console, errors=errors, as_json=as_json,
                             model=model, concurrency=concurrency, executor=executor, address=address,
                             connections=connections, experience=experience, governor=governor, budget=budget,
                             reflector_model=reflector_model)
    raise typer.Exit(code)


@app.command("experience")
def experience_cmd(
    as_json: Annotated[bool, typer.Option("--json", help="Print the entries as JSON.")] = False,
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


@app.command()
def runs(
    limit: Annotated[int, typer.Option(min=1, help="How many runs.")] = 20,
    loop: Annotated[str | None, typer.Option("--loop", help=f"Only runs of this loop: {', '.join(LOOPS)}.",
                    show_default=False)] = None,
    status: Annotated[str | None, typer.Option("--status", help="Only runs with this status (running, stale, "
                      "finished, interrupted) or stop reason (PASSED, ...). stale: stored as running, but its "
                      "process is gone.", show_default=False)] = None,
    since: Annotated[str | None, typer.Option("--since", help="Only runs started since: an age (30m, 2h, 3d, "
                     "1w) or a date (2026-11-30, 2026-11-30T14:00).", show_default=False)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the runs as a JSON list.")] = False,
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


@app.command()
def show(
    run_id: Annotated[str, typer.Argument(help="A run id or a unique prefix of one.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the run and its steps as JSON.")] = False,
    full: Annotated[bool, typer.Option("--full", help="Show whole candidates, observations and the task.")] = False,
    trace: TraceOpt = None,
) -> None:
    """Print one run step by step, with timestamps, its answer and how to continue it if unfinished."""
    with clean_errors():
        from .browse import show_run

        store = open_store(trace, reader=True)
        record = find_run(store, run_id)
        if as_json:
            print(json.dumps({"run": dataclasses.asdict(record),
                              "steps": [s.to_dict() for s in store.steps(record.run_id)]}, default=str, indent=2))
            return
        show_run(console, store, record, full=full)


@app.command("ui")
def ui_cmd(
    trace: TraceOpt = None,
    host: Annotated[str, typer.Option(help="Address to listen on. Anything but a loopback address shows "
                                      "every prompt and answer in the trace to the network, with no password.")
                    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port; 0 picks a free one.")] = 8765,
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


def _version(value: bool) -> None:
    if value:
        from .. import __version__

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
