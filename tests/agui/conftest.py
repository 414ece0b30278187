"""Fixtures of the AG-UI tests: the dev server, the gateway (with its thread and event desks)
and the demo systems over real HTTP, and a worker serving the refunds agent, one whose model
waits to be let go, and one whose job asks a question."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from temporalio.testing import WorkflowEnvironment

from tests.agui.agui_app import ASKER, HOLDER, REFUNDER, ask, region_tool
from tests.rigs import Stack, serving_stack
from tests.workflows.threads_app import Held
from waitstate.apps import Apps

KEYS = {"agui": "a" * 40}
WITHIN = 30.0  # far more than a run takes: only turns a hang into a failure


@pytest.fixture
async def rig(dev_env: WorkflowEnvironment, task_queue: str) -> AsyncIterator[Stack]:
    async with (
        serving_stack(
            dev_env.client,
            task_queue,
            KEYS,
            "agui",
            events=True,
            thread_model="scripted:demo",
            within=WITHIN,
        ) as stack,
        stack.worker(
            tools=[*stack.tools(), region_tool()],
            apps=Apps(
                agents={a.name: a for a in (REFUNDER, HOLDER, ASKER)},
                providers={"held": Held},
                scripts={"asker": ask},
            ),
        ),
    ):
        yield stack
