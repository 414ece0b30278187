"""A server's resources and prompts as tools a run is granted (`activities/mcp_resources.py`):
listed where the server offers them, matched by the run's grants as its tools are, and
answered with what the server says, bounded; the model's wrong arguments and the server's
refusals are the model's to read. A real MCP server (fastmcp over streamable HTTP) in this
process; the activities run in an ActivityEnvironment."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
from fastmcp import FastMCP
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from examples.systems import serving
from tests.mcp.runs import granted_tools, mcp_activities
from waitstate.activities.mcp import McpActivities
from waitstate.activities.mcp_resources import MAX_ANSWER_CHARS
from waitstate.mcp import McpServer
from waitstate.schemas import ToolCall, ToolDefinition
from waitstate.schemas.run import McpTool, ToolCallInput

GUIDE = "Read me first."
BLOBS = "blobs"


def _server() -> FastMCP:
    server = FastMCP("docs")

    @server.resource("docs://guide", description="The guide.")
    def guide() -> str:
        return GUIDE

    @server.resource("docs://huge")
    def huge() -> str:
        return "x" * (MAX_ANSWER_CHARS + 10)

    @server.prompt(description="Summarize a topic.")
    def summarize(topic: str) -> str:
        return f"Summarize {topic} in two lines."

    @server.tool
    def ping() -> str:
        """Answer pong."""
        return "pong"

    return server


def _tools_only() -> FastMCP:
    server = FastMCP("bare")

    @server.tool
    def ping() -> str:
        """Answer pong."""
        return "pong"

    return server


@pytest.fixture
async def activities(tmp_path: Path) -> AsyncIterator[McpActivities]:
    async with serving(_server().http_app()) as docs, serving(_tools_only().http_app()) as bare:
        yield mcp_activities(
            tmp_path / BLOBS,
            McpServer("docs", url=f"{docs}/mcp"),
            McpServer("bare", url=f"{bare}/mcp"),
        )


async def _listing(activities: McpActivities, grants: list[str], root: Path) -> dict[str, McpTool]:
    return await granted_tools(activities, grants, root / BLOBS)


async def _call(
    activities: McpActivities, tool: McpTool, arguments: dict[str, object]
) -> tuple[str, bool]:
    call = ToolCall(id="c1", name=tool.definition.name, arguments=json.dumps(arguments))
    result = await ActivityEnvironment().run(activities.call, ToolCallInput(call=call), tool)
    return result.content, result.is_error


async def test_a_servers_resources_and_prompts_are_listed_as_read_only_tools_where_offered(
    activities: McpActivities, tmp_path: Path
) -> None:
    everything = await _listing(activities, ["docs__*", "bare__*"], tmp_path)
    reading = await _listing(activities, ["docs__resources__*"], tmp_path)

    assert sorted(everything) == [
        "bare__ping",
        "docs__ping",
        "docs__prompts__get",
        "docs__prompts__list",
        "docs__resources__list",
        "docs__resources__read",
    ]  # the bare server has neither (though fastmcp declares both): no such tools of its
    assert sorted(reading) == ["docs__resources__list", "docs__resources__read"]
    read = everything["docs__resources__read"]
    assert (read.read_only, read.reads, read.requires_approval) == (True, True, False)
    assert not everything["docs__ping"].reads
    assert read.definition.parameters["required"] == ["uri"]


async def test_resources_and_prompts_are_read_through_their_tools(
    activities: McpActivities, tmp_path: Path
) -> None:
    tools = await _listing(activities, ["docs__*"], tmp_path)

    listed, _ = await _call(activities, tools["docs__resources__list"], {})
    guide = await _call(activities, tools["docs__resources__read"], {"uri": "docs://guide"})
    huge, _ = await _call(activities, tools["docs__resources__read"], {"uri": "docs://huge"})
    prompts, _ = await _call(activities, tools["docs__prompts__list"], {})
    prompt = await _call(
        activities,
        tools["docs__prompts__get"],
        {"name": "summarize", "arguments": {"topic": "tea"}},
    )

    assert {r["uri"]: r.get("description") for r in json.loads(listed)} == {
        "docs://guide": "The guide.",
        "docs://huge": None,
    }
    assert guide == (GUIDE, False)
    assert len(huge) < MAX_ANSWER_CHARS + 100 and huge.endswith("characters]")  # bounded
    [summarize] = json.loads(prompts)
    assert summarize["name"] == "summarize"
    [topic] = summarize["arguments"]
    assert (topic["name"], topic["required"]) == ("topic", True)
    assert prompt == ("user: Summarize tea in two lines.", False)


@pytest.mark.parametrize(
    ("tool", "arguments", "says"),
    [
        ("docs__resources__read", {}, "send the resource's URI"),
        ("docs__resources__read", {"uri": 7}, "send the resource's URI"),
        (
            "docs__prompts__get",
            {"name": "summarize", "arguments": {"topic": 3}},
            "object of strings",
        ),
        ("docs__resources__read", {"uri": "docs://nowhere"}, "MCP server 'docs'"),
        ("docs__prompts__get", {"name": "nothing"}, "MCP server 'docs'"),
    ],
    ids=["no-uri", "uri-not-text", "argument-not-text", "unknown-uri", "unknown-prompt"],
)
async def test_wrong_arguments_and_the_servers_refusals_are_the_models_to_read(
    activities: McpActivities, tmp_path: Path, tool: str, arguments: dict[str, object], says: str
) -> None:
    tools = await _listing(activities, ["docs__*"], tmp_path)

    content, is_error = await _call(activities, tools[tool], arguments)

    assert is_error and says in content


async def test_a_server_that_cannot_be_reached_is_tried_again(tmp_path: Path) -> None:
    gone = McpServer("gone", url="http://127.0.0.1:9/mcp", reach_within=timedelta(seconds=1))
    activities = mcp_activities(tmp_path, gone)
    read = McpTool(
        definition=ToolDefinition(name="gone__resources__read", description="", parameters={}),
        read_only=True,
        reads=True,
    )

    with pytest.raises(ApplicationError) as raised:
        await _call(activities, read, {"uri": "docs://guide"})

    assert raised.value.type == "McpServerUnavailable" and not raised.value.non_retryable
