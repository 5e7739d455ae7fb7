"""What every command shares: the consoles, clean errors, the store, finding a run, exit codes."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from ..errors import ConfigError, ReflexaError
from ..types import strip_controls


class SafeConsole(Console):
    """A console that strips terminal control sequences from the text it prints: a tool's output, a model's
    reply or a task may carry them (clear the screen, set the window title), and none reaches the terminal."""

    def print(self, *objects: Any, **options: Any) -> None:
        super().print(*(strip_controls(o) if isinstance(o, str) else o for o in objects), **options)

    def rule(self, title: Any = "", **options: Any) -> None:
        super().rule(strip_controls(title) if isinstance(title, str) else title, **options)


console = SafeConsole()
errors = SafeConsole(stderr=True)

EXIT_CODES = {"PASSED": 0, "ERROR": 1, "ANSWERED_UNVERIFIED": 4, "AWAITING_APPROVAL": 5, "INTERRUPTED": 130}
"""How a run's stop reason maps to the exit status; every other reason (a run stopped without passing) is 3.
2 is bad input."""
NOT_PASSED = 3


def exit_code(stop_reason: str | None) -> int:
    """The exit status for a run that ended with `stop_reason` (docs/cli.md, "Exit codes")."""
    return EXIT_CODES.get(str(stop_reason), NOT_PASSED)


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


def open_store(target: str | None, *, reader: bool = False) -> Any:
    """The store --trace names; a `reader` command opens one it may not write read-only."""
    from ..trace.open import open_store as open_trace

    return open_trace(target, reader=reader)


def find_run(store: Any, run_id: str) -> Any:
    """A run by id or unique prefix; distinct errors for an unknown id and an ambiguous prefix."""
    if not run_id.strip():
        raise ConfigError("no run id given", hint="list runs with `reflexa runs`")
    matches = store.find_runs(run_id)
    if not matches:
        raise ConfigError(f"no run has an id starting with {run_id!r}", hint="list runs with `reflexa runs`")
    if len(matches) > 1:
        raise ConfigError(f"{run_id!r} matches more than one run", hint="give more characters of the id")
    return matches[0]
