"""The same shop tools as an MCP server (the `mcp` SDK's MCPServer), over stdio or streamable HTTP.

reflexa react "What does the tent cost?" --mcp "python examples/tools/shop_server.py"
python examples/tools/shop_server.py --http 8765   # then: --mcp http://127.0.0.1:8765/mcp
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

sys.path.insert(0, str(Path(__file__).parent))
import shop_tools  # noqa: E402 - beside this file

server = MCPServer("shop")
read_only = ToolAnnotations(readOnlyHint=True)
server.add_tool(shop_tools.product_price.function, annotations=read_only)
server.add_tool(shop_tools.order_status.function, annotations=read_only)
server.add_tool(shop_tools.cancel_order.function, annotations=ToolAnnotations(readOnlyHint=False,
                                                                                 destructiveHint=True))

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on 127.0.0.1:PORT")
    options = parser.parse_args()
    if options.http:
        server.run("streamable-http", host="127.0.0.1", port=options.http)
    else:
        server.run()
