"""A real MCP server for the tests (fastmcp over streamable HTTP), run as its own process:

    python -m tests.mcp.reports_server PORT

It answers with `serving on PORT` on stdout once it listens. Its tasks live in its memory, or,
with `REPORTS_MCP_TASKS_URL=redis://HOST:PORT/DB`, in that store, where they outlive the process
(`FASTMCP_DOCKET_*` set the rest: the queue's name, how soon a task whose server died is run
again).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections import Counter
from datetime import timedelta

import uvicorn
from fastmcp import Context, FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.utilities.tasks import TaskConfig
from fastmcp_tasks import TasksExtension
from mcp_types import (
    CreateMessageRequest,
    CreateMessageRequestParams,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    InputRequiredResult,
    ListRootsRequest,
    ListRootsResult,
    SamplingMessage,
    TextContent,
)

server = FastMCP("reports")
# No URL: `memory://`, unless FASTMCP_DOCKET_URL says otherwise.
server.add_extension(TasksExtension(url=os.environ.get("REPORTS_MCP_TASKS_URL")))
# Polled every second: the tests wait for tasks in real time.
TASK = TaskConfig(mode="required", poll_interval=timedelta(seconds=1))
# What the tasks did, by event: `render_report started`, `slow_export cancelled`...
EVENTS: Counter[str] = Counter()
CHANNELS = ["email", "slack"]


@server.tool
def events() -> dict[str, int]:
    """What the server's tasks did so far (for the tests' assertions)."""
    return dict(EVENTS)


@server.tool(task=TASK)
async def render_report(region: str, seconds: float = 2.0) -> dict[str, str]:
    """Render a region's report; takes a few seconds."""
    EVENTS["render_report started"] += 1
    await asyncio.sleep(seconds)
    EVENTS["render_report finished"] += 1
    return {"url": f"https://reports.example/{region}.pdf"}


@server.tool(task=TASK)
async def slow_export(region: str) -> str:
    """Export a region's data; takes ten minutes."""
    EVENTS["slow_export started"] += 1
    try:
        await asyncio.sleep(600)
    except asyncio.CancelledError:
        EVENTS["slow_export cancelled"] += 1
        raise
    return "exported"


@server.tool(task=TASK)
async def count(to: int, ctx: Context, seconds: float = 0.5) -> dict[str, int]:
    """Count to `to`, a step every `seconds`, reporting `step k/n` as it goes."""
    EVENTS["count started"] += 1
    for step in range(1, to + 1):
        await ctx.report_progress(step, to, f"step {step}/{to}")
        await asyncio.sleep(seconds)
    EVENTS["count finished"] += 1
    return {"counted": to}


@server.tool(task=TASK)
async def broken_job(region: str) -> str:
    """A job that fails."""
    EVENTS["broken_job started"] += 1
    raise ValueError(f"no data for {region}")


@server.tool(task=TASK)
async def publish_report(region: str, ctx: Context) -> dict[str, str] | InputRequiredResult:
    """Publish a region's report, asking which channel to while it runs."""
    # The guard pattern: the first leg returns the question and ends; the task is then
    # `input_required` until `tasks/update` answers, and the next leg reads the answer.
    answer = (ctx.input_responses or {}).get("channel")
    if not isinstance(answer, ElicitResult):
        EVENTS["publish_report asked"] += 1
        schema = {
            "type": "object",
            "properties": {"channel": {"type": "string", "enum": CHANNELS}},
            "required": ["channel"],
        }
        question = ElicitRequestFormParams(
            message=f"Publish the {region} report to which channel?", requested_schema=schema
        )
        return InputRequiredResult(input_requests={"channel": ElicitRequest(params=question)})
    EVENTS[f"publish_report answered {answer.action}"] += 1
    if answer.action != "accept":
        said = {"decline": "declined", "cancel": "cancelled"}[answer.action]
        raise ToolError(f"not published: the question was {said}")
    channel = (answer.content or {}).get("channel")
    if channel not in CHANNELS:
        raise ToolError(f"not published: no channel among {', '.join(CHANNELS)}")
    EVENTS["publish_report published"] += 1
    return {"published": region, "channel": str(channel)}


@server.tool(task=TASK)
async def ask_with_schema(schema: str, ctx: Context) -> dict[str, object] | InputRequiredResult:
    """Ask a question whose requested schema is `schema` (JSON, any: the tests send hostile
    ones), then return what came back: the action, the content, and the reason a client that
    declined on its own gave (`_meta`)."""
    answer = (ctx.input_responses or {}).get("form")
    if not isinstance(answer, ElicitResult):
        EVENTS["ask_with_schema asked"] += 1
        question = ElicitRequestFormParams(
            message="Fill in this form.", requested_schema=json.loads(schema)
        )
        return InputRequiredResult(input_requests={"form": ElicitRequest(params=question)})
    EVENTS[f"ask_with_schema answered {answer.action}"] += 1
    reason = (answer.meta or {}).get("io.waitstate/reason")
    return {"action": answer.action, "content": answer.content, "reason": reason}


def _ask(message: str, schema: dict[str, object], state: dict[str, object]) -> InputRequiredResult:
    """A round of a plain call: one question, under the key `answer` in every round (a client
    must tell the rounds apart), and the call's state so far (fastmcp seals it: a client that
    changes it is refused)."""
    question = ElicitRequestFormParams(message=message, requested_schema=schema)
    return InputRequiredResult(
        input_requests={"answer": ElicitRequest(params=question)}, request_state=json.dumps(state)
    )


@server.tool
async def approve_budget(team: str, ctx: Context) -> dict[str, object] | InputRequiredResult:
    """Approve a team's budget: asks the amount, then a confirmation, in rounds of a plain
    call (no task), the amount kept in the round's requestState."""
    EVENTS["approve_budget called"] += 1
    state = json.loads(ctx.request_state or "{}")
    answer = (ctx.input_responses or {}).get("answer")
    if isinstance(answer, ElicitResult) and answer.action != "accept":
        EVENTS["approve_budget declined"] += 1
        raise ToolError(f"no budget for {team}: the question was declined")
    content = (answer.content or {}) if isinstance(answer, ElicitResult) else {}
    if state.get("step") is None:
        EVENTS["approve_budget asked amount"] += 1
        amount = {"type": "object", "properties": {"amount": {"type": "integer"}}}
        return _ask(f"What budget for {team}?", amount, {"step": "amount"})
    if state["step"] == "amount":
        EVENTS["approve_budget asked confirm"] += 1
        confirm = {"type": "object", "properties": {"confirm": {"type": "boolean"}}}
        amount = content.get("amount")
        return _ask(f"Approve {amount} for {team}?", confirm, {"step": "confirm", "amount": amount})
    EVENTS["approve_budget approved"] += 1
    return {"team": team, "amount": state["amount"], "approved": bool(content.get("confirm"))}


@server.tool
async def list_roots_forever(ctx: Context) -> str | InputRequiredResult:
    """Asks for the client's roots again every round, and never answers otherwise."""
    EVENTS["list_roots_forever called"] += 1
    roots = (ctx.input_responses or {}).get("roots")
    seen = len(roots.roots) if isinstance(roots, ListRootsResult) else None
    rounds = int(ctx.request_state or "0") + 1
    EVENTS[f"list_roots_forever saw {seen} roots"] += 1
    return InputRequiredResult(
        input_requests={"roots": ListRootsRequest()}, request_state=str(rounds)
    )


@server.tool
async def swell_state(ctx: Context, at_once: bool = False) -> str | InputRequiredResult:
    """Asks for the roots with a small requestState, then (or `at_once`) with one of 100,000
    characters."""
    EVENTS["swell_state called"] += 1
    if ctx.request_state is None and not at_once:
        return InputRequiredResult(input_requests={"roots": ListRootsRequest()}, request_state="1")
    return InputRequiredResult(
        input_requests={"roots": ListRootsRequest()}, request_state="x" * 100_000
    )


@server.tool
async def draft_with_sampling(topic: str, ctx: Context) -> str | InputRequiredResult:
    """Asks the client's model for a draft (a sampling request) and a title (a question)."""
    EVENTS["draft_with_sampling called"] += 1
    message = SamplingMessage(role="user", content=TextContent(type="text", text=topic))
    sampling = CreateMessageRequestParams(messages=[message], max_tokens=50)
    title = ElicitRequestFormParams(
        message=f"A title for {topic}?",
        requested_schema={"type": "object", "properties": {"title": {"type": "string"}}},
    )
    return InputRequiredResult(
        input_requests={
            "draft": CreateMessageRequest(params=sampling),
            "title": ElicitRequest(params=title),
        }
    )


def _drafted(ctx: Context) -> str | None:
    """The text of the client's answer to the sampling request `draft`, once it came."""
    answer = (ctx.input_responses or {}).get("draft")
    content = getattr(answer, "content", None)
    text = getattr(content, "text", None)
    return text if isinstance(text, str) else None


def _ask_for_a_draft(topic: str, max_tokens: int) -> InputRequiredResult:
    message = SamplingMessage(role="user", content=TextContent(type="text", text=topic))
    sampling = CreateMessageRequestParams(
        messages=[message], system_prompt="Write a one-line summary.", max_tokens=max_tokens
    )
    return InputRequiredResult(input_requests={"draft": CreateMessageRequest(params=sampling)})


@server.tool
async def summary_by_model(
    topic: str, ctx: Context, max_tokens: int = 40
) -> str | InputRequiredResult:
    """Has the client's model write a summary (a sampling request, in rounds), then answers
    with it."""
    drafted = _drafted(ctx)
    if drafted is None:
        EVENTS["summary_by_model asked"] += 1
        return _ask_for_a_draft(topic, max_tokens)
    EVENTS["summary_by_model answered"] += 1
    return f"summary: {drafted}"


@server.tool(task=TASK)
async def summary_task(topic: str, ctx: Context) -> str | InputRequiredResult:
    """As `summary_by_model`, as a task whose first leg asks for the draft."""
    drafted = _drafted(ctx)
    if drafted is None:
        EVENTS["summary_task asked"] += 1
        return _ask_for_a_draft(topic, 40)
    EVENTS["summary_task answered"] += 1
    return f"summary: {drafted}"


@server.tool
def add(a: int, b: int) -> int:
    """Add two whole numbers."""
    return a + b


@server.tool
def summarize(region: str) -> dict[str, object]:
    """Sales totals of a region."""
    return {"region": region, "total": 1200, "currency": "EUR"}


@server.tool(annotations={"destructiveHint": True})
def delete_dataset(name: str) -> str:
    """Delete a dataset for good."""
    return f"deleted {name}"


@server.tool
def explode(reason: str) -> str:
    """Always fails, saying why."""
    raise ValueError(reason)


@server.tool(annotations={"readOnlyHint": True})
def big_table(rows: int) -> str:
    """A table of `rows` lines."""
    return "\n".join(f"row {i}: {'x' * 40}" for i in range(rows))


if __name__ == "__main__":
    port = int(sys.argv[1])
    config = uvicorn.Config(server.http_app(), host="127.0.0.1", port=port, log_level="warning")
    runner = uvicorn.Server(config)
    print(f"serving on {port}", flush=True)
    runner.run()
