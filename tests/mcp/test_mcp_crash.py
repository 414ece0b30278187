"""A worker process killed with SIGKILL while it polls an MCP task: another worker finishes the
wait, and the server made exactly one task."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from tests.helpers import process_env, start_run, until_the_poll_has_heartbeated
from tests.mcp.mcp_app import task_events
from tests.rigs import WorkerProcess
from waitstate.schemas import RunInput

RESULT_TIMEOUT = 90


async def test_a_worker_killed_mid_poll_leaves_one_task_finished_by_the_next(
    dev_env: WorkflowEnvironment, task_queue: str, reports_url: str, tmp_path: Path
) -> None:
    env = process_env(
        dev_env.client,
        task_queue,
        WAITSTATE_APPS="tests.mcp.mcp_app:app",
        WAITSTATE_MCP_SERVERS=f"reports={reports_url}",
        WAITSTATE_BLOB_DIR=str(tmp_path / "blobs"),
    )
    worker = WorkerProcess(env, tmp_path / "worker.log")
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
    after = await task_events(reports_url)

    assert result.status == "completed"
    assert '"status":"succeeded"' in (result.final_output or "")
    started = after.get("render_report started", 0) - before.get("render_report started", 0)
    assert started == 1
