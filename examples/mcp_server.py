"""The demo's MCP server (fastmcp with its tasks extension, over streamable HTTP): a report
that takes a while and runs as an MCP task reporting its progress, and a destructive tool.
The deletion is a task too, and asks for confirmation while it runs (`input_required`).

    python -m examples.mcp_server --port 8791     # `make mcp-demo` starts it

Tasks live in this process's memory by default, so a restart of the server loses them (a
run polling one then finds it unknown, and its operation fails with `job_unknown`). With
`DEMO_MCP_TASKS_URL=redis://...` they are kept in Redis and survive a restart: the next life
of the server runs again the tasks its last one was running (from their start), once the
lease of the killed one lapses (`FASTMCP_DOCKET_REDELIVERY_TIMEOUT`). With
`DEMO_MCP_STATS_FILE` what the tasks did (`/_test/stats`) is kept in that file too. A test
fault: `DEMO_MCP_DELETE_SCHEMAS`, a JSON object of dataset names, makes the deletion of each ask
in the schema given instead of `{confirm: boolean}` (a hostile server, to test the client's
checks: a backtracking pattern, a malformed schema).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from collections import Counter, defaultdict
from datetime import timedelta
from pathlib import Path

import uvicorn
from fastmcp import Context, FastMCP
from fastmcp.utilities.tasks import TaskConfig
from fastmcp_tasks import TasksExtension
from fastmcp_tasks.context import get_task_leg_number
from mcp_types import ElicitRequest, ElicitRequestFormParams, ElicitResult, InputRequiredResult
from starlette.requests import Request
from starlette.responses import JSONResponse

server = FastMCP("reports")
server.add_extension(TasksExtension(url=os.environ.get("DEMO_MCP_TASKS_URL")))
PAGES = 5
PAGE_SECONDS = float(os.environ.get("DEMO_MCP_PAGE_SECONDS", "1.5"))
TASK = TaskConfig(mode="required", poll_interval=timedelta(seconds=1))
CONFIRM_SCHEMA: dict[str, object] = {
    "type": "object",
    "properties": {"confirm": {"type": "boolean", "description": "true to delete"}},
    "required": ["confirm"],
}
DELETE_SCHEMAS: dict[str, dict[str, object]] = json.loads(
    os.environ.get("DEMO_MCP_DELETE_SCHEMAS") or "{}"
)
# Where a client that declined on its own says why (waitstate: a question it would not ask).
REASON_META = "io.waitstate/reason"


class Stats:
    """What each region's reports did: started, finished, cancelled (the chaos suite's
    invariants read it at /_test/stats; a task is known to the suite by the region it was asked
    for); and each deletion, under `delete:NAME`: asked, answered, deleted or kept, and
    `reasoned` when its answer was a decline that said why.

    Each count is of a task's legs (a task runs a leg, and another after each answer): a leg
    its server ran again after a restart counts once, the runs again under `reruns`. Kept in
    a file (one JSON line an event) when `DEMO_MCP_STATS_FILE` names one, so that it outlives
    a restart."""

    def __init__(self, path: str | None) -> None:
        self._path = Path(path) if path else None
        self._seen: set[tuple[str, str, str]] = set()
        self._counts: defaultdict[str, Counter[str]] = defaultdict(Counter)
        if self._path is not None and self._path.exists():
            for line in self._path.read_text().splitlines():
                if line.strip():
                    event = json.loads(line)
                    self._count(event["key"], event["event"], event["task"])

    def record(self, key: str, event: str, ctx: Context) -> None:
        """Count `event` of `key`'s task, once for the leg running."""
        task = f"{ctx.task_id}/{get_task_leg_number()}"
        if self._path is not None:
            with self._path.open("a") as log:
                log.write(json.dumps({"key": key, "event": event, "task": task}) + "\n")
        self._count(key, event, task)

    def _count(self, key: str, event: str, task: str) -> None:
        if (key, event, task) in self._seen:
            if event in ("started", "asked"):
                self._counts[key]["reruns"] += 1
            return
        self._seen.add((key, event, task))
        self._counts[key][event] += 1

    def view(self) -> dict[str, dict[str, int]]:
        """Every key's counts."""
        return {key: dict(counts) for key, counts in self._counts.items()}


STATS = Stats(os.environ.get("DEMO_MCP_STATS_FILE"))


@server.tool(task=TASK)
async def build_report(region: str, ctx: Context) -> dict[str, object]:
    """Build a region's sales report, page by page; takes several seconds."""
    STATS.record(region, "started", ctx)
    try:
        for page in range(PAGES):
            await ctx.report_progress(page, PAGES, f"page {page + 1} of {PAGES}")
            await asyncio.sleep(PAGE_SECONDS)
    except asyncio.CancelledError:
        STATS.record(region, "cancelled", ctx)
        raise
    STATS.record(region, "finished", ctx)
    return {"region": region, "pages": PAGES, "url": f"https://reports.example/{region}.pdf"}


@server.tool(task=TASK, annotations={"destructiveHint": True})
async def delete_dataset(name: str, ctx: Context) -> str | InputRequiredResult:
    """Delete a dataset for good, once confirmed while it runs."""
    key = f"delete:{name}"
    # The guard pattern: the first leg returns the question and ends; the task is then
    # `input_required` until `tasks/update` answers, and the next leg reads the answer.
    answer = (ctx.input_responses or {}).get("confirm")
    if not isinstance(answer, ElicitResult):
        STATS.record(key, "asked", ctx)
        question = ElicitRequestFormParams(
            message=f"Delete dataset {name} for good? This cannot be undone.",
            requested_schema=DELETE_SCHEMAS.get(name, CONFIRM_SCHEMA),
        )
        return InputRequiredResult(input_requests={"confirm": ElicitRequest(params=question)})
    STATS.record(key, "answered", ctx)
    if answer.action == "decline" and (answer.meta or {}).get(REASON_META):
        STATS.record(key, "reasoned", ctx)
    # Anything but an accepted `confirm: true` keeps the dataset: a no is an answer, not an error.
    if answer.action == "accept" and (answer.content or {}).get("confirm") is True:
        STATS.record(key, "deleted", ctx)
        return f"deleted dataset {name}"
    STATS.record(key, "kept", ctx)
    return f"kept dataset {name}"


@server.custom_route("/_test/stats", methods=["GET"])
async def stats(request: Request) -> JSONResponse:
    """What each region's reports did (for the chaos suite)."""
    return JSONResponse(STATS.view())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=8791)
    args = parser.parse_args()
    print(f"mcp server listening on http://127.0.0.1:{args.port}/mcp", flush=True)
    uvicorn.run(server.http_app(), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
