"""How runs look in a terminal: one panel per attempt, verdicts with their signals, usage per role."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.status import Status as Spinner
from rich.table import Table

from ..types import Result, Step, Usage

STATUS_STYLE = {"PASS": "bold green", "NEEDS_IMPROVEMENT": "bold yellow", "FAIL": "bold red"}
SNIPPET_LINES = 25
"""Lines of a candidate shown live; the full text is in the trace (`reflexa show`)."""


def _snippet(text: str, lines: int = SNIPPET_LINES) -> str:
    rows = text.splitlines()
    return "\n".join(rows[:lines]) + (f"\n… ({len(rows) - lines} more lines)" if len(rows) > lines else "")


def usage_table(usage: dict[str, Any]) -> Table:
    table = Table("role", "input tokens", "output tokens", "calls", title="usage")
    total = Usage()
    for role, u in usage.items():
        u = u if isinstance(u, Usage) else Usage(u["input_tokens"], u["output_tokens"], u["calls"])
        total.add(u)
        table.add_row(role, str(u.input_tokens), str(u.output_tokens), str(u.calls))
    table.add_row("[bold]total", str(total.input_tokens), str(total.output_tokens), str(total.calls))
    return table


def print_step(console: Console, step: Step | dict[str, Any], *, verbose: bool = False) -> None:
    """One stored step, as it happens (live) or from the store (`show`)."""
    s = step if isinstance(step, dict) else step.to_dict()
    kind, out = s["kind"], s["output"] or {}
    if kind == "model_call":
        if verbose:
            u = s["usage"]
            console.print(f"[dim]#{s['step_id']} {s['role']} call: {u['input_tokens']} in, "
                          f"{u['output_tokens']} out, finish={out.get('finish_reason')}"
                          + (f", invalid reply: {escape(out['error'])}" if out.get("error") else "") + "[/dim]")
    elif kind == "attempt":
        console.rule(f"attempt {s['input']['iteration']}" + (" (revision)" if s["input"]["revising"] else ""))
        if out.get("plan"):
            console.print(f"[dim]{escape(_snippet(out['plan'], 4))}[/dim]")
        console.print(escape(_snippet(out.get("candidate") or "(empty)")))
    elif kind == "verdict":
        status = out["status"]
        console.print(f"verdict: [{STATUS_STYLE.get(status, 'bold')}]{status}[/]"
                      + (" [dim](subjective)[/dim]" if out.get("subjective") else ""))
        for signal in out["signals"]:
            mark = "[green]✓[/green]" if signal["ok"] else "[red]✗[/red]"
            code = f" {signal['code']}" if signal.get("code") else ""
            console.print(f"  {mark} {escape(signal['source'])}{code}: {escape(signal['message'])}")
    elif kind == "engine":
        lesson = out.get("lesson")
        label = {"repair": "rule repair", "lesson": "lesson", "none": "no lesson", "stop": "stop"}[out["decision"]]
        console.print(f"[cyan]{label}[/cyan] ({escape(out['reason'])})")
        if lesson:
            console.print(f"  [cyan]mismatch[/cyan]: {escape(lesson['observed_mismatch'])}\n"
                          f"  [cyan]cause[/cyan]: {escape(lesson['root_cause'])}\n"
                          f"  [cyan]correction[/cyan]: {escape(lesson['correction'])}")
        if out.get("repair"):
            console.print(f"  [cyan]repair[/cyan]: {escape(str(out['repair']))}")
    elif kind == "react":
        mark = "[green]✓[/green]" if out["ok"] else f"[red]✗ {out.get('code')}[/red]"
        replay = " [dim](replayed, not run again)[/dim]" if out.get("replayed") else ""
        console.print(f"[bold]step {s['input']['step']}[/bold] {escape(s['input']['thought'])}\n"
                      f"  {escape(s['input']['action'])} {mark}{replay}\n"
                      f"  [dim]{escape(_snippet(out['observation'], 6))}[/dim]")
    elif kind == "queries":
        for query in out["run"]:
            console.print(f"[cyan]search[/cyan] {escape(query)}")
        for rejection in out["rejected"]:
            console.print(f"[dim]query rejected: {escape(rejection)}[/dim]")
    elif kind == "search":
        status = "[green]ok[/green]" if out["status"] == "ok" else f"[red]failed: {escape(out.get('error', ''))}[/red]"
        cached = " [dim](cached)[/dim]" if out.get("cached") else ""
        console.print(f"  {escape(s['input']['query'])}: {status}{cached} {len(out.get('evidence', []))} passage(s)")
    elif kind == "audit":
        mark = "[green]✓[/green]" if out["ok"] else "[red]✗[/red]"
        console.print(f"citation audit {mark} {escape(out['message'])}")
    elif kind == "trial":
        console.rule(f"trial {s['input']['trial']}: {out['stop_reason']}")
    elif kind in ("no_progress", "flag"):
        console.print(f"[magenta]{kind}[/magenta]: {escape(out.get('why', ''))}")
    elif kind == "stop":
        reason = out.get("stop_reason")
        style = "bold green" if reason == "PASSED" else "bold red"
        console.print(f"stop: [{style}]{reason}[/]" + (f" — {escape(out['error'])}" if out.get("error") else ""))


class LiveView:
    """An observer for a running loop: a spinner while the model works, then each step as it lands."""

    def __init__(self, console: Console, *, verbose: bool = False) -> None:
        self.console = console
        self.verbose = verbose
        self.spinner: Spinner | None = None

    def __call__(self, event: str, data: Any) -> None:
        if event == "call":
            self.stop_spinner()
            self.spinner = self.console.status(f"{data} is working…")
            self.spinner.start()
        elif event == "step":
            self.stop_spinner()
            print_step(self.console, data, verbose=self.verbose)

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
    console.print(f"run {result.run_id[:12]}: {result.iterations} iteration(s), {result.steps} steps stored. "
                  f"Details: reflexa show {result.run_id[:12]}")
