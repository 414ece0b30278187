"""An MCP server over stdio for the tests: `python -m tests.mcp.stdio_server`.

Its tasks (fastmcp's tasks extension) live in the process's memory: they end with it. It exits
when the process that started it is gone (a worker killed outright), as a stdio server should
once its stdin closes.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from datetime import timedelta

from fastmcp import Context, FastMCP
from fastmcp.utilities.tasks import TaskConfig
from fastmcp_tasks import TasksExtension

server = FastMCP("local")
server.add_extension(TasksExtension())
# Polled every second: the tests wait for tasks in real time.
TASK = TaskConfig(mode="required", poll_interval=timedelta(seconds=1))


@server.tool(annotations={"readOnlyHint": True})
def shout(text: str) -> str:
    """The text in capitals."""
    return text.upper()


@server.tool(annotations={"readOnlyHint": True})
def pid() -> int:
    """This process's id (for the tests: which process answered)."""
    return os.getpid()


@server.tool(task=TASK)
async def count(to: int, ctx: Context, seconds: float = 0.5) -> dict[str, int]:
    """Count to `to`, a step every `seconds`, reporting `step k/n` as it goes."""
    for step in range(1, to + 1):
        await ctx.report_progress(step, to, f"step {step}/{to}")
        await asyncio.sleep(seconds)
    return {"counted": to}


def _exit_with_parent() -> None:
    # fastmcp, its stdin closed, would first finish the tasks it runs (for minutes).
    parent = os.getppid()
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(0)


if __name__ == "__main__":
    threading.Thread(target=_exit_with_parent, daemon=True).start()
    server.run(show_banner=False)
