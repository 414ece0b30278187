"""An MCP server that annotates nothing (fastmcp over streamable HTTP), run as its own process:

    python -m tests.mcp.plain_server PORT

It answers with `serving on PORT` on stdout once it listens. Its tools drop and count tables,
and it records every call it was sent (`calls`), so a test can tell a call that never reached
it from one that did.
"""

from __future__ import annotations

import sys

import uvicorn
from fastmcp import FastMCP

server = FastMCP("tables")
# Every call sent, as `TOOL NAME`: `drop_table q3_drafts`.
CALLS: list[str] = []


@server.tool
def calls() -> list[str]:
    """Every call this server was sent (for the tests' assertions)."""
    return list(CALLS)


@server.tool
def drop_table(name: str) -> str:
    """Drop a table and all its rows."""
    CALLS.append(f"drop_table {name}")
    return f"dropped {name}"


@server.tool
def delete_rows(table: str) -> str:
    """Delete every row of a table."""
    CALLS.append(f"delete_rows {table}")
    return f"emptied {table}"


@server.tool
def count_rows(table: str) -> int:
    """How many rows a table has."""
    CALLS.append(f"count_rows {table}")
    return 42


if __name__ == "__main__":
    port = int(sys.argv[1])
    config = uvicorn.Config(server.http_app(), host="127.0.0.1", port=port, log_level="warning")
    print(f"serving on {port}", flush=True)
    uvicorn.Server(config).run()
