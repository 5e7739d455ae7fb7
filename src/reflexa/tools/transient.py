"""Whether a tool's failure is transient (waiting and calling again may work), and how long to wait.

Read first from what the failure is: a connection error or a timeout by its exception type (ConnectionError,
TimeoutError and the errno values of a dropped connection), an HTTP status by the exception's status code
(408, 425, 429, 500, 502, 503, 504, as retrying HTTP clients treat them), and a Retry-After the exception
carries. Only then from its words, for a failure that reaches reflexa as text (an MCP server's error): the
same statuses with their reason phrases, and the common words of a dropped connection, a lock or a rate
limit. A bare number is no such sign ("no customer with id 503"), nor is "locked" alone ("account is locked
by policy").
"""

from __future__ import annotations

import errno
import re
from typing import Any

STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})
"""HTTP statuses that say the request may work later."""
ERRNOS = frozenset(getattr(errno, name) for name in ("ECONNRESET", "ECONNREFUSED", "ECONNABORTED", "EPIPE",
                                                      "ETIMEDOUT", "EHOSTUNREACH", "ENETUNREACH", "ENETDOWN",
                                                      "EAGAIN", "EBUSY") if hasattr(errno, name))
"""OS errors of a connection that dropped or a resource that is busy for now."""
MAX_RETRY_AFTER = 5.0
"""Seconds a Retry-After is honoured at most: a longer wait is left to a later attempt or a human."""

_STATUS = "|".join(str(code) for code in sorted(STATUSES))
_REASON = (r"request time-?out|too early|too many requests|internal server error|bad gateway|service "
           r"(?:temporarily )?unavailable|gateway time-?out")
TRANSIENT_TEXT = re.compile(
    rf"\b(?:(?:http(?:/\d(?:\.\d)?)?|status|error|code)[ :=]*(?:{_STATUS})\b|(?:{_STATUS})[ :-]*(?:{_REASON})|"
    rf"(?:{_STATUS}) from\b|"
    rf"{_REASON}|connection (?:was )?(?:reset|refused|aborted|closed)|reset by peer|broken pipe|"
    r"econn(?:reset|refused|aborted)|timed out|time-?out while|temporar(?:il)?y (?:unavailable|failure|"
    r"error)|try (?:again|later)|call again|retry[ -]after|rate.?limit(?:ed)?|throttl(?:ed|ing)|"
    r"(?:service|server|upstream) (?:is )?(?:busy|overloaded|unavailable)|\bbusy\b|"
    r"(?:database|table|file|resource) is locked)",
    re.IGNORECASE)
"""A failure's words that say waiting may fix it."""
_AFTER = re.compile(r"retry[ -]after[:= ]*(\d+(?:\.\d+)?)|retry in (\d+(?:\.\d+)?) ?s", re.IGNORECASE)


def status_of(exc: BaseException) -> int | None:
    """The HTTP status an exception carries (`status_code`, `status` or `code`, its own or its response's)."""
    for holder in (exc, getattr(exc, "response", None)):
        for name in ("status_code", "status", "code"):
            value = getattr(holder, name, None)
            if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599:
                return value
    return None


def is_transient(exc: BaseException, message: str = "") -> bool:
    """Whether `exc` (a tool's failure, with the text it says) is one that waiting may fix."""
    if isinstance(exc, ConnectionError | TimeoutError):
        return True
    if isinstance(exc, OSError) and exc.errno in ERRNOS:
        return True
    if (status := status_of(exc)) is not None:
        return status in STATUSES
    return transient_text(message or str(exc))


def transient_text(message: str) -> bool:
    """Whether a failure's words say waiting may fix it."""
    return bool(TRANSIENT_TEXT.search(message))


def retry_after(exc: BaseException | None, message: str = "") -> float | None:
    """The wait a failure asks for (a Retry-After header or attribute, or its words), capped at MAX_RETRY_AFTER;
    None when it names none."""
    for holder in (exc, getattr(exc, "response", None)):
        said: Any = getattr(holder, "retry_after", None)
        headers = getattr(holder, "headers", None)
        if said is None and headers is not None and hasattr(headers, "get"):
            said = headers.get("Retry-After") or headers.get("retry-after")
        try:
            if said is not None:
                return min(max(float(said), 0.0), MAX_RETRY_AFTER)
        except (TypeError, ValueError):
            pass
    if match := _AFTER.search(message):
        return min(float(match.group(1) or match.group(2)), MAX_RETRY_AFTER)
    return None
