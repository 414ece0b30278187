"""A server that asks for the client's roots is answered from its declaration (`McpServer(...,
roots=[...])`), at once and by no person: as a task's input request (`tasks/update`), and as
the session's own `roots/list`; a server that declares none is told so rather than left
waiting for its task's expiry. A real MCP server (fastmcp with its tasks extension) in this
process asks."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from fastmcp import Context, FastMCP
from fastmcp.utilities.tasks import TaskConfig
from fastmcp_tasks import TasksExtension
from mcp_types import InputRequiredResult, ListRootsRequest, ListRootsResult

from examples.systems import serving
from tests.helpers import eventually
from waitstate.mcp import McpConfigError, McpServer
from waitstate.mcp.extension import CreatedTask, Tasks
from waitstate.mcp.sessions import list_roots
from waitstate.mcp.tasks import McpTaskBackend
from waitstate.schemas.operations import Completion

TASK = TaskConfig(mode="required", poll_interval=timedelta(milliseconds=200))
ROOTS = ["file:///srv/reports", "file:///srv/archive"]


def _server() -> FastMCP:
    server = FastMCP("roots")
    server.add_extension(TasksExtension())

    @server.tool(task=TASK)
    async def where(ctx: Context) -> str | InputRequiredResult:
        """Ask for the client's roots, then name them."""
        listed = (ctx.input_responses or {}).get("roots")
        if listed is None:
            return InputRequiredResult(input_requests={"roots": ListRootsRequest()})
        roots = ListRootsResult.model_validate(
            listed if isinstance(listed, dict) else listed.model_dump(by_alias=True)
        )
        return " ".join(str(root.uri) for root in roots.roots) or "none"

    return server


@pytest.fixture
async def url() -> AsyncIterator[str]:
    async with serving(_server().http_app()) as served:
        yield f"{served}/mcp"


async def _ended(server: McpServer) -> Completion:
    async with server.connect(extensions=[Tasks()]) as client:
        created = await client.session.call_tool("where", {}, allow_claimed=True)
    assert isinstance(created, CreatedTask)
    backend = McpTaskBackend(server)
    try:

        async def ended() -> Completion | None:
            completion = await backend.status(created.task_id)
            return completion if completion.status not in ("running", "input_required") else None

        return await eventually(ended, "the task's end")
    finally:
        await backend.aclose()


@pytest.mark.parametrize(("roots", "told"), [(ROOTS, " ".join(ROOTS)), ([], "none")])
async def test_a_tasks_roots_request_is_answered_from_the_declaration(
    url: str, roots: list[str], told: str
) -> None:
    completion = await _ended(McpServer("roots", url=url, roots=roots))

    assert completion.status == "succeeded", completion
    assert completion.result == {"result": told}  # the structured result of the tool


async def test_the_session_answers_roots_list_from_the_declaration() -> None:
    server = McpServer("roots", url="http://127.0.0.1:9/mcp", roots=ROOTS)

    listed: Any = await list_roots(server, None)

    assert [str(root.uri) for root in listed.roots] == ROOTS


@pytest.mark.parametrize("roots", ["file:///srv", ["/srv/reports"], ["https://x.example/"], [7]])
def test_roots_other_than_file_uris_are_refused(roots: Any) -> None:
    with pytest.raises(McpConfigError, match="file:// URIs"):
        McpServer("roots", url="http://127.0.0.1:9/mcp", roots=roots)
