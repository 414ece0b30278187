"""A worker process killed with SIGKILL while it polls an MCP task: another worker finishes the
wait, and the server made exactly one task."""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from tests.helpers import until_the_poll_has_heartbeated
from tests.mcp.runs import reports_run_on_a_process

RESULT_TIMEOUT = 90


async def test_a_worker_killed_mid_poll_leaves_one_task_finished_by_the_next(
    dev_env: WorkflowEnvironment, task_queue: str, reports_url: str, tmp_path: Path
) -> None:
    async with reports_run_on_a_process(
        dev_env, task_queue, tmp_path, reports_url, "scripted:mcp-render-slow", "render"
    ) as run:
        await until_the_poll_has_heartbeated(run.handle)
        await run.restart_worker()
        result = await asyncio.wait_for(run.handle.result(), RESULT_TIMEOUT)
    events = await run.server_events()

    assert result.status == "completed"
    assert '"status":"succeeded"' in (result.final_output or "")
    assert events.get("render_report started", 0) == 1
