"""A call of waitstate's MCP server sent again: with its idempotency key
(`io.waitstate/idempotency-key` in `_meta`), the same call twice, or a call whose answer was
lost (the client dropped the connection before reading it, then sent it again), reaches one
run, or one message of a thread, and answers with the same task. Sent from a raw JSON-RPC
client over HTTP (`chaos/mcp_wire.py`), as the SDKs would hide the retry; the runs are counted
where they are, in Temporal, under the caller's workflow ids. And a caller finds its own tasks,
and only its own, with `list_tasks`."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from mcp_types import INVALID_PARAMS
from temporalio.client import WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment

from chaos import mcp_wire as wire
from examples.systems.serving import serving
from tests.helpers import eventually, make_worker
from tests.mcp.agents_app import APP, ASKS
from tests.mcp.runs import agents_server
from waitstate.apps import load_apps
from waitstate.client import RunNotFound, WaitstateClient
from waitstate.mcp_server import http_app, listing, shapes
from waitstate.schemas.run import RunState

ALICE = "a" * 40
BOB = "b" * 40
SECRETS = {"alice": ALICE, "bob": BOB}


@dataclass
class Served:
    url: str
    client: WaitstateClient
    http: httpx.AsyncClient
    # Each test's callers are its own (the dev server is the session's): by name, their ids.
    callers: dict[str, str]

    async def send(self, request: dict[str, Any], caller: str = "alice") -> wire.Answer:
        return await wire.send(self.http, self.url, request, SECRETS[caller])

    async def until_done(self, task_id: str, caller: str = "alice") -> dict[str, Any]:
        """The task once it has ended."""

        async def ended() -> dict[str, Any] | None:
            request = wire.body("tasks/get", {"taskId": task_id})
            task = (await self.send(request, caller)).result
            return task if task["status"] in ("completed", "failed", "cancelled") else None

        return await eventually(ended, f"task {task_id} to end")

    async def task_runs(self, caller: str = "alice") -> list[tuple[str, WorkflowExecutionStatus]]:
        """The caller's task runs as Temporal lists them (not its threads)."""
        query = f'WorkflowId STARTS_WITH "{shapes.runs_of(self.callers[caller])}-"'
        return [
            (run.id, run.status)
            async for run in self.client.temporal.list_workflows(query)
            if run.status is not None
        ]

    async def thread(self, caller: str, agent: str, thread: str) -> RunState | None:
        try:
            thread_id = shapes.thread_run_id(self.callers[caller], agent, thread)
            return await self.client.query(thread_id)
        except RunNotFound:
            return None


@pytest.fixture
async def served(dev_env: WorkflowEnvironment, task_queue: str) -> AsyncIterator[Served]:
    """The agents of `tests/mcp/agents_app.py`, served to alice and bob, and a worker."""
    apps = load_apps([APP])
    client = WaitstateClient(dev_env.client, task_queue=task_queue)
    callers = {name: f"{name}-{uuid.uuid4().hex[:8]}" for name in SECRETS}
    server = agents_server(client, {callers[name]: key for name, key in SECRETS.items()})
    worker = make_worker(dev_env.client, task_queue, apps=apps)
    async with worker, serving(http_app(server)) as root, httpx.AsyncClient() as http:
        yield Served(f"{root}/mcp", client, http, callers)


async def test_the_same_call_sent_twice_with_its_key_is_one_run(served: Served) -> None:
    """Same JSON-RPC id, same body, sent twice: one task, one run, which answers once."""
    request = wire.call("echo", {"task": "hello"}, key="order-7f3a")

    first = await served.send(request)
    second = await served.send(request)
    done = await served.until_done(first.result["taskId"])
    runs = await served.task_runs()

    assert second.result["taskId"] == first.result["taskId"]
    assert done["result"]["structuredContent"]["answer"].endswith("hello")
    assert runs == [
        (
            shapes.run_id_of(served.callers["alice"], first.result["taskId"]),
            WorkflowExecutionStatus.COMPLETED,
        )
    ]


async def test_a_call_whose_answer_was_lost_and_sent_again_is_one_run(served: Served) -> None:
    """The client sends the call and drops the connection once the run exists (its answer is
    lost on the way), then sends it again with its key: the answer is the first call's task,
    and no other run was started."""
    request = wire.call("echo", {"task": "hello again"}, key="lost-1")

    async def started() -> str | None:
        runs = await served.task_runs()
        return runs[0][0] if runs else None

    async with wire.unread(served.url, request, ALICE):
        first_run = await eventually(started, "the first call's run")
    again = await served.send(request)
    await served.until_done(again.result["taskId"])
    runs = await served.task_runs()

    assert shapes.run_id_of(served.callers["alice"], again.result["taskId"]) == first_run
    assert [run_id for run_id, _ in runs] == [first_run]


async def test_a_thread_message_sent_twice_with_its_key_is_one_message(served: Served) -> None:
    request = wire.call("listener", {"task": "hello", "thread": "plans"}, key="msg-1")

    first = await served.send(request)
    second = await served.send(request)
    done = await served.until_done(first.result["taskId"])
    thread = await served.thread("alice", "listener", "plans")

    assert second.result["taskId"] == first.result["taskId"]
    assert first.result["taskId"] == shapes.message_task_id("listener", "plans", "m1")
    assert done["result"]["structuredContent"]["answer"] == "heard 1: hello"
    assert thread is not None and thread.thread is not None
    assert thread.thread.received == 1
    assert await served.task_runs() == []  # a message, not a task run


async def test_a_thread_message_whose_answer_was_lost_and_sent_again_is_one_message(
    served: Served,
) -> None:
    request = wire.call("listener", {"task": "hello", "thread": "lost"}, key="msg-lost")

    async def received() -> int | None:
        state = await served.thread("alice", "listener", "lost")
        return state.thread.received if state and state.thread and state.thread.received else None

    async with wire.unread(served.url, request, ALICE):
        await eventually(received, "the first call's message")
    again = await served.send(request)
    done = await served.until_done(again.result["taskId"])
    state = await served.thread("alice", "listener", "lost")

    assert again.result["taskId"] == shapes.message_task_id("listener", "lost", "m1")
    assert done["result"]["structuredContent"]["answer"] == "heard 1: hello"
    assert state is not None and state.thread is not None and state.thread.received == 1


async def test_a_key_sent_again_with_another_call_is_refused_and_changes_nothing(
    served: Served,
) -> None:
    """A key names one call: with another task, another agent, another message or a thread's
    message for a task run's key, it is refused (-32602), never answered with the first
    call's task; the first stays as it was."""
    first = await served.send(wire.call("echo", {"task": "one"}, key="k-1"))
    said = await served.send(wire.call("listener", {"task": "first", "thread": "t"}, key="k-2"))
    await served.until_done(said.result["taskId"])
    others = [
        wire.call("echo", {"task": "two"}, key="k-1"),
        wire.call("listener", {"task": "one"}, key="k-1"),
        wire.call("listener", {"task": "one", "thread": "t"}, key="k-1"),
        wire.call("listener", {"task": "second", "thread": "t"}, key="k-2"),
    ]
    refused = [await served.send(request) for request in others]
    await served.until_done(first.result["taskId"])
    state = await served.thread("alice", "listener", "t")

    assert [answer.error["code"] for answer in refused] == [INVALID_PARAMS] * len(others)
    assert all("idempotency key" in answer.error["message"] for answer in refused)
    assert [run_id for run_id, _ in await served.task_runs()] == [
        shapes.run_id_of(served.callers["alice"], first.result["taskId"])
    ]
    assert state is not None and state.thread is not None and state.thread.received == 1


async def test_two_callers_equal_keys_never_meet(served: Served) -> None:
    request = wire.call("echo", {"task": "same"}, key="shared-key")

    alices = await served.send(request, "alice")
    bobs = await served.send(request, "bob")
    await served.until_done(bobs.result["taskId"], "bob")

    assert alices.result["taskId"] != bobs.result["taskId"]
    assert len(await served.task_runs("alice")) == len(await served.task_runs("bob")) == 1
    stolen = wire.body("tasks/get", {"taskId": alices.result["taskId"]})
    assert (await served.send(stolen, "bob")).error["code"] == INVALID_PARAMS


async def test_a_caller_lists_its_own_tasks_and_no_one_elses(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`list_tasks`, a plain tool (no tasks extension needed): the caller's task runs, newest
    first, a page at a time (here of one), by agent if asked; never another caller's."""
    monkeypatch.setattr(listing, "PAGE", 1)
    echoed = await served.send(wire.call("echo", {"task": "one"}, key="l-1"))
    await served.until_done(echoed.result["taskId"])
    asking = await served.send(wire.call("approver", {"task": ASKS}, key="l-2"))
    await served.send(wire.call("echo", {"task": "bob's"}, key="l-1"), "bob")

    async def page(caller: str, **arguments: Any) -> dict[str, Any]:
        request = wire.body(
            "tools/call", {"name": "list_tasks", "arguments": arguments}, tasks=False
        )
        answer = await served.send(request, caller)
        assert not answer.result.get("isError"), answer
        listed: dict[str, Any] = answer.result["structuredContent"]
        return listed

    async def both_listed() -> list[dict[str, Any]] | None:
        """Every page of alice's listing, followed by its cursors, once both are listed."""
        listed, cursor, pages = [], None, 0
        while pages == 0 or cursor is not None:
            found = await page("alice", **({"cursor": cursor} if cursor else {}))
            assert len(found["tasks"]) <= 1
            listed += found["tasks"]
            cursor, pages = found.get("nextCursor"), pages + 1
        return listed if len(listed) == 2 and pages >= 2 else None

    async def asking_listed() -> dict[str, Any] | None:
        [task] = (await page("alice", agent="approver"))["tasks"] or [None]
        return task if task is not None and task["status"] == "input_required" else None

    tasks = await eventually(both_listed, "alice's two tasks, one a page")
    waiting = await eventually(asking_listed, "the approver's task waiting for alice")
    bobs = await eventually(lambda: page("bob"), "bob's listing")
    refused = [
        await served.send(wire.body("tools/call", {"name": "list_tasks", "arguments": a}))
        for a in ({"cursor": "not a cursor!"}, {"agent": "nobody"}, {"Agent": "echo"})
    ]

    assert [(t["taskId"], t["agent"]) for t in tasks] == [
        (asking.result["taskId"], "approver"),
        (echoed.result["taskId"], "echo"),
    ]
    assert tasks[1]["status"] == "completed"
    assert waiting["taskId"] == asking.result["taskId"]
    assert all(
        t["taskId"] not in {echoed.result["taskId"], asking.result["taskId"]} for t in bobs["tasks"]
    )
    assert [answer.error["code"] for answer in refused] == [INVALID_PARAMS] * 3
