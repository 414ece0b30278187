"""MCP Tasks (the `io.modelcontextprotocol/tasks` extension, SEP-2663), client side: a server may
answer a `tools/call` with a task; the task is then polled with `tasks/get` and cancelled with
`tasks/cancel`, from any process (over streamable HTTP a task is reachable by id, without the
session that created it).

Imported only by workers that call MCP servers (it needs the `mcp` SDK).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Sequence
from contextlib import AsyncExitStack
from typing import Any, Literal

import mcp_types
from mcp.client import ClaimContext, ClientExtension, ResultClaim
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, CallToolResult, RequestParams, Result
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ConfigDict, Field

from waitstate.mcp import McpServer
from waitstate.schemas.operations import Completion, OperationError
from waitstate.schemas.questions import MAX_MESSAGE_CHARS, Question
from waitstate.tools.spec import Job, JobAnswer, StartContext, ToolError

log = logging.getLogger("waitstate.mcp.tasks")

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
# The `_meta` key of an elicitation result that carries why the run declined on its own.
DECLINE_REASON_META = "io.waitstate/reason"
# Closing a session is bounded: one whose server died under it must not hold its activity (and
# the worker's shutdown, which waits for every activity) for ever.
CLOSE_WITHIN_SECONDS = 5.0
MAX_URL_CHARS = 2_000  # of a URL elicitation's address, as a person is shown it
TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]


class _TaskFields(Result):
    model_config = ConfigDict(populate_by_name=True)

    task_id: str = Field(alias="taskId")
    status: TaskStatus
    ttl_ms: int | None = Field(default=None, alias="ttlMs")
    status_message: str | None = Field(default=None, alias="statusMessage")
    poll_interval_ms: int | None = Field(default=None, alias="pollIntervalMs")


class CreatedTask(_TaskFields):
    """A `tools/call` the server runs as a task."""

    result_type: Literal["task"] = Field(alias="resultType")


class TaskState(_TaskFields):
    """A `tasks/get` answer: the task, and its result, error or input requests."""

    result_type: Literal["complete"] = Field(alias="resultType")
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    input_requests: dict[str, Any] | None = Field(default=None, alias="inputRequests")


class _TaskParams(RequestParams):
    model_config = ConfigDict(populate_by_name=True)

    task_id: str = Field(serialization_alias="taskId")


# Each request on a task names it in its `Mcp-Name` header too (the SDK copies
# `params[name_param]` there), as the tasks extension requires of a client: a server may route
# on it, and refuses a request whose header and params disagree.
class _GetTask(mcp_types.Request[_TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    name_param = "taskId"
    params: _TaskParams


class _CancelTask(mcp_types.Request[_TaskParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    name_param = "taskId"
    params: _TaskParams


class _UpdateParams(_TaskParams):
    input_responses: dict[str, dict[str, Any]] = Field(serialization_alias="inputResponses")


class _UpdateTask(mcp_types.Request[_UpdateParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    name_param = "taskId"
    params: _UpdateParams


async def _not_here(task: CreatedTask, context: ClaimContext) -> CallToolResult:
    # Calls are made with allow_claimed=True: the run, not the SDK, waits for the task.
    raise RuntimeError(f"task {task.task_id} is the run's to wait for")


class Tasks(ClientExtension):
    """Tells the server this client drives tasks itself (it may then answer with one)."""

    identifier = TASKS_EXTENSION

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return (
            ResultClaim(
                result_type="task",
                model=CreatedTask,
                resolve=_not_here,
                protocol_versions=frozenset(MODERN_PROTOCOL_VERSIONS),
            ),
        )


def tool_result_text(result: CallToolResult) -> str:
    """The text of a tool result's content, or its structured content as JSON if it has no
    text (non-text blocks are named, not shown)."""
    parts = []
    for block in result.content:
        text = getattr(block, "text", None)
        if text is not None:
            parts.append(str(text))
        else:
            kind = getattr(block, "type", "content")
            mime = getattr(block, "mime_type", None)
            parts.append(f"[{kind}{f' {mime}' if mime else ''} not shown]")
    has_text = any(getattr(block, "text", None) is not None for block in result.content)
    if not has_text and result.structured_content is not None:
        return json.dumps(result.structured_content)
    return "\n".join(parts)


def completion_of(state: TaskState) -> Completion:
    """A task's state as an operation's: `working` is `running` (its status message the
    progress), `completed` is `succeeded`, or `failed` when the tool's result is an error."""
    if state.status == "working":
        return Completion(status="running", progress=_short(state.status_message))
    if state.status == "input_required":
        return Completion(
            status="input_required",
            progress=_short(state.status_message),
            questions=questions_of(state.input_requests or {}) or None,
        )
    if state.status == "completed":
        result = CallToolResult.model_validate(state.result or {})
        text = tool_result_text(result)
        if result.is_error:
            return Completion(
                status="failed",
                error=OperationError(code="tool_error", message=text[:2000], retryable=False),
            )
        value: Any = result.structured_content if result.structured_content is not None else text
        return Completion(status="succeeded", result=value)
    if state.status == "cancelled":
        return Completion(
            status="failed",
            error=OperationError(
                code="task_cancelled",
                message=f"task {state.task_id} was cancelled",
                retryable=False,
            ),
        )
    message = (state.error or {}).get("message") or state.status_message or "the task failed"
    return Completion(
        status="failed",
        error=OperationError(code="task_failed", message=str(message)[:2000], retryable=False),
    )


def questions_of(input_requests: dict[str, Any]) -> list[Question]:
    """A task's input requests as questions. Only elicitations (a form: a message and the
    schema of the answer) are questions; roots requests are answered from the server's
    declaration (`McpTaskBackend`), and sampling requests are left for the task's expiry."""
    questions = []
    for key, payload in input_requests.items():
        try:
            request = mcp_types.ElicitRequest.model_validate(payload)
        except ValueError:
            if (malformed := _malformed_elicitation(key, payload)) is not None:
                questions.append(malformed)
            continue
        # A form's message and schema, as the client received them (a URL elicitation has no
        # schema: its answer is an accept or a decline, once the person opened its address).
        params = request.model_dump(by_alias=True, mode="json", exclude_none=True)["params"]
        schema = params.get("requestedSchema") or {"type": "object", "properties": {}}
        message = str(params.get("message", ""))[:MAX_MESSAGE_CHARS]
        if params.get("mode") == "url" and params.get("url"):
            message = _with_url(message, str(params["url"]))
        questions.append(Question(key=key, message=message, requested_schema=schema))
    return questions


def _with_url(message: str, url: str) -> str:
    """A URL elicitation's message with its address, which the person must open (the server
    asks them to do something there: sign in, pay, consent) before they accept or decline. It
    is shown as text, never as a link the page follows: it came from the server."""
    address = f"\n\nOpen this address, then accept or decline: {url[:MAX_URL_CHARS]}"
    return message[: MAX_MESSAGE_CHARS - len(address)] + address


def _malformed_elicitation(key: str, payload: Any) -> Question | None:
    """An elicitation whose form is not one (its `requestedSchema` a list, a string, a schema
    of the wrong shape): asked all the same, so that the run refuses it with the reason and
    the task is told no at once, rather than left to wait for its expiry."""
    if not isinstance(payload, dict) or payload.get("method") != "elicitation/create":
        return None
    params = payload.get("params")
    params = params if isinstance(params, dict) else {}
    schema = params.get("requestedSchema")
    if not isinstance(schema, dict):
        schema = {"type": type(schema).__name__}  # refused: not an object's schema
    message = params.get("message")
    return Question(
        key=key,
        message=(message if isinstance(message, str) else "")[:MAX_MESSAGE_CHARS],
        requested_schema=schema,
    )


def _short(text: str | None) -> str | None:
    return text[:500] if text else None


class McpTaskBackend:
    """A server's tasks, as a long tool's backend: the poll and cancel activities use it.

    It keeps one session with the server from its first check until `aclose()` (a poll checks
    a task every few seconds, for as long as it runs), and opens a new one after a failure. A
    stdio server's session is the worker's one (`McpServer.connect`): closing it here leaves
    the server's process, where its tasks live, running.
    """

    def __init__(self, server: McpServer) -> None:
        self._server = server
        self._session: AsyncExitStack | None = None
        self._client: Any = None

    async def start(self, args: Any, context: StartContext) -> Job:
        """Tasks are started by the `call_tool` activity, never here."""
        raise ToolError("an MCP task is started by its tools/call")

    async def status(self, job_id: str) -> Completion:
        """`tasks/get`; a task's end is read twice before it is taken.

        Why twice: a server that runs a task in legs (a leg parked on a question, the next
        started by `tasks/update`) may report the parked leg's end as the task's, with no
        result, to a `tasks/get` that raced the update (fastmcp-tasks reads the task's current
        leg, then its open questions, apart: the update may move the leg and clear them in
        between). The next read sees the next leg; a task that did end says so again.

        Raises:
            ToolError: the server does not know the task (any more).
            ConnectionError: the session broke under the check (its server went away).
        """
        state = await self._get(job_id)
        if state.status == "completed":
            state = await self._get(job_id)
        if state.status == "input_required":
            await self._answer_roots(job_id, state.input_requests or {})
        return completion_of(state)

    async def _get(self, job_id: str) -> TaskState:
        """One `tasks/get`.

        Raises:
            ToolError: the server does not know the task (any more).
            ConnectionError: the session broke under the check (its server went away).
        """
        try:
            state: TaskState = await (await self._connected()).session.send_request(
                _GetTask(params=_TaskParams(task_id=job_id)), TaskState
            )
        except MCPError as err:
            await self.aclose()
            if err.error.code == CONNECTION_CLOSED:  # the server went away under the check
                raise ConnectionError(f"MCP server {self._server.name!r}: {err}") from None
            if self._server.over_stdio:
                raise ToolError(
                    f"MCP server {self._server.name!r}: {err}. It runs over stdio, as a "
                    "process of its worker, and its tasks end with that process (a worker "
                    "restart ends them): the task is gone, and may be started again"
                ) from None
            raise ToolError(f"MCP server {self._server.name!r}: {err}") from None
        except asyncio.CancelledError:
            # The SDK cancels a session whose server went away: a failed check, unless this
            # check itself is being cancelled (still so once the session's scope is left).
            await self.aclose()
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
            raise ConnectionError(f"MCP server {self._server.name!r} ended the session") from None
        except BaseException:
            await self.aclose()  # the session may be broken: the next check opens another
            raise
        return state

    async def _answer_roots(self, job_id: str, input_requests: dict[str, Any]) -> None:
        """Answer the task's `roots/list` requests at once, from the server's declaration (its
        `roots`): no person is asked, and answering again (a poll that saw it before the server
        took the answer) changes nothing."""
        keys = [
            key
            for key, request in input_requests.items()
            if isinstance(request, dict) and request.get("method") == "roots/list"
        ]
        if not keys:
            return
        listed = self._server.roots_listed()
        try:
            await (await self._connected()).session.send_request(
                _UpdateTask(
                    params=_UpdateParams(
                        task_id=job_id, input_responses=dict.fromkeys(keys, listed)
                    )
                ),
                mcp_types.Result,
            )
        except Exception as err:  # the next poll answers again
            await self.aclose()
            log.warning("MCP server %r: roots for task %s: %s", self._server.name, job_id, err)

    async def answer(self, job_id: str, answer: JobAnswer) -> None:
        """`tasks/update` with the answer under the task's key for the question (the server
        ignores an answer to a key already answered).

        Raises:
            ToolError: the server refused the update (an unknown task...).
        """
        response: dict[str, Any] = {"action": answer.action}
        if answer.content is not None:
            response["content"] = answer.content
        if answer.reason is not None:
            # A decline the run made on its own (a question it refused): the reason, where an
            # elicitation result may carry more (`_meta`, under a prefix of ours).
            response["_meta"] = {DECLINE_REASON_META: answer.reason}
        try:
            await (await self._connected()).session.send_request(
                _UpdateTask(
                    params=_UpdateParams(task_id=job_id, input_responses={answer.key: response})
                ),
                mcp_types.Result,
            )
        except MCPError as err:
            raise ToolError(f"MCP server {self._server.name!r}: {err}") from None

    async def cancel(self, job_id: str) -> None:
        """`tasks/cancel`; a task the server no longer knows needs none."""
        try:
            await (await self._connected()).session.send_request(
                _CancelTask(params=_TaskParams(task_id=job_id)), mcp_types.Result
            )
        except MCPError:
            return
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        """End the session, if one is open."""
        session, self._session, self._client = self._session, None, None
        if session is not None:
            # Also when the poll itself is being cancelled (its operation expired): the
            # cancellation is the poll's to report, not the closing's.
            with contextlib.suppress(Exception, asyncio.CancelledError):
                async with asyncio.timeout(CLOSE_WITHIN_SECONDS):
                    await session.aclose()

    async def _connected(self) -> Any:
        if self._client is None:
            session = AsyncExitStack()
            self._client = await session.enter_async_context(
                self._server.connect(extensions=[Tasks()])
            )
            self._session = session
        return self._client
