"""Runs of named agents from an app: the agent's definition recorded at the start, overrides,
an unknown agent, the app's deps in a tool's RunContext, and structured output."""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from tests.helpers import make_worker, replays, scheduled_activities, start_run
from tests.upstream import pydantic_says
from tests.workflows.agent_app import FIX_OUTPUT, Report
from tests.workflows.runs import run_to_end
from waitstate.apps import load_apps
from waitstate.schemas import RunInput, RunResult, RunState
from waitstate.schemas.run import CALL_MODEL, RESOLVE_AGENT
from waitstate.settings import Settings
from waitstate.testing.wire_server import WireServer, anthropic_text, openai_text
from waitstate.workflows.agent_run import AgentRunWorkflow

APP = "tests.workflows.agent_app:app"
Ran = tuple[WorkflowHandle[Any, RunResult], RunResult, RunState]
Run = Callable[..., Awaitable[Ran]]


async def _run(
    env: WorkflowEnvironment, task_queue: str, settings: Settings | None = None, **fields: Any
) -> Ran:
    """A run with `fields` to its end, on a worker serving the app (with `settings`, when
    given): its handle, result and last state."""
    return await run_to_end(
        env, task_queue, RunInput(**fields), apps=load_apps([APP]), settings=settings
    )


@pytest.fixture
def run(time_skipping_env: WorkflowEnvironment, task_queue: str) -> Run:
    """`_run` on the time-skipping server and the test's own queue."""
    return functools.partial(_run, time_skipping_env, task_queue)


async def test_a_run_of_an_agent_takes_its_definition_and_its_apps_deps(run: Run) -> None:
    handle, result, state = await run(task="one two three", agent="counter")
    await replays(handle, "agent_of_an_app")

    assert result.status == "completed"
    counted = json.loads((result.final_output or "").removeprefix("counted: "))
    assert counted == {
        "words": 3,
        "greeting": "hello from the app",
        "run_id": handle.id,
        "idempotency_key": f"{handle.id}/call_0",
    }
    assert state.agent == "counter"
    assert state.model == "scripted:count-then-answer"
    assert (await scheduled_activities(handle))[:2] == [RESOLVE_AGENT, CALL_MODEL]


async def test_what_the_run_sets_overrides_the_agent(run: Run) -> None:
    _, result, state = await run(task="say this", agent="counter", model="scripted:echo")

    assert result.status == "completed"
    assert (result.final_output or "").endswith("say this")
    assert state.model == "scripted:echo"


async def test_an_unknown_agent_fails_the_run_at_once_naming_the_known_ones(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    apps = load_apps([APP])
    async with make_worker(time_skipping_env.client, task_queue, apps=apps):
        handle = await start_run(
            time_skipping_env.client, task_queue, RunInput(task="anything", agent="nobody")
        )
        with pytest.raises(WorkflowFailureError) as failure:
            await handle.result()
        state = await handle.query(AgentRunWorkflow.status)
        await replays(handle, "agent_unknown")

    cause = failure.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.message == "unknown agent 'nobody'; known: counter, reporter, stubborn, tempered"
    assert await scheduled_activities(handle) == [RESOLVE_AGENT]  # no model call
    assert state.status == "failed"


async def test_an_answer_that_fails_the_output_type_goes_back_and_the_corrected_one_is_json(
    run: Run,
) -> None:
    handle, result, state = await run(task="report", agent="reporter")
    await replays(handle, "agent_structured_output_corrected")

    assert result.status == "completed"
    assert json.loads(result.final_output or "") == {"title": "Q3", "words": 3}
    assert result.turns == 2
    missing = pydantic_says(Report, '{"title": "Q3"}', "missing")
    assert state.steps[0].detail == f"answer sent back: words: {missing}"


async def test_an_answer_that_never_validates_ends_the_run_output_invalid(run: Run) -> None:
    _, result, state = await run(task="report", agent="stubborn")

    # (The CLI's view of it: tests/test_output_invalid.py.)
    assert result.status == "output_invalid"
    assert result.final_output is None
    assert result.rejected_output == state.rejected_output
    assert [step.detail.split(":")[0] for step in state.steps] == ["answer sent back"] * 2
    not_json = pydantic_says(Report, "a report, in prose", "json_invalid")
    assert state.steps[0].detail == f"answer sent back: (answer): {not_json}"


async def test_the_agents_model_settings_reach_the_provider(
    dev_env: WorkflowEnvironment, task_queue: str, wire: WireServer
) -> None:
    wire.enqueue(openai_text("cool and short"))
    settings = Settings(openai_base_url=wire.openai_base_url, openai_api_key="test-key")
    _, result, _ = await _run(dev_env, task_queue, settings, task="say something", agent="tempered")

    assert result.final_output == "cool and short"
    body = wire.requests[-1].body
    assert (body["temperature"], body["max_completion_tokens"]) == (0.3, 200)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_structured_output_through_each_providers_sdk(
    dev_env: WorkflowEnvironment, task_queue: str, wire: WireServer, provider: str
) -> None:
    text = openai_text if provider == "openai" else anthropic_text
    wire.enqueue(text('{"title": "Q3", "words": "three"}'), text('{"title": "Q3", "words": 3}'))
    settings = Settings(
        openai_base_url=wire.openai_base_url,
        anthropic_base_url=wire.anthropic_base_url,
        openai_api_key="test-key",
        anthropic_api_key="test-key",
    )
    _, result, state = await _run(
        dev_env,
        task_queue,
        settings,
        task="report",
        agent="reporter",
        model=f"{provider}:test-model",
    )

    assert result.status == "completed"
    assert json.loads(result.final_output or "") == {"title": "Q3", "words": 3}
    not_int = pydantic_says(Report, '{"title": "Q3", "words": "three"}', "int_parsing")
    assert state.steps[0].detail == f"answer sent back: words: {not_int}"
    second = wire.requests[-1].body
    corrections = [m for m in second["messages"] if FIX_OUTPUT in json.dumps(m)]
    assert len(corrections) == 1
