"""The output flags every run command shares. Kept apart and light: `reflexa --help` and `--version` must
not import the loops."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Output:
    """How a command shows a run: `json` one document at the end; `jsonl` one line per stored step, then
    the result; `quiet` no live line and no steps (the summary still prints); `verbose` every model call.
    The live line goes to stderr under --json and --jsonl (when stderr is a terminal), so stdout stays
    data."""

    json: bool = False
    jsonl: bool = False
    quiet: bool = False
    verbose: bool = False
