"""Model calls on a queue of their own (WAITSTATE_MODEL_TASK_QUEUE), served by the workers that
poll it, and each carrying its run's tenant as the fairness key; runs without either call the
model as they always did. How fast the calls go at the queue's rate is measured by the bench
(`python -m bench --only 9`), not here: tests are not timed; that no second holds more than the
rate is tests/test_model_rate.py's."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from tests.helpers import eventually, make_worker, replays, start_run
from tests.workflows.runs import run_to_end
from waitstate import Agent, App, tool
from waitstate.apps import AppError, load_apps
from waitstate.schemas import RunInput
from waitstate.schemas.run import CALL_MODEL, CALL_TOOL
from waitstate.settings import Settings

APP = "tests.workflows.test_model_queue:app"


@tool
async def calculate(expression: str) -> str:
    """Work out an arithmetic expression.

    Args:
        expression: Such as `1 + 2`.
    """
    left, _, right = expression.partition("+")
    return str(int(left) + int(right))


# Loaded by reference (APP): an app of one tenant, one of whose agents names its own.
app = App(
    tenant="acme",
    agents=[
        Agent("acme-looper", model="scripted:forever", tools=[calculate], max_turns=2),
        Agent("globex-looper", model="scripted:forever", tools=[calculate], max_turns=2,
              tenant="globex"),
    ],
)  # fmt: skip


async def _scheduled(handle: WorkflowHandle[Any, Any]) -> list[tuple[str, str, str]]:
    """Each activity the run scheduled: its type, its task queue and its fairness key."""
    scheduled = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attributes = event.activity_task_scheduled_event_attributes
            scheduled.append(
                (
                    attributes.activity_type.name,
                    attributes.task_queue.name,
                    attributes.priority.fairness_key,
                )
            )
    return scheduled


async def test_model_calls_go_to_the_model_queue_with_the_agents_tenant_as_fairness_key(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    model_queue = f"{task_queue}-model"
    settings = Settings(model_task_queue=model_queue, model_calls_per_second=50.0)
    apps = load_apps([APP])
    handles = []
    for agent in ("acme-looper", "globex-looper"):
        handle, result, state = await run_to_end(
            dev_env,
            task_queue,
            RunInput(task="count", agent=agent, model_task_queue=model_queue),
            apps=apps,
            settings=settings,
        )
        assert result.status == "max_turns" and state.turns == 2
        handles.append(handle)
    await replays(handles[0], "model_queue_tenant")

    acme, globex = [await _scheduled(h) for h in handles]
    # The model calls on the model queue, with the tenant; the tools on the run's own, without.
    assert [a for a in acme if a[0] == CALL_MODEL] == [(CALL_MODEL, model_queue, "acme")] * 2
    assert [a for a in globex if a[0] == CALL_MODEL] == [(CALL_MODEL, model_queue, "globex")] * 2
    assert {a for a in acme if a[0] == CALL_TOOL} == {(CALL_TOOL, task_queue, "")}


async def test_a_run_without_a_model_queue_or_tenant_calls_the_model_on_its_own_queue(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    # The workers poll a model queue; the run, started without one, never uses it.
    settings = Settings(model_task_queue=f"{task_queue}-model")
    handle, result, _ = await run_to_end(
        dev_env,
        task_queue,
        RunInput(task="count", model="scripted:forever", tools=["calculate"], max_turns=2),
        settings=settings,
    )

    assert result.status == "max_turns"
    scheduled = await _scheduled(handle)
    assert {a for a in scheduled} == {(CALL_MODEL, task_queue, ""), (CALL_TOOL, task_queue, "")}


async def test_a_run_whose_model_queue_no_worker_polls_waits_there_and_goes_on_once_one_does(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    model_queue = f"{task_queue}-model"
    run_input = RunInput(task="hello", model="scripted:echo", model_task_queue=model_queue)
    # The runs' worker alone: the model call is scheduled on the model queue, and waits.
    async with make_worker(dev_env.client, task_queue):
        handle = await start_run(dev_env.client, task_queue, run_input)

        async def pending_on_model_queue() -> bool:
            scheduled = await _scheduled(handle)
            return scheduled == [(CALL_MODEL, model_queue, "")]

        await eventually(pending_on_model_queue, "the model call scheduled on the model queue")
    settings = Settings(model_task_queue=model_queue)
    async with make_worker(dev_env.client, task_queue, settings=settings):
        result = await handle.result()
    assert result.status == "completed"
    assert (result.final_output or "").endswith(" hello")


def test_the_client_puts_its_model_queue_in_the_runs_it_starts() -> None:
    from waitstate.client import WaitstateClient

    client = WaitstateClient(None, model_task_queue="models")  # type: ignore[arg-type]
    plain = RunInput(task="t")
    own = RunInput(task="t", model_task_queue="elsewhere")

    assert client._with_model_queue(plain).model_task_queue == "models"
    assert client._with_model_queue(own).model_task_queue == "elsewhere"
    assert WaitstateClient(None)._with_model_queue(plain) is plain  # type: ignore[arg-type]


def test_a_tenant_is_an_agents_own_else_its_apps_and_at_most_64_bytes() -> None:
    agents = load_apps([APP]).agents
    assert agents["acme-looper"].tenant == "acme"
    assert agents["globex-looper"].tenant == "globex"
    assert RunInput(task="t", tenant="é" * 32).tenant == "é" * 32
    with pytest.raises(ValueError, match="at most 64 bytes"):
        RunInput(task="t", tenant="é" * 33)
    with pytest.raises(ValueError, match="must not be blank"):
        RunInput(task="t", tenant=" ")


def test_an_apps_agent_with_a_tenant_too_long_stops_the_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    long = dataclasses.replace(app, tenant="t" * 65)
    monkeypatch.setattr(__import__(__name__, fromlist=["app"]), "app", long)
    with pytest.raises(AppError, match="agent 'acme-looper': a tenant is at most 64 bytes"):
        load_apps([APP])
