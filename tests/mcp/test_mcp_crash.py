"""A worker process killed with SIGKILL while it polls an MCP task: another worker finishes the
wait, and the server made exactly one task."""

from __future__ import annotations

import asyncio

from tests.helpers import until_the_poll_has_heartbeated
from tests.mcp.runs import ReportsProcess

RESULT_TIMEOUT = 90


async def test_a_worker_killed_mid_poll_leaves_one_task_finished_by_the_next(
    reports_process: ReportsProcess,
) -> None:
    async with reports_process("scripted:mcp-render-slow", "render") as run:
        await until_the_poll_has_heartbeated(run.handle)
        await run.restart_worker()
        result = await asyncio.wait_for(run.handle.result(), RESULT_TIMEOUT)
    events = await run.server_events()

    assert result.status == "completed"
    assert '"status":"succeeded"' in (result.final_output or "")
    assert events.get("render_report started", 0) == 1
