"""Faults as real services raise them, for a built agent domain's tools.

In process (`wrapped(api, FAULT)`, for a `tools` file): `noisy`, every output drowned in log lines, as a
chatty client library prints them; `flaky`, every other call with the same arguments raises
ConnectionResetError in this process (the first fails, a retry works). Over MCP (`server.py --fault F`, a
process per run, so each run meets its fault afresh): the first call of each tool fails once, as a flaky
upstream does, and the next call works.
"""

from __future__ import annotations

import random
import time
from typing import Any

from reflexa import Tool

NOISE_LINES = 24
"""Log lines before every output under the `noisy` fault (about 1,500 characters)."""


def _noise(seed: str) -> str:
    rng = random.Random(seed)
    levels = ("DEBUG", "DEBUG", "INFO", "TRACE")
    return "\n".join(f"2026-11-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:"
                     f"{rng.randint(0, 59):02d}Z {rng.choice(levels)} pool[{rng.randint(1, 8)}] "
                     f"conn={rng.getrandbits(32):08x} latency_ms={rng.randint(1, 90)} cache=miss"
                     for _ in range(NOISE_LINES))


CALLS: dict[str, int] = {}
"""Calls so far in this process, by tool and arguments (the `flaky` fault)."""


def wrapped(module: Any, fault: str) -> dict[str, Tool]:
    """The @tools of `module`, each with `fault` injected, by name."""
    out: dict[str, Tool] = {}
    for value in vars(module).values():
        if not isinstance(value, Tool):
            continue

        def call(*args: Any, _fn: Any = value.function, _name: str = value.name, **kwargs: Any) -> Any:
            key = f"{_name}{sorted(kwargs.items())!r}"
            CALLS[key] = CALLS.get(key, 0) + 1
            if fault == "flaky" and CALLS[key] % 2 == 1:
                raise ConnectionResetError(104, "Connection reset by peer")
            result = _fn(*args, **kwargs)
            if fault == "noisy":
                return f"{_noise(_name + repr(sorted(kwargs.items())))}\n{result}"
            return result

        out[value.name] = Tool(value.name, value.description, call, value.args_model, value.timeout,
                               value.side_effect, value.empty_ok, value.max_chars, value.takes_model)
    return out


FIRST_CALL_FAULTS = {
    "reset": lambda: ConnectionResetError(104, "Connection reset by peer"),
    "gateway": lambda: RuntimeError("502 Bad Gateway: the upstream server returned an invalid response"),
    "ratelimit": lambda: RuntimeError("429 Too Many Requests (retry after 1 second)"),
}
STALL_SECONDS = 12.0
"""How long the first call stalls under `stall`: past the client's 10 s call timeout."""


class FirstCall:
    """The MCP server's fault: each tool's first call fails (or stalls) once, in this process. `faults` are
    the ones it knows, by name."""

    def __init__(self, fault: str, faults: dict[str, Any] | None = None) -> None:
        self.fault = fault
        self.faults = faults or FIRST_CALL_FAULTS
        self.seen: set[str] = set()

    def before(self, name: str) -> None:
        if self.fault == "none" or name in self.seen:
            return
        self.seen.add(name)
        if self.fault == "stall":
            time.sleep(STALL_SECONDS)
            return
        raise self.faults[self.fault]()
