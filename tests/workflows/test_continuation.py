"""Continue-as-new (workflows/continuation.py): a long run hands its ledger, conversation and
pending work to a new run under the same id, so its history stays small, and a webhook or a
decision sent later reaches the run that carries on."""

from __future__ import annotations

import asyncio

from pydantic import BaseModel, Field
from temporalio.testing import WorkflowEnvironment

from tests.helpers import eventually, history_bytes, make_worker, replays, start_run
from tests.rigs import EXPORT_TASK, REFUND_TOOLS, Desk, Stack
from waitstate.schemas import RunInput, RunState
from waitstate.schemas.approvals import DecisionSignal
from waitstate.tools import ToolSpec
from waitstate.workflows.agent_run import AgentRunWorkflow

RESULT_TIMEOUT = 120


class ChunkArgs(BaseModel):
    n: int = Field(description="Which chunk")


async def _chunk(args: ChunkArgs) -> str:
    return f"chunk {args.n:04d} " + "y" * 4086


async def test_two_hundred_turns_stay_small_and_continue_as_new(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    tools = [ToolSpec(name="chunk", description="chunk", args=ChunkArgs, handler=_chunk)]
    async with make_worker(time_skipping_env.client, task_queue, tools=tools):
        handle = await start_run(
            time_skipping_env.client,
            task_queue,
            RunInput(
                task="read 200 chunks",
                model="scripted:long-haul",
                tools=["chunk"],
                max_turns=201,
                continue_as_new_after_events=1000,
            ),
        )
        result = await asyncio.wait_for(handle.result(), 300)
    size, runs = await history_bytes(
        time_skipping_env.client, handle.id, handle.first_execution_run_id or handle.run_id or ""
    )
    print(f"200 turns x 4 KB: {size} bytes of history over {runs} runs")

    assert result.status == "completed" and result.final_output is not None
    assert result.final_output.endswith("200 chunks read")
    assert (result.turns, result.tool_calls) == (201, 200)
    assert runs >= 2, "it continued as new"
    assert size < 2 * 1024 * 1024
    first = time_skipping_env.client.get_workflow_handle(
        handle.id, run_id=handle.first_execution_run_id
    )
    await replays(first, "state_continued_as_new")


async def test_a_webhook_after_continue_as_new_resumes_the_run(stack: Stack) -> None:
    await stack.faults(export_seconds=3)
    async with stack.worker(tools=stack.tools(mode="handle")):
        handle = await stack.start(
            EXPORT_TASK,
            ["start_export"],
            model="scripted:two-exports",
            continue_as_new_after_events=10,
        )
        result = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)
        state = await handle.query(AgentRunWorkflow.status)

    assert result.status == "completed"
    assert state.continued_as_new >= 1
    assert sorted(op.status for op in state.operations.values()) == ["succeeded", "succeeded"]
    assert result.final_output is not None and result.final_output.count('"check_with"') == 2
    await replays(handle, "state_webhook_after_continue_as_new")


async def test_an_approval_after_continue_as_new_resumes_the_run(dev_desk: Desk) -> None:
    desk = dev_desk
    async with desk.worker():
        handle = await desk.start(
            "Refund $420 for claim C-118",
            REFUND_TOOLS,
            continue_as_new_after_events=10,
        )

        async def request_open() -> RunState | None:
            state = await handle.query(AgentRunWorkflow.status)
            return state if any(r.open for r in state.approvals.values()) else None

        state = await eventually(request_open, "the approval request to open")
        request = next(r for r in state.approvals.values() if r.open)
        assert state.continued_as_new >= 1
        await handle.signal(AgentRunWorkflow.approve, DecisionSignal(request_id=request.request_id))
        result = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)

    assert result.status == "completed" and "Refunded $420" in (result.final_output or "")
    assert len(await desk.get("/refunds")) == 1
