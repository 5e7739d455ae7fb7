"""A built agent domain's API served over MCP (stdio), with one fault: `python3 server.py --fault reset`.

The tools are api.py's @tools with their own names, descriptions and argument schemas; the server's
instructions are api.py's docstring. A process per run (reflexa starts one for each run), so each run meets
the fault afresh: the first call of each tool fails once (inject.FirstCall).
"""

from __future__ import annotations

import argparse
import functools
import inspect
import sys
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError as SDKToolError
from mcp.types import ToolAnnotations

sys.path.insert(0, str(Path(__file__).parent))
import api  # noqa: E402 - beside this file
from inject import FIRST_CALL_FAULTS, FirstCall  # noqa: E402

from reflexa import Tool  # noqa: E402

FAULTS = {**FIRST_CALL_FAULTS, **getattr(api, "FIRST_CALL_FAULTS", {})}
"""The faults this server can inject: the runtime's, and any api.py defines (a name -> an exception maker)."""


def build(fault: str) -> MCPServer:
    server = MCPServer(Path(__file__).parent.name, instructions=inspect.getdoc(api) or None)
    first = FirstCall(fault, FAULTS)
    for tool in (value for value in vars(api).values() if isinstance(value, Tool)):

        @functools.wraps(tool.function)
        def call(*args: Any, _fn: Any = tool.function, _name: str = tool.name, **kwargs: Any) -> str:
            try:
                first.before(_name)
                return str(_fn(*args, **kwargs))
            except Exception as exc:  # noqa: BLE001 - the SDK hides an error that is not its ToolError
                raise SDKToolError(f"{type(exc).__name__}: {exc}") from None

        server.add_tool(call, name=tool.name, description=tool.description,
                        annotations=ToolAnnotations(readOnlyHint=True))
    return server


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fault", choices=["none", "stall", *FAULTS], default="none")
    build(parser.parse_args().fault).run()
