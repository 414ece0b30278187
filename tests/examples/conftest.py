"""Fixtures for the tests of the demo systems and of the demo's tools over them: the systems
served over real HTTP for a module, a client for them, and a webhook receiver. A module that
needs the systems with other timings defines its own `systems_app` (`systems_app_fixture`);
`systems_url` and `client` follow it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from examples.systems import serving
from tests.examples.systems_helpers import Hook, Receiver, systems_app_fixture

# The demo systems with their usual timings, served for the module, and their URL.
systems_app = systems_app_fixture()


@pytest.fixture(scope="module")
def systems_url(systems_app: tuple[FastAPI, str]) -> str:
    return systems_app[1]


@pytest.fixture
async def client(systems_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """A client for the systems (base URL set), test hooks included; the systems start each
    test empty."""
    async with httpx.AsyncClient(base_url=systems_url) as client:
        assert (await client.post("/_test/reset")).status_code == 204
        yield client


@pytest.fixture(scope="module")
async def module_receiver() -> AsyncIterator[Receiver]:
    app = FastAPI()
    receiver = Receiver()

    @app.post("/hooks/{name}")
    async def hook(name: str, request: Request) -> JSONResponse:
        received = Hook(
            name,
            request.headers.get("authorization"),
            await request.json(),
            request.headers.get("webhook-id"),
        )
        receiver.hooks.append(received)
        if receiver.on_hook is not None:
            await receiver.on_hook(received)
        status = receiver.answers.popleft() if receiver.answers else 200
        return JSONResponse({"answered": status}, status_code=status)

    async with serving(app) as url:
        receiver.url = url
        yield receiver


@pytest.fixture
def receiver(module_receiver: Receiver) -> Receiver:
    """The module's webhook receiver (at `{url}/hooks/{name}`), cleared for the test."""
    module_receiver.clear()
    return module_receiver
