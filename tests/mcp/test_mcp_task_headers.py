"""The HTTP headers of the requests a run's task backend sends (`waitstate/mcp_tasks.py`), as a
real MCP server (fastmcp with its tasks extension, served in this process) receives them: the
tasks extension says a client MUST name the task in `Mcp-Name` on `tasks/get`, `tasks/update`
and `tasks/cancel`, and a server may refuse a request without it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from fastmcp import Context, FastMCP
from fastmcp.utilities.tasks import TaskConfig
from fastmcp_tasks import TasksExtension
from mcp_types import ElicitRequest, ElicitRequestFormParams, ElicitResult, InputRequiredResult

from examples.systems import serving
from tests.helpers import eventually
from waitstate.mcp import McpServer
from waitstate.mcp_tasks import CreatedTask, McpTaskBackend, Tasks
from waitstate.tools.spec import JobAnswer

TASK = TaskConfig(mode="required", poll_interval=timedelta(milliseconds=200))
CONFIRM = {"type": "object", "properties": {"confirm": {"type": "boolean"}}}


def _server() -> FastMCP:
    server = FastMCP("headers")
    server.add_extension(TasksExtension())

    @server.tool(task=TASK)
    async def ask(ctx: Context) -> str | InputRequiredResult:
        """Ask to confirm, then answer."""
        if isinstance((ctx.input_responses or {}).get("confirm"), ElicitResult):
            return "answered"
        question = ElicitRequestFormParams(message="Sure?", requested_schema=CONFIRM)
        return InputRequiredResult(input_requests={"confirm": ElicitRequest(params=question)})

    return server


@dataclass
class Recorder:
    """An ASGI app that records each request's `Mcp-Method` and `Mcp-Name`, then hands it on."""

    app: Any
    seen: list[tuple[str | None, str | None]] = field(default_factory=list)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
            self.seen.append((headers.get("mcp-method"), headers.get("mcp-name")))
        await self.app(scope, receive, send)


@pytest.fixture
async def recorded() -> AsyncIterator[tuple[str, Recorder]]:
    """A tasks server in this process, its URL and what it received."""
    recorder = Recorder(_server().http_app())
    async with serving(recorder) as url:
        yield f"{url}/mcp", recorder


async def test_task_requests_name_their_task_in_mcp_name(
    recorded: tuple[str, Recorder],
) -> None:
    url, recorder = recorded
    server = McpServer("headers", url=url)
    async with server.connect(extensions=[Tasks()]) as client:
        created = await client.session.call_tool("ask", {}, allow_claimed=True)
    assert isinstance(created, CreatedTask)
    task_id = created.task_id

    backend = McpTaskBackend(server)
    try:

        async def asking() -> bool:
            return (await backend.status(task_id)).status == "input_required"

        await eventually(asking, "the task's question")
        answer = JobAnswer(key="confirm", action="accept", content={}, responder="dana")
        await backend.answer(task_id, answer)
        await backend.cancel(task_id)
    finally:
        await backend.aclose()

    task_requests = {(m, n) for m, n in recorder.seen if m and m.startswith("tasks/")}
    assert task_requests == {
        ("tasks/get", task_id),
        ("tasks/update", task_id),
        ("tasks/cancel", task_id),
    }
    assert ("tools/call", "ask") in recorder.seen
