"""Durable state: a context rebuilt from the ledger after a long wait, results and transcripts
by reference, continue-as-new carrying pending work, and the ledger in `starter.py status`."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from datetime import timedelta
from typing import Any

import httpx
import pytest
from pydantic import BaseModel, Field
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from examples.demo.exports import ExportService, export_tool
from examples.systems import create_app as systems_app
from examples.systems import serving
from gateway.tokens import ResumeTokens
from schemas import RunInput, RunResult
from schemas.approvals import DecisionSignal
from schemas.operations import CompleteOperation, Completion
from settings import Settings
from tests.helpers import callback_token, eventually, make_worker, replays
from tests.rigs import EXPORT_TASK, EXPORT_TOOLS, ROOT, Desk, Stack
from tools import ToolSpec
from waitstate.testing.wire_server import WireServer, openai_text, openai_tool_calls
from workflows.agent_run import AgentRunWorkflow
from workflows.ledger import LEDGER_CHARS

KEYS = {"state": "s" * 40}
RESULT_TIMEOUT = 120


class NoArgs(BaseModel):
    pass


class ChunkArgs(BaseModel):
    n: int = Field(description="Which chunk")


async def _big(args: NoArgs) -> str:
    return "x" * 12_000


async def _five_megabytes(args: NoArgs) -> str:
    return "".join(f"{i:08d}\n" for i in range(5 * 1024 * 1024 // 9 + 1))


async def _chunk(args: ChunkArgs) -> str:
    return f"chunk {args.n:04d} " + "y" * 4086


def _tool(name: str, args: type[BaseModel], handler: Any) -> ToolSpec:
    return ToolSpec(name=name, description=name, args=args, handler=handler)


async def _history_bytes(client: Client, workflow_id: str, run_id: str) -> tuple[int, int]:
    """Bytes of every run in a continue-as-new chain, and how many runs it has."""
    total, runs = 0, 0
    next_run: str | None = run_id
    while next_run:
        runs += 1
        handle = client.get_workflow_handle(workflow_id, run_id=next_run)
        next_run = None
        async for event in handle.fetch_history_events():
            total += event.ByteSize()
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
                next_run = (
                    event.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
                )
    return total, runs


async def _rebuilt_after_a_day(
    env: WorkflowEnvironment, task_queue: str, wire: WireServer, earlier_turns: int
) -> tuple[list[dict[str, Any]], int, str, RunResult, WorkflowHandle[Any, Any], Any]:
    """Run `earlier_turns` turns of 12 KB results, start an export, let a day pass, complete it
    by webhook; return what the model was sent next."""
    tokens = ResumeTokens(KEYS, "state")
    for i in range(earlier_turns):
        wire.enqueue(openai_tool_calls([(f"c{i}", "big", "{}")]))
    wire.enqueue(
        openai_tool_calls(
            [("e1", "start_export", '{"dataset": "transactions", "period": "2025-Q3"}')]
        ),
        # Before the run suspends, the model writes the checkpoint.
        openai_text(
            "Done: export requested\nRemaining: verify the row count, upload, notify the team"
        ),
        openai_text("filed"),
    )
    async with (
        httpx.AsyncClient(timeout=10) as http,
        serving(systems_app(export_seconds=0.1)) as systems_url,
    ):
        await http.post(f"{systems_url}/_test/faults", json={"never_complete": True})
        settings = Settings(
            openai_base_url=wire.openai_base_url,
            openai_api_key="test",
            demo_systems_url=systems_url,
            gateway_url="http://127.0.0.1:9",
        )
        tools = [
            _tool("big", NoArgs, _big),
            export_tool(ExportService(http, systems_url), timeout=timedelta(days=3)),
        ]
        async with make_worker(
            env.client, task_queue, tools=tools, settings=settings, tokens=tokens
        ):
            handle = await env.client.start_workflow(
                AgentRunWorkflow.run,
                RunInput(
                    task="Export Q3 transactions",
                    model="openai:test-model",
                    tools=["big", "start_export"],
                    constraints=["never email customers"],
                ),
                id=f"run-{uuid.uuid4()}",
                task_queue=task_queue,
            )

            async def pending() -> Any:
                state = await handle.query(AgentRunWorkflow.status)
                return state if state.operations else None

            [op] = (await eventually(pending, "the export to be pending")).operations.values()
            await env.sleep(timedelta(days=1))
            nonce = tokens.verify(await callback_token(tokens, handle, op)).nonce
            await handle.execute_update(
                AgentRunWorkflow.complete_operation,
                CompleteOperation(
                    operation_id=op.operation_id,
                    nonce=nonce,
                    delivery_id="d1",
                    completion=Completion(
                        status="succeeded", result={"file": "exports/q3.csv", "rows": 412882}
                    ),
                ),
            )
            result = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)
            state = await handle.query(AgentRunWorkflow.status)
    checkpoint_request = wire.requests[-2].body
    assert "tools" not in checkpoint_request
    assert [m["role"] for m in checkpoint_request["messages"]] == ["system", "user"]
    assert checkpoint_request["messages"][1]["content"].endswith(
        f"Now waiting for: start_export ({op.operation_id})"
    )
    before = len(json.dumps(wire.requests[-3].body))
    return wire.requests[-1].body["messages"], before, op.operation_id, result, handle, state


@pytest.mark.parametrize("earlier_turns", [0, 3])
async def test_a_day_long_wait_wakes_with_a_context_rebuilt_from_the_ledger(
    time_skipping_env: WorkflowEnvironment, task_queue: str, wire: WireServer, earlier_turns: int
) -> None:
    messages, transcript, op_id, result, handle, state = await _rebuilt_after_a_day(
        time_skipping_env, task_queue, wire, earlier_turns
    )

    assert result.status == "completed" and result.final_output == "filed"
    assert [m["role"] for m in messages] == ["system", "user"], "not the old transcript"
    lines = messages[1]["content"].splitlines()
    assert lines[:3] == [
        "Task: Export Q3 transactions",
        "Constraints: never email customers",
        "Completed:",
    ]
    assert len(lines) == 3 + earlier_turns + 2
    assert all(line.startswith("- big: xxxx") for line in lines[3:-2])
    event = json.loads(lines[-2].removeprefix("Event: start_export: "))
    assert event == {
        "operation_id": op_id,
        "tool": "start_export",
        "status": "succeeded",
        "result": {"file": "exports/q3.csv", "rows": 412882},
    }
    assert lines[-1] == "Remaining: verify the row count, upload, notify the team"
    # Bounded by the ledger's lines, not by the transcript left behind.
    assert len(messages[1]["content"]) < 600 + earlier_turns * (LEDGER_CHARS + 10)
    if earlier_turns:
        assert transcript > 36_000
    assert state.context_rebuilds == 1
    assert state.checkpoint is not None and state.checkpoint.done == "export requested"
    # The export said it would take a second: no checkpoint before the wait, but one once the
    # wait had outlasted rebuild_after, before the rebuilt context needed it.
    [op] = state.operations.values()
    assert state.checkpoint.at >= op.started_at + timedelta(days=1)
    assert state.usage.model_calls == earlier_turns + 3, "the checkpoint is a model call"
    assert any(s.kind == "event" and s.name == "context" for s in state.steps)
    await replays(handle, f"state_rebuilt_after_a_day_{earlier_turns}")


async def test_a_five_megabyte_result_goes_by_reference(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    tools = [_tool("big_report", NoArgs, _five_megabytes)]
    async with make_worker(time_skipping_env.client, task_queue, tools=tools):
        handle = await time_skipping_env.client.start_workflow(
            AgentRunWorkflow.run,
            RunInput(task="read it", model="scripted:read-big", tools=["big_report"]),
            id=f"run-{uuid.uuid4()}",
            task_queue=task_queue,
        )
        result = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)
        state = await handle.query(AgentRunWorkflow.status)
    size, _ = await _history_bytes(time_skipping_env.client, handle.id, handle.result_run_id or "")

    first = next(s for s in state.steps if s.kind == "tool")
    assert first.detail.startswith("00000000 00000001")
    assert result.final_output is not None
    read = json.loads(result.final_output.split("slice: ", 1)[1])
    assert read["offset"] == 1_000_000 and read["total_bytes"] == 5 * 1024 * 1024 // 9 * 9 + 9
    whole = await _five_megabytes(NoArgs())
    assert read["text"] == whole[1_000_000:1_000_036]
    assert size < 64 * 1024, f"history is {size} bytes"
    print(f"history of a run with a 5 MB tool result: {size} bytes")
    await replays(handle, "state_result_by_reference")


async def test_two_hundred_turns_stay_small_and_continue_as_new(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    tools = [_tool("chunk", ChunkArgs, _chunk)]
    async with make_worker(time_skipping_env.client, task_queue, tools=tools):
        handle = await time_skipping_env.client.start_workflow(
            AgentRunWorkflow.run,
            RunInput(
                task="read 200 chunks",
                model="scripted:long-haul",
                tools=["chunk"],
                max_turns=201,
                continue_as_new_after_events=1000,
            ),
            id=f"run-{uuid.uuid4()}",
            task_queue=task_queue,
        )
        result = await asyncio.wait_for(handle.result(), 300)
    size, runs = await _history_bytes(
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


async def test_an_approval_after_continue_as_new_resumes_the_run(desk: Desk) -> None:
    async with desk.worker():
        handle = await desk.start(
            "Refund $420 for claim C-118",
            ["check_claim", "issue_refund"],
            continue_as_new_after_events=10,
        )

        async def request_open() -> Any:
            state = await handle.query(AgentRunWorkflow.status)
            return state if any(r.open for r in state.approvals.values()) else None

        state = await eventually(request_open, "the approval request to open")
        request = next(r for r in state.approvals.values() if r.open)
        assert state.continued_as_new >= 1
        await handle.signal(AgentRunWorkflow.approve, DecisionSignal(request_id=request.request_id))
        result = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)

    assert result.status == "completed" and "Refunded $420" in (result.final_output or "")
    assert len(await desk.get("/refunds")) == 1


async def test_status_of_a_waiting_run_shows_the_ledger(
    stack: Stack, dev_env: WorkflowEnvironment
) -> None:
    await stack.faults(never_complete=True)
    async with stack.worker():
        # Any wait counts as long: the run writes its checkpoint before it.
        handle = await stack.start(EXPORT_TASK, EXPORT_TOOLS, rebuild_after=timedelta(0))

        async def checkpointed() -> bool:
            return (await handle.query(AgentRunWorkflow.status)).checkpoint is not None

        await eventually(checkpointed, "the run to write its checkpoint")
        shown = await asyncio.create_subprocess_exec(
            sys.executable, "starter.py", "status", handle.id,
            cwd=ROOT,
            env={**os.environ, "TEMPORAL_ADDRESS": dev_env.client.service_client.config.target_host},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        out, err = await shown.communicate()
        await handle.cancel()

    text = out.decode()
    assert shown.returncode == 0, err.decode()
    assert f"run {handle.id}: waiting" in text
    assert "pending operation: op_" in text and "start_export" in text and "expires 20" in text
    assert "checkpoint (" in text and "remaining: once start_export (op_" in text
    assert "steps:" in text and "model scripted:demo: calls start_export" in text
