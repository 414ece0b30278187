"""The demo's research lead (`make tree-demo`), to its report on the dev server, with the demo
systems and the gateway over real HTTP: its researchers run at once as its children, one waits
for the export's webhook through the gateway, one for a person's approval."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from temporalio.client import WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment

from examples.demo.research import RESEARCH_TASK
from examples.systems import create_app as systems_app
from tests.helpers import eventually
from tests.rigs import Stack, serving_stack
from waitstate.apps import load_apps
from waitstate.schemas import RunInput, RunResult, RunState
from waitstate.worker import DEMO_APP
from waitstate.workflows.agent_run import AgentRunWorkflow

KEYS = {"test": "t" * 40}
# Runs take seconds; this only turns a hang into a failure.
RUN_WITHIN = 90.0
NODES = ["researcher-1", "data-researcher-2", "payments-researcher-3"]


@pytest.fixture
async def stack(dev_env: WorkflowEnvironment, task_queue: str) -> AsyncIterator[Stack]:
    """The dev server, the gateway and the demo systems (exports take a third of a second)."""
    systems = systems_app(export_seconds=0.3)
    async with serving_stack(dev_env.client, task_queue, KEYS, "test", systems) as stack:
        yield stack


async def _state(stack: Stack, run_id: str) -> RunState:
    state: RunState = await stack.client.get_workflow_handle(run_id).query(AgentRunWorkflow.status)
    return state


async def test_the_research_lead_starts_its_researchers_at_once_and_reports_what_each_found(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The demo app's tools call the demo systems where DEMO_SYSTEMS_URL says, as under `make up`.
    monkeypatch.setenv("DEMO_SYSTEMS_URL", stack.systems_url)
    apps = load_apps([DEMO_APP])
    try:
        async with stack.worker(tools=[], apps=apps):
            started = await stack.waitstate.start(
                RunInput(task=RESEARCH_TASK, agent="research-lead")
            )
            root = stack.client.get_workflow_handle(started.run_id, result_type=RunResult)
            payments = f"{root.id}/payments-researcher-3"
            # The payments researcher waits for a person; the lead waits for it.
            notice = await stack.notice(payments, "approval")
            waiting = await _state(stack, payments)
            assert waiting.final_output is None and waiting.completed == []
            lead = await _state(stack, root.id)
            assert lead.tree is not None
            assert lead.tree.children[payments].status == "running"
            decided = await stack.approve_by_link(notice)
            assert decided.status_code == 200, decided.text
            result = await asyncio.wait_for(root.result(), RUN_WITHIN)
            lead = await _state(stack, root.id)
            children = {node: await _state(stack, f"{root.id}/{node}") for node in NODES}
    finally:
        await apps.aclose()

    assert result.status == "completed", result
    # Three researchers, each a run of its own, started in one turn, each completed.
    assert lead.tree is not None and lead.tree.started == 3
    assert [c.node for c in lead.tree.children.values()] == NODES
    assert {c.status for c in lead.tree.children.values()} == {"completed"}
    assert lead.turns == 2
    nodes = await _nodes(stack, root.id, 3)
    assert sorted(n.id for n in nodes) == sorted(f"{root.id}/{node}" for node in NODES)
    assert {n.status for n in nodes} == {WorkflowExecutionStatus.COMPLETED}
    # The export ended by the export service's webhook, through the gateway.
    [export] = children["data-researcher-2"].operations.values()
    assert (export.tool, export.completion, export.status) == (
        "start_export",
        "callback",
        "succeeded",
    )
    [job] = [j for j in stack.systems.jobs.values() if j.key.startswith(f"{root.id}/data-")]
    assert job.callback_url is not None and job.callback_url.startswith(stack.gateway_url)
    assert [(w.report, w.status_code) for w in job.webhooks][-1] == ("succeeded", 200)
    # The payments were read once a person approved the read.
    [request] = children["payments-researcher-3"].approvals.values()
    assert request.tool == "read_payment_history"
    assert request.decision is not None
    assert (request.decision.decision, request.decision.reviewer) == ("approve", "ana")
    # The report has each researcher's part.
    report = result.final_output or ""
    assert "- researcher-1: Claim C-118 is valid: $420 for Dana Whitfield." in report
    rows = int(job.result["rows"]) if job.result else -1
    assert (
        f"- data-researcher-2: Exported {rows} transactions rows for 2025-Q3 to "
        "exports/transactions-2025-Q3.csv; the row count checks out." in report
    )
    assert "- payments-researcher-3: Refunded on claim C-118 so far: $0 (0 refunds)." in report


async def _nodes(stack: Stack, root: str, count: int) -> list[Any]:
    """The runs below `root` (Temporal's RootWorkflowId), once the list view shows `count`."""

    async def listed() -> list[Any] | None:
        query = f"RootWorkflowId = '{root}' AND WorkflowId != '{root}'"
        found = [w async for w in stack.client.list_workflows(query)]
        return found if len(found) == count and all(w.close_time for w in found) else None

    return await eventually(listed, f"{count} nodes of {root} in the list view", within=20)
