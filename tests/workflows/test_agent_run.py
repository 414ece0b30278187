"""AgentRunWorkflow with the scripted model: each way a run can go, asserted by outcome."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from pydantic import BaseModel
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError, CancelledError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from examples.demo.basic import CalculateArgs as DemoCalculateArgs
from tests.helpers import (
    EVENTUALLY_WITHIN,
    make_worker,
    replays,
    scheduled_activities,
    start_run,
)
from tests.upstream import pydantic_says
from tests.workflows.runs import run_to_end
from waitstate.activation_order import workflow_runner
from waitstate.client import run_status
from waitstate.providers.scripted import SCRIPTED_BANNER
from waitstate.schemas import ModelCallInput, ModelResponse, RunInput, RunResult, RunState
from waitstate.schemas.errors import RUN_FAILED
from waitstate.tools import ToolSpec
from waitstate.workflows.agent_run import AgentRunWorkflow
from waitstate.workflows.search_attributes import AGENT_STATUS

ALL_TOOLS = ["calculate", "count_words", "utc_now"]
Run = Callable[..., Awaitable[tuple[RunResult, RunState, WorkflowHandle[Any, RunResult]]]]


@pytest.fixture
def run(time_skipping_env: WorkflowEnvironment, task_queue: str) -> Run:
    """Takes a run of the given fields (the demo's tools unless given) to its end on the
    time-skipping server, on a worker of the demo's tools (or of `worker_tools`): its result,
    last state and handle."""

    async def run_fields(
        worker_tools: list[ToolSpec] | None = None, **fields: Any
    ) -> tuple[RunResult, RunState, WorkflowHandle[Any, RunResult]]:
        run_input = RunInput(**{"tools": ALL_TOOLS, **fields})
        handle, result, state = await run_to_end(
            time_skipping_env, task_queue, run_input, tools=worker_tools
        )
        return result, state, handle

    return run_fields


class CalculateArgs(BaseModel):
    expression: str


async def fan_out(run: Run, calculate: Callable[[CalculateArgs], Awaitable[str]]) -> RunResult:
    """The fan-out script's run: one turn of three `calculate` calls, answered by `calculate`."""
    tools = [ToolSpec(name="calculate", description="d", args=CalculateArgs, handler=calculate)]
    result, _, _ = await run(
        worker_tools=tools, task="squares", model="scripted:fan-out", tools=["calculate"]
    )
    return result


async def test_demo_run_calls_tools_and_answers(run: Run) -> None:
    result, state, handle = await run(task="What is 1234 * 5678?", model="scripted:demo")
    description = await handle.describe()

    assert result.status == "completed"
    assert result.final_output is not None
    assert result.final_output.startswith(SCRIPTED_BANNER)
    assert "calculate -> 7006652" in result.final_output
    assert (result.turns, result.tool_calls) == (3, 3)
    assert result.usage.model_calls == 3
    assert result.usage.input_tokens > 0 and result.usage.output_tokens > 0
    assert [(s.turn, s.kind, s.name) for s in state.steps] == [
        (1, "model", "scripted:demo"),
        (1, "tool", "calculate"),
        (1, "tool", "utc_now"),
        (2, "model", "scripted:demo"),
        (2, "tool", "count_words"),
        (3, "model", "scripted:demo"),
    ]
    assert state.status == "completed"
    # Revision 1: no upsert as it completes; Temporal's status says it, `run_status` reads both.
    assert description.typed_search_attributes.get(AGENT_STATUS) == "running"
    assert run_status("running", description.status) == "completed"
    events = [e.event_type for e in (await handle.fetch_history()).events]
    assert events[-2] == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED  # no upsert before the end


async def test_a_run_of_revision_0_upserts_completed_as_it_ends(run: Run) -> None:
    """The behaviour of histories recorded before revisions were carried, kept for a run
    started with it: its last command is the `completed` upsert."""
    result, _, handle = await run(task="What is 1234 * 5678?", model="scripted:demo", revision=0)
    description = await handle.describe()
    events = [e.event_type for e in (await handle.fetch_history()).events]

    assert result.status == "completed"
    assert description.typed_search_attributes.get(AGENT_STATUS) == "completed"
    assert events[-2] == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES


async def test_tool_calls_of_one_turn_run_concurrently(run: Run) -> None:
    in_flight = 0
    most = 0

    all_in_flight = asyncio.Event()

    async def slow_calculate(args: CalculateArgs) -> str:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        if in_flight == 3:
            all_in_flight.set()
        # Held until the turn's three calls are all in flight. Calls run one after another
        # never get there: each gives up in the end, and `most` below says what went wrong.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(EVENTUALLY_WITHIN):
                await all_in_flight.wait()
        in_flight -= 1
        return args.expression

    result = await fan_out(run, slow_calculate)

    assert result.status == "completed"
    assert result.tool_calls == 3
    assert most == 3, "the three calls of one turn must be in flight together"


async def test_max_turns_is_its_own_status(run: Run) -> None:
    result, _, handle = await run(task="loop", model="scripted:forever", max_turns=3)
    description = await handle.describe()

    assert result.status == "max_turns"
    assert (result.turns, result.tool_calls, result.final_output) == (3, 3, None)
    assert description.typed_search_attributes.get(AGENT_STATUS) == "max_turns"


async def test_wrong_arguments_go_back_to_the_model(run: Run) -> None:
    result, state, _ = await run(task="add", model="scripted:fix-args")

    assert result.status == "completed"
    assert result.final_output is not None and result.final_output.endswith("2 + 2 = 4")
    first_tool = next(s for s in state.steps if s.kind == "tool")
    assert first_tool.is_error
    missing = pydantic_says(DemoCalculateArgs, {"expr": "2 + 2"}, "missing")
    assert f"invalid arguments for calculate: expression: {missing}" in first_tool.detail


async def test_tool_outside_the_run_is_refused_without_running(run: Run) -> None:
    # `calculate` exists on the worker, but this run was only granted count_words.
    result, state, handle = await run(
        task="loop", model="scripted:forever", tools=["count_words"], max_turns=2
    )
    activities = await scheduled_activities(handle)

    assert result.status == "max_turns"
    tool_steps = [s for s in state.steps if s.kind == "tool"]
    assert all(s.is_error and "unknown tool 'calculate'" in s.detail for s in tool_steps)
    assert "available: count_words" in tool_steps[0].detail
    assert activities == ["call_model", "call_model"]


async def test_unknown_tool_name_is_an_error_the_model_reads(run: Run) -> None:
    result, _, _ = await run(task="oops", model="scripted:unknown-tool")

    assert result.status == "completed"
    assert result.final_output is not None
    assert "unknown tool 'delete_everything'" in result.final_output


async def test_failing_tool_is_retried_then_reported_to_the_model(run: Run) -> None:
    attempts = 0

    async def broken(args: CalculateArgs) -> str:
        nonlocal attempts
        attempts += 1
        raise RuntimeError("disk on fire")

    result = await fan_out(run, broken)

    assert result.status == "completed"
    assert result.final_output is not None and "disk on fire" in result.final_output
    assert attempts == 9, "three calls, three attempts each"


async def test_unknown_script_fails_the_run_without_retrying(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    async with make_worker(time_skipping_env.client, task_queue):
        handle = await start_run(
            time_skipping_env.client, task_queue, RunInput(task="t", model="scripted:nope")
        )
        with pytest.raises(WorkflowFailureError) as failure:
            await handle.result()
        state = await handle.query(AgentRunWorkflow.status)
        description = await handle.describe()
        activities = await scheduled_activities(handle)

    cause = failure.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == RUN_FAILED and cause.non_retryable
    assert "no script named 'nope'" in cause.message
    assert activities == ["call_model"]
    assert state.status == "failed" and state.error is not None and "nope" in state.error
    assert description.typed_search_attributes.get(AGENT_STATUS) == "failed"


async def test_status_while_running_then_cancel(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    model_started = asyncio.Event()

    @activity.defn(name="call_model")
    async def never_answers(input: ModelCallInput) -> ModelResponse:
        model_started.set()
        while True:  # heartbeats are how the worker learns of the cancellation
            activity.heartbeat()
            await asyncio.sleep(0.05)

    async with Worker(
        dev_env.client,
        task_queue=task_queue,
        workflows=[AgentRunWorkflow],
        workflow_runner=workflow_runner(),
        activities=[never_answers],
    ):
        handle = await start_run(
            dev_env.client, task_queue, RunInput(task="wait", model="scripted:demo")
        )
        await asyncio.wait_for(model_started.wait(), timeout=10)
        running = await handle.query(AgentRunWorkflow.status)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError) as failure:
            await handle.result()
        cancelled = await handle.query(AgentRunWorkflow.status)
        description = await handle.describe()
        await replays(handle, "agent_run_cancelled_mid_model_call")

    assert (running.status, running.turns, running.task) == ("running", 0, "wait")
    assert isinstance(failure.value.cause, CancelledError)
    assert cancelled.status == "cancelled"
    assert description.typed_search_attributes.get(AGENT_STATUS) == "cancelled"
