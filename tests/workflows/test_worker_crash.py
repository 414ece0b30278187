"""A worker process killed with SIGKILL mid-operation: the run completes on a restarted worker
and the external system saw exactly one start."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from examples.systems import create_app as systems_app
from tests.helpers import (
    eventually,
    quiet_history_length,
    start_run,
    until_the_poll_has_heartbeated,
)
from tests.rigs import WorkerProcess, worker_process_beside
from tests.tiers import SUBPROCESS, needs
from waitstate.activation_order import workflow_runner
from waitstate.converter import DATA_CONVERTER
from waitstate.schemas import RunInput
from waitstate.schemas.approvals import ApprovalPolicy, DecideInput
from waitstate.workflows.agent_run import AgentRunWorkflow

KEYS = {"crash": "c" * 40}
RESULT_TIMEOUT = 90


@pytest.fixture
@needs(SUBPROCESS)
async def crash_stack(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> AsyncIterator[tuple[WorkerProcess, str]]:
    """A worker process, started, serving the test's queue, with the demo systems and the
    gateway in this process: the worker, and the systems' URL."""
    systems = systems_app(export_seconds=0.5, pipeline_seconds=6.0)
    async with worker_process_beside(
        dev_env.client, task_queue, tmp_path / "worker.log", systems, KEYS
    ) as stack:
        yield stack


async def _stats(http: httpx.AsyncClient, url: str) -> dict[str, Any]:
    return dict((await http.get(f"{url}/_test/stats")).json())


async def _until_job_created(http: httpx.AsyncClient, url: str) -> None:
    async def created() -> bool:
        return any(k["jobs_created"] for k in (await _stats(http, url))["keys"].values())

    await eventually(created, "the external system to create the job")


async def test_worker_killed_while_polling(
    dev_env: WorkflowEnvironment, task_queue: str, crash_stack: tuple[WorkerProcess, str]
) -> None:
    worker, systems_url = crash_stack
    async with httpx.AsyncClient(timeout=10) as http:
        handle = await start_run(
            dev_env.client,
            task_queue,
            RunInput(task="enrich", model="scripted:enrich", tools=["enrich_dataset"]),
            workflow_id=f"crash-poll-{task_queue}",
        )
        await _until_job_created(http, systems_url)
        await until_the_poll_has_heartbeated(handle)
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
    async with httpx.AsyncClient(timeout=10) as http:
        # The export service creates the job, then holds its answer: the worker dies in between.
        (
            await http.post(f"{systems_url}/_test/faults", json={"hold_start_answers_seconds": 30})
        ).raise_for_status()
        handle = await start_run(
            dev_env.client,
            task_queue,
            RunInput(
                task="Export Q3 transactions and file them in the compliance folder",
                tools=["start_export", "verify_row_count", "upload_file", "notify_team"],
                tool_timeout=timedelta(seconds=5),
            ),
            workflow_id=f"crash-start-{task_queue}",
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


async def test_a_decision_waiting_for_a_worker_when_the_window_passed_replays(
    dev_env: WorkflowEnvironment, task_queue: str, crash_stack: tuple[WorkerProcess, str]
) -> None:
    """The worker dies with the run waiting for a person; the approval window passes (its timer
    fires into a workflow task nobody takes) and a person decides before a worker is back.
    The new worker gets the timer and the decision in one task it has to rebuild the run for:
    whatever order it sees them in, the history it writes must replay."""
    worker, _ = crash_stack
    policy = ApprovalPolicy(timeout=timedelta(seconds=2), on_timeout="escalate")
    handle = await start_run(
        dev_env.client,
        task_queue,
        RunInput(
            task="ask first",
            model="scripted:ask-first",
            tools=["request_approval"],
            approval=policy,
        ),
        workflow_id=f"crash-decision-{task_queue}",
    )

    async def open_request() -> str | None:
        state = await handle.query(AgentRunWorkflow.status)
        return next((r.request_id for r in state.approvals.values() if r.open), None)

    request_id = await eventually(open_request, "the approval request")
    await quiet_history_length(handle)
    await worker.kill()

    async def fired() -> bool:
        # The window's timer fired into a task for the dead worker's sticky queue.
        events = [event async for event in handle.fetch_history_events()]
        return any(e.event_type == EventType.EVENT_TYPE_TIMER_FIRED for e in events)

    await eventually(fired, "the approval window to pass")
    # The person decides while that task waits for the dead worker (it times out, then goes to
    # the worker started below, cold).
    deciding = asyncio.create_task(
        handle.execute_update(
            AgentRunWorkflow.decide,
            DecideInput(request_id=request_id, decision="approve", reviewer="ana"),
        )
    )
    await worker.start()
    outcome = await asyncio.wait_for(deciding, RESULT_TIMEOUT)
    result = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)
    history = await handle.fetch_history()
    replay = await Replayer(
        workflow_runner=workflow_runner(),
        workflows=[AgentRunWorkflow],
        data_converter=DATA_CONVERTER,
    ).replay_workflow(history, raise_on_replay_failure=False)

    assert outcome.status == "approved" and result.status == "completed"
    assert replay.replay_failure is None, replay.replay_failure
