"""A real MCP server for the tests (fastmcp over streamable HTTP), run as its own process:

    python -m tests.mcp.reports_server PORT

It answers with `serving on PORT` on stdout once it listens.
"""

from __future__ import annotations

import sys

import uvicorn
from fastmcp import FastMCP

server = FastMCP("reports")
CALLS: dict[str, int] = {}


@server.tool
def add(a: int, b: int) -> int:
    """Add two whole numbers."""
    return a + b


@server.tool
def summarize(region: str) -> dict[str, object]:
    """Sales totals of a region."""
    return {"region": region, "total": 1200, "currency": "EUR"}


@server.tool(annotations={"destructiveHint": True})
def delete_dataset(name: str) -> str:
    """Delete a dataset for good."""
    return f"deleted {name}"


@server.tool
def explode(reason: str) -> str:
    """Always fails, saying why."""
    raise ValueError(reason)


@server.tool(annotations={"readOnlyHint": True})
def big_table(rows: int) -> str:
    """A table of `rows` lines."""
    return "\n".join(f"row {i}: {'x' * 40}" for i in range(rows))


if __name__ == "__main__":
    port = int(sys.argv[1])
    config = uvicorn.Config(server.http_app(), host="127.0.0.1", port=port, log_level="warning")
    runner = uvicorn.Server(config)
    print(f"serving on {port}", flush=True)
    runner.run()
