"""The fault suite's tools served by an MCP server (the `mcp` SDK's MCPServer, over stdio): the SQL tools on
one database with one fault injected, exactly as `faults.py` builds them in process. `faults.py --strategies
reflexa-mcp` starts one per task, to show the engine behaves the same across the MCP seam.

python bench/faults_server.py --db shop.sqlite --fault flaky
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError as SDKToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations

sys.path.insert(0, str(Path(__file__).parent))
from faults import FAULTS, faulty_tools  # noqa: E402 - beside this file

from reflexa import ToolError, sql_tools  # noqa: E402


def serve(db: Path, fault: str) -> MCPServer:
    server = MCPServer("faults")
    plain = {tool.name: tool.function for tool in sql_tools(db)}  # their signatures give the MCP schemas
    for tool in faulty_tools(db, fault):

        @functools.wraps(plain[tool.name])
        def call(*args: Any, _fn: Any = tool.function, **kwargs: Any) -> str | CallToolResult:
            try:
                return str(_fn(*args, **kwargs))  # the SQL tool's own signature (wraps) says it returns str
            except ToolError as exc:  # reflexa's code and repair, as structured content a reflexa client reads
                return CallToolResult(content=[TextContent(type="text", text=str(exc))], is_error=True,
                                      structured_content={"code": str(exc.code), "suggestion": exc.suggestion,
                                                          "fatal": exc.fatal})
            except Exception as exc:  # noqa: BLE001 - the SDK passes a ToolError's message on; others it hides
                raise SDKToolError(str(exc)) from None

        server.add_tool(call, name=tool.name, description=tool.description,
                        annotations=ToolAnnotations(readOnlyHint=True))
    return server


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--fault", choices=FAULTS, default="none")
    options = parser.parse_args()
    serve(options.db, options.fault).run()
