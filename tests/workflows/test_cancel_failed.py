"""A cancel that fails (issue 22, defect 9): an operation expires and its job's system will not
cancel it. The model is told so in the operation's outcome (the job may still run), as is the
operator in `status` and `status --json`, and the failure is counted; on the time-skipping
server (an hour's wait and the cancel's retries take no time), with the demo systems over
HTTP. tests/mcp/test_mcp_cancel_failed.py has an MCP server down at the expiry."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from examples.demo.pipeline import EnrichmentPipeline, enrich_tool
from examples.systems import create_app as systems_app
from examples.systems import serving
from tests.helpers import make_worker, process_env, replays, start_run
from tests.test_starter import Cli
from waitstate.schemas import RunInput
from waitstate.workflows.agent_run import AgentRunWorkflow

RESULT_TIMEOUT = 60


@pytest.mark.subprocess  # the CLI
async def test_a_cancel_the_jobs_system_refuses_is_told_to_the_model_and_in_status(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    env = time_skipping_env
    cli = Cli(process_env(env.client, task_queue))
    async with (
        httpx.AsyncClient(timeout=10) as http,
        serving(systems_app(pipeline_seconds=0.5)) as systems_url,
    ):
        faults = {"never_complete": True, "fail_cancels": 100}
        (await http.post(f"{systems_url}/_test/faults", json=faults)).raise_for_status()
        # One check per ten minutes (the retry policy polls): the hour passes in no time.
        pipeline = EnrichmentPipeline(http, systems_url)
        tool = enrich_tool(
            pipeline, poll_interval=timedelta(minutes=10), timeout=timedelta(hours=1)
        )
        async with make_worker(env.client, task_queue, tools=[tool]):
            handle = await start_run(
                env.client,
                task_queue,
                RunInput(
                    task="enrich",
                    model="scripted:enrich",
                    tools=["enrich_dataset"],
                    rebuild_after=timedelta(days=1),  # the script reads its own transcript
                ),
            )
            result = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)
            state = await handle.query(AgentRunWorkflow.status)
            text = await cli("status", handle.id)
            as_json = await cli("status", handle.id, "--json")
            await replays(handle, "cancel_refused_by_the_jobs_system")
        stats = (await http.get(f"{systems_url}/_test/stats")).json()

    # The model read the truth in the tool's result: expired, and the job may still run.
    assert result.status == "completed", result.error
    told = json.loads((result.final_output or "").split("enrichment: ", 1)[1])
    assert told["status"] == "expired"
    assert "the cancel failed" in told["error"]["message"], told
    assert told["error"]["message"].endswith("the job may still run"), told
    assert "cannot cancel now" in told["error"]["message"], told
    [op] = state.operations.values()
    assert (op.status, op.cancel) == ("expired", "failed")
    # The job's system was asked (the cancel's five attempts) and the job runs on.
    [job] = stats["jobs"].values()
    assert job["status"] == "running"
    assert sum(key["cancels"] for key in stats["keys"].values()) == 5
    # The operator sees it in `status` and in `status --json`.
    assert text.code == 0, text.stderr
    assert f"{op.operation_id}: the cancel of job {op.job_id} failed" in text.stdout
    assert "the job may still run" in text.stdout
    assert as_json.code == 0, as_json.stderr
    shown = json.loads(as_json.stdout)["operations"][op.operation_id]
    assert shown["cancel"] == "failed"
    assert shown["error"]["message"] == told["error"]["message"]
