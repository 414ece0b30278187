"""What the MCP server says of itself, and only what it serves: its name and version (the
package's), the capabilities it answers for, and a call of a tool it does not have refused as
the protocol error the spec names rather than answered as a tool's failure.

fastmcp speaks for any server it runs: it advertises the MCP Apps extension
(`io.modelcontextprotocol/ui`) whatever the server serves, and resource subscriptions wherever
`subscriptions/listen` is served; an unversioned server reports fastmcp's own version; and an
unknown tool is an `isError` result (docs/upstream/fastmcp-says-what-it-does-not-serve.md).
"""

from __future__ import annotations

import importlib.metadata
from typing import Any

import mcp_types
from fastmcp import FastMCP
from fastmcp.apps.config import UI_EXTENSION_ID
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.tools.base import Tool, ToolResult
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

MAX_NAME_SHOWN = 100  # characters of an unknown tool's name, in the refusal


def version() -> str:
    """The version `serverInfo` says: the package's."""
    return importlib.metadata.version("waitstate")


class CheckedTool(Tool):
    """A tool whose arguments are checked against its input schema before it runs: one that
    does not fit is the protocol error `-32602`, not a tool's failure (what an error raised
    while it runs becomes)."""

    def check_arguments(self, arguments: dict[str, Any]) -> None:
        """Raise `MCPError(INVALID_PARAMS, ...)` saying what does not fit."""
        raise NotImplementedError


class KnownTools(Middleware):
    """A call of a tool the server does not have is refused with `-32602` (the spec's
    "unknown tool"), and so is one whose arguments a `CheckedTool` refuses, before anything
    runs."""

    async def on_call_tool(
        self,
        context: MiddlewareContext[mcp_types.CallToolRequestParams],
        call_next: CallNext[mcp_types.CallToolRequestParams, ToolResult],
    ) -> ToolResult:
        name = context.message.name
        server = context.fastmcp_context.fastmcp if context.fastmcp_context else None
        if server is None:
            return await call_next(context)
        tool = await server.get_tool(name)
        if tool is None:
            raise MCPError(
                code=INVALID_PARAMS,
                message=f"unknown tool {name[:MAX_NAME_SHOWN]!r}: tools/list names the tools",
            )
        if isinstance(tool, CheckedTool):
            tool.check_arguments(dict(context.message.arguments or {}))
        return await call_next(context)


def advertise_only_what_is_served(server: FastMCP) -> None:
    """Leave out of the server's capabilities what it does not serve: the MCP Apps extension
    (it has no UI resources) and resource subscriptions (it has no resources)."""
    low = server._mcp_server  # pyright: ignore[reportPrivateUsage]
    advertised = low.get_capabilities

    def get_capabilities(*args: Any, **kwargs: Any) -> mcp_types.ServerCapabilities:
        capabilities = advertised(*args, **kwargs)
        extensions = {
            key: value
            for key, value in (capabilities.extensions or {}).items()
            if key != UI_EXTENSION_ID
        }
        resources = capabilities.resources
        if resources is not None:
            resources = resources.model_copy(update={"subscribe": None})
        return capabilities.model_copy(
            update={"extensions": extensions or None, "resources": resources}
        )

    # The SDK's server asks itself for its capabilities when it answers `server/discover` and
    # `initialize`; fastmcp gives no other way in.
    low.get_capabilities = get_capabilities  # type: ignore[method-assign]
