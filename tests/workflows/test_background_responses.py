"""Runs on the real dev server whose model answers in the background
(`openai-responses:<model>?background`), through the real OpenAI SDK, against the local wire
server: the run waits for each response by a polling activity, not a model call held open; a new
worker takes the wait over from the id in the history; past the run's `model_timeout`, or when
the run is cancelled, the response is cancelled at the provider."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta
from typing import Any

import pytest
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError, CancelledError
from temporalio.testing import WorkflowEnvironment

from tests.helpers import eventually, make_worker, replays, scheduled_activities, start_run
from waitstate.schemas import RunInput, RunResult
from waitstate.schemas.errors import RUN_FAILED
from waitstate.schemas.run import AWAIT_MODEL_RESPONSE, CALL_MODEL, CANCEL_MODEL_RESPONSE
from waitstate.settings import Settings
from waitstate.testing.wire_server import WireServer, responses_function_calls, responses_text
from waitstate.workflows.agent_run import AgentRunWorkflow

MODEL = "openai-responses:test-model?background"
CALCULATE = ("call_1", "calculate", '{"expression": "17 * 23"}')


def _settings(server: WireServer, **changes: Any) -> Settings:
    settings = Settings(openai_base_url=server.openai_base_url, openai_api_key="test-key")
    return dataclasses.replace(settings, **changes)


def _calls(wire: WireServer, method: str, suffix: str = "") -> list[str]:
    """The paths (without the query) of the requests of `method` ending with `suffix`."""
    paths = [r.path.partition("?")[0] for r in wire.requests if r.method == method]
    return [p for p in paths if p.endswith(suffix)]


def _creates(wire: WireServer) -> list[dict[str, Any]]:
    return [r.body for r in wire.requests if r.method == "POST" and r.path == "/v1/responses"]


async def _start(
    env: WorkflowEnvironment, task_queue: str, **changes: Any
) -> WorkflowHandle[Any, RunResult]:
    run = RunInput(task="What is 17 * 23?", model=MODEL, **{"tools": ["calculate"], **changes})
    return await start_run(env.client, task_queue, run)


async def _until_polled(wire: WireServer) -> None:
    async def polled() -> bool:
        return bool(_calls(wire, "GET"))

    await eventually(polled, "the first check of the background response")


async def test_background_calls_complete_through_the_poll(
    dev_env: WorkflowEnvironment, task_queue: str, wire: WireServer
) -> None:
    wire.background.seconds = 1.5
    wire.enqueue(
        responses_function_calls([CALCULATE], reasoning="enc-1"),
        responses_text("17 * 23 = 391", input_tokens=40, output_tokens=7, cached_tokens=32),
    )
    # No cache: every workflow task replays the history so far, as after a worker restart.
    settings = _settings(wire, max_cached_workflows=0)
    async with make_worker(dev_env.client, task_queue, settings=settings):
        handle = await _start(dev_env, task_queue)
        result = await handle.result()
        state = await handle.query(AgentRunWorkflow.status)

    assert result.status == "completed" and result.final_output == "17 * 23 = 391"
    assert (result.turns, result.tool_calls) == (2, 1)
    # Each call counted once, with the usage its response reported, cached tokens and all.
    assert result.usage.model_calls == 2
    assert result.usage.input_tokens == 10 + 40
    assert result.usage.cached_input_tokens == 32
    creates = _creates(wire)
    assert len(creates) == 2
    assert all(c["background"] is True and c["store"] is True for c in creates)
    assert creates[0]["model"] == "test-model"
    assert "391" in str(creates[1]["input"]), "the tool's result went back to the model"
    assert "enc-1" in str(creates[1]["input"]), "so did the reasoning that called the tool"
    assert len(_calls(wire, "GET")) >= 2
    assert _calls(wire, "POST", "/cancel") == []
    assert await scheduled_activities(handle) == [
        CALL_MODEL,
        AWAIT_MODEL_RESPONSE,
        "call_tool",
        CALL_MODEL,
        AWAIT_MODEL_RESPONSE,
    ]
    assert [s.kind for s in state.steps] == ["model", "tool", "model"]
    await replays(handle, "agent_run_background_response")


async def test_a_new_worker_takes_the_wait_over_with_one_create(
    dev_env: WorkflowEnvironment, task_queue: str, wire: WireServer
) -> None:
    wire.background.seconds = 6
    wire.enqueue(responses_text("391"))
    async with make_worker(dev_env.client, task_queue, settings=_settings(wire)):
        handle = await _start(dev_env, task_queue, tools=[])
        await _until_polled(wire)
    # That worker is gone; the run's history has the response's id.
    checks_before = len(_calls(wire, "GET"))
    async with make_worker(dev_env.client, task_queue, settings=_settings(wire)):
        result = await asyncio.wait_for(handle.result(), 60)

    assert result.status == "completed" and result.final_output == "391"
    assert len(_creates(wire)) == 1, "the model was asked once"
    assert len(_calls(wire, "GET")) > checks_before, "the new worker asked for the response"
    attempts = []
    async for event in handle.fetch_history_events():
        if event.HasField("activity_task_started_event_attributes"):
            attempts.append(event.activity_task_started_event_attributes.attempt)
    assert attempts == [1, 2], "the wait was taken over, as a second attempt"


async def test_past_the_model_timeout_the_response_is_cancelled(
    dev_env: WorkflowEnvironment, task_queue: str, wire: WireServer
) -> None:
    wire.background.seconds = 120
    async with make_worker(dev_env.client, task_queue, settings=_settings(wire)):
        handle = await _start(dev_env, task_queue, model_timeout=timedelta(seconds=4))
        with pytest.raises(WorkflowFailureError) as failure:
            await asyncio.wait_for(handle.result(), 60)
        state = await handle.query(AgentRunWorkflow.status)
        await replays(handle, "agent_run_background_response_past_its_timeout")

    cause = failure.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == RUN_FAILED
    assert f"{MODEL} did not answer within 4 s (model_timeout)" in cause.message
    assert len(_creates(wire)) == 1
    cancels = _calls(wire, "POST", "/cancel")
    assert len(cancels) == 1
    response_id = cancels[0].split("/")[-2]
    assert (await wire_status(wire, response_id)) == "cancelled"
    assert state.status == "failed"
    assert any("it was cancelled" in s.detail for s in state.steps if s.kind == "event")
    assert (await scheduled_activities(handle))[-1] == CANCEL_MODEL_RESPONSE


async def test_cancelling_the_run_cancels_the_response(
    dev_env: WorkflowEnvironment, task_queue: str, wire: WireServer
) -> None:
    wire.background.seconds = 120
    async with make_worker(dev_env.client, task_queue, settings=_settings(wire)):
        handle = await _start(dev_env, task_queue)
        await _until_polled(wire)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError) as failure:
            await asyncio.wait_for(handle.result(), 60)
        state = await handle.query(AgentRunWorkflow.status)
        await replays(handle, "agent_run_background_response_cancelled")

    assert isinstance(failure.value.cause, CancelledError)
    assert state.status == "cancelled"
    assert len(_calls(wire, "POST", "/cancel")) == 1
    assert (await scheduled_activities(handle))[-1] == CANCEL_MODEL_RESPONSE


async def wire_status(wire: WireServer, response_id: str) -> str | None:
    """The background response's status as the server has it now."""
    body = wire.background.retrieve(response_id)
    return None if body is None else str(body["status"])
