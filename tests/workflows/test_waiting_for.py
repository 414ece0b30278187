"""What a run waits for is derived from what is open, whatever order things opened in (issue 22,
defect 7): a job's question that comes while the checkpoint's model call is in flight (hosted
models take a second or two) is what the run shows it waits for once its wait begins, so
`starter.py pending` and the Web UI's `WaitingFor="input"` find it. Against the dev server,
the gateway, the demo purge service and a model over the OpenAI wire protocol."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from examples.demo.purges import PurgeService, purge_tool
from tests.helpers import (
    accept,
    eventually,
    first_question,
    process_env,
    quiet_history_length,
    replays,
)
from tests.rigs import Stack
from tests.test_starter import Cli
from tests.tiers import SUBPROCESS, needs
from waitstate.testing.wire_server import (
    RecordedRequest,
    WireServer,
    held,
    openai_text,
    openai_tool_calls,
)
from waitstate.workflows.agent_run import AgentRunWorkflow
from waitstate.workflows.search_attributes import AGENT_STATUS, WAITING_FOR

MODEL = "slow-model"
# Bounds the checkpoint's hold; the test releases it as soon as the question is recorded.
HOLD = 120.0
CHECKPOINT = "Done: started the purge of staging_events\nRemaining: report the purge's outcome"


async def _at_least(wire: WireServer, count: int) -> list[RecordedRequest] | None:
    requests = wire.requests
    return requests if len(requests) >= count else None


@pytest.fixture
@needs(SUBPROCESS)
def cli(dev_env: WorkflowEnvironment, task_queue: str) -> Cli:
    return Cli(process_env(dev_env.client, task_queue))


async def test_a_question_asked_during_the_checkpoint_call_is_what_the_run_waits_for(
    stack: Stack, wire: WireServer, cli: Cli
) -> None:
    purge = json.dumps({"dataset": "staging_events"})
    wire.enqueue(
        openai_tool_calls([("call_1", "purge_dataset", purge)]),
        # The checkpoint before the purge's wait: answered only once the purge's question is
        # in the run (an event, not a clock), by the request that releases it...
        held(HOLD, openai_text(CHECKPOINT)),
        # ... which itself gets this (it is not the run's).
        openai_text("released"),
        openai_text("purged staging_events"),
    )
    worker = stack.worker(
        tools=[purge_tool(PurgeService(stack.http, stack.systems_url))],
        openai_base_url=wire.openai_base_url,
        openai_api_key="test-key",
    )
    async with worker:
        handle = await stack.start(
            "purge the staging events",
            ["purge_dataset"],
            model=f"openai:{MODEL}",
            # Shorter than the purge's eta (a second): its wait is worth a checkpoint.
            rebuild_after=timedelta(milliseconds=100),
        )
        question = await first_question(handle, "the purge's question")
        # The race this is about: the question is in the run while the checkpoint call (held
        # until released) is in flight.
        requests = await eventually(
            lambda: _at_least(wire, 2), "the checkpoint call to reach the model"
        )
        assert len(requests) == 2 and requests[1].answered_at is None
        async with httpx.AsyncClient(timeout=10) as http:
            release = {"model": MODEL, "messages": [{"role": "user", "content": "release"}]}
            (await http.post(f"{wire.openai_base_url}/chat/completions", json=release)).json()
        await quiet_history_length(handle)  # the wait has begun: nothing left to run
        attributes = (await handle.describe()).typed_search_attributes
        assert attributes.get(WAITING_FOR) == "input", attributes.get(WAITING_FOR)
        assert attributes.get(AGENT_STATUS) == "waiting"

        async def listed() -> list[Any] | None:
            query = f'WorkflowId = "{handle.id}" AND WaitingFor = "input"'
            return [run async for run in stack.client.list_workflows(query)] or None

        found = await eventually(listed, 'the run in WaitingFor = "input"')
        pending = await cli("pending", "--json")
        answered = await accept(handle, question, {"confirm": True})
        result = await handle.result()
        state = await handle.query(AgentRunWorkflow.status)
        await replays(handle, "question_during_checkpoint")

    assert [run.id for run in found] == [handle.id]
    assert pending.code == 0, pending.stderr
    rows = [row for row in json.loads(pending.stdout) if row.get("run_id") == handle.id]
    assert [row.get("question_id") for row in rows] == [question.question_id]
    assert answered.accepted and answered.delivered
    assert result.status == "completed" and result.final_output == "purged staging_events"
    assert state.checkpoint is not None and state.checkpoint.done.startswith("started the purge")
    assert state.usage.model_calls == 3  # the turn, the checkpoint, the answer
