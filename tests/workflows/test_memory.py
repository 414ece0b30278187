"""What the model is given across long waits (workflows/memory.py): the checkpoint, written
before a wait known to be long or once a wait turned out long (never on the path of a short
poll), by any model alike; the context rebuilt from the ledger after a day; a result of
megabytes by reference; and the ledger in `starter.py status`."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
import pytest
from pydantic import BaseModel
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from examples.demo.exports import ExportService, export_tool
from examples.systems import create_app as systems_app
from examples.systems import serving
from tests.helpers import (
    callback_token,
    eventually,
    history_bytes,
    make_worker,
    process_env,
    replays,
    scheduled_activities,
    start_run,
)
from tests.rigs import EXPORT_TASK, EXPORT_TOOLS, Stack
from tests.test_starter import Cli
from tests.workflows.runs import run_to_end
from waitstate.auth.tokens import ResumeTokens
from waitstate.schemas import RunInput, RunResult, RunState
from waitstate.schemas.approvals import ApprovalPolicy, DecideInput
from waitstate.schemas.operations import CompleteOperation, Completion
from waitstate.settings import Settings
from waitstate.testing.wire_server import WireServer, openai_text, openai_tool_calls
from waitstate.tools import ToolSpec
from waitstate.tools.spec import Handler
from waitstate.workflows.agent_run import AgentRunWorkflow
from waitstate.workflows.ledger import LEDGER_CHARS

KEYS = {"state": "s" * 40}
RESULT_TIMEOUT = 120


class NoArgs(BaseModel):
    pass


async def _big(args: NoArgs) -> str:
    return "x" * 12_000


async def _five_megabytes(args: NoArgs) -> str:
    return "".join(f"{i:08d}\n" for i in range(5 * 1024 * 1024 // 9 + 1))


def _tool(name: str, handler: Handler) -> ToolSpec:
    return ToolSpec(name=name, description=name, args=NoArgs, handler=handler)


# --- the checkpoint -----------------------------------------------------------------------------


async def test_a_short_poll_costs_no_model_call_for_a_checkpoint(
    stack: Stack, wire: WireServer
) -> None:
    wire.enqueue(
        openai_tool_calls([("call_1", "enrich_dataset", '{"dataset": "transactions"}')]),
        openai_text("enriched"),
    )
    async with stack.worker(openai_base_url=wire.openai_base_url, openai_api_key="test"):
        handle = await stack.start("enrich", ["enrich_dataset"], model="openai:test-model")
        result = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)
        state = await handle.query(AgentRunWorkflow.status)

    assert result.status == "completed" and result.final_output == "enriched"
    # The pipeline said it would take seconds: nobody asks the model to sum up before it.
    assert await scheduled_activities(handle) == [
        "call_model",
        "call_tool",
        "poll_operation",
        "call_model",
    ]
    assert len(wire.requests) == 2 and state.checkpoint is None


async def test_before_an_approval_any_model_writes_the_checkpoint(stack: Stack) -> None:
    policy = ApprovalPolicy(timeout=timedelta(hours=1))
    async with stack.worker():
        handle = await stack.start(
            "ask first", ["request_approval"], model="scripted:ask-first", approval=policy
        )

        async def open_request() -> str | None:
            state = await handle.query(AgentRunWorkflow.status)
            return next((r.request_id for r in state.approvals.values() if r.open), None)

        request_id = await eventually(open_request, "the approval request")
        waiting = await handle.query(AgentRunWorkflow.status)
        await handle.execute_update(
            AgentRunWorkflow.decide,
            DecideInput(request_id=request_id, decision="approve", reviewer="ana"),
        )
        result = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)

    checkpoint = waiting.checkpoint
    assert checkpoint is not None
    assert checkpoint.remaining.startswith("once approval of request_approval from approvers is")
    assert waiting.usage.model_calls == 2, "the turn, and the checkpoint before the wait"
    scheduled = await scheduled_activities(handle)
    assert scheduled[:3] == ["call_model", "call_model", "notify_approval"]
    assert result.status == "completed"


# --- the context rebuilt after a long wait ------------------------------------------------------


@dataclass
class Rebuilt:
    """A run that waited a day for its export, and what its model was sent next."""

    messages: list[dict[str, Any]]
    transcript_chars: int  # of the request before the wait, the transcript left behind
    operation_id: str
    result: RunResult
    state: RunState
    handle: WorkflowHandle[Any, RunResult]


async def _rebuilt_after_a_day(
    env: WorkflowEnvironment, task_queue: str, wire: WireServer, earlier_turns: int
) -> Rebuilt:
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
            _tool("big", _big),
            export_tool(ExportService(http, systems_url), timeout=timedelta(days=3)),
        ]
        async with make_worker(
            env.client, task_queue, tools=tools, settings=settings, tokens=tokens
        ):
            handle = await start_run(
                env.client,
                task_queue,
                RunInput(
                    task="Export Q3 transactions",
                    model="openai:test-model",
                    tools=["big", "start_export"],
                    constraints=["never email customers"],
                ),
            )

            async def pending() -> RunState | None:
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
    return Rebuilt(
        messages=wire.requests[-1].body["messages"],
        transcript_chars=len(json.dumps(wire.requests[-3].body)),
        operation_id=op.operation_id,
        result=result,
        state=state,
        handle=handle,
    )


@pytest.mark.parametrize("earlier_turns", [0, 3])
async def test_a_day_long_wait_wakes_with_a_context_rebuilt_from_the_ledger(
    time_skipping_env: WorkflowEnvironment, task_queue: str, wire: WireServer, earlier_turns: int
) -> None:
    rebuilt = await _rebuilt_after_a_day(time_skipping_env, task_queue, wire, earlier_turns)
    messages, result, state = rebuilt.messages, rebuilt.result, rebuilt.state

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
        "operation_id": rebuilt.operation_id,
        "tool": "start_export",
        "status": "succeeded",
        "result": {"file": "exports/q3.csv", "rows": 412882},
    }
    assert lines[-1] == "Remaining: verify the row count, upload, notify the team"
    # Bounded by the ledger's lines, not by the transcript left behind.
    assert len(messages[1]["content"]) < 600 + earlier_turns * (LEDGER_CHARS + 10)
    if earlier_turns:
        assert rebuilt.transcript_chars > 36_000
    assert state.context_rebuilds == 1
    assert state.checkpoint is not None and state.checkpoint.done == "export requested"
    # The export said it would take a second: no checkpoint before the wait, but one once the
    # wait had outlasted rebuild_after, before the rebuilt context needed it.
    [op] = state.operations.values()
    assert state.checkpoint.at >= op.started_at + timedelta(days=1)
    assert state.usage.model_calls == earlier_turns + 3, "the checkpoint is a model call"
    assert any(s.kind == "event" and s.name == "context" for s in state.steps)
    await replays(rebuilt.handle, f"state_rebuilt_after_a_day_{earlier_turns}")


# --- results by reference, and the ledger as the CLI shows it ----------------------------------


async def test_a_five_megabyte_result_goes_by_reference(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    handle, result, state = await run_to_end(
        time_skipping_env,
        task_queue,
        RunInput(task="read it", model="scripted:read-big", tools=["big_report"]),
        tools=[_tool("big_report", _five_megabytes)],
        within=RESULT_TIMEOUT,
    )
    size, _ = await history_bytes(time_skipping_env.client, handle.id, handle.result_run_id or "")

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


@pytest.mark.subprocess
async def test_status_of_a_waiting_run_shows_the_ledger(stack: Stack) -> None:
    await stack.faults(never_complete=True)
    async with stack.worker():
        # Any wait counts as long: the run writes its checkpoint before it.
        handle = await stack.start(EXPORT_TASK, EXPORT_TOOLS, rebuild_after=timedelta(0))

        async def checkpointed() -> bool:
            return (await handle.query(AgentRunWorkflow.status)).checkpoint is not None

        await eventually(checkpointed, "the run to write its checkpoint")
        shown = await Cli(process_env(stack.client))("status", handle.id)
        await handle.cancel()

    text = shown.stdout
    assert shown.code == 0, shown.stderr
    assert f"run {handle.id}: waiting" in text
    assert "pending operation: op_" in text and "start_export" in text and "expires 20" in text
    assert "checkpoint (" in text and "remaining: once start_export (op_" in text
    assert "steps:" in text and "model scripted:demo: calls start_export" in text
