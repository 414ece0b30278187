"""MCP servers as tool sources, client side: the servers a run may use, and what the worker does
with them.

    servers.py    the servers (McpServer, McpServers, WAITSTATE_MCP_SERVERS), their grants
    sessions.py   sessions with them on the SDK (a stdio server's one process)
    extension.py  the tasks extension as the client declares it, and the tasks servers answer with
    tasks.py      a server's tasks and its rounds of input as a long tool's jobs (McpTaskBackend)
    round_trips.py  its half for a plain call's rounds: their questions, the call sent again
    results.py    a task's state or a call's result as an operation's completion and questions
    rounds.py     rounds of input on a plain call (SEP-2322), recorded in the blob store
    sampling.py   servers' sampling requests, answered by the calling run's model
    notices.py    a server's task notifications, which wake a poll

This package exports what a worker's or an app's declarations need, from `servers` only: the
other modules need the `mcp` SDK, and only workers import them (their MCP activities).
waitstate as an MCP server is `waitstate.mcp_server`.
"""

from waitstate.mcp.servers import (
    McpConfigError,
    McpServer,
    McpServers,
    SamplingPolicy,
    granted,
    grants_by_server,
    is_mcp_name,
    parse_servers,
    split_name,
)

__all__ = [
    "McpConfigError",
    "McpServer",
    "McpServers",
    "SamplingPolicy",
    "granted",
    "grants_by_server",
    "is_mcp_name",
    "parse_servers",
    "split_name",
]
