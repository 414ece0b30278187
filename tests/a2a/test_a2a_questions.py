"""A question a run's tool asks a person, as an A2A task's input-required: the status says the
question and its schema; an answer that does not fit the schema is refused and changes nothing;
the answer that fits, sent twice, reaches the job once, and the task completes. Over real HTTP,
with the official Python SDK's client."""

from __future__ import annotations

import pytest
from a2a.helpers.proto_helpers import get_artifact_text, get_data_parts
from a2a.types import GetTaskRequest, Task, TaskState
from a2a.utils.errors import InvalidParamsError

from tests.a2a.asker_app import APP, JOB, SCHEMA
from tests.a2a.serving import ALICE, agent_url, message, sdk_client, send
from tests.helpers import eventually
from tests.rigs import ServerProcess

pytestmark = pytest.mark.subprocess


@pytest.fixture
def a2a_app() -> str:
    return APP


async def test_a_question_is_input_required_and_its_answer_applied_once(
    served: ServerProcess,
) -> None:
    async with sdk_client(agent_url(served, "asker"), ALICE) as alice:
        [sent] = await send(alice, message("export please"))
        task = sent.task

        async def asked() -> Task | None:
            read = await alice.get_task(GetTaskRequest(id=task.id))
            return read if read.status.state == TaskState.TASK_STATE_INPUT_REQUIRED else None

        asking = await eventually(asked, "the job's question to reach the task")
        with pytest.raises(InvalidParamsError):
            await send(alice, message(data={"ok": "yes"}, task_id=task.id))
        still = await alice.get_task(GetTaskRequest(id=task.id))
        answer = message(data={"ok": True}, task_id=task.id)
        await send(alice, answer)
        await send(alice, answer)  # its reply lost: sent again

        async def completed() -> Task | None:
            read = await alice.get_task(GetTaskRequest(id=task.id))
            return read if read.status.state == TaskState.TASK_STATE_COMPLETED else None

        done = await eventually(completed, "the answered task to complete")

    status = asking.status.message
    assert status.parts[0].text == "start_export_asks asks: Export everything?"
    [shown] = get_data_parts(status.parts)
    assert (shown["kind"], shown["schema"]) == ("question", SCHEMA)
    assert still.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert get_artifact_text(done.artifacts[0]) == "export started"
    # The job was answered once, with what fits its question.
    assert [kept.content for kept in JOB.answers] == [{"ok": True}]
