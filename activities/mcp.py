"""MCP activities: list the tools a run was granted, once; call one of them."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pydantic import TypeAdapter
from temporalio import activity
from temporalio.exceptions import ApplicationError

from waitstate.blobs import BlobNotFound, BlobStore
from waitstate.mcp import McpConfigError, McpServers, granted, grants_by_server, split_name
from waitstate.providers.base import shorten
from waitstate.schemas import ToolCall, ToolDefinition, ToolResult
from waitstate.schemas.errors import RUN_INPUT_INVALID
from waitstate.schemas.run import LIST_MCP_TOOLS, McpListing, McpListInput, McpTool
from waitstate.tools.spec import error_result

if TYPE_CHECKING:
    from mcp.types import CallToolResult

MCP_UNAVAILABLE = "McpServerUnavailable"
MCP_REFUSED = "McpRequestRefused"
_LISTING = TypeAdapter(list[McpTool])
# A server's message is kept to this many characters, on one line, in a failure.
MESSAGE_CHARS = 500


class McpActivities:
    """The MCP servers this worker may call, and the blob store that keeps runs' listings."""

    def __init__(self, servers: McpServers, blobs: BlobStore) -> None:
        self._servers = servers
        self._blobs = blobs

    @activity.defn(name=LIST_MCP_TOOLS)
    async def list_mcp_tools(self, input: McpListInput) -> McpListing:
        """The tools the run's grants name, from each server, stored by reference.

        Raises:
            ApplicationError: non-retryable when a grant names an undeclared server or matches
                no tool of its server; retryable when a server cannot be reached.
        """
        tools: list[McpTool] = []
        for name, patterns in grants_by_server(input.grants).items():
            try:
                server = self._servers.get(name)
            except McpConfigError as err:
                raise ApplicationError(
                    str(err), type=RUN_INPUT_INVALID, non_retryable=True
                ) from None
            listed = await self._list(name)
            chosen = [tool for tool in listed if granted(tool.name, patterns)]
            if unmatched := [p for p in patterns if not any(granted(t.name, [p]) for t in listed)]:
                raise ApplicationError(
                    f"MCP server {name!r} has no tool matching {', '.join(unmatched)}; it has: "
                    f"{', '.join(sorted(t.name for t in listed)) or 'none'}",
                    type=RUN_INPUT_INVALID,
                    non_retryable=True,
                )
            for tool in chosen:
                hints = tool.annotations
                destructive = bool(hints is not None and hints.destructive_hint)
                tools.append(
                    McpTool(
                        definition=ToolDefinition(
                            name=f"{name}__{tool.name}",
                            description=tool.description or tool.title or tool.name,
                            parameters=tool.input_schema,
                        ),
                        destructive=destructive,
                        idempotent=bool(hints is not None and hints.idempotent_hint),
                        read_only=bool(hints is not None and hints.read_only_hint),
                        requires_approval=destructive and server.requires_approval_if_destructive,
                    )
                )
        ref = await self._blobs.put(_LISTING.dump_json(tools))
        return McpListing(ref=ref, names=[tool.definition.name for tool in tools])

    async def _list(self, name: str) -> list[Any]:
        try:
            async with self._servers.get(name).connect() as client:
                return list((await client.list_tools()).tools)
        except McpConfigError as err:
            raise ApplicationError(str(err), type=RUN_INPUT_INVALID, non_retryable=True) from None
        except Exception as err:  # the server could not be reached or answered nonsense
            raise _unavailable(name, "listing its tools", err) from None

    async def call(self, call: ToolCall, tool: McpTool) -> ToolResult:
        """Call the tool; its result, or its error, as the model reads it.

        A call whose outcome is unknown (the connection was lost once the request may have
        reached the server) is not retried for a tool that is not read-only or idempotent:
        the model is told, rather than risk the action twice.

        Raises:
            ApplicationError: non-retryable when the server refused the request itself;
                retryable when it could not be reached and a retry is safe.
        """
        server_name, tool_name = split_name(call.name)
        try:
            arguments = json.loads(call.arguments or "{}")
        except json.JSONDecodeError as err:
            return error_result(call, f"arguments are not valid JSON ({err.msg}); send an object")
        if not isinstance(arguments, dict):
            return error_result(call, "arguments must be a JSON object")
        from mcp.shared.exceptions import MCPError

        try:
            async with self._servers.get(server_name).connect() as client:
                result = await client.call_tool(tool_name, arguments)
        except McpConfigError as err:
            raise ApplicationError(str(err), type=RUN_INPUT_INVALID, non_retryable=True) from None
        except MCPError as err:
            raise ApplicationError(
                f"MCP server {server_name!r} refused {tool_name}: {shorten(str(err), MESSAGE_CHARS)}",
                type=MCP_REFUSED,
                non_retryable=True,
            ) from None
        except Exception as err:
            if tool.read_only or tool.idempotent:
                raise _unavailable(server_name, f"calling {tool_name}", err) from None
            return error_result(
                call,
                f"the call to {call.name} may or may not have taken effect: the connection to "
                f"its server failed ({shorten(str(err) or type(err).__name__, 200)}). Check "
                "before calling it again.",
            )
        return _to_result(call, result)


async def read_listing(blobs: BlobStore, ref: str) -> dict[str, McpTool]:
    """A run's MCP listing, by tool name (`server__tool`).

    Raises:
        ApplicationError: non-retryable, when the listing is not in this worker's store.
    """
    try:
        stored = await blobs.get(ref)
    except BlobNotFound:
        raise ApplicationError(
            f"{ref} is not in this worker's blob store (workers must share one)",
            type=RUN_INPUT_INVALID,
            non_retryable=True,
        ) from None
    return {tool.definition.name: tool for tool in _LISTING.validate_json(stored)}


def _to_result(call: ToolCall, result: CallToolResult) -> ToolResult:
    """The text of its content (which carries structured content too, serialized, as the
    protocol asks of servers); the structured content as JSON when there is no text."""
    parts = []
    for block in result.content:
        text = getattr(block, "text", None)
        if text is not None:
            parts.append(str(text))
        else:
            kind = getattr(block, "type", "content")
            mime = getattr(block, "mime_type", None)
            parts.append(f"[{kind}{f' {mime}' if mime else ''} not shown]")
    content = "\n".join(parts)
    texts = [block for block in result.content if getattr(block, "text", None) is not None]
    if not texts and result.structured_content is not None:
        content = json.dumps(result.structured_content)
    return ToolResult(
        tool_call_id=call.id, name=call.name, content=content, is_error=bool(result.is_error)
    )


def _unavailable(server: str, doing: str, err: BaseException) -> ApplicationError:
    message = str(err) or type(err).__name__
    return ApplicationError(
        f"MCP server {server!r} could not be reached {doing}: {shorten(message, MESSAGE_CHARS)}",
        type=MCP_UNAVAILABLE,
    )
