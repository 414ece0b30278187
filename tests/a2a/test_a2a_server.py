"""waitstate's agents served over A2A (`python -m waitstate.a2a`, a process of the test's, over
real HTTP), driven by the official Python SDK's client: an agent's card; a message that starts a
run, whose approval is the task's `input-required`; the reply that approves it, and the completed
task with the answer as its artifact; a send and a reply sent again, applied once; another
caller's task not found; a request without a key refused; a malformed body refused."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from a2a.client import A2ACardResolver
from a2a.helpers.proto_helpers import get_artifact_text
from a2a.types import GetTaskRequest, ListTasksRequest, SubscribeToTaskRequest, TaskState
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError, UnsupportedOperationError
from temporalio.testing import WorkflowEnvironment

from tests.a2a.serving import (
    ALICE,
    BOB,
    CAROL,
    agent_url,
    message,
    sdk_client,
    send,
)
from tests.rigs import ServerProcess
from waitstate.a2a import shapes
from waitstate.client import WaitstateClient

pytestmark = pytest.mark.subprocess


async def _runs(env: WorkflowEnvironment, task_queue: str) -> list[str]:
    listed = env.client.list_workflows(f"TaskQueue = '{task_queue}'")
    return [w.id async for w in listed]


async def test_a_task_asks_for_approval_and_completes_once_approved(
    served: ServerProcess, dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    url = agent_url(served, "approver")
    client = WaitstateClient(dev_env.client, task_queue=task_queue)
    async with httpx.AsyncClient() as http:
        card = await A2ACardResolver(http, url).get_agent_card()
    async with sdk_client(url, ALICE) as alice:
        first = message("Delete the q3 drafts")
        [sent] = await send(alice, first)
        [again] = await send(alice, first)  # the same message, its answer lost: sent again
        task = sent.task
        run_id = shapes.run_id_of("alice", "approver", task.id)
        asked = task.status.message.parts[0].text
        decided = message("approve", task_id=task.id, context_id=task.context_id)
        [replied] = await send(alice, decided)
        [replied_again] = await send(alice, decided)
        done = await alice.get_task(GetTaskRequest(id=task.id))
    state = await client.query(run_id)

    assert card.name == "approver"
    assert [skill.id for skill in card.skills] == ["approver"]
    assert card.capabilities.streaming
    assert card.supported_interfaces[0].url == url
    assert "bearer" in card.security_schemes
    # The run's approval is the task's question, with the tool and its arguments.
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert asked.startswith("Approve request_approval")
    assert (again.task.id, again.task.status.state) == (task.id, task.status.state)
    assert replied.task.id == replied_again.task.id == task.id
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    [artifact] = done.artifacts
    assert "approved" in get_artifact_text(artifact)
    assert done.history[0].parts[0].text == "Delete the q3 drafts"
    # One run, one approval, decided once, by the caller.
    assert await _runs(dev_env, task_queue) == [run_id]
    [approval] = state.approvals.values()
    assert approval.status == "approved"
    assert approval.decision is not None and approval.decision.reviewer == "a2a:alice"


async def test_a_task_is_its_callers_alone(
    served: ServerProcess, dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    url = agent_url(served, "approver")
    async with sdk_client(url, ALICE) as alice, sdk_client(url, BOB) as bob:
        [sent] = await send(alice, message("Delete the q3 drafts"))
        task = sent.task
        with pytest.raises(TaskNotFoundError) as others:
            await bob.get_task(GetTaskRequest(id=task.id))
        with pytest.raises(TaskNotFoundError) as unknown:
            await bob.get_task(GetTaskRequest(id=f"{task.context_id}.nosuchtask"))
        # Bob's reply to Alice's task reaches nothing.
        with pytest.raises(TaskNotFoundError):
            await send(bob, message("approve", task_id=task.id))
        # A reply that is no decision is refused, and changes nothing.
        with pytest.raises(InvalidParamsError):
            await send(alice, message("maybe", task_id=task.id))
        still = await alice.get_task(GetTaskRequest(id=task.id))
    assert str(others.value).replace(task.id, "X") == str(unknown.value).replace(
        f"{task.context_id}.nosuchtask", "X"
    )
    assert still.status.state == TaskState.TASK_STATE_INPUT_REQUIRED


async def test_requests_without_a_key_or_with_a_malformed_body_start_nothing(
    served: ServerProcess, dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    url = agent_url(served, "approver")
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {
            "message": {
                "messageId": "m-1",
                "role": "ROLE_USER",
                "parts": [{"text": "Delete the q3 drafts"}],
            }
        },
    }
    async with httpx.AsyncClient(timeout=30) as http:
        card = await http.get(f"{url}/.well-known/agent-card.json")
        anonymous = await http.post(url, json=body, headers={"A2A-Version": "1.0"})
        wrong = await http.post(
            url, json=body, headers={"Authorization": "Bearer nope", "A2A-Version": "1.0"}
        )
        keyed = {"Authorization": f"Bearer {ALICE}", "A2A-Version": "1.0"}
        broken = await http.post(url, content=b"{not json", headers=keyed)
        no_parts = {**body, "params": {"message": {"messageId": "m-2", "role": "ROLE_USER"}}}
        empty = await http.post(url, json=no_parts, headers=keyed)
        huge = await http.post(url, content=b"x" * 2_000_000, headers=keyed)

    assert card.status_code == 200
    assert (anonymous.status_code, wrong.status_code) == (401, 401)
    assert anonymous.headers["www-authenticate"].startswith("Bearer")
    assert broken.json()["error"]["code"] == -32700
    assert empty.json()["error"]["code"] in (-32600, -32602)
    assert huge.status_code == 413
    assert await _runs(dev_env, task_queue) == []


async def test_a_stream_follows_the_task_to_its_question_and_to_its_end(
    served: ServerProcess,
) -> None:
    url = agent_url(served, "approver")
    async with sdk_client(url, ALICE, streaming=True) as alice:
        opened = await send(alice, message("Delete the q3 drafts"))
        task = opened[0].task
        closed = await send(alice, message("reject not today", task_id=task.id))
        ended = await alice.get_task(GetTaskRequest(id=task.id))
        # An ended task takes no subscription, and no message.
        with pytest.raises(UnsupportedOperationError):
            [e async for e in alice.subscribe(SubscribeToTaskRequest(id=task.id))]
        with pytest.raises(UnsupportedOperationError):
            await send(alice, message("approve", task_id=task.id))

    states = [e.status_update.status.state for e in opened if e.HasField("status_update")]
    assert opened[0].HasField("task")
    assert (states or [task.status.state])[-1] == TaskState.TASK_STATE_INPUT_REQUIRED
    final = [e.status_update.status.state for e in closed if e.HasField("status_update")]
    assert final[-1] == TaskState.TASK_STATE_COMPLETED
    assert any(e.HasField("artifact_update") for e in closed)
    assert ended.status.state == TaskState.TASK_STATE_COMPLETED
    assert "rejected" in get_artifact_text(ended.artifacts[0])


async def test_a_caller_lists_its_own_tasks_a_page_at_a_time(served: ServerProcess) -> None:
    url = agent_url(served, "echo")
    # Carol: a caller whose every task is this test's.
    async with sdk_client(url, CAROL) as carol, sdk_client(url, BOB) as bob:
        mine = [(await send(carol, message(f"task {n}")))[0].task for n in range(3)]
        [theirs] = await send(bob, message("bob's task"))
        first = await carol.list_tasks(ListTasksRequest(page_size=2))
        rest = await carol.list_tasks(
            ListTasksRequest(page_size=2, page_token=first.next_page_token)
        )
        in_context = await carol.list_tasks(ListTasksRequest(context_id=mine[1].context_id))
        done = await carol.list_tasks(
            ListTasksRequest(status=TaskState.TASK_STATE_COMPLETED, include_artifacts=True)
        )
        bobs = await bob.list_tasks(ListTasksRequest())
        with pytest.raises(InvalidParamsError):
            await carol.list_tasks(ListTasksRequest(page_size=101))
        with pytest.raises(InvalidParamsError):
            await carol.list_tasks(ListTasksRequest(page_token="not-ours"))

    listed = [task.id for task in [*first.tasks, *rest.tasks]]
    assert sorted(listed) == sorted(task.id for task in mine)
    assert (len(first.tasks), first.total_size, rest.next_page_token) == (2, 3, "")
    assert [task.id for task in in_context.tasks] == [mine[1].id]
    assert sorted(task.id for task in done.tasks) == sorted(task.id for task in mine)
    assert all(task.artifacts for task in done.tasks)
    assert theirs.task.id in [task.id for task in bobs.tasks]
    assert not {task.id for task in mine} & {task.id for task in bobs.tasks}


async def test_concurrent_copies_of_a_send_and_of_a_reply_apply_once(
    served: ServerProcess, dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    url = agent_url(served, "approver")
    client = WaitstateClient(dev_env.client, task_queue=task_queue)
    async with sdk_client(url, ALICE) as alice:
        first = message("Delete the q3 drafts")
        sent = await asyncio.gather(*(send(alice, first) for _ in range(10)))
        [task_id] = {events[0].task.id for events in sent}
        approve = message("approve", task_id=task_id)
        replied = await asyncio.gather(*(send(alice, approve) for _ in range(10)))
        done = await alice.get_task(GetTaskRequest(id=task_id))
    run_id = shapes.run_id_of("alice", "approver", task_id)
    state = await client.query(run_id)

    assert {events[0].task.id for events in replied} == {task_id}
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert run_id in await _runs(dev_env, task_queue)
    assert len(await _runs(dev_env, task_queue)) == 1
    [approval] = state.approvals.values()
    assert approval.status == "approved"
    assert state.status == "completed"
