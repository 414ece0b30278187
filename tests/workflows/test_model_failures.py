"""A run whose model cannot be reached, or never answers, ends failed with one line that names
the provider, the limit and the attempts (on the time-skipping server: the retries' backoff
takes no time)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from tests.helpers import activity_attempts, make_worker, start_run
from waitstate.schemas import RunInput
from waitstate.schemas.errors import RUN_FAILED
from waitstate.settings import Settings
from waitstate.testing.wire_server import WireServer, delayed, openai_text
from waitstate.workflows.policies import MODEL_RETRY


async def _failure(
    env: WorkflowEnvironment, task_queue: str, settings: Settings, model_timeout: timedelta
) -> tuple[ApplicationError, list[int]]:
    async with make_worker(env.client, task_queue, settings=settings):
        handle = await start_run(
            env.client,
            task_queue,
            RunInput(task="hello", model="openai:test-model", model_timeout=model_timeout),
        )
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == RUN_FAILED
    return cause, await activity_attempts(handle)


async def test_an_unreachable_provider_fails_the_run_naming_it_and_the_attempts(
    time_skipping_env: WorkflowEnvironment, task_queue: str, closed_port: int
) -> None:
    settings = Settings(
        openai_base_url=f"http://127.0.0.1:{closed_port}/v1", openai_api_key="test-key"
    )
    cause, attempts = await _failure(time_skipping_env, task_queue, settings, timedelta(seconds=30))

    # The history records an activity's last attempt only.
    assert attempts == [MODEL_RETRY.maximum_attempts]
    assert cause.message.startswith("model call failed on turn 1: openai:test-model: ")
    assert f"127.0.0.1:{closed_port}" in cause.message
    assert cause.message.endswith(f"gave up after {MODEL_RETRY.maximum_attempts} attempts")
    assert "\n" not in cause.message and len(cause.message) < 2000
    assert cause.cause is None, "no chained causes (and their tracebacks) in the run's failure"


async def test_a_model_that_never_answers_fails_the_run_naming_its_limit(
    time_skipping_env: WorkflowEnvironment, task_queue: str, wire: WireServer
) -> None:
    wire.enqueue(*(delayed(30, openai_text("too late")) for _ in range(8)))
    settings = Settings(openai_base_url=wire.openai_base_url, openai_api_key="test-key")
    cause, attempts = await _failure(time_skipping_env, task_queue, settings, timedelta(seconds=1))

    assert attempts == [MODEL_RETRY.maximum_attempts]
    assert "openai" in cause.message and "model_timeout of 1 s" in cause.message
    assert cause.message.endswith(f"gave up after {MODEL_RETRY.maximum_attempts} attempts")
