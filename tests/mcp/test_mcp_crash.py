"""A worker process killed with SIGKILL while it polls an MCP task: another worker finishes the
wait, and the server made exactly one task."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from tests.helpers import start_run, until_the_poll_has_heartbeated
from tests.mcp.mcp_app import task_events, task_events_since
from tests.mcp.runs import worker_process
from waitstate.schemas import RunInput

RESULT_TIMEOUT = 90


async def test_a_worker_killed_mid_poll_leaves_one_task_finished_by_the_next(
    dev_env: WorkflowEnvironment, task_queue: str, reports_url: str, tmp_path: Path
) -> None:
    worker = worker_process(dev_env, task_queue, tmp_path, f"reports={reports_url}")
    before = await task_events(reports_url)
    await worker.start()
    try:
        handle = await start_run(
            dev_env.client,
            task_queue,
            RunInput(task="render", model="scripted:mcp-render-slow", tools=["reports__*"]),
            workflow_id=f"mcp-crash-{uuid.uuid4()}",
        )
        await until_the_poll_has_heartbeated(handle)
        await worker.kill()
        await worker.start()
        result = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)
    finally:
        await worker.stop()
    events = await task_events_since(reports_url, before)

    assert result.status == "completed"
    assert '"status":"succeeded"' in (result.final_output or "")
    assert events.get("render_report started", 0) == 1
