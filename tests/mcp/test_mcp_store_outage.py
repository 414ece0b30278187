"""A run whose MCP listing cannot be kept (its blob store is out when the run starts) waits the
outage out, past the listing's five attempts, and goes on once the store is back (issue 22,
defect 4). Against the MCP test server over streamable HTTP, on the time-skipping server (the
run's backoff takes no time)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from tests.helpers import eventually, make_worker, replays, start_run
from waitstate.apps import load_apps
from waitstate.mcp import McpServer
from waitstate.schemas import TERMINAL_STATUSES, RunInput, RunResult, RunState
from waitstate.settings import Settings
from waitstate.workflows.agent_run import AgentRunWorkflow

APP = "tests.mcp.mcp_app:app"
LISTING_ATTEMPTS = 5  # the listing's own retry policy


async def test_an_outage_of_the_store_at_the_start_is_waited_out(
    time_skipping_env: WorkflowEnvironment, task_queue: str, reports_url: str, tmp_path: Path
) -> None:
    root = tmp_path / "blobs"
    root.mkdir()
    owners = root / "owners"
    owners.write_text("not a directory")  # every write begins with its owner's marker
    apps = load_apps([APP], mcp_servers=[McpServer("reports", url=reports_url)])
    client = time_skipping_env.client
    async with make_worker(client, task_queue, apps=apps, settings=Settings(blob_dir=root)):
        handle: WorkflowHandle[Any, RunResult] = await start_run(
            client,
            task_queue,
            RunInput(task="add", model="scripted:mcp-add", tools=["reports__add"]),
        )

        async def past_the_listings_attempts() -> RunState | None:
            state = await handle.query(AgentRunWorkflow.status)
            if state.status in TERMINAL_STATUSES:
                raise AssertionError(f"the run ended {state.status}: {state.error}")
            tries = state.store_outage.tries if state.store_outage else 0
            return state if tries > LISTING_ATTEMPTS else None

        # The time-skipping server skips time only while a result is awaited.
        ended = asyncio.create_task(handle.result())
        try:
            during = await eventually(past_the_listings_attempts, "more tries than five")
            owners.unlink()
            result = await ended
        finally:
            ended.cancel()
        await replays(handle, "mcp_listing_store_outage")

    assert during.store_outage is not None
    assert during.store_outage.call == "listing of MCP tools"
    assert result.status == "completed"
    assert result.final_output == "sum=5 offered=reports__add"
