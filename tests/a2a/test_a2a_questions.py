"""A question a run's tool asks a person, as an A2A task's input-required: the status says the
question and its schema; an answer that does not fit the schema is refused and changes nothing;
the answer that fits, sent twice, reaches the job once, and the task completes. Over real HTTP,
with the official Python SDK's client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from a2a.helpers.proto_helpers import get_artifact_text, get_data_parts
from a2a.types import GetTaskRequest, Task, TaskState
from a2a.utils.errors import InvalidParamsError
from temporalio.testing import WorkflowEnvironment

from tests.a2a.asker_app import APP, JOB, SCHEMA
from tests.a2a.serving import ALICE, CALLER_KEYS, agent_url, message, sdk_client, send
from tests.helpers import eventually, make_worker, process_env
from tests.rigs import ServerProcess, free_port
from waitstate.apps import load_apps

pytestmark = pytest.mark.subprocess


@pytest.fixture
async def served(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> AsyncIterator[ServerProcess]:
    port = free_port()
    env = process_env(dev_env.client, task_queue, WAITSTATE_A2A_CALLER_KEYS=CALLER_KEYS)
    args = ["-m", "waitstate.a2a", "--app", APP, "--port", str(port)]
    server = ServerProcess(args, port, tmp_path / "a2a.log", env)
    async with make_worker(dev_env.client, task_queue, apps=load_apps([APP])):
        await server.start()
        try:
            yield server
        finally:
            await server.stop()


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
