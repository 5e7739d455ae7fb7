"""reflexa as an MCP server (`reflexa mcp`): an MCP client (an IDE assistant, a desktop chat app) asks it over
stdio for a checked, budgeted answer (`refine`, `research`) and reads the runs it stored (`runs`, `show`).

The server is in `server.py`, which imports the MCP SDK: it needs the `mcp` extra (`pip install
'reflexa[mcp]'`). This package's own import does not, so `import reflexa` never loads the SDK; `serve` says
what to install when the SDK is missing.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError

INSTALL_HINT = "pip install 'reflexa[mcp]'"


def serve(*, model: str | None = None, reflector_model: str | None = None, trace: str | None = None,
          max_tokens: int | None = None, max_calls: int | None = None, max_seconds: float | None = None,
          max_reflections: int | None = None, max_attempts: int | None = None, root: Path | None = None) -> None:
    """Serve reflexa's tools over stdio until the client closes the connection (`server.serve`), every run
    within the given budget and every path a client names inside `root` (default: the current directory).
    A missing MCP SDK is a ConfigError with the install hint, raised before anything
    is read or served."""
    try:
        from . import server
    except ImportError as exc:
        if not (exc.name or "").startswith("mcp"):  # the SDK or its `mcp_types`; anything else is a bug
            raise
        raise ConfigError(f"reflexa mcp needs the MCP SDK, which is not installed ({exc.name} is missing)",
                          hint=INSTALL_HINT) from None
    budget = server.ClientBudget(max_tokens=max_tokens, max_calls=max_calls, max_seconds=max_seconds,
                                 max_reflections=max_reflections, max_attempts=max_attempts)
    server.serve(model=model, reflector_model=reflector_model, trace=trace, budget=budget,
                 root=root)
