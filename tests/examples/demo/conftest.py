"""Fixtures for the tools that call the demo systems over HTTP. A module that needs the systems
with other timings defines its own `systems_url`; `http` and `client` follow it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI

from examples.systems import create_app, serving


@pytest.fixture(scope="module")
async def systems_app() -> AsyncIterator[tuple[FastAPI, str]]:
    """The demo systems, served over real HTTP for the module (exports finish fast)."""
    app = create_app(export_seconds=0.05)
    async with serving(app) as url:
        yield app, url


@pytest.fixture
async def http(systems_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """A client for the tools; the systems start each test empty."""
    async with httpx.AsyncClient() as client:
        assert (await client.post(f"{systems_url}/_test/reset")).status_code == 204
        yield client
