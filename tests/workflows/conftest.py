"""Fixtures of the workflow tests: the stack a long tool's run works against, and the approvals
desk (see `tests.rigs` for what each holds)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from examples.systems import create_app as systems_app
from examples.systems import serving
from tests.rigs import Desk, Stack, serving_stack
from tests.workflows import fork_app
from waitstate.client import WaitstateClient

KEYS = {"test": "t" * 40}


@pytest.fixture
async def stack(dev_env: WorkflowEnvironment, task_queue: str) -> AsyncIterator[Stack]:
    """The dev server, the gateway and the demo systems (exports take half a second, the
    pipeline two), over real HTTP."""
    systems = systems_app(export_seconds=0.5, pipeline_seconds=2.0)
    async with serving_stack(dev_env.client, task_queue, KEYS, "test", systems) as stack:
        yield stack


@pytest.fixture
async def desk(time_skipping_env: WorkflowEnvironment, task_queue: str) -> AsyncIterator[Desk]:
    """The time-skipping server and the demo systems over real HTTP."""
    async with httpx.AsyncClient(timeout=10) as http, serving(systems_app()) as url:
        yield Desk(time_skipping_env, http, url, task_queue)


@pytest.fixture
async def dev_desk(dev_env: WorkflowEnvironment, task_queue: str) -> AsyncIterator[Desk]:
    """The approvals desk on the dev server, for a test that needs no time skipped and whose
    run may cancel an activity as it completes (a notice, as a decision closes its window):
    the time-skipping server refuses that cancel (`ACTIVITY_UNKNOWN`), and the run stalls there;
    the real server takes it, as production does."""
    async with httpx.AsyncClient(timeout=10) as http, serving(systems_app()) as url:
        yield Desk(dev_env, http, url, task_queue)


@pytest.fixture
async def shop(dev_env: WorkflowEnvironment, task_queue: str) -> AsyncIterator[WaitstateClient]:
    """A client of the dev server, whose worker serves the shop (tests/workflows/fork_app.py:
    its tools count each real call)."""
    async with fork_app.serving(dev_env, task_queue) as client:
        yield client
