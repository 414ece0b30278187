"""When a run writes its checkpoint (what is done, what remains): before a wait known to be
long, or once a wait turned out long, before the context is rebuilt from it; never on the
path of a short poll. Every model is asked alike, the scripted one too."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta

from temporalio.api.enums.v1 import EventType

from schemas.approvals import ApprovalPolicy, DecideInput
from tests.helpers import eventually, make_worker, scheduled_activities
from tests.rigs import Stack
from waitstate.testing.wire_server import WireServer, openai_text, openai_tool_calls
from workflows.agent_run import AgentRunWorkflow

RESULT_TIMEOUT = 60


async def test_a_short_poll_costs_no_model_call_for_a_checkpoint(stack: Stack) -> None:
    with WireServer() as wire:
        wire.enqueue(
            openai_tool_calls([("call_1", "enrich_dataset", '{"dataset": "transactions"}')]),
            openai_text("enriched"),
        )
        settings = dataclasses.replace(
            stack.settings, openai_base_url=wire.openai_base_url, openai_api_key="test"
        )
        async with make_worker(
            stack.client,
            stack.task_queue,
            tools=stack.tools(),
            settings=settings,
            tokens=stack.tokens,
        ):
            handle = await stack.start("enrich", ["enrich_dataset"], model="openai:test-model")
            result = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)
            state = await handle.query(AgentRunWorkflow.status)

    assert result.status == "completed" and result.final_output == "enriched"
    # The pipeline said it would take seconds: nobody asks the model to sum up before it.
    assert await scheduled_activities(handle) == [
        "call_model",
        "call_tool",
        "poll_operation",
        "call_model",
    ]
    assert len(wire.requests) == 2 and state.checkpoint is None


async def test_before_an_approval_any_model_writes_the_checkpoint(stack: Stack) -> None:
    policy = ApprovalPolicy(timeout=timedelta(hours=1))
    async with stack.worker():
        handle = await stack.start(
            "ask first", ["request_approval"], model="scripted:ask-first", approval=policy
        )

        async def open_request() -> str | None:
            state = await handle.query(AgentRunWorkflow.status)
            return next((r.request_id for r in state.approvals.values() if r.open), None)

        request_id = await eventually(open_request, "the approval request")
        waiting = await handle.query(AgentRunWorkflow.status)
        await handle.execute_update(
            AgentRunWorkflow.decide,
            DecideInput(request_id=request_id, decision="approve", reviewer="ana"),
        )
        result = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)

    checkpoint = waiting.checkpoint
    assert checkpoint is not None
    assert checkpoint.remaining.startswith("once approval of request_approval from approvers is")
    assert waiting.usage.model_calls == 2, "the turn, and the checkpoint before the wait"
    events = [e async for e in handle.fetch_history_events()]
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    assert scheduled[:3] == ["call_model", "call_model", "notify_approval"]
    assert result.status == "completed"
