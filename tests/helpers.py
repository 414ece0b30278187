"""Small helpers shared by tests."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Replayer, Worker

from examples.demo.basic import demo_tools
from gateway.tokens import ResumeTokens
from schemas import ToolCall
from schemas.operations import Operation
from schemas.run import CALL_TOOL, ToolCallInput
from settings import Settings
from tools import ToolRegistry, ToolSpec
from waitstate.converter import DATA_CONVERTER
from worker import build_providers, build_worker
from workflows.agent_run import AgentRunWorkflow

HISTORIES = Path(__file__).resolve().parent / "histories"
# How long `eventually` waits by default: far longer than anything takes on a loaded 2-core
# machine, so it only turns a hang into a failure; no test depends on it.
EVENTUALLY_WITHIN = 30.0
T = TypeVar("T")

# One store for the session: conversations are content-addressed, so tests cannot collide.
TEST_BLOBS = Path(tempfile.mkdtemp(prefix="waitstate-test-blobs-"))


@asynccontextmanager
async def make_worker(
    client: Client,
    task_queue: str,
    *,
    tools: Sequence[ToolSpec] | None = None,
    max_cached_workflows: int = 100,
    settings: Settings | None = None,
    tokens: ResumeTokens | None = None,
) -> AsyncIterator[Worker]:
    """The production worker wiring, running on a test's own task queue."""
    settings = settings or Settings(max_cached_workflows=max_cached_workflows)
    if settings.blob_dir == Settings().blob_dir:  # never the checkout's own store
        settings = dataclasses.replace(settings, blob_dir=TEST_BLOBS)
    providers = build_providers(settings)
    async with httpx.AsyncClient(timeout=10) as http:
        worker = build_worker(
            client,
            settings,
            providers,
            demo_tools() if tools is None else tools,
            http,
            tokens=tokens,
            task_queue=task_queue,
        )
        try:
            async with worker:
                yield worker
        finally:
            await providers.aclose()


async def eventually(
    check: Callable[[], Awaitable[T]], what: str, within: float = EVENTUALLY_WITHIN
) -> T:
    """Poll `check` until it returns a truthy value, and return that value.

    Tests wait for the event they need (a request opened, a job created, a counter exported),
    never for a fixed time: `within` only bounds a wait that would otherwise hang.

    Args:
        check: Asks once; a falsy answer means "not yet".
        what: What is awaited, for the failure message ("the approval request").
        within: Seconds before giving up, counting the checks themselves.

    Raises:
        AssertionError: `within` passed first; names `what` and the last answer.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    value: T | None = None
    try:
        async with asyncio.timeout_at(deadline):
            while True:
                value = await check()
                if value:
                    return value
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(
            f"waited {within:g} s for {what}; the last check answered {value!r}"
        ) from None


async def quiet_history_length(handle: WorkflowHandle[Any, Any]) -> int:
    """The run's history length once it has nothing to do but wait (for a person, a webhook
    or a timer): no workflow task and no activity pending, so only a request that reaches it
    can add an event."""

    async def quiet() -> int:
        described = await handle.describe()
        raw = described.raw_description
        busy = raw.HasField("pending_workflow_task") or len(raw.pending_activities) > 0
        return 0 if busy else described.history_length

    return await eventually(quiet, f"run {handle.id} to wait with nothing pending")


async def callback_token(
    tokens: ResumeTokens, handle: WorkflowHandle[Any, Any], operation: Operation
) -> str:
    """The resume token the run's start activity handed the external system for `operation`,
    minted again from the same claims: the run, the operation, its expiry, and the nonce the
    run chose, which its history holds (no secret: a token needs the key). For a test that
    plays the external system when it cannot read what the system was given."""
    nonce = None
    async for event in handle.fetch_history_events():
        if event.event_type != EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            continue
        scheduled = event.activity_task_scheduled_event_attributes
        if scheduled.activity_type.name != CALL_TOOL:
            continue
        [call] = DATA_CONVERTER.payload_converter.from_payloads(
            scheduled.input.payloads, [ToolCallInput]
        )
        # Runs from the checkpoint policy on give the operation's id as the activity's.
        if (call.operation_id or scheduled.activity_id) == operation.operation_id:
            nonce = call.nonce
    return tokens.mint(handle.id, operation.operation_id, operation.expires_at, nonce=nonce).token


async def scheduled_activities(handle: WorkflowHandle[Any, Any]) -> list[str]:
    """Activity type names, in the order the run scheduled them."""
    names = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            names.append(event.activity_task_scheduled_event_attributes.activity_type.name)
    return names


async def activity_attempts(handle: WorkflowHandle[Any, Any]) -> list[int]:
    """The attempt number of every activity that ran to completion or failure."""
    attempts = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attempts.append(event.activity_task_started_event_attributes.attempt)
    return attempts


async def replays(handle: WorkflowHandle[Any, Any], name: str) -> None:
    """The run's history replays on today's code. With WAITSTATE_RECORD_HISTORIES=1 it is
    also kept as tests/histories/<name>.json, which test_replay checks every later change
    against."""
    history = await handle.fetch_history()
    replayer = Replayer(workflows=[AgentRunWorkflow], data_converter=DATA_CONVERTER)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure
    if os.environ.get("WAITSTATE_RECORD_HISTORIES") == "1":
        (HISTORIES / f"{name}.json").write_text(history.to_json())


async def call_tool(registry: ToolRegistry, name: str, **arguments: Any) -> tuple[Any, bool]:
    """Run a tool as the worker would: the model's JSON in; the text it reads out, as JSON
    when it is JSON, and whether it is an error."""
    result = await registry.run(ToolCall(id="call_1", name=name, arguments=json.dumps(arguments)))
    try:
        return json.loads(result.content), result.is_error
    except json.JSONDecodeError:
        return result.content, result.is_error
