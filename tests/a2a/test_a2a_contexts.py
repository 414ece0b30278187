"""A2A contexts as conversations: a message that names the context of an earlier task (a task
run that completed) is a message in the context's thread, which is told the earlier task and
its answer first; the next message in the context is the thread's next, remembered; a message
sent again is taken once; a message in a conversation is not canceled. Over real HTTP, with the
official Python SDK's client."""

from __future__ import annotations

import pytest
from a2a.helpers.proto_helpers import get_artifact_text
from a2a.types import CancelTaskRequest, GetTaskRequest, Task, TaskState
from a2a.utils.errors import TaskNotCancelableError
from temporalio.testing import WorkflowEnvironment

from tests.a2a.serving import ALICE, agent_url, message, sdk_client, send
from tests.helpers import eventually
from tests.rigs import ServerProcess
from waitstate.a2a import shapes
from waitstate.client import WaitstateClient

pytestmark = pytest.mark.subprocess


async def test_a_context_goes_on_as_a_conversation_that_remembers_its_first_task(
    served: ServerProcess, dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    client = WaitstateClient(dev_env.client, task_queue=task_queue)
    async with sdk_client(agent_url(served, "listener"), ALICE) as alice:

        async def answered(task: Task) -> Task:
            async def done() -> Task | None:
                read = await alice.get_task(GetTaskRequest(id=task.id))
                return read if read.status.state == TaskState.TASK_STATE_COMPLETED else None

            return await eventually(done, f"task {task.id} to complete")

        [first] = await send(alice, message("the sky is green"))
        first_done = await answered(first.task)
        context = first.task.context_id
        [second] = await send(alice, message("what colour is the sky?", context_id=context))
        second_done = await answered(second.task)
        third_message = message("and now?", context_id=context)
        [third] = await send(alice, third_message)
        third_done = await answered(third.task)
        [again] = await send(alice, third_message)
        with pytest.raises(TaskNotCancelableError):
            await alice.cancel_task(CancelTaskRequest(id=third.task.id))
    thread = await client.query(shapes.thread_id_of("alice", "listener", context))

    assert get_artifact_text(first_done.artifacts[0]) == "heard 1: the sky is green"
    assert second.task.context_id == third.task.context_id == context
    assert len({first.task.id, second.task.id, third.task.id}) == 3
    # The context's thread was told the first task and its answer, then the second message.
    said = get_artifact_text(second_done.artifacts[0])
    assert said.startswith("heard 1: ")
    assert "the sky is green" in said and "what colour is the sky?" in said
    # The thread remembers: its second message is the third task.
    assert get_artifact_text(third_done.artifacts[0]) == "heard 2: and now?"
    # Sent again, the third message is the same task, and the thread took it once.
    assert again.task.id == third.task.id
    assert again.task.status.state == TaskState.TASK_STATE_COMPLETED
    assert thread.thread is not None and thread.thread.received == 2


async def test_a_conversations_message_asks_for_approval_and_is_answered(
    served: ServerProcess,
) -> None:
    async with sdk_client(agent_url(served, "approver"), ALICE) as alice:
        [sent] = await send(alice, message("Delete the q3 drafts", context_id="ops-chat"))
        task = sent.task
        [replied] = await send(alice, message("approve", task_id=task.id))

        async def done() -> Task | None:
            read = await alice.get_task(GetTaskRequest(id=task.id))
            return read if read.status.state == TaskState.TASK_STATE_COMPLETED else None

        finished = await eventually(done, "the approved message to be answered")

    assert task.context_id == "ops-chat"
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert task.status.message.parts[0].text.startswith("Approve request_approval")
    assert replied.task.id == task.id
    assert "approved" in get_artifact_text(finished.artifacts[0])
