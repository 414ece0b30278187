"""The HTTP headers of the requests a run's task backend sends (`waitstate/mcp/tasks.py`), as a
real MCP server (fastmcp with its tasks extension, served in this process) receives them: the
tasks extension says a client MUST name the task in `Mcp-Name` on `tasks/get`, `tasks/update`
and `tasks/cancel`, and a server may refuse a request without it. And how the backend reads a
task's end: twice, so that the end of a leg parked on a question is not taken for the task's."""

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
from waitstate.mcp.extension import CreatedTask, Tasks, TaskState
from waitstate.mcp.tasks import McpTaskBackend
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


class _Reads:
    """A session whose `tasks/get` answers are the test's, in order."""

    def __init__(self, *states: dict[str, Any]) -> None:
        self.states = [TaskState.model_validate(state) for state in states]
        self.reads = 0
        self.session = self

    async def send_request(self, request: Any, result_type: Any) -> Any:
        self.reads += 1
        return self.states.pop(0)


def _state(status: str, **fields: Any) -> dict[str, Any]:
    stamp = {"createdAt": "2026-12-03T00:00:00Z", "lastUpdatedAt": "2026-12-03T00:00:00Z"}
    return {"resultType": "complete", "taskId": "t1", "status": status, **stamp, **fields}


async def test_a_tasks_end_is_read_twice_and_a_parked_legs_end_is_not_taken_for_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A server that runs the task in legs reported the end of the leg parked on a question
    # (no result) to a read that raced the answer; the next read sees the next leg working.
    backend = McpTaskBackend(McpServer("legs", url="http://127.0.0.1:9/mcp"))
    raced = _Reads(_state("completed", result={"content": []}), _state("working"))
    monkeypatch.setattr(backend, "_connected", _returning(raced))

    assert (await backend.status("t1")).status == "running"

    done = {"content": [{"type": "text", "text": "published"}]}
    ended = _Reads(_state("completed", result=done), _state("completed", result=done))
    monkeypatch.setattr(backend, "_connected", _returning(ended))
    completion = await backend.status("t1")

    assert (completion.status, completion.result, ended.reads) == ("succeeded", "published", 2)


def _returning(value: Any) -> Any:
    async def connected() -> Any:
        return value

    return connected
