"""A worker process killed with SIGKILL mid-operation: the run completes on a restarted worker
and the external system saw exactly one start."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from examples.systems import create_app as systems_app
from examples.systems import serving
from gateway.app import create_app as gateway_app
from gateway.delivery import TemporalDeliverer
from gateway.tokens import ResumeTokens
from schemas import RunInput
from schemas.run import POLL_OPERATION
from tests.helpers import eventually
from tests.rigs import WorkerProcess
from workflows.agent_run import AgentRunWorkflow

KEYS = {"crash": "c" * 40}
RESULT_TIMEOUT = 90


@pytest.fixture
async def crash_stack(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> AsyncIterator[tuple[WorkerProcess, str]]:
    tokens = ResumeTokens(KEYS, "crash")
    async with (
        serving(systems_app(export_seconds=0.5, pipeline_seconds=6.0)) as systems_url,
        serving(gateway_app(TemporalDeliverer(dev_env.client), tokens)) as gateway_url,
    ):
        env = {
            **os.environ,
            "TEMPORAL_ADDRESS": dev_env.client.service_client.config.target_host,
            "WAITSTATE_TASK_QUEUE": task_queue,
            "DEMO_SYSTEMS_URL": systems_url,
            "GATEWAY_URL": gateway_url,
            "WAITSTATE_TOKEN_KEYS": ",".join(f"{k}:{v}" for k, v in KEYS.items()),
        }
        worker = WorkerProcess(env, tmp_path / "worker.log")
        try:
            yield worker, systems_url
        finally:
            await worker.stop()


async def _stats(http: httpx.AsyncClient, url: str) -> dict[str, Any]:
    return dict((await http.get(f"{url}/_test/stats")).json())


async def _until_job_created(http: httpx.AsyncClient, url: str) -> None:
    async def created() -> bool:
        return any(k["jobs_created"] for k in (await _stats(http, url))["keys"].values())

    await eventually(created, "the external system to create the job")


async def _until_the_poll_has_heartbeated(handle: WorkflowHandle[Any, Any]) -> None:
    """The poll activity is running and the server holds a heartbeat of it, which is what a
    worker that takes over resumes from."""

    async def heartbeated() -> bool:
        pending = (await handle.describe()).raw_description.pending_activities
        return any(
            a.activity_type.name == POLL_OPERATION and a.heartbeat_details.payloads for a in pending
        )

    await eventually(heartbeated, "a heartbeat of the poll activity")


async def test_worker_killed_while_polling(
    dev_env: WorkflowEnvironment, task_queue: str, crash_stack: tuple[WorkerProcess, str]
) -> None:
    worker, systems_url = crash_stack
    await worker.start()
    async with httpx.AsyncClient(timeout=10) as http:
        handle = await dev_env.client.start_workflow(
            AgentRunWorkflow.run,
            RunInput(task="enrich", model="scripted:enrich", tools=["enrich_dataset"]),
            id=f"crash-poll-{task_queue}",
            task_queue=task_queue,
        )
        await _until_job_created(http, systems_url)
        await _until_the_poll_has_heartbeated(handle)
        await worker.kill()
        await worker.start()
        result = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)
        stats = await _stats(http, systems_url)

    assert result.status == "completed"
    assert result.final_output is not None and '"status":"succeeded"' in result.final_output
    [key] = stats["keys"].values()
    assert (key["starts"], key["jobs_created"]) == (1, 1)


async def test_worker_killed_right_after_the_start_was_accepted(
    dev_env: WorkflowEnvironment, task_queue: str, crash_stack: tuple[WorkerProcess, str]
) -> None:
    worker, systems_url = crash_stack
    await worker.start()
    async with httpx.AsyncClient(timeout=10) as http:
        # The export service creates the job, then holds its answer: the worker dies in between.
        (
            await http.post(f"{systems_url}/_test/faults", json={"hold_start_answers_seconds": 30})
        ).raise_for_status()
        handle = await dev_env.client.start_workflow(
            AgentRunWorkflow.run,
            RunInput(
                task="Export Q3 transactions and file them in the compliance folder",
                tools=["start_export", "verify_row_count", "upload_file", "notify_team"],
                tool_timeout=timedelta(seconds=5),
            ),
            id=f"crash-start-{task_queue}",
            task_queue=task_queue,
        )
        await _until_job_created(http, systems_url)
        await worker.kill()
        (
            await http.post(f"{systems_url}/_test/faults", json={"hold_start_answers_seconds": 0})
        ).raise_for_status()
        await worker.start()
        result = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)
        stats = await _stats(http, systems_url)

    assert result.status == "completed"
    assert result.final_output is not None and "filed them at compliance/" in result.final_output
    [key] = [k for k in stats["keys"].values() if k["kind"] == "export"]
    assert key["jobs_created"] == 1, "the retried start found the job, it did not make another"
    assert key["starts"] == 2
