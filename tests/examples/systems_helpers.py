"""What the tests of the demo systems, and of the demo's tools over them, share: the systems
served for a module with its timings, the systems' test hooks, the webhooks a receiver got, a
job's start context, waiting for a job to end or for the systems to go idle, and what every
demo long tool declares by default. The fixtures
that serve the systems with their usual timings and the receiver are in `conftest.py` beside
this module."""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from examples.systems import DemoSystems, create_app, serving
from tests.helpers import eventually
from waitstate import Completion, LongSpec, LongTool, StartContext, ToolSpec


def systems_app_fixture(
    **timings: float,
) -> Callable[[], AsyncIterator[tuple[FastAPI, str]]]:
    """A module's `systems_app` fixture: the demo systems with `timings` (`create_app`'s
    `export_seconds`, `pipeline_seconds`), served over real HTTP for the module, and their URL.
    A module sets `systems_app = systems_app_fixture(...)`."""

    @pytest.fixture(scope="module")
    async def systems_app() -> AsyncIterator[tuple[FastAPI, str]]:
        app = create_app(**timings)
        async with serving(app) as url:
            yield app, url

    return systems_app


@dataclass
class Hook:
    """A webhook the receiver got."""

    name: str
    authorization: str | None
    body: Any
    webhook_id: str | None = None


@dataclass
class Receiver:
    """A webhook receiver: records every POST to `/hooks/{name}`, awaits `on_hook` when it is
    set, then answers with the next status of `answers` (200 once none is left)."""

    url: str = ""
    hooks: list[Hook] = field(default_factory=list)
    answers: deque[int] = field(default_factory=deque)
    on_hook: Callable[[Hook], Awaitable[None]] | None = None

    def named(self, name: str) -> list[Hook]:
        return [hook for hook in self.hooks if hook.name == name]

    def clear(self) -> None:
        """Forget the webhooks and what to answer, for the next test."""
        self.hooks.clear()
        self.answers.clear()
        self.on_hook = None


async def hook_number(receiver: Receiver, name: str, number: int) -> Hook:
    """The `number`th webhook (1, 2...) to `/hooks/{name}`, once it has arrived."""

    async def arrived() -> Hook | None:
        hooks = receiver.named(name)
        return hooks[number - 1] if len(hooks) >= number else None

    return await eventually(arrived, f"webhook {number} to {name}")


async def stats(client: httpx.AsyncClient) -> dict[str, Any]:
    """What the systems saw (`GET /_test/stats`); `client` has the systems' base URL."""
    response = await client.get("/_test/stats")
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    return body


async def set_faults(client: httpx.AsyncClient, **values: Any) -> dict[str, Any]:
    """Set some of the systems' faults (`POST /_test/faults`); all of them, as they are now."""
    response = await client.post("/_test/faults", json=values)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def idle(app: FastAPI) -> None:
    """Wait until the systems have no job left running. A job's task is what ends it and
    sends its webhooks, retries and copies included, each awaited until answered or given up:
    once none is left, every webhook has reached its receiver and no other can come."""
    systems: DemoSystems = app.state.systems

    async def no_task() -> bool:
        return not systems.long_jobs.tasks

    await eventually(no_task, "the systems to finish every job and its webhooks")


def context(key: str, callback_url: str | None = None) -> StartContext:
    """A long tool's start context, with a callback (token `token-abc`) when given its URL."""
    return StartContext(
        idempotency_key=key,
        operation_id="op_1",
        callback_url=callback_url,
        callback_token="token-abc" if callback_url else None,
    )


async def until_finished(service: LongTool, job_id: str) -> tuple[list[Completion], Completion]:
    """Poll until the job ends: the running reports seen, and the final one."""
    seen = []

    async def ended() -> Completion | None:
        completion = await service.status(job_id)
        if completion.status == "running":
            seen.append(completion)
            return None
        return completion

    return seen, await eventually(ended, f"job {job_id} to end")


async def later_job_ended(service: LongTool, args: Any) -> Completion:
    """Start another job (with `args`) and wait for its end. Any job started before it has
    reached the end of its own duration by then: jobs of one duration end in the order they
    started (their timers share the systems' event loop)."""
    job = await service.start(args, context("later"))
    _, done = await until_finished(service, job.job_id)
    return done


def assert_long_tool(spec: ToolSpec, name: str, backend: LongTool, completion: str) -> LongSpec:
    """Assert what a demo long tool declares by default: its name, that it is long, over
    `backend`, completed by `completion`, its result awaited, for at most an hour. Returns its
    `LongSpec`."""
    assert spec.name == name
    assert spec.kind == "long"
    assert spec.long is not None
    assert spec.long.backend is backend
    assert (spec.long.completion, spec.long.mode) == (completion, "await")
    assert spec.long.timeout == timedelta(hours=1)
    return spec.long
