"""`reflexa mcp`: reflexa as an MCP server over stdio (reflexa/mcp/server.py). Its budget flags bound every
run a client starts; a client cannot name a budget of its own."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from .common import clean_errors
from .options import ModelOpt, ReflectorOpt, TraceOpt, budget_flags, option, with_flags


def _mcp(
    model: ModelOpt = None,
    reflector_model: ReflectorOpt = None,
    trace: TraceOpt = None,
    max_attempts: Annotated[int | None, option("N", "refine's attempts at most (default 3).", min=1)] = None,
    root: Annotated[Path | None, option("DIR", "The folder every path a client names must be inside (default: "
                                        "the current directory).", names=("--root",), path=True)] = None,
    budget: dict[str, Any] | None = None,
) -> None:
    """Serve reflexa to an MCP client over stdio: tools refine, research, runs and show (docs/mcp.md). Every
    run gets this command's budget; stdout carries the protocol alone, errors go to stderr."""
    with clean_errors():
        from ..mcp import serve

        serve(model=model, reflector_model=reflector_model, trace=trace, max_attempts=max_attempts, root=root,
              **(budget or {}))


mcp_command = with_flags(_mcp, budget_flags("each run a client starts"), into="budget")
