"""A plain call's rounds of input (`mrtr:` jobs, `waitstate.mcp.rounds`) driven as a long tool's
job: each round's open questions, answered from the server's declaration, by the run's model or
by a person; once every one is answered, the call sent again with the answers, round after
round, until the server answers otherwise. `McpTaskBackend` serves both a server's tasks and
these calls: this is its half for the calls.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from mcp.shared.exceptions import MCPError
from mcp_types import (
    CONNECTION_CLOSED,
    CallToolResult,
    CreateMessageResult,
    ElicitResult,
    InputRequiredResult,
    ListRootsResult,
)
from pydantic import BaseModel, ValidationError

from waitstate.blobs import BlobStore
from waitstate.cancelling import keep_cancellation
from waitstate.mcp.extension import CreatedTask
from waitstate.mcp.results import questions_of, result_completion
from waitstate.mcp.rounds import (
    ELICITATION,
    ROOTS_LIST,
    PendingCall,
    Reply,
    Rounds,
    failed,
    input_required_reply,
    question_key,
    round_questions,
    split_question_key,
    unknown_outcome_message,
)
from waitstate.mcp.sampling import ALLOW, SAMPLING, allow_key
from waitstate.mcp.servers import McpServer
from waitstate.schemas.operations import Completion, OperationError
from waitstate.schemas.questions import Question
from waitstate.tools.spec import ToolError

log = logging.getLogger("waitstate.mcp.tasks")

# How many pages of a server's tools a session reads at most to find one tool.
MAX_LISTING_PAGES = 20
# Each send of a call's rounds may be made on a session of its own, whose request ids start
# again from 1: send n's ids start past n times this many, so that no send reuses an id of an
# earlier send of the call (SEP-2322: a retry's JSON-RPC id MUST differ from the request's).
IDS_PER_SEND = 1_000


class CallRounds:
    """The rounds half of `McpTaskBackend`, which gives it the server, the blob store, the
    session and the answers of the run's model (the methods below it overrides)."""

    _server: McpServer
    _blobs: BlobStore | None
    _rounds: dict[str, Rounds]

    async def _connected(self) -> Any:
        raise NotImplementedError

    async def aclose(self) -> None:
        raise NotImplementedError

    async def _sampled(
        self, job_id: str, allow: str, key: str, request: Any
    ) -> dict[str, Any] | Question | None:
        raise NotImplementedError

    async def _task_status(self, job_id: str) -> Completion:
        raise NotImplementedError

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
        except asyncio.CancelledError as err:
            # The SDK cancels a session whose server went away: a broken send, unless this
            # check itself is being cancelled (told apart once the session's scope is left).
            await self.aclose()
            keep_cancellation(err)
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
