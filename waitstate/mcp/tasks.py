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
from contextlib import AsyncExitStack
from typing import Any, Literal

import mcp_types
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, CallToolResult, RequestParams
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from waitstate.blobs import BlobStore
from waitstate.mcp.extension import CreatedTask, Tasks, TaskState
from waitstate.mcp.notices import TaskWatch
from waitstate.mcp.rounds import (
    ELICITATION,
    ROOTS_LIST,
    PendingCall,
    Reply,
    Rounds,
    failed,
    input_required_reply,
    is_rounds_job,
    question_key,
    round_questions,
    split_question_key,
    unknown_outcome_message,
)
from waitstate.mcp.sampling import (
    ALLOW,
    SAMPLING,
    Sampler,
    SamplingRefused,
    allow_key,
    allow_question,
    decision_name,
    is_sampling,
)
from waitstate.mcp.servers import McpServer
from waitstate.providers.base import ProviderError
from waitstate.schemas.operations import Completion, OperationError
from waitstate.schemas.questions import MAX_MESSAGE_CHARS, Question
from waitstate.tools.spec import Job, JobAnswer, StartContext, ToolError

log = logging.getLogger("waitstate.mcp.tasks")

# The `_meta` key of an elicitation result that carries why the run declined on its own.
DECLINE_REASON_META = "io.waitstate/reason"
# Closing a session is bounded: one whose server died under it must not hold its activity (and
# the worker's shutdown, which waits for every activity) for ever.
CLOSE_WITHIN_SECONDS = 5.0
MAX_URL_CHARS = 2_000  # of a URL elicitation's address, as a person is shown it
# How many pages of a server's tools a session reads at most to find one tool.
MAX_LISTING_PAGES = 20
# Each send of a call's rounds may be made on a session of its own, whose request ids start
# again from 1: send n's ids start past n times this many, so that no send reuses an id of an
# earlier send of the call (SEP-2322: a retry's JSON-RPC id MUST differ from the request's).
IDS_PER_SEND = 1_000


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
        return result_completion(state.result or {})
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


def result_completion(result: dict[str, Any]) -> Completion:
    """A tool's result (a `CallToolResult`, as JSON) as an operation's end: `succeeded` with its
    structured content or text, or `failed` when it is an error."""
    parsed = CallToolResult.model_validate(result)
    text = tool_result_text(parsed)
    if parsed.is_error:
        return Completion(
            status="failed",
            error=OperationError(code="tool_error", message=text[:2000], retryable=False),
        )
    value: Any = parsed.structured_content if parsed.structured_content is not None else text
    return Completion(status="succeeded", result=value)


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
    """A server's tasks, and its plain calls that ask for input in rounds (`mrtr:` jobs, see
    `waitstate.mcp.rounds`), as a long tool's backend: the poll, answer and cancel activities
    use it.

    It keeps one session with the server from its first check until `aclose()` (a poll checks
    a task every few seconds, for as long as it runs), and opens a new one after a failure. A
    stdio server's session is the worker's one (`McpServer.connect`): closing it here leaves
    the server's process, where its tasks live, running.

    Args:
        server: The server.
        blobs: The worker's blob store, where a plain call's rounds are recorded (without it,
            an `mrtr:` job is unknown).
        sampler: Answers the server's sampling requests with the calling run's model (the
            server's `sampling` policy allows it); None leaves them open.
    """

    def __init__(
        self, server: McpServer, blobs: BlobStore | None = None, sampler: Sampler | None = None
    ) -> None:
        self._server = server
        self._blobs = blobs
        self._sampler = sampler
        self._rounds: dict[str, Rounds] = {}
        self._session: AsyncExitStack | None = None
        self._client: Any = None
        self._watch = TaskWatch()  # the tasks this session follows by notification

    @property
    def sampler(self) -> Sampler | None:
        """What answers the server's sampling requests (and counts what they cost), if any."""
        return self._sampler

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

        A plain call's rounds (`mrtr:`): the round's open questions; once every one is
        answered, the call sent again with the answers (see `_send_round`), and what the server
        answered that.

        Raises:
            ToolError: the server does not know the task (any more), or the store the call.
            ConnectionError: the session broke under the check (its server went away).
        """
        if is_rounds_job(job_id):
            return await self._round_status(job_id)
        return await self._task_status(job_id)

    async def changed(self, job_id: str, seconds: float) -> bool:
        """Wait until the server notifies a change of the task `job_id` (if it sends task
        notifications: `waitstate.mcp.notices`), or `seconds` pass: whether it did. A poll waits
        on this between two checks; it never fails (a broken session is the next check's to
        find)."""
        if is_rounds_job(job_id) or self._server.over_stdio:
            await asyncio.sleep(seconds)
            return False
        try:
            followed = await self._watch.follow((await self._connected()).session, job_id)
        except Exception as err:  # the session could not be opened: the check will say why
            log.info("task %s: not followed by notification: %s", job_id, err)
            followed = False
        if not followed:
            await asyncio.sleep(seconds)
            return False
        return await self._watch.wait(job_id, seconds)

    async def _task_status(self, job_id: str) -> Completion:
        state = await self._get(job_id)
        if state.status == "completed":
            state = await self._get(job_id)
        completion = completion_of(state)
        if state.status == "input_required":
            await self._answer_roots(job_id, state.input_requests or {})
            if asking := await self._answer_sampling(job_id, state.input_requests or {}):
                questions = [*(completion.questions or []), *asking]
                completion = completion.model_copy(update={"questions": questions})
        return completion

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

    async def _answer_sampling(self, job_id: str, input_requests: dict[str, Any]) -> list[Question]:
        """Answer the task's sampling requests with the run's model, where the server's policy
        allows it; the questions asking a person's leave first, where it wants that and nobody
        decided yet. A request refused (by the policy or a person), or one the model could not
        answer, is left open (the next poll tries again)."""
        responses, asking = {}, []
        for key, request in input_requests.items():
            sampled = await self._sampled(job_id, ALLOW + key, key, request)
            if isinstance(sampled, Question):
                asking.append(sampled)
            elif sampled is not None:
                responses[key] = sampled
        if responses:
            try:
                await (await self._connected()).session.send_request(
                    _UpdateTask(params=_UpdateParams(task_id=job_id, input_responses=responses)),
                    mcp_types.Result,
                )
            except Exception as err:  # the next poll answers again (the same answers)
                await self.aclose()
                log.warning("MCP server %r: sampling for %s: %s", self._server.name, job_id, err)
        return asking

    async def _sampled(
        self, job_id: str, allow: str, key: str, request: Any
    ) -> dict[str, Any] | Question | None:
        """The run's model's answer to `request`, if it is a sampling request this backend
        answers; the question asking a person's leave (its key `allow`) if the policy wants
        one and nobody decided yet; else None (left open)."""
        if self._sampler is None or not is_sampling(request):
            return None
        if self._sampler.policy.approval:
            decided = await self._decided(job_id, allow)
            if decided is None:
                max_tokens = self._sampler.policy.max_tokens
                return allow_question(key, request, self._server.name, max_tokens)
            if not decided:
                return None
        try:
            return await self._sampler.answer(request)
        except SamplingRefused as err:
            log.warning(
                "MCP server %r: sampling request %s not answered: %s", self._server.name, key, err
            )
        except ProviderError as err:
            log.warning("MCP server %r: sampling request %s: %s", self._server.name, key, err)
        return None

    async def _decided(self, job_id: str, question_key: str) -> bool | None:
        """A person's decision on the sampling request the question `question_key` asked
        leave for: whether they let the model answer (None: not decided yet)."""
        if self._blobs is None:
            return None
        stored = await self._blobs.get_record(decision_name(job_id, question_key))
        return None if stored is None else bool(json.loads(stored).get("allow"))

    async def _decide(self, job_id: str, answer: JobAnswer) -> None:
        """Record a person's decision on a sampling request (the first one stands): only an
        accepted `allow: true` lets the model answer."""
        if self._blobs is None:
            raise ToolError(f"{job_id}: this worker keeps no blob store for a decision")
        allow = answer.action == "accept" and (answer.content or {}).get("allow") is True
        record = json.dumps({"allow": allow, "by": answer.responder}).encode()
        await self._blobs.put_record(decision_name(job_id, answer.key), record)

    async def answer(self, job_id: str, answer: JobAnswer) -> None:
        """`tasks/update` with the answer under the task's key for the question (the server
        ignores an answer to a key already answered). A plain call's round: the answer is
        recorded (the first one to a request stands, as a task's server keeps the first).

        Raises:
            ToolError: the server refused the update (an unknown task...), or the round has no
                such question.
        """
        if allow_key(answer.key) is not None:  # leave for the run's model: not the server's
            await self._decide(job_id, answer)
            return
        response = elicitation_response(answer)
        if is_rounds_job(job_id):
            task_id = await self._answer_round(job_id, answer.key, response)
            if task_id is None:
                return
            job_id = task_id
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
        """`tasks/cancel`; a task the server no longer knows needs none. A plain call's rounds
        are ended: no answers are sent after this (the server holds nothing to stop)."""
        if is_rounds_job(job_id):
            rounds = self._rounds_of(job_id)
            try:
                n, reply = await rounds.latest()
            except ToolError:  # no such call: nothing to stop
                return
            if reply.kind == "task" and reply.task_id is not None:
                job_id = reply.task_id
            else:
                if reply.kind == "input_required" and await rounds.claim_send(n + 1):
                    await rounds.record_reply(
                        n + 1, failed("cancelled", "the call's rounds were cancelled")
                    )
                await self.aclose()
                return
        try:
            await (await self._connected()).session.send_request(
                _CancelTask(params=_TaskParams(task_id=job_id)), mcp_types.Result
            )
        except MCPError:
            return
        finally:
            await self.aclose()

    # --- a plain call's rounds -------------------------------------------------------------

    def _rounds_of(self, job_id: str) -> Rounds:
        if self._blobs is None:
            raise ToolError(f"{job_id}: this worker keeps no blob store for a call's rounds")
        if job_id not in self._rounds:
            self._rounds[job_id] = Rounds(self._blobs, job_id)
        return self._rounds[job_id]

    async def _round_status(self, job_id: str) -> Completion:
        """Where the call stands: a round's open questions, or, once they are all answered,
        the call sent again, round after round, until the server answers otherwise.

        Raises:
            ToolError: the store does not hold the call.
            ConnectionError: the server could not be reached to send the answers, or (a
                repeatable call) the connection broke under the send.
        """
        rounds = self._rounds_of(job_id)
        call = await rounds.call()
        while True:  # bounded: every pass sends the call once more, MAX_ROUNDS at most
            n, reply = await rounds.latest()
            if reply.kind != "input_required":
                return await self._reply_completion(reply)
            requests = reply.input_requests or {}
            answered = await rounds.answers(n, list(requests))
            asking = []
            for key, request in requests.items():
                if key in answered:
                    continue
                if request.get("method") == ROOTS_LIST:
                    # Answered at once from the server's declaration, by no person.
                    await rounds.record_answer(n, key, self._server.roots_listed())
                    answered[key] = self._server.roots_listed()
                    continue
                allow = question_key(n + 1, ALLOW + key)
                sampled = await self._sampled(job_id, allow, key, request)
                if isinstance(sampled, Question):
                    asking.append(sampled)
                elif sampled is not None:
                    # By the run's model, as the server's policy allows; the first answer
                    # recorded stands (a poll that raced this one answered too).
                    await rounds.record_answer(n, key, sampled)
                    answered = await rounds.answers(n, list(requests))
            open_requests = {k: r for k, r in requests.items() if k not in answered}
            if open_requests:
                return _round_waiting(n + 1, open_requests, asking)
            await self._send_round(rounds, call, n, reply, answered)

    async def _send_round(
        self,
        rounds: Rounds,
        call: PendingCall,
        n: int,
        reply: Reply,
        answered: dict[str, dict[str, Any]],
    ) -> None:
        """Send the call again with the answers to reply `n` and its `requestState` as it came,
        and record what the server answered. The send is claimed first (a record): an attempt
        that finds it claimed by another (a worker that died mid-send) sends again only a
        read-only or idempotent call, and otherwise records the outcome unknown.

        Raises:
            ConnectionError: the server could not be reached (nothing sent), or the connection
                broke under the send of a repeatable call (sent again on the next check).
        """
        from mcp_types import CreateMessageResult, ElicitResult, ListRootsResult

        kinds: dict[str, type[BaseModel]] = {
            ROOTS_LIST: ListRootsResult,
            SAMPLING: CreateMessageResult,
        }

        try:
            client = await self._connected()
            if call.header_params:
                await learn_header_params(client, call.tool)
        except Exception as err:  # nothing was sent: the next check tries again
            await self.aclose()
            raise ConnectionError(f"MCP server {self._server.name!r}: {err}") from None
        requests = reply.input_requests or {}
        try:
            responses = {
                key: kinds.get(str(requests[key].get("method")), ElicitResult).model_validate(
                    response
                )
                for key, response in answered.items()
            }
        except ValidationError as err:  # an answer its form allowed, and MCP cannot carry
            await rounds.record_reply(
                n + 1,
                failed(
                    "answer_invalid",
                    f"an answer to round {n + 1} of {call.tool} is not one an MCP client can "
                    f"send (not sent): {str(err)[:500]}",
                ),
            )
            return
        if not await rounds.claim_send(n + 1) and not call.repeatable:
            why = f"round {n + 1}'s answers may have been sent by an attempt that was interrupted"
            await rounds.record_reply(
                n + 1, failed("outcome_unknown", unknown_outcome_message(call.name, why))
            )
            return
        _ids_from(client, IDS_PER_SEND * (n + 1))
        try:
            result = await client.session.call_tool(
                call.tool,
                call.arguments,
                input_responses=responses,
                request_state=reply.request_state,
                allow_input_required=True,
                allow_claimed=True,
            )
        except MCPError as err:
            if err.error.code != CONNECTION_CLOSED:
                await rounds.record_reply(
                    n + 1,
                    failed(
                        "refused",
                        f"MCP server {self._server.name!r} refused {call.tool}: {err}",
                    ),
                )
                return
            await self._broken_send(rounds, call, n + 1, err)
            return
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                await self.aclose()
                raise
            await self._broken_send(rounds, call, n + 1, ConnectionError("session ended"))
            return
        except ValidationError as err:
            # The server answered, with something that is no answer to a call (an input
            # request of no known kind...): sending again would only get it again.
            await rounds.record_reply(
                n + 1,
                failed(
                    "unexpected_result",
                    f"MCP server {self._server.name!r} answered {call.tool} with something "
                    f"that is not a tool's answer: {str(err)[:500]}",
                ),
            )
            return
        except Exception as err:
            await self._broken_send(rounds, call, n + 1, err)
            return
        await rounds.record_reply(n + 1, self._reply_of(result, n + 1, call))

    async def _broken_send(
        self, rounds: Rounds, call: PendingCall, n: int, err: BaseException
    ) -> None:
        """The connection broke under send `n`: a repeatable call is sent again on the next
        check; any other's outcome is unknown (recorded so).

        Raises:
            ConnectionError: for a repeatable call.
        """
        await self.aclose()
        why = str(err)[:200] or type(err).__name__
        if call.repeatable:
            raise ConnectionError(f"MCP server {self._server.name!r}: {why}") from None
        await rounds.record_reply(
            n, failed("outcome_unknown", unknown_outcome_message(call.name, why))
        )

    def _reply_of(self, result: Any, n: int, call: PendingCall) -> Reply:
        """What the server answered send `n` with, as a reply to record."""
        from mcp_types import InputRequiredResult

        if isinstance(result, InputRequiredResult):
            return input_required_reply(result, n, self._server.name, call.tool)
        if isinstance(result, CreatedTask):
            return Reply(
                kind="task", task_id=result.task_id, poll_interval_ms=result.poll_interval_ms
            )
        if isinstance(result, CallToolResult):
            return Reply(kind="result", result=result.model_dump(by_alias=True, mode="json"))
        return failed(
            "unexpected_result",
            f"MCP server {self._server.name!r} answered {call.tool} with a {type(result).__name__}",
        )

    async def _reply_completion(self, reply: Reply) -> Completion:
        """The call's state, from its last reply (a task: that task's)."""
        if reply.kind == "result":
            return result_completion(reply.result or {})
        if reply.kind == "task" and reply.task_id is not None:
            return await self._task_status(reply.task_id)
        return Completion(
            status="failed",
            error=reply.error
            or OperationError(code="failed", message="the call failed", retryable=False),
        )

    async def _answer_round(self, job_id: str, key: str, response: dict[str, Any]) -> str | None:
        """Record the answer to a round's question. A question of a round already sent is
        answered (this one is ignored). Returns the task's id when the call now runs as a
        task and the key is not a round's (the answer is the task's).

        Raises:
            ToolError: no round of the call asked it, and no task runs it.
        """
        rounds = self._rounds_of(job_id)
        n, reply = await rounds.latest()
        parsed = split_question_key(key)
        if parsed is not None and 1 <= parsed[0] <= n + 1:
            asked = reply if parsed[0] == n + 1 else await rounds.reply(parsed[0] - 1)
            if asked is not None and parsed[1] in (asked.input_requests or {}):
                if parsed[0] == n + 1 and reply.kind == "input_required":
                    await rounds.record_answer(n, parsed[1], response)
                return None
        if reply.kind == "task" and reply.task_id is not None:
            return reply.task_id
        raise ToolError(f"the MCP call {job_id} asked no question {key!r}")

    async def aclose(self) -> None:
        """End the session, if one is open."""
        session, self._session, self._client = self._session, None, None
        self._watch.close()
        self._watch = TaskWatch()
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
                self._server.connect(extensions=[Tasks(self._watch)])
            )
            self._session = session
        return self._client


def elicitation_response(answer: JobAnswer) -> dict[str, Any]:
    """An answer to a question as the server's elicitation is answered (an `ElicitResult`, as
    JSON)."""
    response: dict[str, Any] = {"action": answer.action}
    if answer.content is not None:
        response["content"] = answer.content
    if answer.reason is not None:
        # A decline the run made on its own (a question it refused): the reason, where an
        # elicitation result may carry more (`_meta`, under a prefix of ours).
        response["_meta"] = {DECLINE_REASON_META: answer.reason}
    return response


def _round_waiting(
    round_number: int, open_requests: dict[str, Any], asking: list[Question]
) -> Completion:
    """A round with open requests: its questions (the elicitations, and `asking`: a person's
    leave for the run's model to answer a sampling request), and what it waits for. A request
    the run cannot answer is left open: the call waits for it until its operation expires."""
    questions = round_questions(round_number, [*questions_of(open_requests), *asking])
    asked = {allow_key(q.key) or q.key.partition("/")[2] for q in questions}
    others = sorted(
        str(request.get("method", "?"))
        for key, request in open_requests.items()
        if key not in asked and request.get("method") != ELICITATION
    )
    progress = f"round {round_number}: {len(open_requests)} answer(s) awaited"
    if others:
        progress += f"; not answered by this client: {', '.join(others)}"
    return Completion(status="input_required", progress=progress, questions=questions or None)


async def learn_header_params(client: Any, tool: str) -> None:
    """List the server's tools on the session until `tool` is among them, so the SDK sends its
    arguments' `Mcp-Param-*` headers (it sends them only for a tool listed on the same
    session).

    Raises:
        Exception: the server refused the listing, or could not be reached.
    """
    cursor = None
    for _ in range(MAX_LISTING_PAGES):
        page = await client.list_tools(cursor=cursor)
        cursor = page.next_cursor
        if not cursor or any(listed.name == tool for listed in page.tools):
            return


def _ids_from(client: Any, floor: int) -> None:
    """Move the session's next request id to at least `floor` (the SDK numbers a session's
    requests from 1 and offers no way to choose them: its dispatcher's counter is set)."""
    dispatcher = getattr(client.session, "_dispatcher", None)
    current = getattr(dispatcher, "_next_id", None)
    if isinstance(current, int) and current < floor:
        dispatcher._next_id = floor  # type: ignore[union-attr]
    elif current is None:
        log.warning("MCP: this SDK's request ids could not be set apart for a call's rounds")
