"""Regular expressions a user, a task file or an MCP client gives, run with a time limit.

A backtracking pattern (`(a|aa)+$`) on a few dozen characters can take minutes in `re`, holding the GIL the
whole time. These run on the `regex` engine, which stops a search after a time limit and releases the GIL
while it searches, so a hostile pattern ends as a failing signal and never freezes the process (or the
event loop of a server) it runs in.
"""

from __future__ import annotations

import regex

SEARCH_SECONDS = 1.0
"""The time one search may take; the engine checks it as it goes, so a search ends within about twice it."""

Pattern = regex.Pattern


class PatternTimeout(Exception):  # noqa: N818 - named for what happened, like TimeoutError
    """A search took longer than its limit: no answer either way."""


def compile_pattern(pattern: str, flags: int = 0) -> regex.Pattern[str]:
    """The compiled pattern (Python `re` syntax and flags), or a ValueError saying what is wrong with it."""
    try:
        return regex.compile(pattern, flags)
    except (regex.error, TypeError, OverflowError) as exc:
        raise ValueError(str(exc)) from None


def search(compiled: regex.Pattern[str], text: str, seconds: float = SEARCH_SECONDS) -> regex.Match[str] | None:
    """`compiled.search(text)` within `seconds`, or PatternTimeout."""
    try:
        return compiled.search(text, timeout=seconds, concurrent=True)
    except TimeoutError:
        raise PatternTimeout(f"the regex took longer than {seconds:g} s on a {len(text)}-character text") from None
