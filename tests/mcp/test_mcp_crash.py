"""A worker process killed with SIGKILL while it polls an MCP task: another worker finishes the
wait, and the server made exactly one task."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from tests.helpers import until_the_poll_has_heartbeated
from tests.mcp.mcp_app import task_events
from tests.rigs import WorkerProcess
from waitstate.schemas import RunInput
from workflows.agent_run import AgentRunWorkflow

RESULT_TIMEOUT = 90


async def test_a_worker_killed_mid_poll_leaves_one_task_finished_by_the_next(
    dev_env: WorkflowEnvironment, task_queue: str, reports_url: str, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": dev_env.client.service_client.config.target_host,
        "WAITSTATE_TASK_QUEUE": task_queue,
        "WAITSTATE_APPS": "tests.mcp.mcp_app:app",
        "WAITSTATE_MCP_SERVERS": f"reports={reports_url}",
        "WAITSTATE_BLOB_DIR": str(tmp_path / "blobs"),
    }
    worker = WorkerProcess(env, tmp_path / "worker.log")
    before = await task_events(reports_url)
    await worker.start()
    try:
        handle = await dev_env.client.start_workflow(
            AgentRunWorkflow.run,
            RunInput(task="render", model="scripted:mcp-render-slow", tools=["reports__*"]),
            id=f"mcp-crash-{uuid.uuid4()}",
            task_queue=task_queue,
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
