"""MCP tasks of a server over stdio (`tests/mcp/stdio_server.py`, whose tasks live in its
process's memory), on the dev server: the worker keeps one process of the server, so a task is
called, polled and finished in the process that made it; and a worker restart, which ends that
process and its tasks, gives the model a failure it can act on, not a hang."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from tests.helpers import eventually, make_worker, scheduled_activities, start_run
from tests.mcp.runs import APP, tool_outcome, worker_process
from waitstate.apps import load_apps
from waitstate.client import WaitstateClient
from waitstate.mcp import McpServer
from waitstate.mcp.results import tool_result_text
from waitstate.schemas import RunInput, RunResult
from waitstate.schemas.run import CALL_MODEL, CALL_TOOL, LIST_MCP_TOOLS, POLL_OPERATION

pytestmark = pytest.mark.subprocess

COMMAND = f"{sys.executable} -m tests.mcp.stdio_server"
# A restarted worker's poll is retried once the killed one's heartbeat is missed (seconds).
RESULT_TIMEOUT = 90


async def _start(
    env: WorkflowEnvironment, task_queue: str, model: str
) -> WorkflowHandle[Any, RunResult]:
    return await start_run(
        env.client, task_queue, RunInput(task="count", model=model, tools=["local__*"])
    )


async def _pid(server: McpServer) -> int:
    async with server.connect() as client:
        return int(tool_result_text(await client.call_tool("pid", {})))


async def test_a_worker_keeps_one_process_of_a_stdio_server_and_starts_another_if_it_ends() -> None:
    server = McpServer("local", command=COMMAND)
    try:
        first = await _pid(server)
        again = await asyncio.gather(*(_pid(server) for _ in range(3)))
        os.kill(first, signal.SIGKILL)

        async def restarted() -> int | None:
            with contextlib.suppress(Exception):  # the one that died may answer a last error
                return await _pid(server)
            return None

        second = await eventually(restarted, "a new process of the server")
    finally:
        await server.aclose()

    assert again == [first] * 3
    assert second != first
    with pytest.raises(ProcessLookupError):  # closed with the worker
        os.kill(second, 0)


@pytest.mark.parametrize(
    ("command", "why"),
    [("false", "ended before it answered"), ("/no/such/server", "could not be started: ")],
)
async def test_a_stdio_server_that_gives_no_session_says_why(command: str, why: str) -> None:
    server = McpServer("local", command=command)
    with pytest.raises(ConnectionError) as raised:
        async with server.connect():
            pass
    await server.aclose()

    assert str(raised.value).startswith(f"MCP server 'local' over stdio ({command}) {why}")


async def test_a_task_of_a_stdio_server_is_called_polled_and_finished(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    apps = load_apps([APP], mcp_servers=[McpServer("local", command=COMMAND)])
    try:
        async with make_worker(dev_env.client, task_queue, apps=apps):
            handle = await _start(dev_env, task_queue, "scripted:mcp-local-count")
            result = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)
    finally:
        await apps.aclose()  # the worker's process of the server ends with it

    got = tool_outcome(result)
    assert got["status"] == "succeeded", got
    assert got["result"] == {"counted": 3}
    assert await scheduled_activities(handle) == [
        LIST_MCP_TOOLS, CALL_MODEL, CALL_TOOL, CALL_MODEL, POLL_OPERATION, CALL_MODEL,
    ]  # fmt: skip


@pytest.mark.parametrize("restart", ["stop", "kill"])
async def test_a_worker_restart_ends_a_stdio_servers_task_and_the_model_is_told(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, restart: str
) -> None:
    worker = worker_process(dev_env, task_queue, tmp_path, f"local=stdio:{COMMAND}")
    client = WaitstateClient(dev_env.client, task_queue=task_queue)
    await worker.start()
    try:
        handle = await _start(dev_env, task_queue, "scripted:mcp-local-count-long")

        async def counting() -> str | None:
            state = (await client.status(handle.id)).state
            return next((op.progress for op in state.operations.values() if op.progress), None)

        # The task runs, and the poll reads it in the process that made it.
        progress = await eventually(counting, "the task's progress", within=RESULT_TIMEOUT)
        # SIGTERM (a deploy: the worker finishes, closing the server) or SIGKILL (a crash).
        await (worker.stop() if restart == "stop" else worker.kill())
        await worker.start()
        result = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)
    finally:
        await worker.stop()

    assert re.fullmatch(r"step \d+/600", progress), progress
    got = tool_outcome(result)
    # The next worker's process of the server does not know the task: the model is told it
    # is gone, and why, as a failed operation.
    assert got["status"] == "failed", got
    assert got["error"]["code"] == "job_unknown"
    message = got["error"]["message"]
    # Ours around the server's refusal (in fastmcp's words, its own).
    assert message.startswith("MCP server 'local': ")
    assert "runs over stdio" in message and "a worker restart ends them" in message
