"""`reflexa mcp`: reflexa as an MCP server over stdio (reflexa/mcp/server.py). Its budget flags bound every
run a client starts; a client cannot name a budget of its own."""

from __future__ import annotations

from typing import Annotated

from .common import clean_errors
from .options import ModelOpt, ReflectorOpt, TraceOpt, option


def mcp_command(
    model: ModelOpt = None,
    reflector_model: ReflectorOpt = None,
    trace: TraceOpt = None,
    max_tokens: Annotated[int | None, option("N", "Token budget of each run (input + output, every call).",
                                             min=1)] = None,
    max_calls: Annotated[int | None, option("N", "Model-call budget of each run.", min=1)] = None,
    max_seconds: Annotated[float | None, option("SECONDS", "Wall-clock budget of each run.", min=0.1)] = None,
    max_attempts: Annotated[int | None, option("N", "refine's attempts at most (default 3).", min=1)] = None,
) -> None:
    """Serve reflexa to an MCP client over stdio: tools refine, research, runs and show (docs/mcp.md). Every
    run gets this command's budget; stdout carries the protocol alone, errors go to stderr."""
    with clean_errors():
        from ..mcp import serve

        serve(model=model, reflector_model=reflector_model, trace=trace, max_tokens=max_tokens,
              max_calls=max_calls, max_seconds=max_seconds, max_attempts=max_attempts)
