"""The MCP server behind `reflexa mcp`: four tools over stdio, on one Session built when the server starts.

- `refine`: a task and a check (tests, test code, a shell command or a regex) -> the best candidate, whether
  it passed, why the run stopped, what it spent, and its run id.
- `research`: a question and a folder of documents -> an answer whose claims cite the documents.
- `runs` and `show`: the runs in the trace store, and one run's steps, read-only.

Budgets are the server's own (`ClientBudget`, from its flags): a caller cannot name one, so a client's model cannot
spend more than whoever started the server allowed. Clients are untrusted (confine.py): every path one names
resolves inside the server's root, the server's folder and root are hidden from every sandboxed check (their
.env secrets redacted from what checks say), each regex search is bounded in time, each tool runs in a worker
thread (a long run never holds up another client's call), and every scratch folder is removed however the
server ends. A bad argument is a tool error with one clear line (the
SDK's ToolError), never a traceback. Stdout carries the protocol alone: the Session has no observer (no live
view), the SDK moves file descriptor 1 to stderr while it serves (what a library or a child process writes
there cannot corrupt the stream), and `stdout_to_stderr` does the same for Python's own `sys.stdout`.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field
from typing_extensions import TypedDict  # pydantic reads a typing.TypedDict only from Python 3.12

from ..errors import ConfigError, ReflexaError
from ..loops import Session
from ..tasks import TaskSpec
from ..trace.store import RunRecord, Store, shown_status
from ..types import Result, Step
from .confine import contained, scratch_home

MAX_RUNS = 100
"""`runs` lists at most this many runs, whatever limit it is given."""
MAX_SHOWN_STEPS = 200
"""`show` summarises at most this many steps of a run (the first ones); `steps_total` counts them all."""
LINE = 200
"""Characters of a step's one-line summary, a task excerpt or a note."""


@dataclass(frozen=True, slots=True)
class ClientBudget:
    """The budget of every run a client starts, from the server's flags; None leaves that bound to the loop's
    own default (refine's 3 attempts, 2 reflections) or unbounded (tokens, calls, seconds)."""

    max_tokens: int | None = None
    max_calls: int | None = None
    max_seconds: float | None = None
    max_reflections: int | None = None
    max_attempts: int | None = None
    """refine's attempts at most."""

    def fields(self, loop: str) -> dict[str, Any]:
        """The TaskSpec fields this budget sets on a task of `loop`."""
        given: dict[str, Any] = {"max_tokens": self.max_tokens, "max_calls": self.max_calls,
                                 "max_seconds": self.max_seconds, "max_reflections": self.max_reflections}
        if loop == "refine":
            given["max_attempts"] = self.max_attempts
        return {name: value for name, value in given.items() if value is not None}


# --- what the tools return (each a TypedDict: the SDK publishes it as the tool's output schema) ------------

class Spent(TypedDict):
    """What a run spent over every model call."""

    tokens: int
    calls: int


class RefineReply(TypedDict):
    """The `refine` tool's result."""

    candidate: str | None
    passed: bool
    stop_reason: str
    usage: Spent
    run_id: str
    note: str | None
    """Why the run did not pass, in one line; None when it passed."""


class Citation(TypedDict):
    n: int
    title: str
    source: str


class ResearchReply(TypedDict):
    """The `research` tool's result."""

    answer: str | None
    citations: list[Citation]
    passed: bool
    stop_reason: str
    usage: Spent
    run_id: str
    note: str | None


class RunSummary(TypedDict):
    run_id: str
    loop: str
    task: str
    status: str
    stop_reason: str | None
    started_at: str


class RunsReply(TypedDict):
    """The `runs` tool's result: the latest runs, newest first."""

    runs: list[RunSummary]


class StepRow(TypedDict):
    step: int
    kind: str
    role: str | None
    text: str


class ShowReply(TypedDict):
    """The `show` tool's result: one run and its steps, each summarised in a line."""

    run_id: str
    loop: str
    task: str
    status: str
    stop_reason: str | None
    started_at: str
    ended_at: str | None
    model: str | None
    answer: str | None
    error: str | None
    usage: Spent
    steps: list[StepRow]
    steps_total: int


# --- the server ----------------------------------------------------------------------------------------------

WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False)
"""refine and research add a run to the trace store (and research updates its corpus's index): they change
something, but destroy nothing."""
READS = ToolAnnotations(read_only_hint=True)

INSTRUCTIONS = ("reflexa checks each attempt against objective signals and retries within a budget the server "
                "sets. `refine` answers a task that a check (tests, test_code, a shell command or a regex) can "
                "verify; `research` answers a question from a folder of documents, citing them; `runs` and "
                "`show` read the stored runs.")


def serve(*, model: str | None, reflector_model: str | None, trace: str | None, budget: ClientBudget,
          root: Path | None = None) -> None:
    """Build the session (its model, reflector and trace store) and serve the tools over stdio until the
    client closes the connection, with clients' paths inside `root` (default: the current directory). A bad
    model spec, store or root is a ReflexaError before anything is served."""
    from ..evaluate.sandbox import Sandbox, hide_in_every_run

    root = Path(os.path.realpath(root or Path.cwd()))
    if not root.is_dir():
        raise ConfigError(f"--root: not a folder: {root}")
    hide_in_every_run(Path.cwd(), root)
    if "private-tmp-run-shm-home" not in Sandbox().isolation:
        print("reflexa mcp: warning: no mount namespace here, so a client's checks can read the server's "
              "folder (its .env); they see no secret of the server's environment", file=sys.stderr)
    session = open_session(model, reflector_model, trace)
    with scratch_home():
        build_server(session, budget, root=root).run("stdio")


def open_session(model: str | None, reflector_model: str | None, trace: str | None) -> Session:
    """The one Session every run of the server shares: no observer (stdout is the protocol's) and no
    experience library (as refine and research run from the command line)."""
    from ..models.spec import resolve, resolve_reflector
    from ..trace.open import open_store

    generator = resolve(model)
    return Session(model=generator, store=open_store(trace), observer=None,
                   reflector_model=resolve_reflector(reflector_model, generator))


def build_server(session: Session, budget: ClientBudget, *, root: Path | None = None) -> MCPServer:
    """An MCPServer with reflexa's tools, running every task in `session` within `budget`. Paths a caller
    gives (a tests file, a corpus) are read against `root` (by default the current directory) and must stay
    inside it."""
    from .._version import __version__

    tools = Tools(session, budget, Path(os.path.realpath(root or Path.cwd())))
    app: MCPServer = MCPServer("reflexa", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING",
                               lifespan=stdout_to_stderr)
    app.tool(annotations=WRITES)(tools.refine)
    app.tool(annotations=WRITES)(tools.research)
    app.tool(annotations=READS)(tools.runs)
    app.tool(annotations=READS)(tools.show)
    return app


@asynccontextmanager
async def stdout_to_stderr(_: MCPServer) -> AsyncIterator[None]:
    """While the server runs, `sys.stdout` is stderr. The SDK has taken the real stdout for the protocol by then
    and moved file descriptor 1 to stderr, but a `print` still fills sys.stdout's buffer, which would reach the
    protocol's stream when it is flushed after the SDK has put descriptor 1 back."""
    sys.stdout.flush()
    saved, sys.stdout = sys.stdout, sys.stderr
    try:
        yield
    finally:
        sys.stdout = saved


@contextmanager
def tool_errors() -> Iterator[None]:
    """reflexa's own errors (a bad argument, a missing file, a run id no run has) as the SDK's ToolError: the
    client gets the message and its hint as an error result, not a crash."""
    try:
        yield
    except ReflexaError as exc:
        raise ToolError(exc.explained()) from None


TaskArg = Annotated[str, Field(description="What to produce: the task, as you would give it to a programmer.")]
TestsArg = Annotated[str | None, Field(
    description="pytest tests that import the candidate from module `solution` (or the `out` file's module): "
                "their source text, or the path of a .py file inside the server's root.")]
TestCodeArg = Annotated[str | None, Field(
    description="Python run after the candidate in one interpreter, e.g. `assert add(2, 3) == 5`.")]
CheckArg = Annotated[str | None, Field(
    description="A shell command run in a scratch folder holding the candidate (as `out`); exit 0 passes.")]
RegexArg = Annotated[str | None, Field(description="A regular expression the candidate must match.")]
OutArg = Annotated[str | None, Field(
    description="The candidate's file name, as the tests and the check see it (default solution.py). "
                "Nothing is written on the server's machine.")]
QuestionArg = Annotated[str, Field(description="The question to answer.")]
CorpusArg = Annotated[str, Field(
    description="A folder of .md, .txt and .html documents inside the server's root (indexed on the fly).")]
LimitArg = Annotated[int, Field(ge=1, description=f"How many runs, newest first (at most {MAX_RUNS}).")]
RunIdArg = Annotated[str, Field(description="A run id, or a unique prefix of one.")]


class Tools:
    """The tools' bodies: each builds a task spec, runs it in the shared session and returns plain data."""

    def __init__(self, session: Session, budget: ClientBudget, root: Path) -> None:
        self.session, self.budget, self.root = session, budget, root

    def refine(self, task: TaskArg, tests: TestsArg = None, test_code: TestCodeArg = None, check: CheckArg = None,
               regex: RegexArg = None, out: OutArg = None) -> RefineReply:
        """Generate an answer to `task`, check it against objective signals, and revise it until the checks
        pass or the server's budget is spent. Give at least one check: tests, test_code, check or regex."""
        with tool_errors():
            if not any(value is not None and value.strip() for value in (tests, test_code, check, regex)):
                raise ConfigError("refine needs a check: give tests, test_code, check or regex")
            # A fresh folder per call: `check` runs in a scratch copy of it, never of the server's folder.
            with tempfile.TemporaryDirectory(prefix="reflexa-mcp-") as scratch:
                fields = {"task": task, "test_code": test_code, "check": check, "regex": regex, "out": out,
                          "tests": self._tests(tests, Path(scratch), out) if tests is not None else None}
                result = self._run("refine", fields, Path(scratch))
        return RefineReply(candidate=result.best, passed=result.passed, stop_reason=result.stop_reason.value,
                           usage=spent(result), run_id=result.run_id, note=note(result))

    def research(self, question: QuestionArg, corpus: CorpusArg) -> ResearchReply:
        """Answer `question` from the documents in the folder `corpus`: every claim cites a passage [n] or is
        marked [UNCERTAIN: ...]; it passes when the citation audit does."""
        with tool_errors():
            folder = contained(self.root, corpus, "corpus")
            if not folder.is_dir():
                raise ConfigError(f"corpus: not a folder on the server's machine: {folder}")
            result = self._run("research", {"task": question, "corpus": str(folder), "search": "local"},
                               self.root)
        return ResearchReply(answer=result.output, citations=citations(result), passed=result.passed,
                             stop_reason=result.stop_reason.value, usage=spent(result), run_id=result.run_id,
                             note=note(result))

    def runs(self, limit: LimitArg = 20) -> RunsReply:
        """The latest runs in the trace store, newest first: id, loop, task excerpt, status and stop reason."""
        with tool_errors():
            store, now = self.session.store, time.time()
            rows = [RunSummary(run_id=r.run_id, loop=r.loop, task=one_line(r.task, LINE),
                           status=shown_status(r, store.lease(r.run_id), now), stop_reason=r.stop_reason,
                           started_at=iso(r.started_at))
                    for r in store.runs(min(limit, MAX_RUNS))]
        return RunsReply(runs=rows)

    def show(self, run_id: RunIdArg) -> ShowReply:
        """One stored run: its task, status, answer, usage, and each of its steps (kind, role, one line)."""
        with tool_errors():
            return show_data(self.session.store, find_run(self.session.store, run_id))

    # --- helpers -------------------------------------------------------------------------------------------

    def _run(self, loop: str, fields: dict[str, Any], workdir: Path) -> Result:
        """The task as a spec within the server's budget, run in the session (`run` checks its files first)."""
        given = {name: value for name, value in fields.items() if value is not None}
        spec = TaskSpec.parse({"loop": loop, **given, **self.budget.fields(loop)},
                              where=f"invalid {loop} arguments")
        return spec.resolved(workdir).run(self.session)

    def _tests(self, tests: str, scratch: Path, out: str | None) -> str:
        """The tests file: a one-line .py name is a path on the server's machine; anything else is pytest
        source, written into the call's scratch folder."""
        if "\n" not in tests.strip() and tests.strip().endswith(".py"):
            return str(contained(self.root, tests, "tests"))
        module = Path(out or "solution.py").stem
        path = scratch / f"test_{module}.py"
        path.write_text(tests, encoding="utf-8")
        return str(path)


# --- plain data from results and stored runs -------------------------------------------------------------------

def spent(result: Result) -> Spent:
    total = result.total_usage
    return Spent(tokens=total.total_tokens, calls=total.calls)


def note(result: Result) -> str | None:
    """Why a run did not pass, in one line: its error, its best candidate's first failed check, or its notes."""
    if result.passed:
        return None
    failed = [s for s in (result.verdict.signals if result.verdict else ()) if not s.ok]
    why = (result.error or (f"{failed[0].source}: {failed[0].message}" if failed else None)
           or "; ".join(result.notes) or "no check passed")
    return one_line(f"{result.stop_reason.value}: {why}", LINE)


def citations(result: Result) -> list[Citation]:
    """The evidence research's answer cites, by number."""
    from ..evaluate.citations import cited

    evidence = {item["n"]: item for item in result.details.get("evidence", [])}
    answer = result.details.get("answer") or ""
    return [Citation(n=n, title=str(evidence[n].get("title", "")), source=str(evidence[n].get("source", "")))
            for n in cited(answer) if n in evidence]


def find_run(store: Store, run_id: str) -> RunRecord:
    """A run by id or unique prefix; distinct errors for no id, an unknown one and an ambiguous prefix."""
    if not run_id.strip():
        raise ConfigError("no run id given", hint="the runs tool lists them")
    matches = store.find_runs(run_id.strip())
    if not matches:
        raise ConfigError(f"no run has an id starting with {run_id!r}", hint="the runs tool lists them")
    if len(matches) > 1:
        raise ConfigError(f"{run_id!r} matches more than one run", hint="give more characters of the id")
    return matches[0]


def show_data(store: Store, record: RunRecord) -> ShowReply:
    """One run as the `show` tool returns it; checkpoints (the loop's saved state) are left out of the steps."""
    result = record.result or {}
    total = result.get("total_usage") or {}
    steps = [s for s in store.steps(record.run_id) if s.kind != "checkpoint"]
    answer = result.get("best") if record.loop == "refine" else result.get("output")
    return ShowReply(
        run_id=record.run_id, loop=record.loop, task=record.task, status=shown_status(record, store.lease(
            record.run_id), time.time()), stop_reason=record.stop_reason, started_at=iso(record.started_at),
        ended_at=iso(record.ended_at) if record.ended_at is not None else None,
        model=record.meta.get("model"), answer=answer, error=result.get("error"),
        usage=Spent(tokens=int(total.get("input_tokens", 0)) + int(total.get("output_tokens", 0)),
                    calls=int(total.get("calls", 0))),
        steps=[StepRow(step=s.step_id, kind=s.kind, role=s.role, text=step_text(s)) for s in steps[:MAX_SHOWN_STEPS]],
        steps_total=len(steps))


def _signal(data: dict[str, Any]) -> str:
    return f"{data.get('source')}: {data.get('message')}"


def _verdict(data: dict[str, Any]) -> str:
    failed = [s for s in data.get("signals", []) if not s.get("ok")]
    return f"{data.get('status')}" + (f", {_signal(failed[0])}" if failed else "")


SUMMARIES: dict[str, Callable[[dict[str, Any]], str]] = {
    "attempt": lambda d: f"attempt {d.get('iteration')}{' (revision)' if d.get('revising') else ''}: "
                         f"{d.get('candidate')}",
    "verdict": lambda d: _verdict(d.get("verdict") or {}),
    "audit": lambda d: _signal(d.get("signal") or {}),
    "engine": lambda d: f"{d.get('decision')}: {d.get('reason')}",
    "react": lambda d: f"step {d.get('step')}: {d.get('action')} -> {'ok' if d.get('ok') else d.get('code')}: "
                       f"{d.get('observation')}",
    "search": lambda d: f"search {d.get('query')!r}: {d.get('status')}, {len(d.get('evidence') or [])} passage(s)",
    "queries": lambda d: "queries: " + "; ".join(d.get("run") or []),
    "subgoal": lambda d: f"{d.get('name')}: {d.get('status')} {d.get('answer') or d.get('reason') or ''}",
    "trial": lambda d: f"trial {d.get('trial')}: {d.get('stop_reason')}",
    "stop": lambda d: f"{d.get('stop_reason')}" + (f": {d['error']}" if d.get("error") else ""),
    "flag": lambda d: str(d.get("why")),
    "repair": lambda d: f"{d.get('repair')}: {d.get('why')}",
    "no_progress": lambda d: str(d.get("why")),
    "selected": lambda d: f"selected attempt {d.get('chosen')} of passing {d.get('passing')}",
}
"""A step kind's one-line summary, from its stored payload (plain data). Other kinds show their JSON."""


def step_text(step: Step) -> str:
    """One line saying what a step was."""
    data = step.output if isinstance(step.output, dict) else {}
    if step.kind == "model_call":
        error = f", {data['error']}" if data.get("error") else ""
        text = f"{step.role or 'model'} call: {step.usage.input_tokens} in, {step.usage.output_tokens} out{error}"
    elif step.kind in SUMMARIES and data:
        text = SUMMARIES[step.kind](data)
    else:
        text = f"{step.kind}: {json.dumps(step.output, default=str)}"
    return one_line(text, LINE)


def one_line(text: str, width: int) -> str:
    """`text` on one line (whitespace collapsed), cut to `width` characters with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def iso(timestamp: float) -> str:
    """A stored time as local ISO 8601, to the second."""
    return datetime.fromtimestamp(timestamp).astimezone().isoformat(timespec="seconds")
