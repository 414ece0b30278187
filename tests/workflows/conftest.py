"""Fixtures of the workflow tests: the stack a long tool's run works against, and the approvals
desk (see `tests.rigs` for what each holds)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from examples.systems import create_app as systems_app
from examples.systems import serving
from tests.rigs import Desk, Stack
from waitstate.gateway.app import create_app as gateway_app
from waitstate.gateway.delivery import TemporalDeliverer
from waitstate.gateway.tokens import ResumeTokens
from waitstate.settings import Settings

KEYS = {"test": "t" * 40}


@pytest.fixture
async def stack(dev_env: WorkflowEnvironment, task_queue: str) -> AsyncIterator[Stack]:
    """The dev server, the gateway and the demo systems (exports take half a second, the
    pipeline two), over real HTTP."""
    tokens = ResumeTokens(KEYS, "test")
    async with (
        httpx.AsyncClient(timeout=10) as http,
        serving(systems_app(export_seconds=0.5, pipeline_seconds=2.0)) as systems_url,
        serving(gateway_app(TemporalDeliverer(dev_env.client), tokens)) as gateway_url,
    ):
        settings = Settings(
            gateway_url=gateway_url,
            demo_systems_url=systems_url,
            token_keys=KEYS,
            token_signing_key="test",
        )
        yield Stack(dev_env.client, http, systems_url, gateway_url, tokens, settings, task_queue)


@pytest.fixture
async def desk(time_skipping_env: WorkflowEnvironment, task_queue: str) -> AsyncIterator[Desk]:
    """The time-skipping server and the demo systems over real HTTP."""
    async with httpx.AsyncClient(timeout=10) as http, serving(systems_app()) as url:
        yield Desk(time_skipping_env, http, url, task_queue)
