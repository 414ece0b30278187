"""Both metrics endpoints, scraped: the worker's (SDK metrics plus ours) and the gateway's."""

from __future__ import annotations

import asyncio
import re
import socket
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from examples.systems import create_app as systems_app
from examples.systems import serving
from tests.helpers import eventually, process_env, start_run
from tests.rigs import WorkerProcess
from waitstate.auth.tokens import ResumeTokens
from waitstate.gateway.app import create_app as gateway_app
from waitstate.gateway.delivery import TemporalDeliverer
from waitstate.schemas import RunInput
from waitstate.schemas.approvals import DecisionSignal
from waitstate.workflows.agent_run import AgentRunWorkflow

KEYS = {"metrics": "m" * 40}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _value(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of `name` whose labels include `labels`."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(f"{name}{{"):
            continue
        if all(f'{key}="{value}"' in line for key, value in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.mark.subprocess
async def test_counters_move_for_an_operation_a_rejected_webhook_and_an_approval(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    tokens = ResumeTokens(KEYS, "metrics")
    metrics_address = f"127.0.0.1:{_free_port()}"
    client = dev_env.client
    async with (
        httpx.AsyncClient(timeout=10) as http,
        serving(systems_app(export_seconds=0.3)) as systems_url,
        serving(gateway_app(TemporalDeliverer(client), tokens)) as gateway_url,
    ):
        worker = WorkerProcess(
            process_env(
                client,
                task_queue,
                DEMO_SYSTEMS_URL=systems_url,
                GATEWAY_URL=gateway_url,
                WAITSTATE_TOKEN_KEYS="metrics:" + KEYS["metrics"],
                WAITSTATE_WORKER_METRICS=metrics_address,
                WAITSTATE_BLOB_DIR=str(tmp_path / "blobs"),
            ),
            tmp_path / "worker.log",
        )
        await worker.start()
        try:
            export = await start_run(
                client,
                task_queue,
                RunInput(
                    task="Export Q3 transactions and file them in the compliance folder",
                    tools=["start_export", "verify_row_count", "upload_file", "notify_team"],
                ),
                workflow_id=f"metrics-export-{task_queue}",
            )
            await asyncio.wait_for(export.result(), 60)
            forged = await http.post(
                f"{gateway_url}/v1/operations/op_x/complete",
                json={"status": "succeeded"},
                headers={"Authorization": "Bearer not-a-token"},
            )
            approval = await start_run(
                client,
                task_queue,
                RunInput(task="publish", model="scripted:ask-first", tools=["request_approval"]),
                workflow_id=f"metrics-approval-{task_queue}",
            )

            async def approvals() -> dict[str, Any]:
                return dict((await approval.query(AgentRunWorkflow.status)).approvals)

            [request] = (await eventually(approvals, "the approval request")).values()
            await approval.signal(
                AgentRunWorkflow.approve, DecisionSignal(request_id=request.request_id)
            )
            await asyncio.wait_for(approval.result(), 60)

            async def exported() -> str:
                # The SDK exports on an interval: wait until every counter below has moved.
                text = (await http.get(f"http://{metrics_address}/metrics")).text
                moved = [
                    _value(text, "waitstate_operations_started", tool="start_export"),
                    _value(text, "waitstate_operations_finished", tool="start_export"),
                    _value(text, "waitstate_approvals", outcome="approved"),
                    _value(text, "waitstate_model_calls", provider="scripted") >= 7,
                    re.search(r"^temporal_workflow_completed", text, re.M),
                ]
                return text if all(moved) else ""

            worker_metrics = await eventually(exported, "the worker's counters to be exported")
            gateway_metrics = (await http.get(f"{gateway_url}/metrics")).text
        finally:
            await worker.stop()

    assert forged.status_code == 401
    assert _value(worker_metrics, "waitstate_operations_started", tool="start_export") == 1
    finished = {"tool": "start_export", "outcome": "succeeded"}
    assert _value(worker_metrics, "waitstate_operations_finished", **finished) == 1
    assert _value(worker_metrics, "waitstate_approvals", outcome="approved") == 1
    assert _value(worker_metrics, "waitstate_model_calls", provider="scripted") >= 7
    assert re.search(r"^temporal_workflow_completed", worker_metrics, re.M), "the SDK's own"
    assert _value(gateway_metrics, "waitstate_gateway_accepted_total", endpoint="complete") == 1
    assert _value(gateway_metrics, "waitstate_gateway_refusals_total", code="invalid_token") == 1
