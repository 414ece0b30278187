"""The start of an MCP call, attempt by attempt (the `call_tool` activity in an
ActivityEnvironment, against the real MCP test server): a task is created at most once, and a
retried attempt that cannot know whether the first one acted says so instead of acting again."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from tests.helpers import eventually
from tests.mcp.mcp_app import task_events
from tests.mcp.runs import mcp_url
from tests.rigs import ServerProcess
from waitstate.activities.mcp import McpActivities
from waitstate.activities.tools import ToolActivities
from waitstate.blobs import LocalBlobStore
from waitstate.mcp import McpServer, McpServers
from waitstate.mcp.tasks import McpTaskBackend
from waitstate.schemas import ToolCall, ToolCallInput, ToolResult
from waitstate.schemas.run import McpListInput
from waitstate.tools import ToolRegistry


async def _activities(
    url: str, tmp_path: Path, reach_within: timedelta = timedelta(seconds=30)
) -> tuple[ToolActivities, str]:
    blobs = LocalBlobStore(tmp_path / "blobs")
    server = McpServer("reports", url=url, reach_within=reach_within)
    mcp = McpActivities(McpServers([server]), blobs)
    listing = await ActivityEnvironment().run(
        mcp.list_mcp_tools, McpListInput(grants=["reports__*"])
    )
    return ToolActivities(ToolRegistry([]), blobs, mcp=mcp), listing.ref


def _call(name: str, arguments: dict[str, Any], listing: str) -> ToolCallInput:
    return ToolCallInput(
        call=ToolCall(id="call_1", name=name, arguments=json.dumps(arguments)),
        mcp_listing=listing,
    )


async def _started(url: str) -> dict[str, int]:
    """How many tasks of each tool the server started (an earlier test's task may still finish
    meanwhile: only starts tell whether a call was sent)."""
    events = await task_events(url)
    return {name: n for name, n in events.items() if name.endswith(" started")}


async def _attempt(
    tools: ToolActivities,
    call: ToolCallInput,
    details: list[Any] | None = None,
    beats: list[tuple[Any, ...]] | None = None,
) -> tuple[ToolResult, list[tuple[Any, ...]]]:
    """The call's attempt (a retry, when given the heartbeat `details` it resumes from), and
    its heartbeats, in order (into `beats` as they come, when given)."""
    env = ActivityEnvironment()
    if details is not None:
        env.info = dataclasses.replace(env.info, attempt=2, heartbeat_details=details)
    beats = [] if beats is None else beats
    env.on_heartbeat = lambda *args: beats.append(args)
    return await env.run(tools.call_tool, call), beats


async def test_a_task_is_recorded_the_moment_it_exists(reports_url: str, tmp_path: Path) -> None:
    tools, listing = await _activities(reports_url, tmp_path)
    call = _call("reports__render_report", {"region": "emea", "seconds": 0.5}, listing)

    result, beats = await _attempt(tools, call)

    assert result.operation is not None
    assert result.operation.completion == "poll"
    assert result.operation.poll_interval_seconds == 1.0  # the server's pollIntervalMs
    assert beats == [("sending",), ("task", result.operation.job_id, 1.0)]


async def test_the_listing_is_owned_by_the_run(reports_url: str, tmp_path: Path) -> None:
    _, listing = await _activities(reports_url, tmp_path)

    # A blob cleanup keeps it while the run (its workflow id) may still read it.
    owners = await LocalBlobStore(tmp_path / "blobs").owners(listing)
    assert owners == [ActivityEnvironment().info.workflow_id]


async def test_a_retried_attempt_takes_the_task_already_created(
    reports_url: str, tmp_path: Path
) -> None:
    tools, listing = await _activities(reports_url, tmp_path)
    call = _call("reports__render_report", {"region": "emea", "seconds": 0.5}, listing)
    before = await _started(reports_url)

    result, beats = await _attempt(tools, call, ["task", "task-from-attempt-1", 1.0])

    assert result.operation is not None and result.operation.job_id == "task-from-attempt-1"
    assert beats == []
    assert await _started(reports_url) == before  # nothing sent to the server


# The first attempt's "sending" heartbeat is there, or it went down with its worker
# (heartbeats are sent in the background): either way its call may have reached the server.
@pytest.mark.parametrize("details", [["sending"], []], ids=["sending", "no-heartbeat"])
async def test_a_retried_attempt_that_may_have_acted_tells_the_model(
    reports_url: str, tmp_path: Path, details: list[Any]
) -> None:
    tools, listing = await _activities(reports_url, tmp_path)
    call = _call("reports__render_report", {"region": "emea"}, listing)
    before = await _started(reports_url)

    result, beats = await _attempt(tools, call, details)

    assert result.is_error
    assert "may or may not have taken effect" in result.content
    assert beats == []
    assert await _started(reports_url) == before


async def test_a_read_only_tool_is_simply_called_again(reports_url: str, tmp_path: Path) -> None:
    tools, listing = await _activities(reports_url, tmp_path)
    call = _call("reports__big_table", {"rows": 2}, listing)

    result, _ = await _attempt(tools, call, ["sending"])

    assert not result.is_error
    assert result.content.startswith("row 0: ")


async def test_a_call_made_while_its_server_restarts_waits_for_it_and_is_made_once(
    restartable_reports: ServerProcess, tmp_path: Path
) -> None:
    url = mcp_url(restartable_reports.port)
    tools, listing = await _activities(url, tmp_path)
    call = _call("reports__render_report", {"region": "emea", "seconds": 0.5}, listing)
    await restartable_reports.kill()
    beats: list[tuple[Any, ...]] = []
    attempt = asyncio.create_task(_attempt(tools, call, beats=beats))

    async def waiting_for_the_server() -> bool:
        return ("connecting",) in beats

    await eventually(waiting_for_the_server, "the call to wait for its server")
    await restartable_reports.start()
    result, _ = await attempt

    assert result.operation is not None, result.content
    # Nothing was sent before the server was back: only tries to connect.
    assert set(beats[:-2]) == {("connecting",)}
    assert beats[-2:] == [("sending",), ("task", result.operation.job_id, 1.0)]
    events = await task_events(url)
    assert events.get("render_report started", 0) <= 1  # its body may not have run yet
    # One task: the server knows the one the call made.
    backend = McpTaskBackend(McpServer("reports", url=url))
    try:
        assert (await backend.status(result.operation.job_id)).status in ("running", "succeeded")
    finally:
        await backend.aclose()


async def test_a_call_whose_server_stays_away_is_not_made_and_the_model_is_told_so(
    restartable_reports: ServerProcess, tmp_path: Path
) -> None:
    url = mcp_url(restartable_reports.port)
    tools, listing = await _activities(url, tmp_path, reach_within=timedelta(seconds=2))
    call = _call("reports__render_report", {"region": "emea"}, listing)
    await restartable_reports.kill()

    result, beats = await _attempt(tools, call)
    await restartable_reports.start()

    assert result.is_error and result.operation is None
    assert "could not be reached within 2s" in result.content
    assert "reports__render_report was not called" in result.content
    assert ("sending",) not in beats and ("connecting",) in beats
    assert await task_events(url) == {}
