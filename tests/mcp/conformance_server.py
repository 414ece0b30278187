"""The demo's MCP server (`examples/mcp_server.py`) with the tools the MCP conformance suite's
Tasks scenarios call, for `tests/mcp/test_conformance.py`:

    python -m tests.mcp.conformance_server --port PORT

It is the demo's own server object, served by its own `main()`: the suite tests the stack a
user runs (fastmcp, its tasks extension, streamable HTTP), and these tools are only added to
it. Their names, arguments and behaviour are the suite's (`@modelcontextprotocol/conformance`,
`src/scenarios/server/tasks/`); its tasks are polled every 200 ms, so the suite runs quickly.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from fastmcp import Context
from fastmcp.exceptions import ToolError
from fastmcp.server.dependencies import get_context
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.tools.base import InputRequiredToolResult, ToolResult
from fastmcp.utilities.tasks import TaskConfig
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CallToolRequestParams,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    InputRequiredResult,
)

from examples.mcp_server import main, server

OPTIONAL = TaskConfig(mode="optional", poll_interval=timedelta(milliseconds=200))
REQUIRED = TaskConfig(mode="required", poll_interval=timedelta(milliseconds=200))
CONFIRM: dict[str, Any] = {
    "type": "object",
    "properties": {"confirm": {"type": "boolean"}},
    "required": ["confirm"],
}
NAME: dict[str, Any] = {
    "type": "object",
    "properties": {"name": {"type": "string"}},
    "required": ["name"],
}
# The tool whose first round asks a question before any task exists (MrtrBeforeTask).
ASKS_BEFORE_TASK = "test_tool_with_task"


def _ask(message: str, schema: dict[str, Any]) -> ElicitRequest:
    return ElicitRequest(params=ElicitRequestFormParams(message=message, requested_schema=schema))


@server.tool
async def greet(name: str) -> str:
    """Greet someone; never a task."""
    return f"Hello, {name}!"


@server.tool(task=OPTIONAL)
async def slow_compute(seconds: float = 1, label: str = "") -> str:
    """Sleep `seconds`, then answer; a task when the client drives tasks."""
    await asyncio.sleep(seconds)
    return f"computed {label} after {seconds}s"


@server.tool(task=REQUIRED)
async def failing_job() -> str:
    """Fail as a tool (a result with isError) after a second; only ever a task."""
    await asyncio.sleep(1)
    raise ToolError("failing_job always fails")


@server.tool(task=OPTIONAL)
async def protocol_error_job() -> str:
    """Fail with a protocol error (the task `failed`, its error inlined)."""
    await asyncio.sleep(0.2)
    raise MCPError(code=-32603, message="protocol_error_job internal failure")


@server.tool(task=OPTIONAL)
async def confirm_delete(filename: str, ctx: Context) -> str | InputRequiredResult:
    """Ask to confirm once, then answer whether the file was deleted."""
    answer = (ctx.input_responses or {}).get("confirm")
    if not isinstance(answer, ElicitResult):
        return InputRequiredResult(input_requests={"confirm": _ask(f"Delete {filename}?", CONFIRM)})
    confirmed = answer.action == "accept" and (answer.content or {}).get("confirm") is True
    return f"{'deleted' if confirmed else 'kept'} {filename}"


@server.tool(task=OPTIONAL)
async def multi_input(ctx: Context) -> str | InputRequiredResult:
    """Ask two questions at once; ask again only those still unanswered."""
    answered = ctx.input_responses or {}
    missing = {k: _ask(f"question {k}", NAME) for k in ("first", "second") if k not in answered}
    if missing:
        return InputRequiredResult(input_requests=missing)
    return "both answered"


@server.tool(name=ASKS_BEFORE_TASK, task=REQUIRED)
async def tool_with_task(user_name: str = "") -> str:
    """Greet the user whose name MrtrBeforeTask asked for; only ever a task."""
    await asyncio.sleep(0.5)
    return f"Hello, {user_name}!"


class MrtrBeforeTask(Middleware):
    """The suite's composition of the two ways to ask (tasks-mrtr-composition): the call's
    first round asks synchronously (`input_required` on tools/call, no task yet), and only the
    round that answers creates the task.

    fastmcp's tasks extension creates a `required` tool's task as soon as it is called, so
    the question is asked here, before it (middleware runs first); the answering round has
    the answer folded into the tool's arguments and goes on to the extension."""

    async def on_call_tool(
        self,
        context: MiddlewareContext[CallToolRequestParams],
        call_next: CallNext[CallToolRequestParams, ToolResult],
    ) -> ToolResult:
        params = context.message
        if params.name != ASKS_BEFORE_TASK:
            return await call_next(context)
        answer = (get_context().input_responses or {}).get("user_name")
        if not isinstance(answer, ElicitResult):
            question = {"user_name": _ask("Your name?", NAME)}
            return InputRequiredToolResult(InputRequiredResult(input_requests=question))
        name = (answer.content or {}).get("name", "")
        arguments = dict(params.arguments or {}, user_name=name)
        answered = params.model_copy(update={"arguments": arguments})
        return await call_next(context.copy(message=answered))


server.add_middleware(MrtrBeforeTask())


if __name__ == "__main__":
    main()
