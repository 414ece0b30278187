"""What the MCP tests' runs share: the test app with the MCP test server declared as `reports`,
a run of it on a worker of the test's own (in the test's process or one of its own), what the
run's tool call got, and a run cancelled when the test ends (also the client's progress test's)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

from fastmcp import FastMCP
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment

from tests.helpers import make_worker, process_env, start_run
from tests.mcp.mcp_app import task_events, task_events_since
from tests.rigs import WorkerProcess
from waitstate.activities.mcp import McpActivities, read_listing
from waitstate.agents import Agent
from waitstate.apps import Apps, load_apps
from waitstate.blobs import LocalBlobStore
from waitstate.mcp import McpServer, McpServers
from waitstate.mcp.sampling import Sampler
from waitstate.mcp.tasks import McpTaskBackend
from waitstate.mcp_server import CallerKeys, agent_server
from waitstate.schemas import RunInput, RunResult, ToolCall, ToolCallInput, ToolResult
from waitstate.schemas.operations import Completion
from waitstate.schemas.run import McpListInput, McpTool
from waitstate.tools.spec import JobAnswer

APP = "tests.mcp.mcp_app:app"
AGENTS_APP = "tests.mcp.agents_app:app"


def agents_server(
    client: Any, callers: dict[str, str], agents: Mapping[str, Agent] | None = None, **options: Any
) -> FastMCP:
    """waitstate's MCP server of `agents` (by default the test agents app's,
    `tests/mcp/agents_app.py`) over `client`, for `callers` (their keys, by id); `options`:
    `agent_server`'s others."""

    async def connect() -> Any:
        return client

    agents = load_apps([AGENTS_APP]).agents if agents is None else agents
    return agent_server(agents, connect=connect, auth=CallerKeys(callers), **options)


def mcp_url(port: int) -> str:
    """The streamable HTTP endpoint of a test MCP server listening on `port`."""
    return f"http://127.0.0.1:{port}/mcp"


def reports_apps(url: str, app: str = APP, **server: Any) -> Apps:
    """`app`, with the MCP server at `url` declared as `reports` (`server`: the declaration's
    other options, such as its input policy)."""
    return load_apps([app], mcp_servers=[McpServer("reports", url=url, **server)])


@asynccontextmanager
async def reports_run(
    env: WorkflowEnvironment,
    task_queue: str,
    apps: Apps | str,
    model: str,
    *,
    task: str = "use the reports server",
    tools: Sequence[str] = ("reports__*",),
    **fields: Any,
) -> AsyncIterator[WorkflowHandle[Any, RunResult]]:
    """A run of `model` granted `tools` (and the run input's other `fields`), started on a
    worker that serves `apps` for the block: given a URL, the test app with the server there
    as `reports`."""
    apps = reports_apps(apps) if isinstance(apps, str) else apps
    async with make_worker(env.client, task_queue, apps=apps):
        run = RunInput(task=task, model=model, tools=list(tools), **fields)
        yield await start_run(env.client, task_queue, run)


def worker_process(
    env: WorkflowEnvironment, task_queue: str, tmp_path: Path, mcp_servers: str
) -> WorkerProcess:
    """A worker process (not started yet) of the test app on the test's task queue, with
    `mcp_servers` declared as `WAITSTATE_MCP_SERVERS` says them, its blobs and log under
    `tmp_path`."""
    variables = process_env(
        env.client,
        task_queue,
        WAITSTATE_APPS=APP,
        WAITSTATE_MCP_SERVERS=mcp_servers,
        WAITSTATE_BLOB_DIR=str(tmp_path / "blobs"),
    )
    return WorkerProcess(variables, tmp_path / "worker.log")


@dataclasses.dataclass
class ProcessRun:
    """A run on a worker process of its own, which the test may kill and start again."""

    worker: WorkerProcess
    handle: WorkflowHandle[Any, RunResult]
    url: str
    before: dict[str, int]

    async def server_events(self) -> dict[str, int]:
        """The MCP test server's task events since the run started (`task_events_since`)."""
        return await task_events_since(self.url, self.before)

    async def restart_worker(self) -> None:
        """Kill the worker process (SIGKILL: whatever it was doing is cut short) and start
        another in its place."""
        await self.worker.kill()
        await self.worker.start()


@asynccontextmanager
async def reports_run_on_a_process(
    env: WorkflowEnvironment, task_queue: str, tmp_path: Path, url: str, model: str, task: str
) -> AsyncIterator[ProcessRun]:
    """A run of `model` granted the tools of the MCP server at `url` (declared as `reports`),
    started on a worker process of its own (`worker_process`); the process is stopped when
    the block ends."""
    before = await task_events(url)
    worker = worker_process(env, task_queue, tmp_path, f"reports={url}")
    await worker.start()
    try:
        run = RunInput(task=task, model=model, tools=["reports__*"])
        yield ProcessRun(worker, await start_run(env.client, task_queue, run), url, before)
    finally:
        await worker.stop()


# `reports_run_on_a_process` on the test's dev server, task queue, directory and MCP test
# server (the `reports_process` fixture): given the model and the task.
ReportsProcess = Callable[[str, str], AbstractAsyncContextManager[ProcessRun]]


def tool_outcome(result: RunResult) -> dict[str, Any]:
    """What the run's tool call got, as the scripted model answered with it (`got: {...}`),
    once the run completed."""
    assert result.status == "completed", result.error
    return dict(json.loads((result.final_output or "").removeprefix("got: ")))


@asynccontextmanager
async def cancelled_at_the_end(handle: WorkflowHandle[Any, Any]) -> AsyncIterator[None]:
    """Cancel the run when the block ends, also when the test failed in it, and wait for the
    run to end: the long task it waits for is cancelled, and its server can stop."""
    try:
        yield
    finally:
        await handle.cancel()
        with contextlib.suppress(WorkflowFailureError):
            await handle.result()


def mcp_activities(blobs: Path, *servers: McpServer) -> McpActivities:
    """The worker's MCP activities for `servers`, keeping listings under `blobs`."""
    return McpActivities(McpServers(servers), LocalBlobStore(blobs))


async def granted_tools(
    activities: McpActivities, grants: list[str], blobs: Path
) -> dict[str, McpTool]:
    """A run's listing of `grants` (the listing activity, run in an ActivityEnvironment), as
    the call activity reads it back from the blob store under `blobs`."""
    listed = await ActivityEnvironment().run(activities.list_mcp_tools, McpListInput(grants=grants))
    return await read_listing(LocalBlobStore(blobs), listed.ref)


@dataclasses.dataclass
class StartedCall:
    """A call of a tool started by the `call_tool` activity, and the backend its operation's
    poll, answer and cancel activities use."""

    result: ToolResult
    backend: McpTaskBackend
    blobs: LocalBlobStore

    @property
    def job_id(self) -> str:
        assert self.result.operation is not None, self.result
        return self.result.operation.job_id

    async def status(self) -> Completion:
        """The operation's status, as its poll activity reads it."""
        return await self.backend.status(self.job_id)

    async def answer(self, answer: JobAnswer) -> None:
        """Send a person's answer to one of the operation's questions."""
        await self.backend.answer(self.job_id, answer)

    async def cancel(self) -> None:
        await self.backend.cancel(self.job_id)


async def started_call(
    server: McpServer,
    tmp_path: Path,
    tool: str,
    arguments: dict[str, Any],
    *,
    sampler: Sampler | None = None,
    **listed: Any,
) -> StartedCall:
    """The `call_tool` activity's call of `server`'s `tool` (its listing changed by `listed`),
    its blobs under `tmp_path`; its backend answers sampling requests with `sampler`."""
    activities = mcp_activities(tmp_path / "blobs", server)
    name = f"{server.name}__{tool}"
    tools = await granted_tools(activities, [name], tmp_path / "blobs")
    granted = tools[name].model_copy(update=listed)
    call = ToolCall(id="call_1", name=name, arguments=json.dumps(arguments))
    input = ToolCallInput(call=call)
    result = await ActivityEnvironment().run(activities.call, input, granted)
    blobs = LocalBlobStore(tmp_path / "blobs")
    return StartedCall(result, McpTaskBackend(server, blobs, sampler), blobs)
