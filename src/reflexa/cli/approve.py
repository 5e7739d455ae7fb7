"""Human approval on the command line: `--approve ask` asks in the terminal before each side-effecting
call, and `reflexa approve RUN_ID` decides on a call a run stopped for (`--approve defer`)."""

from __future__ import annotations

import json
import sys
from contextlib import nullcontext
from typing import Annotated, Any

import typer
from rich.markup import escape

from ..errors import ConfigError
from ..tools.approval import ApprovalRequest, Decision, invalid_args
from .common import clean_errors, console, errors, find_run, open_store
from .options import TraceOpt, option


class TerminalApprover:
    """Asks on the terminal: approve, deny with a reason, edit the arguments, or defer. The live view is
    taken down while it asks; no answer (stdin closed) defers, so nothing runs without a decision."""

    def __init__(self, view: Any = None) -> None:
        self.view = view

    def __call__(self, request: ApprovalRequest) -> Decision:
        with self.view.paused() if self.view is not None else nullcontext():
            errors.print(f"[bold yellow]approval needed:[/bold yellow] {escape(request.tool)}"
                         f"({escape(json.dumps(request.args, ensure_ascii=False))})", highlight=False)
            while True:
                answer = _ask("approve? [y]es, [n]o, [e]dit the arguments, [d]efer: ").lower()
                if answer in ("y", "yes"):
                    return Decision.approve()
                if answer in ("n", "no"):
                    return Decision.deny(_ask("why (the agent sees this): "))
                if answer in ("e", "edit"):
                    if (edited := _edited(request)) is not None:
                        return Decision.approve(edited)
                    continue
                if answer in ("d", "defer", ""):
                    return Decision.defer()


def _ask(prompt: str) -> str:
    errors.print(prompt, end="", highlight=False, markup=False)
    line = sys.stdin.readline()
    return line.strip() if line else ""  # "" at end of input: defer


def _edited(request: ApprovalRequest) -> dict[str, Any] | None:
    """Arguments typed in the terminal, or None (said why; the question is asked again) when they are no
    JSON object or do not fit the tool's schema."""
    try:
        edited = json_object(_ask("arguments as a JSON object: "))
    except ValueError as exc:
        errors.print(str(exc), highlight=False, markup=False)
        return None
    if why := invalid_args(request.schema, edited):
        errors.print(f"these arguments do not fit {request.tool}: {why}", highlight=False, markup=False)
        return None
    return edited


def json_object(text: str) -> dict[str, Any]:
    """Arguments typed by a person: a JSON object, or a ValueError saying why not."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc.msg}") from None
    if not isinstance(value, dict):
        raise ValueError("the arguments must be a JSON object")
    return value


def approve(
    run_id: Annotated[str, typer.Argument(metavar="RUN_ID", help="The run waiting for approval (id or prefix).")],
    deny: Annotated[str | None, option("WHY", "Deny the call; the agent sees the reason.", names=("--deny",))] = None,
    args: Annotated[str | None, option("JSON", "Approve the call with these arguments instead (a JSON object).",
                                       names=("--args",))] = None,
    change: Annotated[bool, typer.Option("--change", help="Correct a decision already made, until the run "
                                         "resumes.")] = False,
    trace: TraceOpt = None,
) -> None:
    """Approve (or deny) the side-effecting call a run stopped for; `reflexa resume RUN_ID` then carries
    it out, once. A second decision on the same call is refused unless it is a `--change`."""
    from ..tools.approval import decide, waiting

    with clean_errors():
        if deny is not None and args is not None:
            raise ConfigError("--deny and --args exclude each other")
        store = open_store(trace)
        record = find_run(store, run_id)
        awaiting = record.status == "awaiting"
        calls = waiting(store, record.run_id) if awaiting else []
        if not calls and awaiting and (decided := waiting(store, record.run_id, decided=True)):
            if not change:
                raise ConfigError(f"the call to {decided[0].tool} was {decided[0].status} already",
                                  hint="--change corrects a decision until the run resumes")
            calls = decided
        if not calls:
            raise ConfigError(f"run {record.run_id[:12]} has no call waiting for approval ({record.status})",
                              hint="a run waits when it stopped AWAITING_APPROVAL (--approve defer)")
        decision = Decision.deny(deny) if deny is not None else Decision.approve(_args(args))
        call = decide(store, calls[0], decision, change=change)
        shown = json.dumps(call.edited if call.edited is not None else call.args, ensure_ascii=False)
        go_on = ("run the batch again" if "batch" in record.meta
                 else f"reflexa resume {str(record.meta.get('parent', record.run_id))[:12]}")
        console.print(f"{call.status}: {call.tool}({shown}); continue with: {go_on}", markup=False,
                      highlight=False, soft_wrap=True)


def _args(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        return json_object(text)
    except ValueError as exc:
        raise ConfigError(f"--args: {exc}") from None
