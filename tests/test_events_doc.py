"""docs/events.md's program, run as written, in a process of its own: it follows a run named as
the page names it, on the dev server, to its end, then reads its events."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from tests.docs import ROOT, page, section
from tests.helpers import make_worker, process_env
from waitstate.client import WaitstateClient
from waitstate.schemas import RunInput

RUN_ID = "run-42"  # the page's


def _program() -> str:
    """The page's Python program, as written."""
    text = section(page("docs/events.md"), "## From a program")
    return text.split("```python\n", 1)[1].split("```", 1)[0]


@pytest.mark.subprocess
async def test_the_program_of_events_md_runs_as_written(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    client = WaitstateClient(dev_env.client, task_queue=task_queue)
    async with make_worker(dev_env.client, task_queue):
        await client.start(RunInput(task="echo me", model="scripted:echo"), run_id=RUN_ID)
        await client.outcome(RUN_ID)
    program = tmp_path / "program.py"
    program.write_text(_program())

    process = await asyncio.create_subprocess_exec(
        sys.executable, str(program), cwd=ROOT, env=process_env(dev_env.client, task_queue),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    async with asyncio.timeout(60):
        stdout, stderr = await process.communicate()

    assert process.returncode == 0, stderr.decode()
    lines = stdout.decode().splitlines()
    assert "model scripted:echo" in " ".join(lines)  # the run's steps, from follow
    assert lines[-1].startswith("run.completed")  # its events, to the end of its chain
