"""An MCP server that is down when its task's wait expires (issue 22, defect 9): the task is
checked once more, then sent `tasks/cancel`, which fails. The model is told so in the
operation's outcome (the task may still run), and so is the operator; against a real MCP
server over streamable HTTP, killed with SIGKILL."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

from temporalio.testing import WorkflowEnvironment

from tests.helpers import make_worker, replays, start_run, until_the_poll_has_heartbeated
from tests.rigs import ServerProcess
from waitstate.apps import load_apps
from waitstate.mcp import McpServer
from waitstate.schemas import RunInput
from waitstate.schemas.run import CANCEL_OPERATION, POLL_OPERATION
from workflows.agent_run import AgentRunWorkflow

APP = "tests.mcp.mcp_app:app"
# The checks and cancels find the server gone in a second each: the cancel's five attempts,
# with their backoff, take about 20 s.
RESULT_TIMEOUT = 120


async def test_a_cancel_that_fails_with_the_server_down_is_told_as_such(
    dev_env: WorkflowEnvironment, task_queue: str, restartable_reports: ServerProcess
) -> None:
    url = f"http://127.0.0.1:{restartable_reports.port}/mcp"
    server = McpServer("reports", url=url, reach_within=timedelta(seconds=1))
    async with make_worker(dev_env.client, task_queue, apps=load_apps([APP], mcp_servers=[server])):
        handle = await start_run(
            dev_env.client,
            task_queue,
            RunInput(
                task="use the reports server",
                model="scripted:mcp-export",  # a ten-minute task
                tools=["reports__*"],
                operation_timeout=timedelta(seconds=12),
            ),
        )
        await until_the_poll_has_heartbeated(handle)
        await restartable_reports.kill()  # down from now until past the expiry
        result = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)
        state = await handle.query(AgentRunWorkflow.status)
        await replays(handle, "mcp_task_cancel_failed_server_down")
        activities = [
            e.activity_task_scheduled_event_attributes.activity_type.name
            async for e in handle.fetch_history_events()
            if e.HasField("activity_task_scheduled_event_attributes")
        ]

    assert result.status == "completed", result.error
    told = json.loads((result.final_output or "").removeprefix("got: "))
    assert told["status"] == "expired"
    message = told["error"]["message"]
    assert "the cancel failed" in message and message.endswith("the job may still run"), told
    [op] = state.operations.values()
    assert (op.status, op.cancel) == ("expired", "failed")
    assert op.error is not None and op.error.message == message
    assert any("failed" in s.detail and "may still run" in s.detail for s in state.steps)
    # The poll, the check before the expiry, then the cancel (the model's answer after it).
    polls = [i for i, name in enumerate(activities) if name == POLL_OPERATION]
    [cancel] = [i for i, name in enumerate(activities) if name == CANCEL_OPERATION]
    assert len(polls) == 2 and polls[1] < cancel, activities
