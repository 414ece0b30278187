"""Fixtures for the tools that call the demo systems over HTTP. A module that needs the systems
with other timings defines its own `systems_app` (`systems_app_fixture`); `systems_url`, `http`
and `client` follow it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from tests.examples.systems_helpers import systems_app_fixture

# The demo systems, served over real HTTP for the module (exports finish fast).
systems_app = systems_app_fixture(export_seconds=0.05)


@pytest.fixture
async def http(systems_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """A client for the tools; the systems start each test empty."""
    async with httpx.AsyncClient() as client:
        assert (await client.post(f"{systems_url}/_test/reset")).status_code == 204
        yield client
