"""Long tools end to end: real dev server, real gateway and demo systems over HTTP, and the
real worker wiring. Each test proves an outcome from what the external system saw and from
the run's history."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import CancelledError
from temporalio.testing import WorkflowEnvironment

from examples.demo.pipeline import EnrichmentPipeline, enrich_tool
from examples.systems import create_app as systems_app
from examples.systems import serving
from tests.helpers import callback_token, eventually, process_env, replays
from tests.rigs import EXPORT_TASK, EXPORT_TOOLS, Stack
from tests.test_starter import Cli
from tests.workflows.runs import run_to_end
from waitstate.auth.tokens import ResumeTokens
from waitstate.schemas import RunInput
from waitstate.schemas.operations import Operation
from waitstate.workflows.agent_run import AgentRunWorkflow

# Every wait in these tests is bounded, so a regression fails instead of hanging CI.
RESULT_TIMEOUT = 60


async def _events(handle: WorkflowHandle[Any, Any]) -> list[HistoryEvent]:
    return [event async for event in handle.fetch_history_events()]


def _scheduled(event: HistoryEvent) -> str | None:
    if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
        return str(event.activity_task_scheduled_event_attributes.activity_type.name)
    return None


async def test_export_scenario_waits_for_the_webhook_without_model_turns(stack: Stack) -> None:
    async with stack.worker():
        handle = await stack.start(EXPORT_TASK, EXPORT_TOOLS)
        result = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)
    events = await _events(handle)
    stats = await stack.stats()
    notifications = (await stack.http.get(f"{stack.systems_url}/notifications")).json()

    assert result.status == "completed"
    assert result.final_output is not None and "filed them at compliance/" in result.final_output
    assert result.turns == 5 and result.usage.model_calls == 5
    # Between the export's start and the webhook's Update: no model call at all.
    start = next(i for i, e in enumerate(events) if _scheduled(e) == "call_tool")
    update = next(
        i
        for i, e in enumerate(events)
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
    )
    assert start < update
    assert [_scheduled(e) for e in events[start:update] if _scheduled(e)] == ["call_tool"]
    [key] = [k for k, v in stats["keys"].items() if v["kind"] == "export"]
    assert key.startswith(f"{handle.id}/")
    assert (stats["keys"][key]["starts"], stats["keys"][key]["jobs_created"]) == (1, 1)
    assert len(notifications) == 1 and "compliance/" in notifications[0]["message"]
    await replays(handle, "operation_callback_export")


async def _pending_operation(handle: WorkflowHandle[Any, Any]) -> Operation:
    async def one() -> Operation | None:
        state = await handle.query(AgentRunWorkflow.status)
        return next(iter(state.operations.values()), None)

    return await eventually(one, f"run {handle.id} to have an operation pending")


async def test_twenty_concurrent_duplicate_completions_apply_once(stack: Stack) -> None:
    await stack.faults(never_complete=True)  # the test delivers the webhook itself
    async with stack.worker():
        handle = await stack.start(EXPORT_TASK, EXPORT_TOOLS)
        op = await _pending_operation(handle)
        # The token the export service was given (with the nonce the run chose).
        token = await callback_token(stack.tokens, handle, op)
        body = {
            "status": "succeeded",
            "result": {"file": "exports/transactions-2025-Q3.csv", "rows": 7},
        }
        url = f"{stack.gateway_url}/v1/operations/{op.operation_id}/complete"
        answers = await asyncio.gather(
            *(
                stack.http.post(url, json=body, headers={"Authorization": f"Bearer {token}"})
                for _ in range(20)
            )
        )
        result = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)
    events = await _events(handle)

    codes = sorted(answer.status_code for answer in answers)
    assert codes == [200] + [409] * 19
    await replays(handle, "operation_duplicate_completions")
    accepted = [
        e for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
    ]
    assert len(accepted) == 1
    assert result.status == "completed" and result.turns == 5, "resumed once, not twenty times"


async def test_bad_tokens_are_refused_and_add_nothing_to_history(stack: Stack) -> None:
    await stack.faults(never_complete=True)
    async with stack.worker():
        handle = await stack.start(EXPORT_TASK, EXPORT_TOOLS)
        op = await _pending_operation(handle)
        before = (await handle.describe()).history_length
        good = await callback_token(stack.tokens, handle, op)
        forged = (
            ResumeTokens({"test": "f" * 40}, "test")
            .mint(handle.id, op.operation_id, op.expires_at)
            .token
        )
        other_op = stack.tokens.mint(handle.id, "op_someone_else", op.expires_at).token
        expired = stack.tokens.mint(
            handle.id, op.operation_id, datetime(2020, 1, 1, tzinfo=UTC)
        ).token
        url = f"{stack.gateway_url}/v1/operations/{op.operation_id}/complete"
        body = {"status": "succeeded", "result": {"rows": 1}}
        codes = [
            (
                await stack.http.post(url, json=body, headers={"Authorization": f"Bearer {t}"})
            ).status_code
            for t in (forged, other_op, expired)
        ]
        malformed = await stack.http.post(
            url, content=b"{not json", headers={"Authorization": f"Bearer {good}"}
        )
        after = (await handle.describe()).history_length
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)

    assert codes == [401, 401, 410]
    assert malformed.status_code == 422
    assert after == before, "refused completions must not touch the run"


async def test_an_operation_that_never_completes_expires_and_its_job_is_cancelled(
    stack: Stack,
) -> None:
    await stack.faults(never_complete=True)
    async with stack.worker(tools=stack.tools(export_timeout=timedelta(seconds=2))):
        handle = await stack.start(EXPORT_TASK, EXPORT_TOOLS)
        result = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)
        state = await handle.query(AgentRunWorkflow.status)
    stats = await stack.stats()

    [op] = state.operations.values()
    assert op.status == "expired" and op.error is not None and op.error.code == "expired"
    assert result.status == "completed"
    assert result.final_output is not None and "expired" in result.final_output
    [job] = stats["jobs"].values()
    assert job["status"] == "cancelled"
    assert sum(k["cancels"] for k in stats["keys"].values()) == 1
    await replays(handle, "operation_expired")


@pytest.mark.subprocess
async def test_cancelling_a_run_cancels_both_of_its_pending_jobs(stack: Stack) -> None:
    await stack.faults(never_complete=True)
    async with stack.worker():
        handle = await stack.start(EXPORT_TASK, EXPORT_TOOLS, model="scripted:two-exports")

        async def two_pending() -> bool:
            state = await handle.query(AgentRunWorkflow.status)
            return len(state.operations) == 2

        await eventually(two_pending, "both exports to be pending")
        cancel = await Cli(process_env(stack.client))("cancel", handle.id)
        with pytest.raises(WorkflowFailureError) as failure:
            await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)
        state = await handle.query(AgentRunWorkflow.status)
    stats = await stack.stats()

    assert cancel.code == 0, cancel.stderr
    assert isinstance(failure.value.cause, CancelledError)
    assert state.status == "cancelled"
    assert sorted(op.status for op in state.operations.values()) == ["cancelled", "cancelled"]
    assert sorted(job["status"] for job in stats["jobs"].values()) == ["cancelled", "cancelled"]
    assert all(k["cancels"] == 1 for k in stats["keys"].values())
    await replays(handle, "operation_run_cancelled")


async def test_handle_mode_returns_at_once_and_the_loop_waits_not_the_model(stack: Stack) -> None:
    async with stack.worker(tools=stack.tools(mode="handle")):
        handle = await stack.start(EXPORT_TASK, ["start_export"], model="scripted:two-exports")
        result = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)
        state = await handle.query(AgentRunWorkflow.status)

    assert result.status == "completed"
    assert (
        result.final_output is not None
        and '"check_with":"get_operation_status"' in result.final_output
    )
    # Turn 1 started both; turn 2 answered with the handles; then the loop (not the model)
    # waited, and called the model once per report: one for both, or one for each.
    assert sorted(op.status for op in state.operations.values()) == ["succeeded", "succeeded"]
    events = [
        i for i, step in enumerate(state.steps) if step.kind == "event" and step.name != "context"
    ]
    later_turns = [step for step in state.steps[events[0] :] if step.kind == "model"]
    assert len(events) == 2
    assert result.turns == 2 + len(later_turns) and len(later_turns) in (1, 2)
    await replays(handle, "operation_handle_mode")


async def test_builtin_tools_check_and_wait_from_workflow_state(stack: Stack) -> None:
    async with stack.worker(tools=stack.tools(mode="handle")):
        handle = await stack.start(EXPORT_TASK, ["start_export"], model="scripted:check-and-wait")
        result = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)
        activities = [_scheduled(e) for e in await _events(handle) if _scheduled(e)]

    assert result.status == "completed" and result.final_output is not None
    assert 'checked: {"operation_id":"op_' in result.final_output
    assert '"status":"running"' in result.final_output.split("waited:")[0]
    assert '"status":"succeeded"' in result.final_output.split("waited:")[1]
    # Both built-ins are answered by the workflow: no activity besides the models and the start.
    assert activities == ["call_model", "call_tool", "call_model", "call_model", "call_model"]


async def test_a_start_beyond_max_in_flight_is_a_tool_error(stack: Stack) -> None:
    await stack.faults(never_complete=True)
    async with stack.worker(tools=stack.tools(mode="handle", export_timeout=timedelta(seconds=2))):
        handle = await stack.start(
            EXPORT_TASK, ["start_export"], model="scripted:two-exports", max_in_flight=1
        )
        result = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)
        state = await handle.query(AgentRunWorkflow.status)
    stats = await stack.stats()

    refused = [s for s in state.steps if s.kind == "tool" and s.is_error]
    assert len(refused) == 1 and "limit 1" in refused[0].detail
    assert len(state.operations) == 1 and len(stats["jobs"]) == 1
    assert result.status == "completed"


async def test_a_poll_interval_of_a_minute_uses_the_retry_policy_as_the_poller(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    async with (
        httpx.AsyncClient(timeout=10) as http,
        serving(systems_app(pipeline_seconds=0.5)) as systems_url,
    ):
        pipeline = EnrichmentPipeline(http, systems_url)
        tools = [
            enrich_tool(pipeline, poll_interval=timedelta(minutes=10), timeout=timedelta(days=30))
        ]
        handle, result, _ = await run_to_end(
            time_skipping_env,
            task_queue,
            RunInput(task="enrich", model="scripted:enrich", tools=["enrich_dataset"]),
            tools=tools,
            within=RESULT_TIMEOUT,
        )
        events = await _events(handle)

    assert result.status == "completed"
    assert result.final_output is not None and '"status":"succeeded"' in result.final_output
    polls = [
        e.activity_task_started_event_attributes.attempt
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
    ]
    # Each attempt is one status check; the ten-minute gaps between them were time-skipped.
    assert max(polls) > 1
    await replays(handle, "operation_long_poll")
