"""Runs on the real dev server whose model is OpenAI (Chat Completions or Responses) or Anthropic,
through their real SDK clients, against a local server that speaks their wire protocols."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.failure.v1 import ApplicationFailureInfo
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from tests.helpers import activity_attempts, make_worker, start_run
from waitstate.agents import Agent
from waitstate.apps import Apps
from waitstate.schemas import RunInput, RunResult
from waitstate.schemas.errors import MODEL_UNAVAILABLE, RUN_FAILED
from waitstate.settings import Settings
from waitstate.testing.wire_server import (
    WireServer,
    anthropic_text,
    anthropic_tool_use,
    error,
    openai_text,
    openai_tool_calls,
    responses_function_calls,
    responses_text,
)
from waitstate.workflows.agent_run import AgentRunWorkflow


def _settings(server: WireServer) -> Settings:
    return Settings(
        openai_base_url=server.openai_base_url,
        anthropic_base_url=server.anthropic_base_url,
        openai_api_key="test-key",
        anthropic_api_key="test-key",
    )


def _tool_call(provider: str) -> dict[str, Any]:
    if provider == "openai":
        return openai_tool_calls([("call_1", "calculate", '{"expression": "17 * 23"}')])
    if provider == "openai-responses":
        calculate = ("call_1", "calculate", '{"expression": "17 * 23"}')
        return responses_function_calls([calculate], reasoning="enc-1")
    return anthropic_tool_use([("toolu_1", "calculate", {"expression": "17 * 23"})])


TEXT: dict[str, Callable[..., dict[str, Any]]] = {
    "openai": openai_text,
    "openai-responses": responses_text,
    "anthropic": anthropic_text,
}
PROVIDERS = list(TEXT)


async def _start(
    env: WorkflowEnvironment, task_queue: str, model: str
) -> WorkflowHandle[Any, RunResult]:
    return await start_run(
        env.client, task_queue, RunInput(task="What is 17 * 23?", model=model, tools=["calculate"])
    )


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_run_completes_with_the_tools_it_called(
    dev_env: WorkflowEnvironment, task_queue: str, wire: WireServer, provider: str
) -> None:
    wire.enqueue(
        _tool_call(provider),
        TEXT[provider]("17 * 23 = 391", input_tokens=40, output_tokens=7),
    )
    async with make_worker(dev_env.client, task_queue, settings=_settings(wire)):
        handle = await _start(dev_env, task_queue, f"{provider}:test-model")
        result = await handle.result()

    assert result.status == "completed"
    assert result.final_output == "17 * 23 = 391"
    assert (result.turns, result.tool_calls) == (2, 1)
    assert result.usage.model_calls == 2
    assert result.usage.input_tokens == 10 + 40  # the helpers' default, then ours
    second = wire.requests[1].body
    assert second["model"] == "test-model"
    conversation = second.get("messages") or second["input"]
    assert "391" in str(conversation), "the tool's result went back to the model"
    if provider == "openai-responses":
        assert "enc-1" in str(conversation), "so did the reasoning that called the tool"
    tool_names = [t.get("name") or t["function"]["name"] for t in second["tools"]]
    assert tool_names == ["calculate"]


async def test_an_agent_that_thinks_sends_its_thinking_back_through_its_tool_calls(
    dev_env: WorkflowEnvironment, task_queue: str, wire: WireServer
) -> None:
    # The stand-in refuses, as Anthropic does, a tool's result whose call's thinking is not
    # sent back with it: two rounds of calls and an answer prove it went back each time.
    thinker = Agent(
        "thinker", model="anthropic:test-model", tools=["calculate"], thinking_tokens=1024
    )
    calculate = [("toolu_1", "calculate", {"expression": "17 * 23"})]
    wire.enqueue(
        anthropic_tool_use(calculate, thinking="Multiply first."),
        anthropic_tool_use([("toolu_2", "calculate", {"expression": "391 + 1"})], thinking="Add one."),
        anthropic_text("392", thinking="Done."),
    )  # fmt: skip
    apps = Apps(agents={"thinker": thinker})
    async with make_worker(dev_env.client, task_queue, settings=_settings(wire), apps=apps):
        run = RunInput(task="What is 17 * 23 + 1?", agent="thinker")
        result = await (await start_run(dev_env.client, task_queue, run)).result()

    assert result.status == "completed" and result.final_output == "392"
    assert (result.turns, result.tool_calls) == (3, 2)
    bodies = [request.body for request in wire.requests]
    assert len(bodies) == 3, "no call was refused"
    assert all(body["thinking"] == {"type": "enabled", "budget_tokens": 1024} for body in bodies)
    last = bodies[-1]["messages"]
    thought = [
        block["thinking"]
        for message in last
        if message["role"] == "assistant"
        for block in message["content"]
        if block["type"] == "thinking"
    ]
    assert thought == ["Multiply first.", "Add one."]


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_rate_limit_is_retried_after_the_delay_the_provider_asked_for(
    dev_env: WorkflowEnvironment, task_queue: str, wire: WireServer, provider: str
) -> None:
    wire.enqueue(error(429, "slow down", {"retry-after": "3"}), TEXT[provider]("done"))
    async with make_worker(dev_env.client, task_queue, settings=_settings(wire)):
        handle = await _start(dev_env, task_queue, f"{provider}:test-model")
        result = await handle.result()
    failure = await _failure_before_the_last_attempt(handle)

    assert result.status == "completed" and result.final_output == "done"
    assert len(wire.requests) == 2
    assert await activity_attempts(handle) == [2]
    # The server schedules the retry by this delay, not by the retry policy's first backoff
    # (1 s): the provider asked for 3.
    assert failure.type == MODEL_UNAVAILABLE
    assert failure.next_retry_delay.ToTimedelta() == timedelta(seconds=3)


async def _failure_before_the_last_attempt(
    handle: WorkflowHandle[Any, Any],
) -> ApplicationFailureInfo:
    """The failure of the model call's attempt before its last, as the run's history keeps it:
    the last attempt's ActivityTaskStarted event carries it, with the retry delay the activity
    asked for."""
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            started = event.activity_task_started_event_attributes
            if started.HasField("last_failure"):
                return started.last_failure.application_failure_info
    raise AssertionError("no attempt of the model call followed a failure")


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_bad_request_fails_the_run_without_retrying(
    dev_env: WorkflowEnvironment, task_queue: str, wire: WireServer, provider: str
) -> None:
    refusal = "tools.0.name: not a name the API takes"
    wire.enqueue(error(400, refusal))
    async with make_worker(dev_env.client, task_queue, settings=_settings(wire)):
        handle = await _start(dev_env, task_queue, f"{provider}:test-model")
        with pytest.raises(WorkflowFailureError) as failure:
            await handle.result()
        state = await handle.query(AgentRunWorkflow.status)

    cause = failure.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == RUN_FAILED
    assert f"{provider}: HTTP 400: {refusal}" in cause.message
    assert len(wire.requests) == 1
    assert state.status == "failed"
