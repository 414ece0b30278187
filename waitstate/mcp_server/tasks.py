"""The tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663) over waitstate runs: a
`tools/call` of an agent starts a run and answers with a task; `tasks/get` reads the run,
`tasks/update` answers what it waits on through its Updates, `tasks/cancel` cancels it.

The run is the task's only state. This process keeps nothing: killed and started again, it
serves every task it created from Temporal, and so does any other copy of it.

Each request is the caller's: the bearer token's client id names the caller (`CallerKeys`, or
any fastmcp token verifier), and a task id reaches only the run of the caller that created it
(`shapes.run_id_of`). Another caller's task is "not found", as an unknown one is.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from fastmcp.server.dependencies import get_access_token, get_http_request
from fastmcp.server.extensions import (
    MethodBinding,
    ServerExtension,
    read_client_extension_settings,
)
from fastmcp.utilities.tasks import TASKS_EXTENSION_ID
from fastmcp_tasks import wire_production
from fastmcp_tasks.models import (
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    CancelTaskParams,
    CancelTaskResult,
    CreateTaskResult,
    GetTaskParams,
    GetTaskResult,
    UpdateTaskParams,
    UpdateTaskResult,
    missing_capability_error_data,
)
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_NAME_HEADER, decode_header_value
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST
from mcp_types.jsonrpc import HEADER_MISMATCH
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from waitstate.agents import Agent
from waitstate.client import (
    AnswerRefused,
    ClientError,
    DecisionRefused,
    NotAnswered,
    RunEnded,
    RunNotFound,
    WaitstateClient,
    thread_input,
)
from waitstate.mcp_server import shapes
from waitstate.mcp_server.errors import (
    MAX_TASK_ID_CHARS,
    fail,
    is_invalid_answer,
    not_found,
    refusal,
)
from waitstate.mcp_server.reading import TaskReader
from waitstate.schemas.approvals import DecideInput
from waitstate.schemas.run import RunInput

if TYPE_CHECKING:
    from fastmcp.server.context import Context
    from fastmcp.server.extensions import ToolCallContinuation, ToolCallOutcome
    from mcp_types import CallToolRequestParams

log = logging.getLogger("waitstate.mcp_server")

_TASK_METHOD_VERSIONS = frozenset(MODERN_PROTOCOL_VERSIONS)
# A task's handle lives as long as its run is kept: Temporal's retention of closed runs, which
# the server's operator sets (the dev server keeps them a day).
DEFAULT_TTL = timedelta(days=30)
DEFAULT_POLL_INTERVAL = timedelta(seconds=2)
KEY_REUSED = (
    f"this idempotency key ('{shapes.IDEMPOTENCY_KEY}') was sent before with another call (another "
    "agent, task or thread): a key names one call; give a new call a new key"
)


class RunTasks(ServerExtension):
    """Serves `agents` as task-required tools over the runs `client` starts.

    Args:
        client: Connected once the server starts (`connect` is awaited in its lifespan).
        agents: The agents served, by name (each is a tool of that name).
        approvals: The caller decides the run's approvals (they are among its input
            requests); False leaves them to the operator's reviewers (the task is `working`
            while they decide).
        poll_interval: What `pollIntervalMs` suggests to callers.
        ttl: What `ttlMs` says: how long a task is kept from its creation.
    """

    identifier = TASKS_EXTENSION_ID

    def __init__(
        self,
        connect: Any,
        agents: Mapping[str, Agent],
        *,
        approvals: bool = True,
        poll_interval: timedelta = DEFAULT_POLL_INTERVAL,
        ttl: timedelta = DEFAULT_TTL,
    ) -> None:
        self._connect = connect
        self._client: WaitstateClient | None = None
        self._agents = dict(agents)
        self._approvals = approvals
        self._poll_ms = int(poll_interval.total_seconds() * 1000)
        self._ttl_ms = int(ttl.total_seconds() * 1000)
        self._reader = TaskReader(
            self._agents, approvals=approvals, ttl_ms=self._ttl_ms, poll_ms=self._poll_ms
        )

    def clone(self) -> RunTasks:
        """An unbound copy of the same configuration (its client is connected in its own
        lifespan)."""
        return RunTasks(
            self._connect,
            self._agents,
            approvals=self._approvals,
            poll_interval=timedelta(milliseconds=self._poll_ms),
            ttl=timedelta(milliseconds=self._ttl_ms),
        )

    def settings(self) -> dict[str, Any]:
        return {}

    def methods(self) -> Sequence[MethodBinding]:
        return [
            MethodBinding("tasks/get", GetTaskParams, self._get, _TASK_METHOD_VERSIONS),
            MethodBinding("tasks/update", UpdateTaskParams, self._update, _TASK_METHOD_VERSIONS),
            MethodBinding("tasks/cancel", CancelTaskParams, self._cancel, _TASK_METHOD_VERSIONS),
        ]

    @asynccontextmanager
    async def lifespan(self) -> AsyncGenerator[None, None]:
        """Connect to Temporal, and let a `tools/call` answer with a task (the SDK's server
        has no way of its own to send that result: fastmcp-tasks' wrap lends it one)."""
        self._client = await self._connect()
        wire_production.install()
        try:
            yield
        finally:
            wire_production.uninstall()

    # --- tools/call -------------------------------------------------------------------------

    async def intercept_tool_call(
        self,
        params: CallToolRequestParams,
        context: Context,
        call_next: ToolCallContinuation,
    ) -> ToolCallOutcome:
        """Start a run of the agent the call names, and answer with its task; a call of any
        other tool goes on as it would."""
        agent = self._agents.get(params.name)
        if agent is None:
            return await call_next()
        rc = context.request_context
        modern = rc is not None and rc.protocol_version in MODERN_PROTOCOL_VERSIONS
        if not modern or context.client_extension_settings(TASKS_EXTENSION_ID) is None:
            raise MCPError(
                code=MISSING_REQUIRED_CLIENT_CAPABILITY,
                message=(
                    f"agent {agent.name!r} runs only as a task: declare the tasks extension "
                    f"({TASKS_EXTENSION_ID}) on the call"
                ),
                data=missing_capability_error_data(),
            )
        try:
            arguments = shapes.task_arguments(params.arguments)
            # The request's whole `_meta` (the SDK's parsed params keep only its own keys).
            key = shapes.idempotency_key(rc.meta if rc is not None else None)
        except shapes.Refused as err:
            raise MCPError(code=INVALID_PARAMS, message=str(err)) from None
        caller = request_caller()
        if arguments.thread is not None:
            run_id, task_id, again = await self._send(
                caller, agent.name, arguments.thread, arguments.task, key
            )
        else:
            run_id, task_id, again = await self._start(caller, agent.name, arguments.task, key)
        if again:
            log.info("caller %s sent the call of task %s again (same key)", caller, task_id)
            return await self._as_it_stands(run_id, task_id)
        log.info("caller %s created task %s", caller, task_id)
        now = _now()
        return CreateTaskResult(
            task_id=task_id,
            status="working",
            created_at=now,
            last_updated_at=now,
            ttl_ms=self._ttl_ms,
            poll_interval_ms=self._poll_ms,
        )

    async def _start(
        self, caller: str, agent: str, task: str, key: str | None
    ) -> tuple[str, str, bool]:
        """Start a run of `agent` on `task` for `caller`: its run id, its task id, and whether
        the same call, sent before with `key`, had started it.

        Raises:
            MCPError: `key` was sent before with another call, or Temporal refused the start.
        """
        task_id = shapes.new_task_id() if key is None else shapes.keyed_task_id(caller, key)
        run_id = shapes.run_id_of(caller, task_id)
        try:
            started = await self.client.start(RunInput(task=task, agent=agent), run_id=run_id)
        except ClientError as err:
            raise refusal(err) from err
        if started.existing:
            try:
                given = await self.client.started_input(run_id)
            except ClientError as err:
                raise refusal(err) from err
            if given is None:
                raise MCPError(
                    code=INTERNAL_ERROR,
                    message="could not read the call the key was first sent with: send it again",
                )
            if (given.agent, given.task) != (agent, task):
                raise MCPError(code=INVALID_PARAMS, message=KEY_REUSED)
        return run_id, task_id, started.existing

    async def _send(
        self, caller: str, agent: str, thread: str, text: str, key: str | None
    ) -> tuple[str, str, bool]:
        """Send `text` to `caller`'s thread `thread` with `agent` (started with this message if
        it never ran): the thread's run id, the message's task id, and whether the same call,
        sent before with `key`, had sent it (the thread's own key, `shapes.message_key`).

        Raises:
            MCPError: `key` was sent before with another call, or the thread refused it.
        """
        run_id = shapes.thread_run_id(caller, agent, thread)
        message_key = None
        if key is not None:
            message_key = shapes.message_key(key, text)
            await self._not_keyed_otherwise(caller, key, run_id, text)
        try:
            sent = await self.client.send_message(
                run_id,
                text,
                key=message_key,
                sender=f"mcp:{caller}",
                start=thread_input(agent=agent),
            )
        except ClientError as err:
            raise refusal(err, thread=thread) from err
        task_id = shapes.message_task_id(agent, thread, sent.accepted.message_id)
        return run_id, task_id, sent.accepted.duplicate

    async def _not_keyed_otherwise(self, caller: str, key: str, thread: str, text: str) -> None:
        """Refuse `key` for a message of `text` to the run `thread` if it was sent before with
        another call: one that started a task run, or another message to this thread (as far as
        the thread remembers its keys). Where the thread cannot be asked (no worker answers), a
        key sent again with another text is taken for another message, never for the first."""
        keyed_run = shapes.run_id_of(caller, shapes.keyed_task_id(caller, key))
        try:
            await self.client.describe(keyed_run)
        except RunNotFound:
            pass
        except ClientError as err:
            raise refusal(err) from err
        else:
            raise MCPError(code=INVALID_PARAMS, message=KEY_REUSED)
        try:
            state = await self.client.query(thread)
        except RunNotFound:
            return  # a thread that never ran has seen no key
        except NotAnswered as err:
            log.info("thread %s: its keys not read (%s)", thread, err)
            return
        keys = state.thread.keys if state.thread is not None else {}
        if shapes.other_message_of(key, text, keys) is not None:
            raise MCPError(code=INVALID_PARAMS, message=KEY_REUSED)

    async def _as_it_stands(self, run_id: str, task_id: str) -> CreateTaskResult:
        """The task a call sent again with its key had created, as it stands now."""
        try:
            current = await self.read(run_id, task_id)
        except ClientError as err:
            fail(err, task_id)
        return CreateTaskResult(
            task_id=task_id,
            status=current.status,
            status_message=current.status_message,
            created_at=current.created_at,
            last_updated_at=current.last_updated_at,
            ttl_ms=self._ttl_ms,
            poll_interval_ms=self._poll_ms,
        )

    # --- tasks/* ----------------------------------------------------------------------------

    async def _get(
        self, ctx: ServerRequestContext[Any, Any], params: GetTaskParams
    ) -> GetTaskResult:
        run_id = self._run_of(ctx, params.task_id)
        try:
            return await self.read(run_id, params.task_id)
        except ClientError as err:
            fail(err, params.task_id)

    async def read(self, run_id: str, task_id: str) -> GetTaskResult:
        """The task `task_id`, of the run `run_id`: what `tasks/get` answers, and each task
        notification carries (see `reading.TaskReader`).

        Raises:
            ClientError: the run is unknown, or Temporal could not be read.
        """
        return await self._reader.read(self.client, run_id, task_id)

    async def _update(
        self, ctx: ServerRequestContext[Any, Any], params: UpdateTaskParams
    ) -> UpdateTaskResult:
        """Apply each response to the request its key names: a decision, or an answer.

        Every response is read before any is applied, so a malformed one changes nothing. A key
        that names nothing open (unknown, already answered, another's decision won) is ignored,
        as the extension asks; an answer that does not fit its question is refused.
        """
        run_id = self._run_of(ctx, params.task_id)
        caller = request_caller()
        responses = params.input_responses
        if len(responses) > shapes.MAX_RESPONSES:
            raise MCPError(
                code=INVALID_PARAMS, message=f"at most {shapes.MAX_RESPONSES} responses at once"
            )
        try:
            decisions = {
                key: shapes.decision_of(key.removeprefix(shapes.APPROVAL_KEY), value, caller)
                for key, value in responses.items()
                if key.startswith(shapes.APPROVAL_KEY) and self._approvals
            }
            answers = {
                key: shapes.answer_of(key.removeprefix(shapes.QUESTION_KEY), value, caller)
                for key, value in responses.items()
                if key.startswith(shapes.QUESTION_KEY)
            }
        except shapes.Refused as err:
            raise MCPError(code=INVALID_PARAMS, message=str(err)) from None
        try:
            await self.client.describe(run_id)  # another's task, or none, is not found
            # The decisions first, then the answers; a response that decides nothing is None.
            for key, response in [*decisions.items(), *answers.items()]:
                update_id = f"mcp-{params.task_id}-{key}"
                try:
                    if isinstance(response, DecideInput):
                        await self.client.decide(run_id, response, update_id=update_id)
                    elif response is not None:
                        await self.client.answer(run_id, response, update_id=update_id)
                except (DecisionRefused, AnswerRefused) as err:
                    if isinstance(err, AnswerRefused) and is_invalid_answer(err):
                        raise refusal(err) from None
                    log.info("task %s: %s ignored: %s", params.task_id, key, err.reason)
        except RunEnded:
            pass  # a task that ended takes nothing more
        except ClientError as err:
            fail(err, params.task_id)
        return UpdateTaskResult()

    async def _cancel(
        self, ctx: ServerRequestContext[Any, Any], params: CancelTaskParams
    ) -> CancelTaskResult:
        """Cancel the run; a task that ended stays as it ended. A thread's message is not
        cancelled: the conversation is the caller's to go on with."""
        run_id = self._run_of(ctx, params.task_id)
        if shapes.thread_of(params.task_id) is not None:
            raise MCPError(
                code=INVALID_PARAMS,
                message="a message in a thread is not cancelled: the thread answers it, and "
                "takes the next",
            )
        try:
            await self.client.cancel(run_id)
        except RunEnded:
            pass
        except ClientError as err:
            fail(err, params.task_id)
        log.info("caller %s cancelled task %s", request_caller(), params.task_id)
        return CancelTaskResult()

    # --- shared -----------------------------------------------------------------------------

    @property
    def client(self) -> WaitstateClient:
        if self._client is None:
            raise MCPError(code=INTERNAL_ERROR, message="the server is not connected to Temporal")
        return self._client

    def _run_of(self, ctx: ServerRequestContext[Any, Any], task_id: str) -> str:
        """The run of the caller's task `task_id`, once the request is one of the extension's:
        declared on the request, and named alike in its `Mcp-Name` header and its body."""
        if read_client_extension_settings(ctx, TASKS_EXTENSION_ID) is None:
            raise MCPError(
                code=MISSING_REQUIRED_CLIENT_CAPABILITY,
                message=f"declare the tasks extension ({TASKS_EXTENSION_ID}) on this request",
                data=missing_capability_error_data(),
            )
        try:
            header = get_http_request().headers.get(MCP_NAME_HEADER)
        except RuntimeError:  # not over HTTP: no header to compare
            header = None
        if header is not None and decode_header_value(header) != task_id:
            raise MCPError(
                code=HEADER_MISMATCH,
                message=f"{MCP_NAME_HEADER} header does not match the request's 'taskId'",
            )
        if not task_id or len(task_id) > MAX_TASK_ID_CHARS:
            raise not_found(task_id)
        return shapes.run_id_of(request_caller(), task_id)


def request_caller() -> str:
    """Who sent the request being served: its token's client id."""
    token = get_access_token()
    if token is None or not token.client_id:
        raise MCPError(code=INVALID_REQUEST, message="the request is not authenticated")
    return token.client_id


def _now() -> str:
    return datetime.now(UTC).isoformat()
