"""An MCP task's progress (its `statusMessage`, "step k/n") as people read it: `starter.py
status`, `status --json` and `watch`, in subprocesses against the dev server, with a real
worker and the real MCP test server. It is read from the poll's heartbeat, so it costs the
run's history nothing."""

from __future__ import annotations

import asyncio
import json
import re

from temporalio.testing import WorkflowEnvironment

from tests.helpers import eventually, process_env
from tests.mcp.runs import cancelled_at_the_end, reports_run
from tests.test_starter import PATIENCE, Cli
from waitstate.client import WaitstateClient

STEP = re.compile(r"step (\d+)/240")


async def _watched_step(watch: asyncio.subprocess.Process) -> tuple[str, int]:
    """The first line of `watch` that shows the task's progress, and its step."""
    assert watch.stdout is not None
    shown: list[str] = []
    try:
        async with asyncio.timeout(PATIENCE):
            while True:
                line = (await watch.stdout.readline()).decode()
                assert line, f"watch ended without showing the task's progress: {shown}"
                shown.append(line.strip())
                if (found := STEP.search(line)) and "(reports__count)" in line:
                    return line.strip(), int(found.group(1))
    except TimeoutError:
        raise AssertionError(f"watch showed no progress in {PATIENCE} s: {shown}") from None


async def test_a_tasks_progress_shows_in_status_status_json_and_watch(
    dev_env: WorkflowEnvironment, task_queue: str, reports_url: str
) -> None:
    cli = Cli(process_env(dev_env.client, task_queue))
    run = reports_run(
        dev_env,
        task_queue,
        reports_url,
        "scripted:mcp-count-long",
        task="count",
        tools=["reports__count"],
    )
    # Also when the test failed: the task is cancelled, and the server can stop.
    async with run as handle, cancelled_at_the_end(handle):
        watch = await cli.watch(handle.id)
        try:
            watched, _ = await _watched_step(watch)

            async def in_status() -> tuple[int, int] | None:
                done = await cli("status", handle.id)
                assert done.code == 0, done.stderr
                found = re.search(r"pending operation: .*, progress: step (\d+)/240", done.stdout)
                if found is None:
                    return None
                return int(found.group(1)), (await handle.describe()).history_length

            first, events = await eventually(in_status, "progress in status", within=PATIENCE)

            async def in_json() -> int | None:
                done = await cli("status", handle.id, "--json")
                assert done.code == 0, done.stderr
                operations = json.loads(done.stdout)["operations"].values()
                [progress] = [op["progress"] for op in operations]
                found = STEP.fullmatch(progress or "")
                # A later step than status showed: the progress is the job's latest.
                return int(found.group(1)) if found and int(found.group(1)) > first else None

            later = await eventually(in_json, "later progress in status --json", within=PATIENCE)
            history_after = (await handle.describe()).history_length
        finally:
            if watch.returncode is None:
                watch.kill()
                await watch.communicate()

    assert re.fullmatch(r"operation op_\S+ \(reports__count\): step \d+/240", watched), watched
    assert later > first
    # The task advanced from `first` to `later` while the run's history stood still.
    assert history_after == events


async def test_each_of_two_tasks_polled_at_once_shows_its_own_progress(
    dev_env: WorkflowEnvironment, task_queue: str, reports_url: str
) -> None:
    client = WaitstateClient(dev_env.client, task_queue=task_queue)
    run = reports_run(
        dev_env, task_queue, reports_url, "scripted:mcp-two-counts", task="count twice"
    )
    async with run as handle, cancelled_at_the_end(handle):

        async def both() -> dict[str, str] | None:
            state = (await client.status(handle.id)).state
            shown = {op.tool_call_id: op.progress or "" for op in state.operations.values()}
            return shown if len(shown) == 2 and all(shown.values()) else None

        progress = await eventually(both, "both tasks' progress", within=PATIENCE)

    # Each operation shows its own job's progress (the poll heartbeats the job's id).
    assert re.fullmatch(r"step \d+/240", progress["call_240"]), progress
    assert re.fullmatch(r"step \d+/120", progress["call_120"]), progress
