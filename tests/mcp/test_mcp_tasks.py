"""MCP Tasks as operations, against a real MCP server (fastmcp with its tasks extension) over
streamable HTTP: a task polled to completion without a model turn, a failed one, and a task
sent `tasks/cancel` when its wait expires or its run is cancelled."""

from __future__ import annotations

import contextlib
from datetime import timedelta

from temporalio.client import WorkflowFailureError
from temporalio.testing import WorkflowEnvironment

from tests.helpers import eventually, replays, scheduled_activities
from tests.mcp.mcp_app import task_events, task_events_since
from tests.mcp.runs import reports_run, tool_outcome
from waitstate.schemas.run import CALL_MODEL, CALL_TOOL, LIST_MCP_TOOLS, POLL_OPERATION
from waitstate.workflows.agent_run import AgentRunWorkflow


async def _until_the_server_cancelled_the_task(url: str, before: dict[str, int]) -> None:
    """The server's `slow_export` task was cancelled since `before` (its events then)."""

    async def cancelled() -> bool:
        return (await task_events_since(url, before)).get("slow_export cancelled", 0) > 0

    await eventually(cancelled, "the task's cancellation on the server")


async def test_a_task_is_an_operation_polled_to_its_result_with_no_model_turn_meanwhile(
    dev_env: WorkflowEnvironment, task_queue: str, reports_url: str
) -> None:
    before = await task_events(reports_url)
    async with reports_run(dev_env, task_queue, reports_url, "scripted:mcp-render") as handle:
        result = await handle.result()
        state = await handle.query(AgentRunWorkflow.status)
        await replays(handle, "mcp_task_polled")
    events = await task_events_since(reports_url, before)

    got = tool_outcome(result)
    assert got["status"] == "succeeded"
    assert got["result"] == {"url": "https://reports.example/emea.pdf"}
    [operation] = state.operations.values()
    assert (operation.tool, operation.completion, operation.status) == (
        "reports__render_report",
        "poll",
        "succeeded",
    )
    # The call; the checkpoint before a wait that may last the task's hour; the answer once
    # the poll ended: no model call while the task ran.
    assert (result.turns, result.usage.model_calls) == (2, 3)
    assert await scheduled_activities(handle) == [
        LIST_MCP_TOOLS, CALL_MODEL, CALL_TOOL, CALL_MODEL, POLL_OPERATION, CALL_MODEL,
    ]  # fmt: skip
    assert events.get("render_report started", 0) == 1


async def test_a_task_that_fails_is_a_failed_operation_the_model_reads(
    dev_env: WorkflowEnvironment, task_queue: str, reports_url: str
) -> None:
    async with reports_run(dev_env, task_queue, reports_url, "scripted:mcp-broken") as handle:
        result = await handle.result()

    got = tool_outcome(result)
    assert got["status"] == "failed"
    assert got["error"]["code"] == "tool_error"
    assert "no data for apac" in got["error"]["message"]


async def test_an_expired_wait_sends_the_task_a_cancel(
    dev_env: WorkflowEnvironment, task_queue: str, reports_url: str
) -> None:
    before = await task_events(reports_url)
    async with reports_run(
        dev_env,
        task_queue,
        reports_url,
        "scripted:mcp-export",
        operation_timeout=timedelta(seconds=3),
    ) as handle:
        result = await handle.result()
        state = await handle.query(AgentRunWorkflow.status)
        await _until_the_server_cancelled_the_task(reports_url, before)
        await replays(handle, "mcp_task_expired")

    [operation] = state.operations.values()
    assert operation.status == "expired"
    assert operation.cancel == "sent"
    assert tool_outcome(result)["status"] == "expired"


async def test_a_cancelled_run_sends_its_task_a_cancel(
    dev_env: WorkflowEnvironment, task_queue: str, reports_url: str
) -> None:
    before = await task_events(reports_url)
    async with reports_run(dev_env, task_queue, reports_url, "scripted:mcp-export") as handle:

        async def waiting() -> bool:
            state = await handle.query(AgentRunWorkflow.status)
            return any(not op.terminal for op in state.operations.values())

        await eventually(waiting, "the run waiting for its task")
        await handle.cancel()
        with contextlib.suppress(WorkflowFailureError):
            await handle.result()
        await _until_the_server_cancelled_the_task(reports_url, before)
        state = await handle.query(AgentRunWorkflow.status)
        await replays(handle, "mcp_task_run_cancelled")

    [operation] = state.operations.values()
    assert operation.status == "cancelled"
    assert operation.cancel == "sent"
