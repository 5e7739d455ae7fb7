"""The commands that run a loop: each turns its own flags into a `TaskSpec`, and every spec runs the same
way (`execute`): checked before any model call, run under the live view, its best candidate written, its
answer and its stop line printed, its stop reason the exit code. `run FILE` runs a saved spec and
`resume RUN_ID` the spec a stored run keeps."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.markup import escape

from ..errors import ConfigError
from ..types import StopReason
from .common import clean_errors, console, errors, exit_code, find_run, open_store
from .inputs import check_out, read_task, where_best_goes, write_out
from .options import (
    JsonlOpt,
    JsonOpt,
    ModelOpt,
    QuietOpt,
    Shared,
    TraceOpt,
    VerboseOpt,
    option,
    path_arg,
    run_command,
)
from .output import Output

if TYPE_CHECKING:
    from ..tasks import TaskSpec
    from ..types import Result

TaskArg = Annotated[str, typer.Argument(
    metavar="TASK", show_default=False, help="The task: the text itself, or a file (.md, .txt) holding it.")]
OutOpt = Annotated[Path | None, option(
    "FILE", "Where the best candidate is written at the end; checks see it under this name (without --out: "
    "solution.py, and no file is written).",
    path=True, names=("--out", "-o"))]
TimeoutOpt = Annotated[float | None, option("SECONDS", "Seconds each check may run (default 10).", min=0.1, max=3600)]
AttemptsOpt = Annotated[int | None, option("N", "Attempts at most (default 3).", min=1)]
ContextOpt = Annotated[str | None, option("WHAT", "What a revision sees: feedback (default), latest or full.")]
SelectOpt = Annotated[int | None, option(
    "K", "Draw K candidates first and keep, of those that pass, the one whose behaviour most others share "
    "(default 1: off).", min=1, max=16)]
ReplyTokensOpt = Annotated[int | None, option(
    "N", "Tokens each attempt's reply may take (default 512); a reply cut there is asked again, shorter.", min=16)]
ShowValuesOpt = Annotated[bool | None, option(
    None, "A failing assert of --test-code also shows what its call computed, line by line (a traced rerun).",
    names=("--show-values",))]
RepairsOpt = Annotated[str | None, option(
    "HOW", "How a failed attempt is repaired: fixed (default: revise, then a fresh sample), revise (every "
    "time), learn (from the trace store's record of what converted) or frozen (that record, unchanged).")]
DbOpt = Annotated[Path | None, option("FILE", "The SQLite database the SQL tools work on.", path=True)]
ValidateOpt = Annotated[str | None, option(
    "SQL|CMD", "Check the final answer: SQL that must return a row (the answer is :answer), or a shell command "
    "that must exit 0 (the answer is $REFLEXA_ANSWER). Without it an answer ends ANSWERED_UNVERIFIED.")]
WriteOpt = Annotated[bool | None, option(None, "Allow changes: adds the side-effecting execute tool.",
                                         names=("--write",))]
ToolsOpt = Annotated[list[str] | None, option(
    "REF", "Your own tools: module:function[,module:function] or a .py file (every @tool in it); repeatable.")]
McpOpt = Annotated[list[str] | None, option(
    "SERVER", "An MCP server's tools: a command that starts a stdio server (quoted, e.g. \"python server.py\") or "
    "http://HOST:PORT/mcp; repeatable. Needs pip install 'reflexa[mcp]'.")]
ApproveOpt = Annotated[str | None, option(
    "HOW", "Human approval of side-effecting tool calls: ask (in the terminal), defer (stop AWAITING_APPROVAL, "
    "exit 5, until `reflexa approve`) or off (default).")]
StepsOpt = Annotated[int | None, option("N", "Steps at most (default 8).", min=1)]
UnitStepsOpt = Annotated[int | None, option("N", "Steps each sub-goal takes at most (default 8).", min=1)]
TrialsOpt = Annotated[int | None, option("N", "Whole react attempts at most (default 3).", min=1)]
RoundsOpt = Annotated[int | None, option("N", "Search-and-revise rounds at most (default 2).", min=1)]
PlanOpt = Annotated[Path | None, option("FILE", "A goal tree as JSON; skips the planner (docs/loops.md).",
                                        path=True, names=("--plan",))]
ReplanOpt = Annotated[bool | None, option(
    None, "Rewrite a failed sub-goal once before skipping its dependents (default on).",
    names=("--replan/--no-replan",))]
CorpusOpt = Annotated[Path | None, option("FOLDER", "A folder of documents, indexed on the fly.", path=True)]
SearchOpt = Annotated[str | None, option(
    "BACKEND", "Search backend: local (default, needs --corpus), tavily, ddgs or wikipedia.")]


def _spec(loop: str, task: str, **fields: Any) -> TaskSpec:
    """A spec of `loop` from a command's flags; a flag left unset stays unset (the spec's default)."""
    from ..tasks import TaskSpec

    given = {name: str(value) if isinstance(value, Path) else value for name, value in fields.items()
             if value is not None}
    return TaskSpec.parse({"loop": loop, "task": read_task(task), **given})


# --- the run commands: flags -> spec ---------------------------------------------------------------------

def refine(task: TaskArg, out: OutOpt = None, timeout: TimeoutOpt = None, max_attempts: AttemptsOpt = None,
           context: ContextOpt = None, repairs: RepairsOpt = None, select: SelectOpt = None,
           max_reply_tokens: ReplyTokensOpt = None, show_values: ShowValuesOpt = None, **checks: Any) -> TaskSpec:
    """Generate, check against objective signals, and revise until the checks pass or a bound is hit."""
    from ..tasks.kinds import kinds

    for name, value in checks.items():
        if value is not None and kinds()[name].text_or_file:
            checks[name] = read_task(value, what=name.replace("_", " "))
    return _spec("refine", task, out=out, timeout=timeout, max_attempts=max_attempts, context=context,
                 repairs=repairs, select=select, max_reply_tokens=max_reply_tokens, show_values=show_values,
                 **checks)


def _with_check_flags(build: Any) -> Any:
    """`build` with a flag for every check kind (tasks/kinds.py) after the task: the registry is the one place
    a kind's flag is declared."""
    from ..tasks.kinds import kinds

    def flag(kind: Any) -> Any:
        if kind.metavar is None:
            return Annotated[bool | None, option(None, kind.help, names=(kind.flag,))]
        return Annotated[Path | None if kind.path else str | None,
                         option(kind.metavar, kind.help, path=kind.path, names=(kind.flag,))]

    task, *rest = [p for p in inspect.signature(build).parameters.values() if p.kind is not p.VAR_KEYWORD]
    checks = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=flag(kind))
              for name, kind in kinds().items()]
    build.__signature__ = inspect.Signature([task, *checks, *[p.replace(kind=p.KEYWORD_ONLY) for p in rest]])
    return build


def react(task: TaskArg, db: DbOpt = None, tools: ToolsOpt = None, mcp: McpOpt = None, approve: ApproveOpt = None,
          validate: ValidateOpt = None, write: WriteOpt = None, max_steps: StepsOpt = None) -> TaskSpec:
    """Answer a question with tools (the bundled SQL toolset, your own, an MCP server's), reflecting only on
    failure signals."""
    return _spec("react", task, db=db, tools=tools, mcp=mcp, approve=approve, validate=validate, write=write,
                 max_steps=max_steps)


def trials(task: TaskArg, db: DbOpt = None, tools: ToolsOpt = None, mcp: McpOpt = None, approve: ApproveOpt = None,
           validate: ValidateOpt = None, write: WriteOpt = None, max_steps: StepsOpt = None,
           max_trials: TrialsOpt = None) -> TaskSpec:
    """Run react trials until one passes; each starts from the lessons of the failed ones before it."""
    return _spec("trials", task, db=db, tools=tools, mcp=mcp, approve=approve, validate=validate, write=write,
                 max_steps=max_steps, max_trials=max_trials)


def research(task: TaskArg, corpus: CorpusOpt = None, search: SearchOpt = None,
             max_rounds: RoundsOpt = None) -> TaskSpec:
    """Answer a question from evidence: every claim cited [n] or marked [UNCERTAIN: ...]."""
    return _spec("research", task, corpus=corpus, search=search, max_rounds=max_rounds)


def plan(task: TaskArg, db: DbOpt = None, tools: ToolsOpt = None, mcp: McpOpt = None, approve: ApproveOpt = None,
         validate: ValidateOpt = None, write: WriteOpt = None, max_steps: UnitStepsOpt = None,
         plan_file: PlanOpt = None, replan: ReplanOpt = None, corpus: CorpusOpt = None,
         search: SearchOpt = None) -> TaskSpec:
    """Break a goal into a tree of sub-goals and run each (react, refine or research) in dependency order,
    under one budget, with what one sub-goal learns applied to the later ones."""
    return _spec("plan", task, db=db, tools=tools, mcp=mcp, approve=approve, validate=validate, write=write,
                 max_steps=max_steps, plan=plan_file, replan=replan, corpus=corpus, search=search)


SpecArg = Annotated[Path, typer.Argument(parser=path_arg, metavar="SPEC", show_default=False,
                                        help="A task spec file (JSON), e.g. written by --save-spec.")]


def run(spec_file: SpecArg) -> TaskSpec:
    """Run a task spec file: any loop, everything it needs in one file (docs/tasks.md)."""
    from ..tasks import TaskSpec

    return TaskSpec.from_file(spec_file)


# --- one way to run a spec -------------------------------------------------------------------------------

EXPERIENCE_DEFAULT = {"react": True, "trials": True, "plan": True}
"""Loops whose CLI runs use the experience library unless told not to: a tool's repair (a close column name,
a blocked call) holds for any task; refine's and research's failures are each task's own."""


def run_flags(build: Any, shared: Shared) -> None:
    """Build the spec from the command's flags, apply the shared options, check it, and run it (or save it
    with --save-spec)."""
    with clean_errors():
        out = shared.output()
        spec = build().with_options(**shared.overrides()).resolved(Path.cwd())
        _out_target(spec, shared.trace)  # an --out that would overwrite an input is named first
        spec = spec.checked()
        if shared.save_spec is not None:
            save_spec(spec, shared.save_spec)
            return
        experience = shared.experience if shared.experience is not None else EXPERIENCE_DEFAULT.get(spec.loop, False)
        result = execute(spec, out, trace=shared.trace, experience=experience)
    finish(result, out)


def save_spec(spec: TaskSpec, path: Path) -> None:
    """Write `spec` to `path` and say how to run it."""
    spec.to_file(path)
    console.print(f"spec written to {path}; run it with: reflexa run {path}", markup=False, highlight=False)


def execute(spec: TaskSpec, out: Output, *, trace: str | None, experience: bool, resume: str | None = None
            ) -> Result:
    """Run a checked spec under the CLI: the live view, Ctrl-C, the best candidate to `out`, the answer."""
    target = _out_target(spec, trace)
    existed = target is not None and target.exists()
    session, tracker = session_for(spec, trace, out, experience=experience)
    result = run_cli(session, tracker, lambda: spec.run(session, resume=resume), out)
    if target is not None:
        _write_best(result, target, existed=existed, out=out)
    if spec.loop != "refine" and not (out.json or out.jsonl or out.quiet) and result.output:
        console.rule("answer")  # research's output carries its references, built from the evidence
        console.print(result.output, highlight=False, markup=False)
    return result


def _out_target(spec: TaskSpec, trace: str | None) -> Path | None:
    """Where the best candidate goes (refine with `out`), checked before the run so a bad one costs no tokens."""
    from .inputs import check_not_an_input

    if spec.loop != "refine" or spec.out is None:
        return None
    target = check_out(Path(spec.workdir or ".") / spec.out)
    check_not_an_input(target, trace=trace, tests=spec.path("tests"))
    return target


def _write_best(result: Result, target: Path, *, existed: bool, out: Output) -> None:
    """The run's best candidate to `target`, or beside it when the run did not pass and a file was there."""
    if result.best is None:
        return
    written = where_best_goes(target, passed=result.passed, existed=existed)
    write_out(written, result.best)
    if not (out.json or out.jsonl) and (written != target or not out.quiet):
        kept = f"the run did not pass, so {target.name} is kept as it was; " if written != target else ""
        console.print(f"{kept}best candidate written to {written}", markup=False, highlight=False)


def session_for(spec: TaskSpec, trace: str | None, out: Output, *, experience: bool) -> tuple[Any, Any]:
    """The Session a spec runs in (its model and reflector, the store, the observers `out` asks for) and
    the CLI's run tracker."""
    from ..loops import Session
    from ..models.spec import resolve, resolve_reflector
    from ..reflect import ExperienceLibrary
    from .approve import TerminalApprover
    from .live import chain, observer_for
    from .render import PlanView

    tracker = observer_for(out, console, errors, view=PlanView if spec.loop == "plan" else None)
    observer = chain(tracker)
    observer("status", "starting")  # the live line shows up now, not after the model has loaded
    try:
        store = open_store(trace)
        model = resolve(spec.model, loop=spec.loop)
        session = Session(model=model, store=store, observer=observer,
                          experience=ExperienceLibrary(store) if experience else None,
                          reflector_model=resolve_reflector(spec.reflector_model, model),
                          approver=TerminalApprover(tracker.view) if spec.approve == "ask" else None)
    except BaseException:
        _stop_view(tracker)  # a bad model spec or store: the error must not print under a live line
        raise
    return session, tracker


def run_cli(session: Any, tracker: Any, run: Any, out: Output) -> Any:
    """Run a loop under the live view, in a worker thread; Ctrl-C stops it within a second, stores it as
    interrupted and says how to resume it (exit 130)."""
    from .live import hard_exit, run_in_worker

    def interrupted(run_id: str | None, left_behind: bool) -> NoReturn:
        _stop_view(tracker)
        record = session.store.get_run(run_id) if run_id is not None else None
        if run_id is None:
            errors.print("interrupted before a run started; nothing was stored")
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


def _stop_view(tracker: Any) -> None:
    if tracker.view is not None:
        tracker.view.close()


def finish(result: Result, out: Output) -> NoReturn:
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
    if result.error and out.quiet and result.stop_reason is not StopReason.AWAITING_APPROVAL:  # no failure
        errors.print(f"[bold red]error:[/bold red] {escape(result.error)}", highlight=False)
    raise typer.Exit(exit_code(result.stop_reason))


# --- resume ----------------------------------------------------------------------------------------------

def resume(
    run_id: Annotated[str, typer.Argument(metavar="RUN_ID", help="The unfinished run: its id or a unique prefix.")],
    model: ModelOpt = None,
    reflector_model: Annotated[str | None, option(
        "SPEC", "Model spec for the reflector's calls; '' for the run's model. Default: the run's own.",
        names=("--reflector-model",))] = None,
    as_json: JsonOpt = False,
    jsonl: JsonlOpt = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
    trace: TraceOpt = None,
) -> None:
    """Continue a killed or interrupted run from its last stored step, rebuilt from the spec it stored;
    a side-effecting tool call is never repeated."""
    with clean_errors():
        from ..tasks import TaskSpec

        out = Shared(json=as_json, jsonl=jsonl, quiet=quiet, verbose=verbose).output()
        record = find_run(open_store(trace), run_id)
        _resumable(record)
        # Files named on this command line are where the user is now; the stored spec's are absolute.
        spec = TaskSpec.from_run(record).with_options(model=model, reflector_model=reflector_model)
        spec = spec.resolved(Path.cwd()).checked()
        result = execute(spec, out, trace=trace, resume=record.run_id,
                         experience=record.meta.get("experience", EXPERIENCE_DEFAULT.get(spec.loop, False)))
    finish(result, out)


def _resumable(record: Any) -> None:
    """A ConfigError naming how to go on when `reflexa resume` is not how this run continues."""
    from .browse import BATCH_RESUME

    short = record.run_id[:12]
    if "parent" in record.meta:
        raise ConfigError(f"run {short} is part of run {str(record.meta['parent'])[:12]} (a plan or trials run)",
                          hint=f"resume that run: reflexa resume {str(record.meta['parent'])[:12]}")
    if record.status == "finished":
        again = (f"run its task again: reflexa show {short} --save-spec task.json && reflexa run task.json "
                 "(a flag such as --max-calls overrides the spec's)") if "spec" in record.meta else None
        raise ConfigError(f"run {short} already finished ({record.stop_reason})", hint=again)
    if "batch" in record.meta:
        raise ConfigError(f"run {short} is task {record.meta.get('batch_task')} of a batch", hint=BATCH_RESUME)


COMMANDS = {name: run_command(build, run_flags) for name, build in
            (("refine", _with_check_flags(refine)), ("react", react), ("trials", trials), ("research", research),
             ("plan", plan), ("run", run))}
"""The run commands, by name, each with the shared option groups."""
