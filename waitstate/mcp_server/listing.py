"""`list_tasks`: the one plain tool of waitstate's MCP server, with which a caller finds its own
task runs (the tasks extension has no `tasks/list`: SEP-2663 removed it), newest first, a page
at a time. A caller that lost a task's id (a call answered while it was away) finds it here;
one that sent its call with an idempotency key finds it again by sending the call again.

Read from Temporal's visibility store, under the caller's workflow ids alone
(`shapes.runs_of`): another caller's tasks are never listed. The store is eventually
consistent: a task created a moment ago may take a moment to be listed.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Mapping
from typing import Any

from fastmcp.tools.base import ToolResult
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS, ToolAnnotations
from pydantic import PrivateAttr
from temporalio.client import WorkflowExecution, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from waitstate.client import WaitstateClient
from waitstate.mcp_server import shapes
from waitstate.mcp_server.served import CheckedTool
from waitstate.names import AGENT_NAME, WAITING_FOR

NAME = "list_tasks"
PAGE = 50
MAX_CURSOR_CHARS = 1_024
QUOTABLE = re.compile(r"[A-Za-z0-9_.-]{1,128}")  # an agent name put in a visibility query
ENDED = {
    WorkflowExecutionStatus.COMPLETED: "completed",
    WorkflowExecutionStatus.CANCELED: "cancelled",
}

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "agent": {"type": "string", "description": "Only the tasks of this agent (its tool)."},
        "cursor": {
            "type": "string",
            "maxLength": MAX_CURSOR_CHARS,
            "description": "The `nextCursor` of the page before: the page after it.",
        },
    },
    "additionalProperties": False,
}
OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "tasks": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "taskId": {"type": "string"},
                    "agent": {"type": "string"},
                    "status": {
                        "type": "string",
                        "enum": ["working", "input_required", "completed", "failed", "cancelled"],
                    },
                    "createdAt": {"type": "string"},
                },
                "required": ["taskId", "status"],
            },
        },
        "nextCursor": {"type": "string"},
    },
    "required": ["tasks"],
}


class TaskList(CheckedTool):
    """The caller's task runs, as `list_tasks` answers (`Context` is the caller's)."""

    _client: Callable[[], WaitstateClient] = PrivateAttr()
    _agents: frozenset[str] = PrivateAttr()
    _approvals: bool = PrivateAttr()
    _caller: Callable[[], str] = PrivateAttr()

    def check_arguments(self, arguments: dict[str, Any]) -> None:
        _arguments(arguments, self._agents)

    async def run(self, arguments: dict[str, Any]) -> ToolResult:
        agent, token = _arguments(arguments, self._agents)
        prefix = f"{shapes.runs_of(self._caller())}-"
        query = f'WorkflowId STARTS_WITH "{prefix}"'
        query += ' AND ExecutionStatus != "ContinuedAsNew"'
        if agent is not None:  # one of the served agents' names: nothing else reaches a query
            query += f' AND {AGENT_NAME.name} = "{agent}"'
        runs = self._client().temporal.list_workflows(query, page_size=PAGE, next_page_token=token)
        try:
            await runs.fetch_next_page()
        except RPCError as err:
            if err.status == RPCStatusCode.INVALID_ARGUMENT and token is not None:
                raise MCPError(code=INVALID_PARAMS, message=BAD_CURSOR) from None
            raise MCPError(code=INTERNAL_ERROR, message=f"could not list: {err.message}") from err
        tasks = [self._task(run, prefix) for run in runs.current_page or []]
        listed: dict[str, Any] = {"tasks": tasks}
        if runs.next_page_token:
            listed["nextCursor"] = base64.urlsafe_b64encode(runs.next_page_token).decode()
        count = f"{len(tasks)} task{'s' if len(tasks) != 1 else ''}"
        more = "; more with `nextCursor`" if runs.next_page_token else ""
        return ToolResult(content=f"{count}{more}", structured_content=listed)

    def _task(self, run: WorkflowExecution, prefix: str) -> dict[str, Any]:
        """A run, as a task in the listing: its status from Temporal's record alone."""
        attributes = run.typed_search_attributes
        if run.status == WorkflowExecutionStatus.RUNNING:
            waiting_for = attributes.get(WAITING_FOR) or "none"
            asking = waiting_for == "input" or (waiting_for == "approval" and self._approvals)
            status = "input_required" if asking else "working"
        else:
            status = ENDED.get(run.status or WorkflowExecutionStatus.FAILED, "failed")
        task: dict[str, Any] = {"taskId": run.id.removeprefix(prefix), "status": status}
        if agent := attributes.get(AGENT_NAME):
            task["agent"] = agent
        if run.start_time is not None:
            task["createdAt"] = run.start_time.isoformat()
        return task


BAD_CURSOR = "'cursor' is the `nextCursor` of an earlier answer of list_tasks"


def task_list(
    client: Callable[[], WaitstateClient],
    agents: Mapping[str, object],
    *,
    approvals: bool,
    caller: Callable[[], str],
) -> TaskList:
    """The `list_tasks` tool over the runs `client()` reads, for the caller `caller()` names."""
    tool = TaskList(
        name=NAME,
        description=(
            "List your tasks on this server (the runs your calls of its agents started), newest "
            "first, with their status: to find a task whose id you do not have. Read one with "
            "tasks/get."
        ),
        parameters=INPUT_SCHEMA,
        output_schema=OUTPUT_SCHEMA,
        annotations=ToolAnnotations(readOnlyHint=True, idempotentHint=True, openWorldHint=False),
    )
    tool._client = client
    tool._agents = frozenset(agents)
    tool._approvals = approvals
    tool._caller = caller
    return tool


def _arguments(
    arguments: Mapping[str, Any], agents: frozenset[str]
) -> tuple[str | None, bytes | None]:
    """The agent to list the tasks of, and the page token the cursor holds.

    Raises:
        MCPError: an argument the schema does not have, an agent not served, or a cursor that
            is not one.
    """
    unknown = sorted(set(arguments) - {"agent", "cursor"})
    if unknown:
        names = ", ".join(repr(name[:64]) for name in unknown[:8])
        raise MCPError(
            code=INVALID_PARAMS, message=f"unknown arguments {names}: it takes 'agent', 'cursor'"
        )
    agent = arguments.get("agent")
    if agent is not None and not (
        isinstance(agent, str) and agent in agents and QUOTABLE.fullmatch(agent)
    ):
        raise MCPError(code=INVALID_PARAMS, message="'agent' names one of this server's agents")
    cursor = arguments.get("cursor")
    if cursor is None:
        return agent, None
    if not isinstance(cursor, str) or not 0 < len(cursor) <= MAX_CURSOR_CHARS:
        raise MCPError(code=INVALID_PARAMS, message=BAD_CURSOR)
    try:
        return agent, base64.urlsafe_b64decode(cursor.encode("ascii"))
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise MCPError(code=INVALID_PARAMS, message=BAD_CURSOR) from None
