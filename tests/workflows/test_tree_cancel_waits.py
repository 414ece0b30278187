"""workflows/tree.py says a run cancelled while it waits for its children "asks Temporal to
cancel them and waits until they have (each ends its own jobs and children first)". The chaos
suite's row 23b (chaos.trees) found parents that close before some of their children have: the
turn's calls are gathered, and the first sub-agent call to end cancelled re-raises the cancel,
which ends the gather (and the run) while the other calls still wait for their children.

Here a lead waits for two sub-agents: an asker, cancelled at once, and an enricher whose job's
cancel takes seconds. The lead is cancelled; it must close after both children, with both
ends in its history. It failed until a cancelled run's calls waited for the turn's sub-agents
(`SubAgents.settled_if_cancelled`), and passes since."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment

from examples.systems import create_app as systems_app
from examples.systems import serving
from tests.helpers import eventually, make_worker, start_run
from tests.workflows.tree_cancel_app import SYSTEMS_URL_ENV
from waitstate.apps import load_apps
from waitstate.schemas import RunInput, RunState
from waitstate.workflows.agent_run import AgentRunWorkflow

APPS = ["tests.workflows.tree_app:app", "tests.workflows.tree_cancel_app:app"]
CHILD_ENDS = {
    EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED,
    EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_FAILED,
    EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_CANCELED,
    EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_TIMED_OUT,
    EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_TERMINATED,
}


async def test_a_cancelled_lead_closes_once_every_child_has(
    dev_env: WorkflowEnvironment, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with serving(systems_app(pipeline_seconds=60)) as systems_url:
        monkeypatch.setenv(SYSTEMS_URL_ENV, systems_url)
        apps = load_apps(APPS)
        async with contextlib.AsyncExitStack() as closing:
            closing.push_async_callback(apps.aclose)  # the enricher's client, once it stops
            await closing.enter_async_context(make_worker(dev_env.client, task_queue, apps=apps))
            lead = await start_run(
                dev_env.client, task_queue, RunInput(task="two fan=2", agent="slow-cancel-lead")
            )

            async def both_wait() -> list[str] | None:
                state: RunState = await lead.query(AgentRunWorkflow.status)
                children = list(state.tree.children) if state.tree else []
                if len(children) < 2:
                    return None
                for child in children:
                    run = dev_env.client.get_workflow_handle(child)
                    try:
                        seen: RunState = await run.query(AgentRunWorkflow.status)
                    except RPCError as err:  # the lead records a child as it asks for its start
                        if err.status == RPCStatusCode.NOT_FOUND:
                            return None
                        raise
                    waits = any(r.open for r in seen.approvals.values()) or any(
                        not op.terminal for op in seen.operations.values()
                    )
                    if not waits:
                        return None
                return children

            children = await eventually(both_wait, "both sub-agents waiting")
            await lead.cancel()
            with contextlib.suppress(WorkflowFailureError):
                await asyncio.wait_for(lead.result(), 30)
            # The moment the lead has closed: every child must have, before it.
            statuses = {
                child: (await dev_env.client.get_workflow_handle(child).describe()).status
                for child in children
            }
            ends = [e async for e in lead.fetch_history_events() if e.event_type in CHILD_ENDS]

            async def all_closed() -> bool:
                described = [
                    await dev_env.client.get_workflow_handle(child).describe() for child in children
                ]
                return all(d.status != WorkflowExecutionStatus.RUNNING for d in described)

            # Whatever the lead did, its children's cancels end before the worker stops.
            await eventually(all_closed, "every child closed")

    assert statuses == dict.fromkeys(children, WorkflowExecutionStatus.CANCELED), statuses
    assert len(ends) == 2, f"the lead recorded {len(ends)} of its 2 children's ends"
