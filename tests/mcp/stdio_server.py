"""An MCP server over stdio for the tests: `python -m tests.mcp.stdio_server`."""

from __future__ import annotations

from fastmcp import FastMCP

server = FastMCP("local")


@server.tool(annotations={"readOnlyHint": True})
def shout(text: str) -> str:
    """The text in capitals."""
    return text.upper()


if __name__ == "__main__":
    server.run(show_banner=False)
