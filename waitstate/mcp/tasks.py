"""MCP Tasks (the `io.modelcontextprotocol/tasks` extension, SEP-2663), client side: a server may
answer a `tools/call` with a task; the task is then polled with `tasks/get` and cancelled with
`tasks/cancel`, from any process (over streamable HTTP a task is reachable by id, without the
session that created it).

Imported only by workers (it needs the `mcp` SDK).
"""

from __future__ import annotations

import asyncio
import json
import logging
from contextlib import AsyncExitStack
from typing import Any, Literal

import mcp_types
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, RequestParams
from pydantic import ConfigDict, Field

from waitstate.blobs import BlobStore
from waitstate.cancelling import keep_cancellation
from waitstate.mcp.extension import Tasks, TaskState
from waitstate.mcp.notices import TaskWatch
from waitstate.mcp.results import (
    completion_of,
    elicitation_response,
)
from waitstate.mcp.round_trips import CallRounds
from waitstate.mcp.rounds import Rounds, failed, is_rounds_job
from waitstate.mcp.sampling import (
    ALLOW,
    Sampler,
    SamplingRefused,
    allow_key,
    allow_question,
    decision_name,
    is_sampling,
)
from waitstate.mcp.servers import McpServer
from waitstate.providers.base import ProviderError
from waitstate.schemas.operations import Completion
from waitstate.schemas.questions import Question
from waitstate.tools.spec import Job, JobAnswer, StartContext, ToolError

log = logging.getLogger("waitstate.mcp.tasks")

# Closing a session is bounded: one whose server died under it must not hold its activity (and
# the worker's shutdown, which waits for every activity) for ever.
CLOSE_WITHIN_SECONDS = 5.0


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


class McpTaskBackend(CallRounds):
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
        except asyncio.CancelledError as err:
            # The SDK cancels a session whose server went away: a failed check, unless this
            # check itself is being cancelled (still so once the session's scope is left).
            await self.aclose()
            keep_cancellation(err)
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

    async def aclose(self) -> None:
        """End the session, if one is open."""
        session, self._session, self._client = self._session, None, None
        self._watch.close()
        self._watch = TaskWatch()
        if session is None:
            return
        try:
            async with asyncio.timeout(CLOSE_WITHIN_SECONDS):
                await session.aclose()
        except (Exception, asyncio.CancelledError) as err:
            # A broken session's closing fails, or ends with the cancellation the SDK made of
            # it: nobody's business. A cancellation of this task (its poll's operation
            # expired, the worker is shutting down) is: it ends the task, whatever the close
            # made of it.
            keep_cancellation(err)
            log.debug("MCP server %r: closing the session: %r", self._server.name, err)
        else:
            keep_cancellation()

    async def _connected(self) -> Any:
        if self._client is None:
            session = AsyncExitStack()
            try:
                self._client = await session.enter_async_context(
                    self._server.connect(extensions=[Tasks(self._watch)])
                )
            except Exception as err:
                # Cancelled while the connection fails (its server is down), the SDK's task
                # group raises the failure and drops the cancellation: a poll that took it
                # for one more failed check would go on for ever.
                keep_cancellation(err)
                raise
            self._session = session
        return self._client
