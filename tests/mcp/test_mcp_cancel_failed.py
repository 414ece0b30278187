"""An MCP server that is down when its task's wait expires (issue 22, defect 9): the task is
checked once more, then sent `tasks/cancel`, which fails. The model is told so in the
operation's outcome (the task may still run), and so is the operator; against a real MCP
server over streamable HTTP, killed with SIGKILL."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio.testing import WorkflowEnvironment

from tests.helpers import replays, scheduled_activities, until_the_poll_has_heartbeated
from tests.mcp.runs import mcp_url, reports_apps, reports_run, tool_outcome
from tests.rigs import ServerProcess
from waitstate.schemas.run import CANCEL_OPERATION, POLL_OPERATION
from waitstate.workflows.agent_run import AgentRunWorkflow

# The checks and cancels find the server gone in a second each: the cancel's five attempts,
# with their backoff, take about 20 s.
RESULT_TIMEOUT = 120


async def test_a_cancel_that_fails_with_the_server_down_is_told_as_such(
    dev_env: WorkflowEnvironment, task_queue: str, restartable_reports: ServerProcess
) -> None:
    apps = reports_apps(mcp_url(restartable_reports.port), reach_within=timedelta(seconds=1))
    async with reports_run(
        dev_env,
        task_queue,
        apps,
        "scripted:mcp-export",  # a ten-minute task
        operation_timeout=timedelta(seconds=12),
    ) as handle:
        await until_the_poll_has_heartbeated(handle)
        await restartable_reports.kill()  # down from now until past the expiry
        result = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)
        state = await handle.query(AgentRunWorkflow.status)
        await replays(handle, "mcp_task_cancel_failed_server_down")
        activities = await scheduled_activities(handle)

    told = tool_outcome(result)
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
