"""A run taken from its start to its end on a worker of the tests' own, for the workflow tests
that only look at how it ended: its result and the state it ended in."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from tests.helpers import make_worker, start_run
from waitstate.apps import Apps
from waitstate.schemas import RunInput, RunResult, RunState
from waitstate.settings import Settings
from waitstate.tools import ToolSpec
from waitstate.workflows.agent_run import AgentRunWorkflow

# Bounds a run that should end by itself: it only turns a wedged run into a failure.
RUN_ENDS_WITHIN = 120.0


async def run_to_end(
    env: WorkflowEnvironment,
    task_queue: str,
    run_input: RunInput,
    *,
    tools: Sequence[ToolSpec] | None = None,
    apps: Apps | None = None,
    settings: Settings | None = None,
    within: float = RUN_ENDS_WITHIN,
) -> tuple[WorkflowHandle[Any, RunResult], RunResult, RunState]:
    """Run `run_input` on `make_worker(tools=, apps=, settings=)` until it ends: its handle,
    its result and its last state (queried while the worker still runs, as a query needs)."""
    async with make_worker(env.client, task_queue, tools=tools, apps=apps, settings=settings):
        handle = await start_run(env.client, task_queue, run_input)
        result = await asyncio.wait_for(handle.result(), within)
        state: RunState = await handle.query(AgentRunWorkflow.status)
    return handle, result, state
