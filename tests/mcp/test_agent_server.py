"""waitstate as an MCP server (`waitstate.mcp_server`), served in the test's process over real
HTTP, its runs on the dev server and a worker of the test's: fastmcp's own client (an MCP
client that is not waitstate's: it drives a task to its end with `tasks/get` and answers its
input requests with `tasks/update`) calls the agents; and what each caller may reach."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
import mcp_types
import pytest
from fastmcp import Client
from fastmcp.client.elicitation import ElicitResult
from fastmcp.exceptions import ToolError
from fastmcp_tasks.client import ToolTask, call_tool_task
from fastmcp_tasks.client_models import UpdateTaskRequest, UpdateTaskRequestParams
from fastmcp_tasks.models import MISSING_REQUIRED_CLIENT_CAPABILITY, missing_capability_error_data
from mcp.shared.exceptions import MCPError as McpError
from temporalio.testing import WorkflowEnvironment

from chaos import mcp_wire as wire
from examples.systems.serving import serving
from tests.helpers import make_worker
from tests.mcp.agents_app import APP, ASKS
from tests.mcp.runs import agents_server
from waitstate.apps import load_apps
from waitstate.client import WaitstateClient
from waitstate.mcp import McpServer
from waitstate.mcp_server import CallerKeys, agent_server, http_app, shapes

ALICE = "a" * 40
BOB = "b" * 40


@dataclass
class Served:
    url: str
    client: WaitstateClient


@pytest.fixture
async def served(dev_env: WorkflowEnvironment, task_queue: str) -> AsyncIterator[Served]:
    """The agents of `tests/mcp/agents_app.py`, served to alice and bob, and a worker."""
    apps = load_apps([APP])
    client = WaitstateClient(dev_env.client, task_queue=task_queue)
    server = agents_server(client, {"alice": ALICE, "bob": BOB})
    worker = make_worker(dev_env.client, task_queue, apps=apps)
    async with worker, serving(http_app(server)) as root:
        yield Served(f"{root}/mcp", client)


def _decide(decision: str, seen: list[str]) -> Any:
    async def handler(message: str, response_type: Any, params: Any, context: Any) -> Any:
        seen.append(message)
        return ElicitResult(action="accept", content={"decision": decision, "comment": "ok"})

    return handler


@pytest.mark.parametrize("decision", ["approve", "reject"])
async def test_an_agent_runs_as_a_task_through_its_approval(served: Served, decision: str) -> None:
    seen: list[str] = []
    async with Client(served.url, auth=ALICE, elicitation_handler=_decide(decision, seen)) as mcp:
        tools = {tool.name: tool for tool in await mcp.list_tools()}
        result = await mcp.call_tool("approver", {"task": ASKS})

    assert tools["approver"].input_schema["required"] == ["task"]
    assert len(seen) == 1 and seen[0].startswith("Approve request_approval")
    structured = result.structured_content
    assert structured is not None
    told = json.loads(structured["answer"].split("decision: ", 1)[1])  # what the agent read
    assert told["approval"] == {"approve": "approved", "reject": "rejected"}[decision]
    assert told["reviewer"] == "mcp:alice"
    assert told["comment"] == "ok"
    run = await served.client.outcome(structured["run_id"])
    assert run.status == "completed"
    assert structured["run_id"].startswith(shapes.RUN_PREFIX)


async def test_a_sub_agents_approval_is_asked_and_decided_in_its_roots_task(
    served: Served,
) -> None:
    seen: list[str] = []
    async with Client(served.url, auth=ALICE, elicitation_handler=_decide("approve", seen)) as mcp:
        result = await mcp.call_tool("approver-lead", {"task": f"{ASKS} fan=1"})

    # Asked in the root's task, with the path of the node that asks; decided there, applied
    # where it was asked.
    assert len(seen) == 1 and "[approver-1]" in seen[0], seen
    structured = result.structured_content
    assert structured is not None
    assert '"approval":"approved","reviewer":"mcp:alice"' in structured["answer"]
    assert (await served.client.outcome(structured["run_id"])).status == "completed"


async def test_an_agent_with_an_output_type_answers_in_structured_content(served: Served) -> None:
    async with Client(served.url, auth=ALICE) as mcp:
        tools = {tool.name: tool for tool in await mcp.list_tools()}
        result = await mcp.call_tool("echo-json", {"task": json.dumps({"word": "hi", "count": 2})})
    assert result.structured_content is not None
    assert result.structured_content["answer"] == {"word": "hi", "count": 2}
    schema = tools["echo-json"].output_schema
    assert schema is not None
    assert schema["properties"]["answer"]["required"] == ["word", "count"]


async def test_a_run_that_ends_without_answering_is_a_tool_error(served: Served) -> None:
    async with Client(served.url, auth=ALICE) as mcp:
        with pytest.raises(ToolError, match="the run ended output_invalid"):
            await mcp.call_tool("echo-json", {"task": "not json"})


async def test_a_task_is_read_from_temporal_alone_while_it_asks_nothing(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    """No worker runs: the task is created and reads as working from the run's description,
    with no query a worker would have to answer; its cancellation is taken (and applied by
    the run once a worker runs it)."""
    apps = load_apps([APP])
    client = WaitstateClient(dev_env.client, task_queue=task_queue)

    async def connect() -> WaitstateClient:
        return client

    server = agent_server(apps.agents, connect=connect, auth=CallerKeys({"alice": ALICE}))
    async with serving(http_app(server)) as root, Client(f"{root}/mcp", auth=ALICE) as alice:
        task = await call_tool_task(alice, "echo", {"task": "hello"})
        status = await task.status()
        await task.cancel()
    run = client.handle(shapes.run_id_of("alice", task.task_id))
    history = [event async for event in run.fetch_history_events()]
    await run.terminate("the test is over")

    assert (status.status, status.status_message) == ("working", "running")
    assert any(
        event.HasField("workflow_execution_cancel_requested_event_attributes") for event in history
    )


async def test_a_tasks_last_update_is_its_runs_last_change_not_the_reads_time(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    """No worker runs, so the run's history holds still between two reads: `lastUpdatedAt`
    is its last event's time both times (it was the read's own time), `createdAt` its start;
    a cancel request is a change, and moves it to that event; once ended, it is the close."""
    apps = load_apps([APP])
    client = WaitstateClient(dev_env.client, task_queue=task_queue)

    async def connect() -> WaitstateClient:
        return client

    server = agent_server(apps.agents, connect=connect, auth=CallerKeys({"alice": ALICE}))
    run_id = ""

    async def last_event() -> datetime:
        events = [e async for e in client.handle(run_id).fetch_history_events()]
        return events[-1].event_time.ToDatetime(tzinfo=UTC)

    async with serving(http_app(server)) as root, httpx.AsyncClient() as http:
        url = f"{root}/mcp"

        async def get(task_id: str) -> dict[str, Any]:
            request = wire.body("tasks/get", {"taskId": task_id})
            return (await wire.send(http, url, request, ALICE)).result

        created = (await wire.send(http, url, wire.call("echo", {"task": "hi"}), ALICE)).result
        run_id = shapes.run_id_of("alice", created["taskId"])
        first, second = await get(created["taskId"]), await get(created["taskId"])
        started = (await client.describe(run_id)).start_time
        still = await last_event()
        request = wire.body("tasks/cancel", {"taskId": created["taskId"]})
        assert (await wire.send(http, url, request, ALICE)).status == 200
        asked = await get(created["taskId"])
        cancel_requested = await last_event()
        await client.handle(run_id).terminate("the test is over")
        ended = await get(created["taskId"])
        closed = (await client.describe(run_id)).close_time

    assert first["lastUpdatedAt"] == second["lastUpdatedAt"] == still.isoformat()
    assert first["createdAt"] == ended["createdAt"] == started.isoformat()
    assert cancel_requested > still
    assert asked["lastUpdatedAt"] == cancel_requested.isoformat()
    assert closed is not None and ended["lastUpdatedAt"] == closed.isoformat()


async def test_a_call_naming_a_thread_is_a_message_in_the_callers_conversation(
    served: Served,
) -> None:
    """Two messages to alice's thread `plans`: one conversation, each message a task whose
    result is its reply; bob's `plans` is another thread; a message is not cancelled."""
    async with Client(served.url, auth=ALICE) as alice, Client(served.url, auth=BOB) as bob:
        first = await alice.call_tool("listener", {"task": "hello", "thread": "plans"})
        second = await alice.call_tool_mcp("listener", {"task": "and then?", "thread": "plans"})
        bobs = await bob.call_tool("listener", {"task": "mine", "thread": "plans"})
        task = await call_tool_task(alice, "listener", {"task": "third", "thread": "plans"})
        with pytest.raises(McpError, match="not cancelled"):
            await task.cancel()
        third = await task.result()
        answered = await task.status()
        with pytest.raises(McpError, match="'thread' names a conversation"):
            await alice.call_tool("listener", {"task": "x", "thread": "no spaces"})

    def said(result: Any) -> tuple[int, str]:
        heard, text = result.structured_content["answer"].split(": ", 1)
        return int(heard.removeprefix("heard ")), text

    assert said(first)[1] == "hello"
    assert said(second)[1] == "and then?" and said(second)[0] > said(first)[0]
    assert said(third)[1] == "third" and said(third)[0] > said(second)[0]
    assert said(bobs) == (said(first)[0], "mine")  # bob's first message in his own thread
    runs = {r.structured_content["run_id"] for r in (first, second, third)}
    assert runs == {shapes.thread_run_id("alice", "listener", "plans")}
    assert bobs.structured_content["run_id"] == shapes.thread_run_id("bob", "listener", "plans")
    assert task.task_id == shapes.message_task_id("listener", "plans", "m3")
    # The message's task was created when it was sent, and last changed when it was answered.
    state = await served.client.query(shapes.thread_run_id("alice", "listener", "plans"))
    assert state.thread is not None
    [m3] = [m for m in state.thread.messages if m.message_id == "m3"]
    assert m3.replied_at is not None
    times = (answered.created_at, answered.last_updated_at)
    assert times == (m3.sent_at.isoformat(), m3.replied_at.isoformat())


async def test_a_caller_reaches_only_its_own_tasks(served: Served) -> None:
    """Bob holds alice's task id: to him it is an unknown task, which he can neither read,
    answer nor cancel; alice cancels it, and its run is cancelled."""
    async with Client(served.url, auth=ALICE) as alice, Client(served.url, auth=BOB) as bob:
        task = await call_tool_task(alice, "approver", {"task": ASKS})
        waiting = await task.wait(state="input_required", timeout=60)
        stolen = ToolTask(bob, "approver", task.create_result)
        for attempt in (stolen.status(), stolen.cancel(), _update(bob, task.task_id, {})):
            with pytest.raises(McpError, match=f"Task {task.task_id} not found"):
                await attempt
        with pytest.raises(McpError, match="an elicitation result"):
            await _update(alice, task.task_id, {next(iter(waiting.input_requests)): "yes"})
        await task.cancel()
        ended = await task.wait(timeout=60)

    [key] = waiting.input_requests
    assert key.startswith(shapes.APPROVAL_KEY)
    assert ended.status == "cancelled"
    run = await served.client.outcome(shapes.run_id_of("alice", task.task_id))
    assert run.status == "cancelled"


async def _update(client: Client, task_id: str, responses: dict[str, Any]) -> None:
    params = UpdateTaskRequestParams(task_id=task_id, input_responses=responses)
    await client.session.send_request(UpdateTaskRequest(params=params), mcp_types.Result)


async def test_a_request_without_a_caller_key_is_refused(served: Served) -> None:
    async with httpx.AsyncClient() as http:
        anonymous = await http.post(served.url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        forged = await http.post(
            served.url,
            json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
            headers={"Authorization": f"Bearer {'c' * 40}"},
        )
    assert anonymous.status_code == 401
    assert forged.status_code == 401


async def test_a_call_that_does_not_declare_the_tasks_extension_is_refused(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLEET_AUTHORIZATION", f"Bearer {ALICE}")
    fleet = McpServer(
        "fleet", url=served.url, headers_from_env={"Authorization": "FLEET_AUTHORIZATION"}
    )
    async with fleet.connect() as plain:  # no extensions offered
        with pytest.raises(McpError) as refused:
            await plain.call_tool("echo", {"task": "hello"})
    assert refused.value.error.code == MISSING_REQUIRED_CLIENT_CAPABILITY
    assert refused.value.error.data == missing_capability_error_data()


async def test_an_oversize_body_is_refused_before_it_is_read(served: Served) -> None:
    body = json.dumps({"task": "x" * 2_000_000})
    async with httpx.AsyncClient() as http:
        response = await http.post(
            served.url, content=body, headers={"Authorization": f"Bearer {ALICE}"}
        )
    assert response.status_code == 413

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted as it arrives
        for _ in range(40):
            yield b"x" * 65_536

    async with httpx.AsyncClient() as http:
        chunked = await http.post(
            served.url, content=chunks(), headers={"Authorization": f"Bearer {ALICE}"}
        )
    assert chunked.status_code == 413


def test_a_task_id_names_a_run_only_with_its_caller() -> None:
    task_id = shapes.new_task_id()
    assert shapes.run_id_of("alice", task_id) != shapes.run_id_of("bob", task_id)
    assert "alice" not in shapes.run_id_of("alice", task_id)
