"""MCP Tasks as operations, against a real MCP server (fastmcp with its tasks extension) over
streamable HTTP: a task polled to completion without a model turn, a failed one, and a task
sent `tasks/cancel` when its wait expires or its run is cancelled."""

from __future__ import annotations

import contextlib
import json
from datetime import timedelta
from typing import Any

from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from tests.helpers import eventually, make_worker, replays, scheduled_activities, start_run
from tests.mcp.mcp_app import task_events
from waitstate.apps import Apps, load_apps
from waitstate.mcp import McpServer
from waitstate.schemas import RunInput, RunResult
from waitstate.schemas.run import CALL_MODEL, CALL_TOOL, LIST_MCP_TOOLS, POLL_OPERATION
from workflows.agent_run import AgentRunWorkflow

APP = "tests.mcp.mcp_app:app"


def _apps(url: str) -> Apps:
    return load_apps([APP], mcp_servers=[McpServer("reports", url=url)])


async def _start(
    env: WorkflowEnvironment, task_queue: str, model: str, **fields: Any
) -> WorkflowHandle[Any, RunResult]:
    return await start_run(
        env.client,
        task_queue,
        RunInput(task="use the reports server", model=model, tools=["reports__*"], **fields),
    )


async def test_a_task_is_an_operation_polled_to_its_result_with_no_model_turn_meanwhile(
    dev_env: WorkflowEnvironment, task_queue: str, reports_url: str
) -> None:
    before = await task_events(reports_url)
    async with make_worker(dev_env.client, task_queue, apps=_apps(reports_url)):
        handle = await _start(dev_env, task_queue, "scripted:mcp-render")
        result = await handle.result()
        state = await handle.query(AgentRunWorkflow.status)
        await replays(handle, "mcp_task_polled")
    after = await task_events(reports_url)

    assert result.status == "completed"
    got = json.loads((result.final_output or "").removeprefix("got: "))
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
    started = after.get("render_report started", 0) - before.get("render_report started", 0)
    assert started == 1


async def test_a_task_that_fails_is_a_failed_operation_the_model_reads(
    dev_env: WorkflowEnvironment, task_queue: str, reports_url: str
) -> None:
    async with make_worker(dev_env.client, task_queue, apps=_apps(reports_url)):
        handle = await _start(dev_env, task_queue, "scripted:mcp-broken")
        result = await handle.result()

    got = json.loads((result.final_output or "").removeprefix("got: "))
    assert got["status"] == "failed"
    assert got["error"]["code"] == "tool_error"
    assert "no data for apac" in got["error"]["message"]


async def test_an_expired_wait_sends_the_task_a_cancel(
    dev_env: WorkflowEnvironment, task_queue: str, reports_url: str
) -> None:
    before = await task_events(reports_url)
    async with make_worker(dev_env.client, task_queue, apps=_apps(reports_url)):
        handle = await _start(
            dev_env, task_queue, "scripted:mcp-export", operation_timeout=timedelta(seconds=3)
        )
        result = await handle.result()
        state = await handle.query(AgentRunWorkflow.status)

        async def cancelled() -> bool:
            now = await task_events(reports_url)
            return now.get("slow_export cancelled", 0) > before.get("slow_export cancelled", 0)

        await eventually(cancelled, "the task's cancellation on the server")

    [operation] = state.operations.values()
    assert operation.status == "expired"
    assert operation.cancel == "sent"
    assert json.loads((result.final_output or "").removeprefix("got: "))["status"] == "expired"


async def test_a_cancelled_run_sends_its_task_a_cancel(
    dev_env: WorkflowEnvironment, task_queue: str, reports_url: str
) -> None:
    before = await task_events(reports_url)
    async with make_worker(dev_env.client, task_queue, apps=_apps(reports_url)):
        handle = await _start(dev_env, task_queue, "scripted:mcp-export")

        async def waiting() -> bool:
            state = await handle.query(AgentRunWorkflow.status)
            return any(not op.terminal for op in state.operations.values())

        await eventually(waiting, "the run waiting for its task")
        await handle.cancel()
        with contextlib.suppress(WorkflowFailureError):
            await handle.result()

        async def cancelled() -> bool:
            now = await task_events(reports_url)
            return now.get("slow_export cancelled", 0) > before.get("slow_export cancelled", 0)

        await eventually(cancelled, "the task's cancellation on the server")
        state = await handle.query(AgentRunWorkflow.status)

    [operation] = state.operations.values()
    assert operation.status == "cancelled"
    assert operation.cancel == "sent"
