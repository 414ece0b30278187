"""Agent trees end to end on the dev server, the gateway and the demo systems over real HTTP: a
tree three levels deep with fan-out 5 through webhooks, polls and approvals decided at the root;
a root cancelled over 50 waiting children, leaving no node running, no job open and no model
call started after the cancel."""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import datetime

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError

from tests.helpers import eventually
from tests.rigs import Stack
from waitstate.apps import load_apps
from waitstate.client import TreeNode
from waitstate.schemas import RunInput, RunResult
from waitstate.schemas.approvals import DecideInput
from waitstate.schemas.run import CALL_MODEL

APP = "tests.workflows.tree_drill_app:app"


async def _tree(stack: Stack, run_id: str, count: int) -> list[TreeNode]:
    async def listed() -> list[TreeNode] | None:
        nodes = await stack.waitstate.tree(run_id)
        return nodes if len(nodes) == count else None

    return await eventually(listed, f"{count} nodes under {run_id}", within=60)


async def test_a_tree_three_deep_with_fan_out_5_ends_through_webhooks_polls_and_the_roots_inbox(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TREE_DRILL_SYSTEMS_URL", stack.systems_url)
    client = stack.waitstate
    apps = load_apps([APP])
    async with stack.worker(tools=[], apps=apps), contextlib.aclosing(apps):
        started = await client.start(RunInput(task="drill fan=5", agent="drill-lead"))
        decided: set[str] = set()
        while len(decided) < 5:  # one asker per team: five requests, each decided at the root
            for request in await client.open_requests(started.run_id):
                if request.request_id not in decided:
                    outcome = await client.decide(
                        started.run_id,
                        DecideInput(
                            request_id=request.request_id, decision="approve", reviewer="ana"
                        ),
                    )
                    assert outcome.accepted
                    decided.add(request.request_id)
            await asyncio.sleep(0.1)
        handle = stack.client.get_workflow_handle(started.run_id, result_type=RunResult)
        result = await asyncio.wait_for(handle.result(), 120)
        nodes = await _tree(stack, started.run_id, 1 + 5 + 25)
    stats = await stack.stats()

    assert result.status == "completed", result
    assert {n.status for n in nodes} == {"completed"}
    agents = [n.agent for n in nodes[1:] if n.depth == 2]
    assert agents.count("drill-exporter") == 10
    assert agents.count("drill-enricher") == 5
    assert agents.count("drill-asker") == 5
    assert agents.count("drill-noter") == 5
    # Every job started once, and reported: 10 exports by webhook, 5 enrichments polled.
    jobs = list(stats["jobs"].values())
    assert {k["starts"] for k in stats["keys"].values()} == {1}
    assert {j["status"] for j in jobs} == {"succeeded"}
    exports = [j for j in jobs if j["kind"] == "export"]
    enrichments = [j for j in jobs if j["kind"] == "enrich"]
    assert len(exports) == 10 and all(j["webhooks"][0]["status_code"] == 200 for j in exports)
    assert len(enrichments) == 5 and all(j["status_checks"] >= 1 for j in enrichments)
    # The root's answer holds each team's, which holds each of its five researchers'.
    assert result.final_output is not None and result.final_output.count("combined 5") == 6


async def _model_calls_after(client: Client, run_ids: list[str], moment: datetime) -> int:
    """The model calls of `run_ids` scheduled or started after `moment`."""
    late = 0
    for run_id in run_ids:
        scheduled: dict[int, str] = {}
        async for event in client.get_workflow_handle(run_id).fetch_history_events():
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                name = event.activity_task_scheduled_event_attributes.activity_type.name
                scheduled[event.event_id] = name
                if name == CALL_MODEL and event.event_time.ToDatetime() > moment:
                    late += 1
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                of = event.activity_task_started_event_attributes.scheduled_event_id
                if scheduled.get(of) == CALL_MODEL and event.event_time.ToDatetime() > moment:
                    late += 1
    return late


async def test_cancelling_a_root_over_50_waiting_children_leaves_nothing_running(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TREE_DRILL_SYSTEMS_URL", stack.systems_url)
    await stack.faults(never_complete=True)  # the exports wait for a webhook that never comes
    client = stack.waitstate
    apps = load_apps([APP])
    async with stack.worker(tools=[], apps=apps), contextlib.aclosing(apps):
        started = await client.start(RunInput(task="wait fan=50", agent="drill-waiters"))

        async def all_waiting() -> list[TreeNode] | None:
            nodes = await stack.waitstate.tree(started.run_id)
            below = nodes[1:]
            return nodes if len(below) == 50 and all(n.status == "waiting" for n in below) else None

        nodes = await eventually(all_waiting, "50 children waiting", within=90)
        root = stack.client.get_workflow_handle(started.run_id)
        began = time.monotonic()
        await root.cancel()
        with contextlib.suppress(WorkflowFailureError):
            await asyncio.wait_for(root.result(), 30)

        async def settled() -> bool:
            running = [
                w
                async for w in stack.client.list_workflows(
                    f'WorkflowId STARTS_WITH "{started.run_id}/" AND ExecutionStatus = "Running"'
                )
            ]
            open_jobs = [
                j
                for j in stack.systems.long_jobs.jobs.values()
                if j.status in ("running", "input_required")
            ]
            return not running and not open_jobs

        await eventually(settled, "no node running, no job open", within=30)
        took = time.monotonic() - began
    cancel_requested = [
        e.event_time.ToDatetime()
        async for e in root.fetch_history_events()
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED
    ][0]
    late = await _model_calls_after(stack.client, [n.run_id for n in nodes], cancel_requested)

    for node in nodes[1:]:
        described = await stack.client.get_workflow_handle(node.run_id).describe()
        assert described.status == WorkflowExecutionStatus.CANCELED, node
    assert late == 0
    print(f"cancel over 50 waiting children: settled in {took:.2f} s (list view and jobs)")
