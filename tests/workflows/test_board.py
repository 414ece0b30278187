"""What a run shows of itself (workflows/board.py), read as a fleet is operated: runs are found
by what they wait for (WaitingFor, WaitExpiresAt, AgentStatus), and `starter.py ops` shows a
wait that is overdue."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from datetime import timedelta
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from tests.helpers import eventually
from tests.rigs import EXPORT_TASK, EXPORT_TOOLS, ROOT, Stack
from waitstate.client import run_status
from waitstate.schemas.approvals import ApprovalPolicy, DecisionSignal
from waitstate.workflows.agent_run import AgentRunWorkflow
from waitstate.workflows.search_attributes import AGENT_STATUS, WAIT_EXPIRES_AT, WAITING_FOR


async def _listed(client: Client, query: str) -> list[Any]:
    async def found() -> list[Any]:  # visibility follows the run by a moment
        return [run async for run in client.list_workflows(query)]

    return await eventually(found, f"a run matching {query}")


async def _overdue(address: str, run_id: str) -> list[dict[str, Any]]:
    """The overdue waits `starter.py ops --json` lists for the run."""
    ops = await asyncio.create_subprocess_exec(
        sys.executable, "starter.py", "ops", "--json",
        cwd=ROOT,
        env={**os.environ, "TEMPORAL_ADDRESS": address},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    out, err = await ops.communicate()
    assert ops.returncode == 0, err.decode()
    return [w for w in json.loads(out)["overdue"] if w["run_id"] == run_id]


async def test_waiting_runs_are_found_by_what_they_wait_for(stack: Stack) -> None:
    await stack.faults(export_seconds=8, pipeline_seconds=8)
    async with stack.worker():
        runs: dict[str, WorkflowHandle[Any, Any]] = {
            "approval": await stack.start(
                "publish", ["request_approval"], model="scripted:ask-first"
            ),
            "webhook": await stack.start(EXPORT_TASK, EXPORT_TOOLS),
            "poll": await stack.start("enrich", ["enrich_dataset"], model="scripted:enrich"),
        }
        found = {
            kind: await _listed(
                stack.client, f'WorkflowId = "{handle.id}" AND WaitingFor = "{kind}"'
            )
            for kind, handle in runs.items()
        }
        state = await runs["approval"].query(AgentRunWorkflow.status)
        [request] = state.approvals.values()
        await runs["approval"].signal(
            AgentRunWorkflow.approve, DecisionSignal(request_id=request.request_id)
        )
        results = {kind: await asyncio.wait_for(h.result(), 60) for kind, h in runs.items()}
        finished = {kind: await h.describe() for kind, h in runs.items()}

    for kind in runs:
        [run] = found[kind]
        assert run.typed_search_attributes.get(WAIT_EXPIRES_AT) is not None, kind
        assert results[kind].status == "completed", kind
        attributes = finished[kind].typed_search_attributes
        # It shows what it showed last (revision 1): Temporal's status says it completed.
        assert attributes.get(AGENT_STATUS) == "running", kind
        assert run_status(attributes.get(AGENT_STATUS), finished[kind].status) == "completed"
        assert attributes.get(WAITING_FOR) == "none", kind


@pytest.mark.subprocess
async def test_ops_shows_an_overdue_wait(stack: Stack, dev_env: WorkflowEnvironment) -> None:
    async with stack.worker():
        handle = await stack.start(
            "publish",
            ["request_approval"],
            model="scripted:ask-first",
            approval=ApprovalPolicy(timeout=timedelta(seconds=2), on_timeout="fail"),
        )
        await _listed(stack.client, f'WorkflowId = "{handle.id}" AND WaitingFor = "approval"')
    # No worker is left to act on the timer: the wait stays open past its expiry, and ops
    # lists it as overdue once the expiry has passed.
    address = dev_env.client.service_client.config.target_host
    try:
        overdue = await eventually(
            lambda: _overdue(address, handle.id), "starter.py ops to list the wait as overdue"
        )
    finally:
        await handle.terminate("test over")

    assert len(overdue) == 1 and overdue[0]["waiting_for"] == "approval"
