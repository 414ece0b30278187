"""A tool whose arguments travel in `Mcp-Param-*` headers too (`x-mcp-header` in its input
schema): the call activity's session lists the tools before it calls, so the SDK sends the
headers the server requires (it mirrors them only for a tool listed on the same session). A
real MCP server (fastmcp over streamable HTTP) in this process checks them; the activities run
in an ActivityEnvironment."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated

import pytest
from fastmcp import FastMCP
from pydantic import Field
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from examples.systems import serving
from tests.mcp.runs import granted_tools, mcp_activities
from waitstate.activities.mcp import McpActivities
from waitstate.mcp import McpServer
from waitstate.schemas import ToolCall
from waitstate.schemas.run import McpTool, ToolCallInput


def _server() -> FastMCP:
    server = FastMCP("regions")

    @server.tool
    def revenue(
        region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})],
    ) -> str:
        """The revenue of a region."""
        return f"revenue of {region}: 1200"

    return server


@pytest.fixture
async def url() -> AsyncIterator[str]:
    async with serving(_server().http_app()) as served:
        yield f"{served}/mcp"


# The model's call of the revenue tool, for EMEA.
EMEA = ToolCallInput(
    call=ToolCall(id="c1", name="regions__revenue", arguments=json.dumps({"region": "emea"}))
)


async def _revenue(url: str, tmp_path: Path) -> tuple[McpActivities, McpTool]:
    """The MCP activities of the server at `url` (as `regions`), and their listing of its
    revenue tool, kept under `tmp_path`."""
    activities = mcp_activities(tmp_path, McpServer("regions", url=url))
    tools = await granted_tools(activities, ["regions__revenue"], tmp_path)
    return activities, tools["regions__revenue"]


async def test_a_tool_with_header_parameters_is_called_with_its_headers(
    url: str, tmp_path: Path
) -> None:
    activities, tool = await _revenue(url, tmp_path)

    result = await ActivityEnvironment().run(activities.call, EMEA, tool)

    assert "x-mcp-header" in json.dumps(tool.definition.parameters)
    assert (result.content, result.is_error) == ("revenue of emea: 1200", False)


async def test_a_call_the_server_refuses_fails_as_refused_not_as_an_unknown_outcome(
    url: str, tmp_path: Path
) -> None:
    # The schema of the listing (no header parameters any more): the session sends no
    # Mcp-Param-Region, and the server refuses the request itself (not the tool: no result).
    activities, tool = await _revenue(url, tmp_path)
    stale = tool.model_copy(
        update={"definition": tool.definition.model_copy(update={"parameters": {"type": "object"}})}
    )

    with pytest.raises(ApplicationError) as raised:
        await ActivityEnvironment().run(activities.call, EMEA, stale)

    assert raised.value.type == "McpRequestRefused" and raised.value.non_retryable
    assert "Mcp-Param-Region" in str(raised.value)
