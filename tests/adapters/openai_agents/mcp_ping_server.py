"""A real MCP server (stdio) for the tests: one ``ping`` tool that logs each call to a file."""

from __future__ import annotations

import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer

server = MCPServer("pinger")
log = Path(sys.argv[1])


@server.tool()
def ping() -> str:
    """Check that the service answers."""
    with log.open("a") as out:
        out.write("ping\n")
    return "pong"


if __name__ == "__main__":
    server.run()
