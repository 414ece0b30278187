"""Small helpers shared by tests."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Replayer, Worker

from gateway.tokens import ResumeTokens
from schemas import ToolCall
from schemas.converter import DATA_CONVERTER
from settings import Settings
from tools import ToolRegistry, ToolSpec, demo_tools
from worker import build_providers, build_worker
from workflows.agent_run import AgentRunWorkflow

HISTORIES = Path(__file__).resolve().parent / "histories"

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
