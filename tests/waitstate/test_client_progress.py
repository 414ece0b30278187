"""A polled long tool's progress as the client reads it (what `status`, `--json` and `watch`
show), on the real dev server with the production worker and the demo enrichment pipeline over
HTTP: from the poll's heartbeat, whether the poll checks in a loop (a short interval) or once
per attempt (the retry policy being the poller)."""

from __future__ import annotations

import re
from datetime import timedelta

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from examples.demo.pipeline import EnrichmentPipeline, enrich_tool
from examples.systems import create_app as systems_app
from examples.systems import serving
from tests.helpers import eventually, make_worker, start_run
from tests.mcp.runs import cancelled_at_the_end
from waitstate.client import WaitstateClient
from waitstate.schemas import RunInput
from waitstate.workflows.agent_run import AgentRunWorkflow


@pytest.mark.parametrize("interval", [timedelta(seconds=1), timedelta(minutes=10)])
async def test_a_polled_jobs_progress_is_read_from_its_polls_heartbeat(
    dev_env: WorkflowEnvironment, task_queue: str, interval: timedelta
) -> None:
    client = WaitstateClient(dev_env.client, task_queue=task_queue)
    async with (
        httpx.AsyncClient(timeout=10) as http,
        serving(systems_app(pipeline_seconds=600)) as url,
    ):
        tools = [enrich_tool(EnrichmentPipeline(http, url), poll_interval=interval)]
        async with make_worker(dev_env.client, task_queue, tools=tools):
            handle = await start_run(
                dev_env.client,
                task_queue,
                RunInput(task="enrich", model="scripted:enrich", tools=["enrich_dataset"]),
            )
            async with cancelled_at_the_end(handle):

                async def reported() -> str | None:
                    state = (await client.status(handle.id)).state
                    return next((op.progress for op in state.operations.values()), None)

                progress = await eventually(reported, "the job's progress in the run's status")
                # The run itself never recorded it: its own answer has none.
                [recorded] = (await handle.query(AgentRunWorkflow.status)).operations.values()

    assert re.fullmatch(r"\d+%", progress), progress
    assert (recorded.status, recorded.progress) == ("running", None)
