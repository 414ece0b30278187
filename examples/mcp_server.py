"""The demo's MCP server (fastmcp with its tasks extension, over streamable HTTP): a report
that takes a while and runs as an MCP task reporting its progress, and a destructive tool.
The deletion is a task too, and asks for confirmation while it runs (`input_required`).

    python -m examples.mcp_server --port 8791     # `make mcp-demo` starts it

Tasks live in this process's memory by default, so a restart of the server loses them (a
run polling one then finds it unknown, and its operation fails with `job_unknown`). With
`DEMO_MCP_TASKS_URL=redis://...` they are kept in Redis and survive a restart.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from collections import Counter, defaultdict
from datetime import timedelta

import uvicorn
from fastmcp import Context, FastMCP
from fastmcp.utilities.tasks import TaskConfig
from fastmcp_tasks import TasksExtension
from mcp_types import ElicitRequest, ElicitRequestFormParams, ElicitResult, InputRequiredResult
from starlette.requests import Request
from starlette.responses import JSONResponse

server = FastMCP("reports")
server.add_extension(TasksExtension(url=os.environ.get("DEMO_MCP_TASKS_URL")))
PAGES = 5
PAGE_SECONDS = float(os.environ.get("DEMO_MCP_PAGE_SECONDS", "1.5"))
TASK = TaskConfig(mode="required", poll_interval=timedelta(seconds=1))
# What each region's reports did: started, finished, cancelled (the chaos suite's invariants
# read it at /_test/stats; a task is known to the suite by the region it was asked for); and
# each deletion, under `delete:NAME`: asked, answered, deleted or kept.
STATS: defaultdict[str, Counter[str]] = defaultdict(Counter)


@server.tool(task=TASK)
async def build_report(region: str, ctx: Context) -> dict[str, object]:
    """Build a region's sales report, page by page; takes several seconds."""
    STATS[region]["started"] += 1
    try:
        for page in range(PAGES):
            await ctx.report_progress(page, PAGES, f"page {page + 1} of {PAGES}")
            await asyncio.sleep(PAGE_SECONDS)
    except asyncio.CancelledError:
        STATS[region]["cancelled"] += 1
        raise
    STATS[region]["finished"] += 1
    return {"region": region, "pages": PAGES, "url": f"https://reports.example/{region}.pdf"}


@server.tool(task=TASK, annotations={"destructiveHint": True})
async def delete_dataset(name: str, ctx: Context) -> str | InputRequiredResult:
    """Delete a dataset for good, once confirmed while it runs."""
    stats = STATS[f"delete:{name}"]
    # The guard pattern: the first leg returns the question and ends; the task is then
    # `input_required` until `tasks/update` answers, and the next leg reads the answer.
    answer = (ctx.input_responses or {}).get("confirm")
    if not isinstance(answer, ElicitResult):
        stats["asked"] += 1
        schema = {
            "type": "object",
            "properties": {"confirm": {"type": "boolean", "description": "true to delete"}},
            "required": ["confirm"],
        }
        question = ElicitRequestFormParams(
            message=f"Delete dataset {name} for good? This cannot be undone.",
            requested_schema=schema,
        )
        return InputRequiredResult(input_requests={"confirm": ElicitRequest(params=question)})
    stats["answered"] += 1
    # Anything but an accepted `confirm: true` keeps the dataset: a no is an answer, not an error.
    if answer.action == "accept" and (answer.content or {}).get("confirm") is True:
        stats["deleted"] += 1
        return f"deleted dataset {name}"
    stats["kept"] += 1
    return f"kept dataset {name}"


@server.custom_route("/_test/stats", methods=["GET"])
async def stats(request: Request) -> JSONResponse:
    """What each region's reports did (for the chaos suite)."""
    return JSONResponse({region: dict(counts) for region, counts in STATS.items()})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=8791)
    args = parser.parse_args()
    print(f"mcp server listening on http://127.0.0.1:{args.port}/mcp", flush=True)
    uvicorn.run(server.http_app(), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
