"""`WaitstatePlugin`: waitstate's agent runs served by a Temporal worker of the user's own, beside
the user's workflows and activities, with the client the plugin was given starting both."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from waitstate import RunInput, WaitstateClient
from waitstate.activation_order import HandlersLast
from waitstate.converter import DATA_CONVERTER
from waitstate.plugin import WaitstatePlugin
from waitstate.settings import Settings

DEMO = "examples.demo.app:app"
# The demo's export completes by webhook: its worker mints resume tokens (no gateway is called).
SETTINGS = Settings(
    token_keys={"plugin": "p" * 40}, token_signing_key="plugin", gateway_url="http://127.0.0.1:9"
)


@activity.defn
async def greet(name: str) -> str:
    return f"Hello, {name}!"


@workflow.defn(sandboxed=False)
class SayHello:
    @workflow.run
    async def run(self, name: str) -> str:
        return await workflow.execute_activity(
            greet, name, start_to_close_timeout=timedelta(seconds=10)
        )


async def test_a_worker_of_the_users_own_serves_agent_runs_beside_its_workflows(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    plugin = WaitstatePlugin([DEMO], settings=SETTINGS)
    target = dev_env.client.service_client.config.target_host
    client = await Client.connect(target, plugins=[plugin])
    runs = WaitstateClient(client, task_queue=task_queue)

    async with Worker(client, task_queue=task_queue, workflows=[SayHello], activities=[greet]):
        hello = await client.execute_workflow(
            SayHello.run, "Ada", id=f"hello-{task_queue}", task_queue=task_queue
        )
        started = await runs.start(
            RunInput(task="What is 17 * 23?", tools=["calculate"]), run_id=f"run-{task_queue}"
        )
        outcome = await runs.outcome(started.run_id)

    assert hello == "Hello, Ada!"
    assert outcome.status == "completed"
    assert outcome.final_output is not None and "391" in outcome.final_output
    assert client.data_converter is DATA_CONVERTER


def test_the_plugin_keeps_the_users_runner_and_wraps_it_for_agent_runs() -> None:
    plugin = WaitstatePlugin([DEMO], settings=SETTINGS)
    users = UnsandboxedWorkflowRunner()

    assert callable(plugin.workflow_runner)
    runner = plugin.workflow_runner(users)

    assert isinstance(runner, HandlersLast) and runner._runner is users


def test_a_client_with_another_converter_is_refused_in_one_line() -> None:
    plugin = WaitstatePlugin([DEMO], settings=SETTINGS)

    assert callable(plugin.data_converter)

    with pytest.raises(ValueError, match="needs waitstate's data converter"):
        plugin.data_converter(pydantic_data_converter)
    assert plugin.data_converter(DataConverter.default) is DATA_CONVERTER


def test_a_model_queue_is_refused_it_needs_workers_of_its_own() -> None:
    with pytest.raises(ValueError, match="unset WAITSTATE_MODEL_TASK_QUEUE"):
        WaitstatePlugin([DEMO], settings=dataclasses.replace(SETTINGS, model_task_queue="models"))
