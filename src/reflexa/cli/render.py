"""How runs look in a terminal: one renderer per step kind, verdicts with their signals, usage per role."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.status import Status as Spinner
from rich.table import Table
from rich.tree import Tree

from ..loops.plan import PlanMade, Propagated, UnitStatus
from ..loops.react import Acted
from ..loops.refine import Attempt, Checked, Flag, NoProgress
from ..loops.research import Audited, Queries, Searched
from ..loops.trials import Trial
from ..reflect.engine import Decided
from ..runtime import Checkpoint, ModelCall, Stop
from ..types import Payload, Result, Signal, Step, StopReason, Usage

STATUS_STYLE = {"PASS": "bold green", "NEEDS_IMPROVEMENT": "bold yellow", "FAIL": "bold red"}
STOP_STYLE = {StopReason.PASSED: "bold green", StopReason.ANSWERED_UNVERIFIED: "bold yellow",
              StopReason.INTERRUPTED: "bold yellow"}
SNIPPET_LINES = 25
"""Lines of a candidate shown live; `reflexa show --full` shows all of it."""


def _snippet(text: str, lines: int | None = SNIPPET_LINES) -> str:
    rows = text.splitlines()
    if lines is None or len(rows) <= lines:
        return text
    return "\n".join(rows[:lines]) + f"\n… ({len(rows) - lines} more lines; reflexa show --full)"


def usage_table(usage: dict[str, Any]) -> Table:
    table = Table("role", "input tokens", "output tokens", "calls", title="usage")
    total = Usage()
    for role, u in usage.items():
        u = u if isinstance(u, Usage) else Usage(u["input_tokens"], u["output_tokens"], u["calls"])
        total.add(u)
        table.add_row(role, str(u.input_tokens), str(u.output_tokens), str(u.calls))
    table.add_row("[bold]total", str(total.input_tokens), str(total.output_tokens), str(total.calls))
    return table


def _signal_line(signal: Signal) -> str:
    mark = "[green]✓[/green]" if signal.ok else "[red]✗[/red]"
    code = f" {signal.code}" if signal.code else ""
    return f"  {mark} {escape(signal.source)}{code}: {escape(signal.message)}"


class View:
    """Renders steps to a console; `full` shows whole candidates, `verbose` every model call."""

    def __init__(self, console: Console, *, verbose: bool = False, full: bool = False,
                 timestamps: bool = False) -> None:
        self.console = console
        self.verbose = verbose
        self.lines: int | None = None if full else SNIPPET_LINES
        self.timestamps = timestamps

    def step(self, step: Step) -> None:
        """One stored step, as it happens (live) or from the store (`show`)."""
        data = step.payload()
        if self.timestamps and not isinstance(data, ModelCall | Checkpoint):
            self.console.print(f"[dim]{datetime.fromtimestamp(step.ended_at):%H:%M:%S}[/dim] ", end="")
        if data is None:  # a step kind this version does not know, or an older shape of a known one
            self.console.print(f"[dim]{escape(step.kind)}: {escape(json.dumps(step.output, default=str)[:300])}[/dim]")
            return
        RENDERERS[type(data)](self, step, data)

    def model_call(self, step: Step, c: ModelCall) -> None:
        if self.verbose:
            u = step.usage
            self.console.print(f"[dim]#{step.step_id} {step.role} call: {u.input_tokens} in, {u.output_tokens} out, "
                               f"finish={c.finish_reason}" + (f", invalid reply: {escape(c.error)}" if c.error else "")
                               + "[/dim]")

    def attempt(self, step: Step, a: Attempt) -> None:
        self.console.rule(f"attempt {a.iteration}" + (" (revision)" if a.revising else ""))
        if a.plan:
            self.console.print(f"[dim]{escape(_snippet(a.plan, 4))}[/dim]")
        self.console.print(escape(_snippet(a.candidate or "(empty)", self.lines)))

    def checked(self, step: Step, c: Checked) -> None:
        status = c.verdict.status
        self.console.print(f"verdict: [{STATUS_STYLE.get(status, 'bold')}]{status}[/]"
                           + (" [dim](subjective)[/dim]" if c.verdict.subjective else ""))
        for signal in c.verdict.signals:
            self.console.print(_signal_line(signal))

    def decided(self, step: Step, d: Decided) -> None:
        labels = {"repair": "rule repair", "lesson": "lesson", "none": "no lesson", "stop": "stop"}
        label = labels.get(d.decision, d.decision)
        self.console.print(f"[cyan]{label}[/cyan] ({escape(d.reason)})")
        if d.lesson:
            self.console.print(f"  [cyan]mismatch[/cyan]: {escape(d.lesson.observed_mismatch)}\n"
                               f"  [cyan]cause[/cyan]: {escape(d.lesson.root_cause)}\n"
                               f"  [cyan]correction[/cyan]: {escape(d.lesson.correction)}")
        if d.repair:
            self.console.print(f"  [cyan]repair[/cyan]: {escape(d.repair.kind)} {escape(json.dumps(d.repair.args))}")

    def acted(self, step: Step, a: Acted) -> None:
        mark = "[green]✓[/green]" if a.ok else f"[red]✗ {a.code}[/red]"
        replay = " [dim](replayed, not run again)[/dim]" if a.replayed else ""
        if a.superseded:
            replay = " [dim](differs from the call recorded before the resume: run as a new call)[/dim]"
        self.console.print(f"[bold]step {a.step}[/bold] {escape(a.thought)}\n  {escape(a.action)} {mark}{replay}\n"
                           f"  [dim]{escape(_snippet(a.observation, 6 if self.lines else None))}[/dim]")

    def queries(self, step: Step, q: Queries) -> None:
        for query in q.run:
            self.console.print(f"[cyan]search[/cyan] {escape(query)}")
        for rejection in q.rejected:
            self.console.print(f"[dim]query rejected: {escape(rejection)}[/dim]")

    def searched(self, step: Step, s: Searched) -> None:
        status = "[green]ok[/green]" if s.status == "ok" else f"[red]failed: {escape(s.error or '')}[/red]"
        cached = " [dim](cached)[/dim]" if s.cached else ""
        self.console.print(f"  {escape(s.query)}: {status}{cached} {len(s.evidence)} passage(s)")

    def audited(self, step: Step, a: Audited) -> None:
        checked = a.signal.ok and a.signal.score == 1.0  # ✓ only when something was cited and checked
        mark = "[green]✓[/green]" if checked else ("[yellow]–[/yellow]" if a.signal.ok else "[red]✗[/red]")
        self.console.print(f"citation audit {mark} {escape(a.signal.message)}")

    def trial(self, step: Step, t: Trial) -> None:
        self.console.rule(f"trial {t.trial}: {t.stop_reason}")

    def note(self, step: Step, n: Flag | NoProgress) -> None:
        self.console.print(f"[magenta]{n.KIND}[/magenta]: {escape(n.why)}")

    def plan_made(self, step: Step, p: PlanMade) -> None:
        if p.errors:
            self.console.print(f"[magenta]planner re-asked[/magenta]: {escape('; '.join(p.errors))}")
        if p.checkpoint is not None:
            self.console.rule(f"goal tree ({p.source})")
            self.console.print(plan_tree(p.tree, p.checkpoint.state.get("units", [])))

    def unit_status(self, step: Step, u: UnitStatus) -> None:
        mark, style = UNIT_MARKS.get(u.status, ("·", "dim"))
        said = f": {escape(u.answer[:200])}" if u.answer and u.status in ("passed", "answered") else ""
        why = f" — {escape(u.reason[:200])}" if u.reason and u.status not in ("passed", "answered") else ""
        self.console.print(f"[{style}]{mark} {escape(u.name)} {u.status}[/]{said}{why}")

    def propagated(self, step: Step, p: Propagated) -> None:
        c = p.lesson.control
        what = f"{c.kind} {c.tool}" + (f"({c.arg}={c.value!r})" if c and c.arg else "") if c else "lesson"
        self.console.print(f"[cyan]propagated from {escape(p.origin)}[/cyan]: {escape(what)} — "
                           f"{escape(p.lesson.correction)}")

    def checkpoint(self, step: Step, c: Checkpoint) -> None:
        pass  # state for a resume, not for reading

    def stop(self, step: Step, s: Stop) -> None:
        style = STOP_STYLE.get(s.stop_reason, "bold red")
        self.console.print(f"stop: [{style}]{s.stop_reason}[/]" + (f" — {escape(s.error)}" if s.error else ""))


RENDERERS: dict[type[Payload], Callable[[View, Step, Any], None]] = {
    ModelCall: View.model_call, Attempt: View.attempt, Checked: View.checked, Decided: View.decided,
    Acted: View.acted, Queries: View.queries, Searched: View.searched, Audited: View.audited, Trial: View.trial,
    Flag: View.note, NoProgress: View.note, Checkpoint: View.checkpoint, Stop: View.stop,
    PlanMade: View.plan_made, UnitStatus: View.unit_status, Propagated: View.propagated,
}
"""One renderer per step kind; a test checks every registered kind has one."""


class LiveView(View):
    """An observer for a running loop: a status line while the model, a check or a tool works, then each
    step as it lands."""

    def __init__(self, console: Console, *, verbose: bool = False) -> None:
        super().__init__(console, verbose=verbose)
        self.spinner: Spinner | None = None

    def __call__(self, event: str, data: Any) -> None:
        if event == "call":
            self._status(f"{data} is working…")
        elif event == "status":
            self._status(str(data))
        elif event == "step":
            self.stop_spinner()
            self.step(data)

    def _status(self, text: str) -> None:
        self.stop_spinner()
        self.spinner = self.console.status(escape(text))
        self.spinner.start()

    def stop_spinner(self) -> None:
        if self.spinner is not None:
            self.spinner.stop()
            self.spinner = None


def counters_line(counters: dict[str, Any]) -> str:
    shown = {k: v for k, v in counters.items() if v}
    return "engine: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in shown.items()) if shown else ""


def print_summary(console: Console, result: Result) -> None:
    console.print(usage_table(result.usage))
    for note in result.notes:
        console.print(f"[yellow]{escape(note)}[/yellow]")
    if line := counters_line(result.counters):
        console.print(escape(line))
    if result.stop_reason is StopReason.ANSWERED_UNVERIFIED:
        console.print("[bold yellow]answered, unverified:[/bold yellow] nothing checked this answer")
    console.print(f"run {result.run_id[:12]}: {result.iterations} iteration(s), {result.steps} steps stored. "
                  f"Details: reflexa show {result.run_id[:12]}")


UNIT_MARKS = {"pending": ("·", "dim"), "running": ("▶", "bold"), "passed": ("✓", "bold green"),
              "answered": ("?", "bold yellow"), "failed": ("✗", "bold red"), "skipped": ("–", "red")}
"""How a plan's sub-goal status looks: answered means answered but unchecked, never green."""


def plan_tree(tree: dict[str, Any], units: list[dict[str, Any]]) -> Tree:
    """A plan's goal tree with each sub-goal's status. A sub-goal hangs under the first one it depends on
    (a tree, though the plan is a graph); the others it needs are named beside it."""
    status = {u["name"]: u for u in units}
    root = Tree(f"[bold]{escape(tree.get('goal', 'plan'))}[/bold]")
    nodes: dict[str, Tree] = {}
    for sub in tree.get("subgoals", []):
        unit = status.get(sub["name"], {})
        mark, style = UNIT_MARKS.get(unit.get("status", "pending"), ("·", "dim"))
        also = sub["depends_on"][1:]
        label = (f"[{style}]{mark} {escape(sub['name'])}[/] {escape(sub['task'][:80])}"
                 + (f" [dim](also needs {', '.join(also)})[/dim]" if also else ""))
        if unit.get("answer") and unit.get("status") in ("passed", "answered"):
            label += f" [dim]→[/dim] {escape(str(unit['answer'])[:80])}"
        elif unit.get("reason") and unit.get("status") in ("failed", "skipped"):
            label += f" [dim]({escape(unit['reason'][:80])})[/dim]"
        parent = nodes.get(sub["depends_on"][0]) if sub["depends_on"] else None
        nodes[sub["name"]] = (parent or root).add(label)
    return root


def last_plan_tree(steps: list[Step]) -> Tree | None:
    """The goal tree of a plan run as its last stored state has it."""
    for step in reversed(steps):
        data = step.payload()
        checkpoint = getattr(data, "checkpoint", None)
        if isinstance(data, PlanMade | UnitStatus) and checkpoint is not None and checkpoint.state.get("tree"):
            return plan_tree(checkpoint.state["tree"], checkpoint.state.get("units", []))
    return None


class PlanView(LiveView):
    """A live view of a plan: the tree when it is made and each time a sub-goal finishes, a line per status
    change and per propagated control; the units' own steps only with --verbose."""

    PLAN_KINDS = (PlanMade, UnitStatus, Propagated)
    plan_run = ""

    def step(self, step: Step) -> None:
        data = step.payload()
        if isinstance(data, self.PLAN_KINDS):
            self.plan_run = step.run_id
        if isinstance(data, self.PLAN_KINDS) or (isinstance(data, Stop) and step.run_id == self.plan_run):
            super().step(step)
            if isinstance(data, UnitStatus) and data.status not in ("running", "pending") and data.checkpoint:
                state = data.checkpoint.state
                self.console.print(plan_tree(state["tree"], state["units"]))
        elif self.verbose:
            super().step(step)
