"""How runs look in a terminal: one renderer per step kind, verdicts with their signals, usage per role."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TextIO

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.live import Live
from rich.markup import escape
from rich.spinner import Spinner as RichSpinner
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from ..loops import steps as step_types
from ..types import Payload, Result, Signal, Step, StopReason, Usage

STATUS_STYLE = {"PASS": "bold green", "NEEDS_IMPROVEMENT": "bold yellow", "FAIL": "bold red"}
STOP_STYLE = {StopReason.PASSED: "bold green", StopReason.ANSWERED_UNVERIFIED: "bold yellow",
              StopReason.INTERRUPTED: "bold yellow", StopReason.AWAITING_APPROVAL: "bold yellow"}
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
        self.stamp = ""
        """The step's time, not yet shown: it leads the step's first line or rule, wrapped with it."""

    def print(self, text: str | RenderableType, **options: Any) -> None:
        """One line (or renderable) of a step; the step's time leads its first line."""
        if self.stamp and isinstance(text, str):
            text, self.stamp = f"[dim]{self.stamp}[/dim]{text}", ""
        self.console.print(text, **options)

    def rule(self, title: str) -> None:
        """A rule across the width, titled, with the step's time in the title."""
        self.console.rule(f"{self.stamp}{title}")
        self.stamp = ""

    def step(self, step: Step) -> None:
        """One stored step, as it happens (live) or from the store (`show`)."""
        data = step.payload()
        show_time = self.timestamps and not isinstance(data, step_types.ModelCall | step_types.Checkpoint)
        self.stamp = f"{datetime.fromtimestamp(step.ended_at):%H:%M:%S} " if show_time else ""
        if data is None:  # a step kind this version does not know, or an older shape of a known one
            self.print(f"[dim]{escape(step.kind)}: {escape(json.dumps(step.output, default=str)[:300])}[/dim]")
            return
        RENDERERS[type(data)](self, step, data)

    def model_call(self, step: Step, c: step_types.ModelCall) -> None:
        if self.verbose:
            u = step.usage
            problem = f", {'call failed' if c.failed else 'invalid reply'}: {escape(c.error)}" if c.error else ""
            on = f" on {escape(c.model)}" if c.model else ""  # a reflector on its own model
            self.print(f"[dim]#{step.step_id} {step.role} call{on}: {u.input_tokens} in, "
                       f"{u.output_tokens} out, finish={c.finish_reason}{problem}[/dim]")

    def attempt(self, step: Step, a: step_types.Attempt) -> None:
        self.rule(f"attempt {a.iteration}" + (" (revision)" if a.revising else ""))
        if a.plan:
            self.print(f"[dim]{escape(_snippet(a.plan, 4))}[/dim]")
        self.print(escape(_snippet(a.candidate or "(empty)", self.lines)))

    def checked(self, step: Step, c: step_types.Checked) -> None:
        status = c.verdict.status
        self.print(f"verdict: [{STATUS_STYLE.get(status, 'bold')}]{status}[/]"
                   + (" [dim](subjective)[/dim]" if c.verdict.subjective else ""))
        for signal in c.verdict.signals:
            self.print(_signal_line(signal))
            if self.lines is None and not signal.ok and signal.evidence:  # --full: the output behind the message
                self.print(f"[dim]{escape(signal.evidence)}[/dim]", highlight=False)

    def decided(self, step: Step, d: step_types.Decided) -> None:
        labels = {"repair": "rule repair", "lesson": "lesson", "none": "no lesson", "stop": "stop"}
        label = labels.get(d.decision, d.decision)
        self.print(f"[cyan]{label}[/cyan] ({escape(d.reason)})")
        if d.lesson:
            self.print(f"  [cyan]mismatch[/cyan]: {escape(d.lesson.observed_mismatch)}\n"
                       f"  [cyan]cause[/cyan]: {escape(d.lesson.root_cause)}\n"
                       f"  [cyan]correction[/cyan]: {escape(d.lesson.correction)}")
        if d.repair:
            self.print(f"  [cyan]repair[/cyan]: {escape(d.repair.kind)} {escape(json.dumps(d.repair.args))}")

    def acted(self, step: Step, a: step_types.Acted) -> None:
        mark = "[green]✓[/green]" if a.ok else f"[red]✗ {a.code}[/red]"
        replay = " [dim](replayed, not run again)[/dim]" if a.replayed else ""
        if a.superseded:
            replay = " [dim](differs from the call recorded before the resume: run as a new call)[/dim]"
        self.print(f"[bold]step {a.step}[/bold] {escape(a.thought)}\n  {escape(a.action)} {mark}{replay}\n"
                   f"  [dim]{escape(_snippet(a.observation, 6 if self.lines else None))}[/dim]")

    def queries(self, step: Step, q: step_types.Queries) -> None:
        for query in q.run:
            self.print(f"[cyan]search[/cyan] {escape(query)}")
        for rejection in q.rejected:
            self.print(f"[dim]query rejected: {escape(rejection)}[/dim]")

    def searched(self, step: Step, s: step_types.Searched) -> None:
        status = "[green]ok[/green]" if s.status == "ok" else f"[red]failed: {escape(s.error or '')}[/red]"
        cached = " [dim](cached)[/dim]" if s.cached else ""
        self.print(f"  {escape(s.query)}: {status}{cached} {len(s.evidence)} passage(s)")
        if self.lines is None:  # --full: which passages, where from, and what they say
            for passage in s.passages:
                self.print(f"    [dim]{escape(passage.id)}[/dim] {escape(passage.title)} — "
                           f"{escape(passage.source)}", highlight=False)
                self.print(f"      [dim]{escape(passage.snippet)}[/dim]", highlight=False)

    def audited(self, step: Step, a: step_types.Audited) -> None:
        checked = a.signal.ok and a.signal.score == 1.0  # ✓ only when something was cited and checked
        mark = "[green]✓[/green]" if checked else ("[yellow]–[/yellow]" if a.signal.ok else "[red]✗[/red]")
        self.print(f"citation audit {mark} {escape(a.signal.message)}")

    def trial(self, step: Step, t: step_types.Trial) -> None:
        self.rule(f"trial {t.trial}: {t.stop_reason}")

    def note(self, step: Step,
             n: step_types.Flag | step_types.NoProgress | step_types.RepairChosen | step_types.Selected) -> None:
        self.print(f"[magenta]{n.KIND}[/magenta]: {escape(n.why)}")

    def plan_made(self, step: Step, p: step_types.PlanMade) -> None:
        if p.errors:
            self.print(f"[magenta]planner re-asked[/magenta]: {escape('; '.join(p.errors))}")
        if p.checkpoint is not None:
            self.rule(f"goal tree ({p.source})")
            self.print(plan_tree(p.tree, p.checkpoint.state.get("units", [])))

    def plan_rejected(self, step: Step, p: step_types.PlanRejected) -> None:
        self.rule("goal tree rejected")
        if p.tree is not None:
            self.print(plan_tree(p.tree, []))
        for error in p.errors:
            self.print(f"  [red]✗[/red] {escape(error)}")

    def unit_status(self, step: Step, u: step_types.UnitStatus) -> None:
        mark, style = UNIT_MARKS.get(u.status, ("·", "dim"))
        said = f": {escape(u.answer[:200])}" if u.answer and u.status in ("passed", "answered") else ""
        why = f" — {escape(u.reason[:200])}" if u.reason and u.status not in ("passed", "answered") else ""
        self.print(f"[{style}]{mark} {escape(u.name)} {u.status}[/]{said}{why}")

    def propagated(self, step: Step, p: step_types.Propagated) -> None:
        c = p.lesson.control
        what = f"{c.kind} {c.tool}" + (f"({c.arg}={c.value!r})" if c and c.arg else "") if c else "lesson"
        self.print(f"[cyan]propagated from {escape(p.origin)}[/cyan]: {escape(what)} — "
                   f"{escape(p.lesson.correction)}")

    def checkpoint(self, step: Step, c: step_types.Checkpoint) -> None:
        pass  # state for a resume, not for reading

    def stop(self, step: Step, s: step_types.Stop) -> None:
        style = STOP_STYLE.get(s.stop_reason, "bold red")
        self.print(f"stop: [{style}]{s.stop_reason}[/]" + (f" — {escape(s.error)}" if s.error else ""))


RENDERERS: dict[type[Payload], Callable[[View, Step, Any], None]] = {
    step_types.ModelCall: View.model_call, step_types.Attempt: View.attempt, step_types.Checked: View.checked,
    step_types.Decided: View.decided, step_types.Acted: View.acted, step_types.Queries: View.queries,
    step_types.Searched: View.searched, step_types.Audited: View.audited, step_types.Trial: View.trial,
    step_types.Flag: View.note, step_types.NoProgress: View.note, step_types.RepairChosen: View.note,
    step_types.Checkpoint: View.checkpoint, step_types.Stop: View.stop, step_types.PlanMade: View.plan_made,
    step_types.PlanRejected: View.plan_rejected, step_types.UnitStatus: View.unit_status,
    step_types.Propagated: View.propagated, step_types.Selected: View.note,
}
"""One renderer per step kind; a test checks every registered kind has one."""


LIVE_REFRESH = 4
"""Redraws of the live line per second, on a timer: elapsed time moves even while nothing arrives."""
TAIL_CHARS = 160
"""Characters of a streaming reply kept for the live line (its last line is shown, cut to the width)."""


@dataclass(slots=True)
class Activity:
    """What runs now, for the live line: a model call (streamed tokens counted) or a check or tool."""

    label: str
    started: float
    model: bool = False
    tokens: int = 0
    tail: str = ""


class LiveView(View):
    """An observer for a running loop: each step as it lands and, below them, one live line redrawn
    LIVE_REFRESH times a second: what runs (a model call, a check, a tool), for how long, and for a model
    call the tokens so far, tokens per second and the tail of the streamed text. With `steps=False`
    only the live line is shown (for --json and --jsonl, on stderr). Thread-safe: events may come from
    a worker thread while the timer redraws."""

    def __init__(self, console: Console, *, verbose: bool = False, steps: bool = True,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(console, verbose=verbose)
        self.show_steps = steps
        self.clock = clock
        self.started = clock()
        self.run_id: str | None = None
        self.activity: Activity | None = None
        self.calls = 0
        self._lock = threading.Lock()
        """Guards the state `line()` reads; never held while printing (see __call__)."""
        self._live_lock = threading.Lock()
        self._live: Live | None = None
        self._closed = False
        self._spinner = RichSpinner("dots", style="cyan")

    def __call__(self, event: str, data: Any) -> None:
        # State changes under the view's lock; printing outside it. The Live's timer thread holds the
        # Live's lock while it asks for `line()` (the view's lock), and printing takes the Live's lock:
        # holding both here, in the other order, would deadlock.
        with self._lock:
            if event == "run":
                self.run_id = str(data)
            elif event == "call":
                self.calls += 1
                self.activity = Activity(str(data), self.clock(), model=True)
            elif event == "token" and self.activity is not None and self.activity.model:
                self.activity.tokens += 1
                self.activity.tail = (self.activity.tail + str(data))[-TAIL_CHARS:]
            elif event == "status":
                self.activity = Activity(str(data), self.clock())
            elif event == "step":
                self.activity = None
            elif event != "token":
                return  # an event this view does not know
        if event == "step" and self.show_steps:
            self.step(data)
        self._start()

    def _start(self) -> None:
        with self._live_lock:
            if self._live is None and not self._closed and self.console.is_terminal:
                self._live = Live(self, console=self.console, refresh_per_second=LIVE_REFRESH, transient=True,
                                  redirect_stdout=False, redirect_stderr=False)
                self._live.start()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """The live line taken down while the terminal asks the user something, then back."""
        with self._live_lock:
            closed, self._closed = self._closed, True
            if self._live is not None:
                self._live.stop()
                self._live = None
        try:
            yield
        finally:
            with self._live_lock:
                self._closed = closed

    def close(self) -> None:
        """Take the live line down for good (the steps printed above it stay)."""
        with self._live_lock:
            self._closed = True
            if self._live is not None:
                self._live.stop()
                self._live = None

    def line(self) -> Text:
        """The live line as it reads now."""
        with self._lock:
            now = self.clock()
            text = Text(no_wrap=True, overflow="ellipsis")
            a = self.activity
            if a is None:
                text.append("working", style="bold")
            else:
                text.append(a.label + (" is writing" if a.model else ""), style="bold cyan" if a.model else "bold")
                took = max(now - a.started, 1e-9)
                text.append(f"  {took:.1f}s", style="yellow")
                if a.model:
                    text.append(f"  {a.tokens} tok")
                    if a.tokens:
                        text.append(f"  {a.tokens / took:.1f} tok/s")
                    elif took >= 1:
                        text.append("  reading the prompt", style="dim")
            text.append(f"  · run {_clock(now - self.started)}", style="dim")
            if self.run_id:
                text.append(f" {self.run_id[:12]}", style="dim")
            if a is not None and a.model and a.tail.strip():
                last = a.tail.rstrip().splitlines()[-1] if a.tail.rstrip() else ""
                text.append("  │ ", style="dim")
                text.append(last.strip()[-80:], style="italic")
            return text

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        # Called by the Live's timer: the elapsed time and the spinner move even while nothing arrives.
        frame = self._spinner.render(time.monotonic())
        line = Text.assemble(frame if isinstance(frame, Text) else Text(str(frame)), " ", self.line())
        line.truncate(max(options.max_width - 1, 10), overflow="ellipsis")
        yield line


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class JsonLines:
    """An observer for scripts (--jsonl): one JSON object a line on stdout, flushed at once: the run's
    id when it opens, then each step as stored ({"event": "step", ...Step.to_dict()}).

    A reader that closes the pipe early (`reflexa refine ... --jsonl | head -1`, for the run's id) stops the
    lines, not the run: it goes on and is stored as it ends, and stdout is pointed at /dev/null so that
    nothing printed later fails."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self._lock = threading.Lock()
        self.closed = False

    def __call__(self, event: str, data: Any) -> None:
        if event == "run":
            self.emit({"event": "run", "run_id": data})
        elif event == "step":
            self.emit({"event": "step", **data.to_dict()})

    def emit(self, record: dict[str, Any]) -> None:
        with self._lock:
            if self.closed:
                return
            try:
                self.out.write(json.dumps(record, default=str, ensure_ascii=False) + "\n")
                self.out.flush()
            except BrokenPipeError:
                self.closed = True
                with contextlib.suppress(OSError, ValueError):  # an `out` with no file descriptor
                    os.dup2(os.open(os.devnull, os.O_WRONLY), self.out.fileno())


def fan_out(*observers: Callable[[str, Any], None] | None) -> Callable[[str, Any], None] | None:
    """One observer that calls each of `observers` (None ones left out); None when there are none."""
    present = [o for o in observers if o is not None]
    if len(present) <= 1:
        return present[0] if present else None

    def observe(event: str, data: Any) -> None:
        for observer in present:
            observer(event, data)

    return observe


def counters_line(counters: dict[str, Any]) -> str:
    shown = {k: v for k, v in counters.items() if v}
    return "engine: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in shown.items()) if shown else ""


def print_summary(console: Console, result: Result) -> None:
    """The usage, notes and engine counts of a finished run, then how it ended."""
    console.print(usage_table(result.usage))
    for note in result.notes:
        console.print(f"[yellow]{escape(note)}[/yellow]")
    if line := counters_line(result.counters):
        console.print(escape(line))
    if result.stop_reason is StopReason.ANSWERED_UNVERIFIED:
        console.print("[bold yellow]answered, unverified:[/bold yellow] nothing checked this answer")
    console.print(f"run {result.run_id[:12]}: {result.iterations} iteration(s), {result.steps} steps stored. "
                  f"Details: reflexa show {result.run_id[:12]}", soft_wrap=True)


def summary_line(result: Result) -> str:
    """The whole result in one line (for -q)."""
    total = result.total_usage
    return (f"{result.stop_reason}: run {result.run_id[:12]}, {result.iterations} iteration(s), "
            f"{total.input_tokens + total.output_tokens} tokens in {total.calls} call(s). "
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
        planned = isinstance(data, step_types.PlanMade | step_types.UnitStatus)
        if planned and checkpoint is not None and checkpoint.state.get("tree"):
            return plan_tree(checkpoint.state["tree"], checkpoint.state.get("units", []))
    return None


class PlanView(LiveView):
    """A live view of a plan: the tree when it is made and each time a sub-goal finishes, a line per status
    change and per propagated control; the units' own steps only with --verbose."""

    PLAN_KINDS = (step_types.PlanMade, step_types.PlanRejected, step_types.UnitStatus, step_types.Propagated)
    plan_run = ""
    """The plan's own run: the first run announced (the units' runs come after it)."""

    def __call__(self, event: str, data: Any) -> None:
        if event == "run" and not self.plan_run:
            self.plan_run = str(data)
        super().__call__(event, data)

    def step(self, step: Step) -> None:
        data = step.payload()
        plan_stop = isinstance(data, step_types.Stop) and step.run_id == self.plan_run
        if isinstance(data, self.PLAN_KINDS) or plan_stop:
            super().step(step)
            if isinstance(data, step_types.UnitStatus) and data.status not in ("running", "pending") \
                    and data.checkpoint:
                state = data.checkpoint.state
                self.console.print(plan_tree(state["tree"], state["units"]))
        elif self.verbose:
            super().step(step)
