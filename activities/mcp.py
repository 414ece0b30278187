"""MCP activities: list the tools a run was granted, once; call one of them.

Both heartbeat while they run (`activities.pulse`: a call under `call_tool`'s, the listing under
its own), so a worker lost mid-call is noticed within the heartbeat timeout; what a call records
for its next attempt (that it sends, the task it created) goes through `pulse.beat`, which the
side task then repeats.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import x_mcp_header_map
from mcp_types import CONNECTION_CLOSED, CallToolResult, InputRequiredResult
from pydantic import TypeAdapter
from temporalio import activity
from temporalio.exceptions import ApplicationError

from waitstate.blobs import BlobNotFound, BlobStore
from waitstate.mcp import (
    McpConfigError,
    McpServer,
    McpServers,
    granted,
    grants_by_server,
    split_name,
)
from waitstate.mcp.extension import CreatedTask, Tasks
from waitstate.mcp.results import tool_result_text
from waitstate.mcp.round_trips import learn_header_params as list_until
from waitstate.mcp.rounds import PendingCall, Rounds, input_required_reply, unknown_outcome_message
from waitstate.providers.base import shorten
from waitstate.schemas import ToolCall, ToolDefinition, ToolResult
from waitstate.schemas.approvals import ApprovalNeeded, ApprovalPolicy
from waitstate.schemas.builtin import MCP_SEPARATOR
from waitstate.schemas.errors import RUN_INPUT_INVALID
from waitstate.schemas.operations import OperationStarted
from waitstate.schemas.run import (
    LIST_MCP_TOOLS,
    McpListing,
    McpListInput,
    McpTool,
    ToolCallInput,
)
from waitstate.tools.spec import error_result

from .mcp_resources import answer, offered
from .pulse import beat, pulse

MCP_UNAVAILABLE = "McpServerUnavailable"
# A task is polled at the server's pollIntervalMs, kept within these bounds.
MIN_POLL = timedelta(seconds=1)
MAX_POLL = timedelta(seconds=60)
DEFAULT_POLL = timedelta(seconds=5)
# A call's rounds of input are checked this often (seconds): how soon answers are sent.
ROUNDS_POLL = MIN_POLL.total_seconds()
MCP_REFUSED = "McpRequestRefused"
_LISTING = TypeAdapter(list[McpTool])
# A server's message is kept to this many characters, on one line, in a failure.
MESSAGE_CHARS = 500


class McpActivities:
    """The MCP servers this worker may call, and the blob store that keeps runs' listings."""

    def __init__(self, servers: McpServers, blobs: BlobStore) -> None:
        self._servers = servers
        self._blobs = blobs

    @activity.defn(name=LIST_MCP_TOOLS)
    async def list_mcp_tools(self, input: McpListInput) -> McpListing:
        """The tools the run's grants name, from each server, stored by reference.

        Raises:
            ApplicationError: non-retryable when a grant names an undeclared server or matches
                no tool of its server; retryable when a server cannot be reached.
        """
        async with pulse():
            return await self._listing(input)

    async def _listing(self, input: McpListInput) -> McpListing:
        tools: list[McpTool] = []
        for name, patterns in grants_by_server(input.grants).items():
            try:
                server = self._servers.get(name)
            except McpConfigError as err:
                raise ApplicationError(
                    str(err), type=RUN_INPUT_INVALID, non_retryable=True
                ) from None
            listed, reading = await self._list(name)
            chosen = [tool for tool in listed if granted(tool.name, patterns)]
            all_names = [t.name for t in listed] + [d.name for d in reading]
            if unmatched := [p for p in patterns if not any(granted(n, [p]) for n in all_names)]:
                raise ApplicationError(
                    f"MCP server {name!r} has no tool matching {', '.join(unmatched)}; it has: "
                    f"{', '.join(sorted(all_names)) or 'none'}",
                    type=RUN_INPUT_INVALID,
                    non_retryable=True,
                )
            tools.extend(
                McpTool(
                    definition=definition.model_copy(
                        update={"name": f"{name}{MCP_SEPARATOR}{definition.name}"}
                    ),
                    idempotent=True,
                    read_only=True,
                    requires_approval=server.approval_pattern(definition.name) is not None,
                    reads=True,
                )
                for definition in reading
                if granted(definition.name, patterns)
            )
            for tool in chosen:
                hints = tool.annotations
                destructive = bool(hints is not None and hints.destructive_hint)
                named = server.approval_pattern(tool.name) is not None
                tools.append(
                    McpTool(
                        definition=ToolDefinition(
                            name=f"{name}__{tool.name}",
                            description=tool.description or tool.title or tool.name,
                            parameters=tool.input_schema,
                        ),
                        destructive=destructive,
                        idempotent=bool(hints is not None and hints.idempotent_hint),
                        read_only=bool(hints is not None and hints.read_only_hint),
                        requires_approval=named
                        or (destructive and server.requires_approval_if_destructive),
                    )
                )
        ref = await self._blobs.put(_LISTING.dump_json(tools), activity.info().workflow_id)
        return McpListing(ref=ref, names=[tool.definition.name for tool in tools])

    async def _list(self, name: str) -> tuple[list[Any], list[ToolDefinition]]:
        """The server's tools, and the tools that read its resources and prompts where it
        offers them (less any its own tools already name)."""
        try:
            async with self._servers.get(name).connect() as client:
                tools = list((await client.list_tools()).tools)
                own = {tool.name for tool in tools}
                reading = [d for d in await offered(name, client) if d.name not in own]
                return tools, reading
        except McpConfigError as err:
            raise ApplicationError(str(err), type=RUN_INPUT_INVALID, non_retryable=True) from None
        except Exception as err:  # the server could not be reached or answered nonsense
            raise _unavailable(name, "listing its tools", err) from None

    async def call(self, input: ToolCallInput, tool: McpTool) -> ToolResult:
        """Call the tool: its result, its error, or, when the server runs the call as a task,
        an operation the run waits for (polled with `tasks/get`, cancelled with
        `tasks/cancel`); or, when the server asks for input first (`input_required`), an
        operation whose questions the run asks, round after round, the call sent again with
        the answers (`_rounds`). A call that needs a person's approval and has none yet is not
        made: the run is told to ask for it (`approval_needed`).

        A start is attempted at most once unless the tool is read-only or idempotent: the
        activity heartbeats before it sends the call and again with the task's id the moment
        it exists, so a retried attempt (a worker that crashed, a lost answer) finds the task
        already created, or tells the model the outcome is unknown, and never starts a
        second one.

        Raises:
            ApplicationError: non-retryable when the server refused the request itself;
                retryable when it could not be reached and a retry is safe.
        """
        call = input.call
        server_name, tool_name = split_name(call.name)
        try:
            arguments = json.loads(call.arguments or "{}")
        except json.JSONDecodeError as err:
            return error_result(call, f"arguments are not valid JSON ({err.msg}); send an object")
        if not isinstance(arguments, dict):
            return error_result(call, "arguments must be a JSON object")
        if input.approved_by is None and (needed := self._approval(call, tool)) is not None:
            return ToolResult(
                tool_call_id=call.id, name=call.name, content="", approval_needed=needed
            )
        repeatable = tool.read_only or tool.idempotent
        if tool.reads:
            return await self._read(call, server_name, tool_name, arguments)
        info = activity.info()
        details = info.heartbeat_details
        if details and details[0] == "task":
            return self._operation(input, str(details[1]), float(details[2]), tool_name)
        if details and details[0] == "rounds":  # recorded before this heartbeat: taken as is
            return self._operation(input, str(details[1]), ROUNDS_POLL, tool_name)
        # A retried attempt of a start that may have sent its call: the heartbeat that says
        # so is sent in the background and may be lost with its worker, so the attempt number
        # decides (every failure this attempt could answer is answered, not raised).
        if info.attempt > 1 and not repeatable:
            return _unknown_outcome(call, "an earlier attempt was interrupted")
        result: Any = None
        refused: MCPError | None = None
        try:
            server = self._servers.get(server_name)
            async with _reached(server) as client:
                await learn_header_params(client, tool_name, tool.definition.parameters)
                beat("sending")
                try:
                    result = await client.session.call_tool(
                        tool_name, arguments, allow_input_required=True, allow_claimed=True
                    )
                except MCPError as err:  # taken here: leaving the session would wrap it
                    if err.error.code == CONNECTION_CLOSED:
                        raise
                    refused = err
                if isinstance(result, CreatedTask):
                    beat("task", result.task_id, _poll_interval(result.poll_interval_ms))
        except _NotReached as err:
            # Its session never opened: nothing was sent, the model may simply call again.
            if repeatable:
                raise _unavailable(server_name, f"calling {tool_name}", err.cause) from None
            why = shorten(str(err.cause) or type(err.cause).__name__, 200)
            return error_result(
                call,
                f"MCP server {server_name!r} could not be reached within "
                f"{server.reach_within.total_seconds():.0f}s ({why}); {call.name} was not "
                "called. Try again later.",
            )
        except McpConfigError as err:
            raise ApplicationError(str(err), type=RUN_INPUT_INVALID, non_retryable=True) from None
        except Exception as err:
            # The connection broke (the server went away under the call). The server's answer
            # stands if the session broke only as it closed.
            if result is None:
                if repeatable:
                    raise _unavailable(server_name, f"calling {tool_name}", err) from None
                return _unknown_outcome(call, shorten(_why(err), 200))
        if refused is not None:
            raise ApplicationError(
                f"MCP server {server_name!r} refused {tool_name}: "
                f"{shorten(str(refused), MESSAGE_CHARS)}",
                type=MCP_REFUSED,
                non_retryable=True,
            )
        if isinstance(result, CreatedTask):
            interval = _poll_interval(result.poll_interval_ms)
            return self._operation(input, result.task_id, interval, tool_name, ttl_ms=result.ttl_ms)
        if isinstance(result, InputRequiredResult):
            return await self._rounds(input, tool, arguments, result)
        if not isinstance(result, CallToolResult):
            return error_result(call, f"{call.name} answered with a {type(result).__name__}")
        return ToolResult(
            tool_call_id=call.id,
            name=call.name,
            content=tool_result_text(result),
            is_error=bool(result.is_error),
        )

    async def _rounds(
        self, input: ToolCallInput, tool: McpTool, arguments: dict[str, Any], first: Any
    ) -> ToolResult:
        """A call the server answered with a round of input requests (`input_required`): an
        operation whose job is the call's rounds, recorded in the blob store (the call, the
        round), which its poll asks, answers and sends again until the server answers
        otherwise (`waitstate.mcp.rounds`). A first round past the bounds is the model's to
        read as the call's error.

        Raises:
            BlobStoreUnavailable: the rounds could not be recorded (the attempt is retried: a
                call that may not be repeated is then reported of unknown outcome).
        """
        call = input.call
        server_name, tool_name = split_name(call.name)
        reply = input_required_reply(first, 0, server_name, tool_name)
        if reply.error is not None:
            return error_result(call, reply.error.message)
        pending = PendingCall(
            server=server_name,
            tool=tool_name,
            name=call.name,
            arguments=arguments,
            repeatable=tool.read_only or tool.idempotent,
            header_params=bool(x_mcp_header_map(tool.definition.parameters)),
        )
        rounds = await Rounds.begin(self._blobs, pending, reply)
        beat("rounds", rounds.job_id)
        return self._operation(input, rounds.job_id, ROUNDS_POLL, tool_name)

    async def _read(
        self, call: ToolCall, server_name: str, tool_name: str, arguments: dict[str, Any]
    ) -> ToolResult:
        """A call of one of the server's resource or prompt tools: what the server says, as
        text. It only reads, so a failure to reach the server is retried.

        Raises:
            ApplicationError: non-retryable when the server refused the request; retryable
                when it could not be reached.
        """
        refused: MCPError | None = None
        try:
            server = self._servers.get(server_name)
            async with _reached(server) as client:
                try:
                    text, wrong = await answer(client, tool_name, arguments)
                except MCPError as err:  # taken here: leaving the session would wrap it
                    if err.error.code == CONNECTION_CLOSED:
                        raise
                    refused = err
        except _NotReached as err:
            raise _unavailable(server_name, f"calling {tool_name}", err.cause) from None
        except McpConfigError as err:
            raise ApplicationError(str(err), type=RUN_INPUT_INVALID, non_retryable=True) from None
        except Exception as err:  # the connection broke: nothing was changed, try again
            raise _unavailable(server_name, f"calling {tool_name}", err) from None
        if refused is not None:
            # The server's refusal (an unknown URI or prompt...) is the model's to read.
            return error_result(call, f"MCP server {server_name!r}: {shorten(str(refused), 500)}")
        if wrong:
            return error_result(call, text)
        return ToolResult(tool_call_id=call.id, name=call.name, content=text)

    def _approval(self, call: ToolCall, tool: McpTool) -> ApprovalNeeded | None:
        """What a person must approve before the call is made, if anything: a tool the run's
        listing marked (destructive, or named by the operator when it was listed), or one the
        server's `require_approval` names now (an operator who adds a pattern is obeyed by
        the runs already going); with the server's approval policy."""
        server_name, tool_name = split_name(call.name)
        try:
            server = self._servers.get(server_name)
        except McpConfigError:
            server = None
        pattern = server.approval_pattern(tool_name) if server is not None else None
        if pattern is None and not tool.requires_approval:
            return None
        if pattern is not None:
            why = f"named by the operator: {pattern}"
        elif tool.destructive:
            why = "destructive"
        else:
            why = "the operator requires approval"
        policy = server.approval if server is not None else ApprovalPolicy()
        return ApprovalNeeded(reason=f"{call.name} ({why}) {call.arguments}", policy=policy)

    def _operation(
        self,
        input: ToolCallInput,
        task_id: str,
        interval: float,
        tool_name: str,
        ttl_ms: int | None = None,
    ) -> ToolResult:
        """The task, as an operation the run waits for (its expiry deterministic from the
        call: a retried attempt computes the same one)."""
        server = self._servers.get(split_name(input.call.name)[0])
        timeout = server.task_timeout
        if ttl_ms is not None:
            timeout = min(timeout, timedelta(milliseconds=ttl_ms))
        if input.operation_timeout is not None:
            timeout = min(timeout, input.operation_timeout)
        expires_at = activity.info().scheduled_time + timeout
        activity.metric_meter().create_counter(
            "waitstate_operations_started", "Long-tool jobs started"
        ).add(1, {"tool": input.call.name})
        return ToolResult(
            tool_call_id=input.call.id,
            name=input.call.name,
            content="",
            operation=OperationStarted(
                job_id=task_id,
                completion="poll",
                mode=input.operation_mode or "await",
                expires_at=expires_at,
                poll_interval_seconds=interval,
                input=server.input,
            ),
        )


async def learn_header_params(client: Any, tool: str, schema: dict[str, Any]) -> None:
    """Let the session know which of the tool's arguments travel in `Mcp-Param-*` headers
    too (`x-mcp-header` in its schema), as the server requires: the SDK sends them only for a
    tool listed on the same session, and a call's session is its own. A tool with none costs
    no listing.

    Raises:
        Exception: the server refused the listing, or could not be reached.
    """
    if x_mcp_header_map(schema):
        await list_until(client, tool)


def _poll_interval(milliseconds: int | None) -> float:
    """The server's poll interval, within [MIN_POLL, MAX_POLL] seconds."""
    if milliseconds is None:
        return DEFAULT_POLL.total_seconds()
    seconds = milliseconds / 1000
    return min(max(seconds, MIN_POLL.total_seconds()), MAX_POLL.total_seconds())


def _unknown_outcome(call: ToolCall, why: str) -> ToolResult:
    return error_result(call, unknown_outcome_message(call.name, why))


async def read_listing(blobs: BlobStore, ref: str) -> dict[str, McpTool]:
    """A run's MCP listing, by tool name (`server__tool`).

    Raises:
        ApplicationError: non-retryable, when the listing is not in this worker's store.
    """
    try:
        stored = await blobs.get(ref)
    except BlobNotFound:
        raise ApplicationError(
            f"{ref} is not in this worker's blob store (workers must share one)",
            type=RUN_INPUT_INVALID,
            non_retryable=True,
        ) from None
    return {tool.definition.name: tool for tool in _LISTING.validate_json(stored)}


class _NotReached(Exception):
    """A session with the server could not be opened (nothing was sent on it)."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


@contextlib.asynccontextmanager
async def _reached(server: McpServer) -> AsyncIterator[Any]:
    """A session with `server` (offering the tasks extension), tried again for as long as the
    server's `reach_within` allows, heartbeating meanwhile.

    Raises:
        _NotReached: every try failed to open a session.
    """
    deadline = time.monotonic() + server.reach_within.total_seconds()
    delay = 0.5
    while True:
        session = contextlib.AsyncExitStack()
        try:
            client = await session.enter_async_context(server.connect(extensions=[Tasks()]))
        except (McpConfigError, MCPError):
            raise
        except Exception as err:
            if time.monotonic() + delay > deadline:
                raise _NotReached(err) from err
            beat("connecting")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 4.0)
            continue
        break
    async with session:
        yield client


def _why(err: BaseException) -> str:
    """What went wrong, in words: the errors inside the groups the SDK wraps its own in
    ("unhandled errors in a TaskGroup" says nothing)."""
    if isinstance(err, BaseExceptionGroup):
        return "; ".join(dict.fromkeys(_why(inner) for inner in err.exceptions))
    return str(err) or type(err).__name__


def _unavailable(server: str, doing: str, err: BaseException) -> ApplicationError:
    message = _why(err)
    return ApplicationError(
        f"MCP server {server!r} could not be reached {doing}: {shorten(message, MESSAGE_CHARS)}",
        type=MCP_UNAVAILABLE,
    )
