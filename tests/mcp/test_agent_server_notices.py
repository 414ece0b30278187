"""Task notifications both ways: the MCP server of our agents (`waitstate.mcp_server.listen`)
sends `notifications/tasks` on a `subscriptions/listen` stream naming its caller's tasks, and a
run's task backend (`waitstate.mcp.notices`, `McpTaskBackend.changed`) wakes its poll on them,
over real HTTP with the runs on the dev server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from mcp.client.extension import NotificationBinding
from mcp_types import NotificationParams
from pydantic import ConfigDict
from temporalio.testing import WorkflowEnvironment

from examples.systems.serving import serving
from tests.helpers import eventually, make_worker
from tests.mcp.agents_app import APP, ASKS
from tests.mcp.runs import agents_server
from tests.mcp.test_agent_server import ALICE, BOB, Served
from waitstate.apps import load_apps
from waitstate.client import WaitstateClient
from waitstate.mcp import McpServer
from waitstate.mcp.extension import CreatedTask, Tasks
from waitstate.mcp.notices import TASK_IDS, TaskWatch, _listen
from waitstate.mcp.tasks import McpTaskBackend
from waitstate.mcp_server import http_app
from waitstate.mcp_server.listen import MAX_TASKS
from waitstate.tools.spec import JobAnswer


class Seen(NotificationParams):
    """A task notification, whole."""

    model_config = ConfigDict(extra="allow")


class Recording(Tasks):
    """The tasks extension, keeping every task notification the session gets."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[dict[str, Any]] = []
        self.arrived = asyncio.Event()

    def notifications(self) -> Any:
        return (
            NotificationBinding(method="notifications/tasks", params_type=Seen, handler=self._keep),
        )

    async def _keep(self, notice: Seen) -> None:
        self.seen.append(notice.model_extra or {})
        self.arrived.set()

    async def until(self, status: str) -> dict[str, Any]:
        async with asyncio.timeout(60):
            while True:
                found = [n for n in self.seen if n.get("status") == status]
                if found:
                    return found[0]
                self.arrived.clear()
                await self.arrived.wait()


async def _serve(env: WorkflowEnvironment, task_queue: str, notify: bool) -> Any:
    apps = load_apps([APP])
    client = WaitstateClient(env.client, task_queue=task_queue)
    server = agents_server(client, {"alice": ALICE, "bob": BOB}, notify=notify)
    return make_worker(env.client, task_queue, apps=apps), http_app(server), client


@pytest.fixture
async def served(dev_env: WorkflowEnvironment, task_queue: str) -> AsyncIterator[Served]:
    worker, app, client = await _serve(dev_env, task_queue, notify=True)
    async with worker, serving(app) as root:
        yield Served(f"{root}/mcp", client)


def _server(served: Served, monkeypatch: pytest.MonkeyPatch, key: str) -> McpServer:
    variable = f"NOTICES_KEY_{key[0].upper()}"
    monkeypatch.setenv(variable, f"Bearer {key}")
    return McpServer("served", url=served.url, headers_from_env={"Authorization": variable})


def _ended(stream: Any) -> Any:
    async def ended() -> str | None:
        return stream.route.end  # type: ignore[no-any-return]

    return ended


async def _call(client: Any, agent: str, task: str) -> str:
    created = await client.session.call_tool(
        agent, {"task": task}, allow_input_required=True, allow_claimed=True
    )
    assert isinstance(created, CreatedTask)
    return created.task_id


async def test_a_caller_follows_its_task_by_notification_to_its_end(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = _server(served, monkeypatch, ALICE)
    recording = Recording()
    async with server.connect(extensions=[recording]) as client:
        task_id = await _call(client, "approver", ASKS)
        stream = await _listen(client.session, [task_id])
        honoured = stream.route.honored.model_extra or {}
        asking = await recording.until("input_required")
        (key,) = asking["inputRequests"]
        answering = McpTaskBackend(server)
        try:
            await answering.answer(
                task_id, JobAnswer(key=key, action="accept", content={"decision": "approve"})
            )
        finally:
            await answering.aclose()
        completed = await recording.until("completed")
        # The server ends the stream once the tasks it follows have ended.
        await eventually(_ended(stream), "the stream's end")

    assert honoured[TASK_IDS] == [task_id]
    assert recording.seen[0]["status"] == "working"  # at once: the task as it stands
    assert all(n["taskId"] == task_id for n in recording.seen)
    assert "approved" in completed["result"]["structuredContent"]["answer"]
    assert [n["status"] for n in recording.seen].count("completed") == 1
    assert stream.route.end == "graceful" and stream.route.error is None


async def test_a_stream_follows_only_the_callers_own_tasks(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with _server(served, monkeypatch, ALICE).connect(extensions=[Tasks()]) as alice:
        alices = await _call(alice, "echo", "hello")
    bob = Recording()
    async with _server(served, monkeypatch, BOB).connect(extensions=[bob]) as client:
        stream = await _listen(client.session, [alices])
        honoured = stream.route.honored.model_extra or {}
        await eventually(_ended(stream), "the stream's end")

    assert honoured.get(TASK_IDS) is None  # alice's task is not bob's to follow
    assert stream.route.end == "graceful"  # nothing to follow: ended at once
    assert bob.seen == []


async def test_a_stream_is_refused_without_the_tasks_extension_or_past_its_bound(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = _server(served, monkeypatch, ALICE)
    async with server.connect() as bare:
        undeclared = await _listen(bare.session, ["any-task"])
    async with server.connect(extensions=[Tasks()]) as client:
        too_many = await _listen(client.session, [f"t{n}" for n in range(MAX_TASKS + 1)])

    assert undeclared.route.error is not None and undeclared.route.error.error.code == -32021
    assert too_many.route.error is not None and too_many.route.error.error.code == -32602
    assert f"at most {MAX_TASKS} tasks" in too_many.route.error.error.message


async def test_a_poll_wakes_when_the_task_changes_not_at_its_interval(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = _server(served, monkeypatch, ALICE)
    async with server.connect(extensions=[Tasks()]) as client:
        task_id = await _call(client, "approver", ASKS)
    backend = McpTaskBackend(server)
    try:
        assert await backend.changed(task_id, 60) is True  # the task as it stood, at once
        while (await backend.status(task_id)).status != "input_required":
            assert await backend.changed(task_id, 60) is True
        (question,) = (await backend.status(task_id)).questions or []
        waking = asyncio.create_task(backend.changed(task_id, 120))
        await asyncio.sleep(0.5)
        assert not waking.done()  # nothing changed yet: it waits
        await backend.answer(
            task_id, JobAnswer(key=question.key, action="accept", content={"decision": "approve"})
        )
        # Woken by the change: `changed` says True for a notification alone (False when its
        # 120 s are up).
        assert await waking is True
        async with asyncio.timeout(60):
            while (await backend.status(task_id)).status != "succeeded":
                await backend.changed(task_id, 60)
    finally:
        await backend.aclose()


async def test_a_poll_of_a_server_without_notifications_waits_its_interval(
    dev_env: WorkflowEnvironment, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker, app, client = await _serve(dev_env, task_queue, notify=False)
    async with worker, serving(app) as root:
        server = _server(Served(f"{root}/mcp", client), monkeypatch, ALICE)
        async with server.connect(extensions=[Tasks()]) as mcp:
            task_id = await _call(mcp, "echo", "hello")
            refused = await _listen(mcp.session, [task_id])
        backend = McpTaskBackend(server)
        try:
            changed = await backend.changed(task_id, 0.5)
            watch = TaskWatch()
            async with server.connect(extensions=[Tasks(watch)]) as mcp:
                followed = await watch.follow(mcp.session, task_id)
        finally:
            await backend.aclose()

    assert refused.route.error is not None and refused.route.error.error.code == -32601
    assert changed is False and followed is False
