"""waitstate as an MCP server: the fleet's agents, served over streamable HTTP as tools that
run only as tasks (the `io.modelcontextprotocol/tasks` extension, 2026-07-28).

    WAITSTATE_MCP_CALLER_KEYS=ide:$(openssl rand -hex 32) \\
        python -m waitstate.mcp_server --app reports.app:app --port 8792

Any MCP client that speaks the tasks extension (an IDE, a desktop assistant, another agent,
another waitstate run) calls an agent's tool with `{task}` and gets a task at once; the task is
a run of that agent, on the fleet's workers. Its approvals and its tools' questions for a person
are the task's `input_required`, answered with `tasks/update`; `tasks/cancel` cancels the run.

Every request carries a bearer token (`Authorization: Bearer <secret>`): one of the caller keys
(`WAITSTATE_MCP_CALLER_KEYS`, `caller:secret`), or what another fastmcp token verifier accepts
(`agent_server(auth=...)`). A task is its caller's alone (`tasks.RunTasks`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any

from fastmcp import FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.server.auth import AccessToken, TokenVerifier
from fastmcp.tools.base import Tool, ToolResult
from mcp_types import SubscriptionsListenRequestParams, ToolAnnotations, ToolExecution
from starlette.types import ASGIApp

from waitstate.agents import Agent
from waitstate.auth.operators import OperatorKeys
from waitstate.client import WaitstateClient
from waitstate.guards import BoundedBody, OriginGuard
from waitstate.mcp_server import listing, served, shapes
from waitstate.mcp_server.listen import TaskNotices
from waitstate.mcp_server.tasks import DEFAULT_POLL_INTERVAL, RunTasks, request_caller

DEFAULT_MAX_BODY_BYTES = 1_048_576

__all__ = ["CallerKeys", "agent_server", "http_app"]


class CallerKeys(TokenVerifier):
    """Bearer tokens that are caller keys (`caller:secret`): the caller is the key's id.

    Compared as digests in constant time (`OperatorKeys`): no secret is kept in the clear."""

    def __init__(self, keys: Mapping[str, str]) -> None:
        super().__init__()
        self._keys = OperatorKeys(keys)

    async def verify_token(self, token: str) -> AccessToken | None:
        caller = self._keys.identify(token)
        if caller is None:
            return None
        return AccessToken(token=token, client_id=caller, scopes=[])


class AgentTool(Tool):
    """An agent, as a tool that runs only as a task: `RunTasks` starts its run before this
    body could run."""

    async def run(self, arguments: dict[str, Any]) -> ToolResult:
        raise ToolError(f"agent {self.name!r} runs only as a task")


def agent_tool(agent: Agent) -> AgentTool:
    """The tool that starts a run of `agent`."""
    description = agent.description or (
        f"Run the agent {agent.name} on a task, durably: it may take minutes or days, and may "
        "ask for approvals and answers while it runs."
    )
    return AgentTool(
        name=agent.name,
        description=description,
        parameters=shapes.input_tool_schema(),
        output_schema=shapes.output_schema(agent.output_type),
        annotations=ToolAnnotations(readOnlyHint=False, idempotentHint=False, openWorldHint=True),
        execution=ToolExecution(task_support="required"),
    )


def agent_server(
    agents: Mapping[str, Agent],
    *,
    connect: Callable[[], Awaitable[WaitstateClient]],
    auth: TokenVerifier,
    approvals: bool = True,
    poll_interval: timedelta = DEFAULT_POLL_INTERVAL,
    notify: bool = True,
    name: str = "waitstate",
) -> FastMCP:
    """An MCP server of `agents`, each a task-required tool of its name, and `list_tasks`, with
    which a caller finds its own tasks (`listing`).

    Args:
        connect: Returns the client its runs are started and read with (awaited when the server
            starts).
        auth: Who may call: the token's `client_id` is the caller its tasks belong to.
        approvals: Callers decide their runs' approvals (False: the operator's reviewers do).
        notify: Callers may follow their tasks on a `subscriptions/listen` stream
            (`notifications/tasks`, see `listen.TaskNotices`) rather than only poll them.
    """
    server = FastMCP(name, version=served.version(), auth=auth)
    served.advertise_only_what_is_served(server)
    server.add_middleware(served.KnownTools())
    tasks = RunTasks(connect, agents, approvals=approvals, poll_interval=poll_interval)
    server.add_extension(tasks)
    if notify:
        # A spec method, which an extension may not bind (`MethodBinding`), and fastmcp has no
        # handler of its own for: registered on the SDK's server underneath.
        server._mcp_server.add_request_handler(  # pyright: ignore[reportPrivateUsage]
            "subscriptions/listen", SubscriptionsListenRequestParams, TaskNotices(tasks)
        )
    if listing.NAME in agents:
        raise ValueError(f"an agent may not be named {listing.NAME!r}: the server's own tool")
    # First in tools/list: the one tool any client may call plainly, with no argument.
    server.add_tool(
        listing.task_list(lambda: tasks.client, agents, approvals=approvals, caller=request_caller)
    )
    for agent in agents.values():
        server.add_tool(agent_tool(agent))
    return server


def http_app(
    server: FastMCP,
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    allowed_origins: Iterable[str] = (),
) -> ASGIApp:
    """The server's streamable HTTP app (at `/mcp`), refusing a browser's request from an
    origin that is neither loopback nor one of `allowed_origins` (`guards.OriginGuard`, the
    origins as `guards.parse_origins` gives them), and bodies over `max_body_bytes`
    (`guards.BoundedBody`)."""
    return OriginGuard(BoundedBody(server.http_app(), max_body_bytes), allowed_origins)
