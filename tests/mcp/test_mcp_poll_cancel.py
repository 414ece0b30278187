"""A poll of an MCP task, cancelled while its server is down, ends cancelled (its operation
expired, or the worker is shutting down and waits for it).

The mcp SDK's session is an anyio task group: cancelled while a child task of it fails (the
connection to a server that is down), the group raises the child's error and drops the
cancellation. The poll took that for one more failed check and went on for ever, and the worker's
shutdown waited on it (tests/mcp/test_mcp_cancel_failed.py hung so, once in a full run). Here the
connection's child task fails as it is torn down, so every cancellation meets a failing child."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from temporalio.testing import ActivityEnvironment

from waitstate.activities import OperationActivities
from waitstate.mcp import McpServer, McpServers
from waitstate.schemas.operations import PollOperationInput
from waitstate.tools import ToolRegistry


class DownServer:
    """Connections to a server that is down: each waits for its answer in an anyio task group,
    whose child task (the request) fails with a connection error when it is torn down."""

    def __init__(self) -> None:
        self.connecting = asyncio.Event()
        self.again = asyncio.Event()  # a connection attempted after the first
        self.attempts = 0

    @asynccontextmanager
    async def connect(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        self.attempts += 1
        if self.attempts > 1:  # refused at once: a poll that goes on can still be stopped
            self.again.set()
            raise ConnectionRefusedError("the reports server is down")
        async with anyio.create_task_group() as group:
            group.start_soon(self._request)
            self.connecting.set()
            await anyio.sleep_forever()  # the answer that never comes
        yield None  # never reached: the group ends by an error

    async def _request(self) -> None:
        try:
            await anyio.sleep_forever()
        finally:
            raise ConnectionRefusedError("the reports server is down")


async def test_a_poll_cancelled_while_its_server_is_down_ends_cancelled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    down = DownServer()
    monkeypatch.setattr(McpServer, "connect", lambda self, *a, **kw: down.connect(*a, **kw))
    servers = McpServers([McpServer("reports", url="http://127.0.0.1:9/mcp")])
    activities = OperationActivities(ToolRegistry([]), servers)
    poll = PollOperationInput(
        operation_id="op_1", tool="reports__export", job_id="t1", poll_interval_seconds=0.01
    )
    env = ActivityEnvironment()
    polling = asyncio.create_task(env.run(activities.poll_operation, poll))
    await down.connecting.wait()

    env.cancel()
    # The poll ends, or connects again: a poll that took its cancellation for a failed check.
    again = asyncio.create_task(down.again.wait())
    await asyncio.wait({polling, again}, return_when=asyncio.FIRST_COMPLETED)
    again.cancel()
    ended = polling.done()
    if not ended:
        polling.cancel()  # the test's own cancellation, to stop it
        await asyncio.wait({polling})

    assert ended, f"the poll went on after its cancellation ({down.attempts} attempts)"
    assert polling.cancelled()
    assert down.attempts == 1
