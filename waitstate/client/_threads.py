"""Threads: send a person's message to a thread (started with it, if the thread has never been
started) and wait for its reply."""

from __future__ import annotations

import asyncio
import contextlib
import random
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio.client import (
    WithStartWorkflowOperation,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from waitstate.client._base import ClientBase
from waitstate.client._errors import (
    ClientError,
    NotAnswered,
    OutcomeUnknown,
    TemporalFailed,
    Unreachable,
    first_line,
)
from waitstate.client._events import growth
from waitstate.client._updates import DESCRIBE_TIMEOUT, rpc_refusal
from waitstate.names import AGENT_NAME, AGENT_RUN, AGENT_STATUS, SEND_MESSAGE_UPDATE, THREAD_ID
from waitstate.schemas import RunInput, RunResult
from waitstate.schemas.threads import MessageAccepted, SendMessage, ThreadMessage, ThreadSettings

# What a thread is for, when its starter does not say: the model reads it as the run's task.
THREAD_TASK = "A conversation: answer each of the person's messages."
SEND_TIMEOUT = timedelta(seconds=30)
REPLY_TIMEOUT = timedelta(minutes=10)
# Seconds between two looks at a thread for a reply: doubling from the first to the last, so a
# quick reply is seen quickly and a slow one costs a query a second.
REPLY_POLL = (0.05, 1.0)
# A message that meets the thread as it continues as new (between two turns) is sent again.
SEND_ATTEMPTS = 5
SEND_RETRY = 0.2
# A message refused for now (see `_again`: a burst of sends past the run's cap of Updates in
# flight) is sent again until `answer_within` runs out, the pause doubling from the first to the
# last (with jitter, so a burst does not come back at once).
BUSY_RETRY = (0.05, 2.0)
DONE = frozenset({"replied", "interrupted", "max_turns", "failed"})


async def _again(err: RPCError, thread: WorkflowHandle[Any, Any]) -> bool:
    """Whether Temporal refused an Update for now, with nothing recorded: the run's Updates in
    flight are at their cap (RESOURCE_EXHAUSTED), or Temporal aborted it (UNAVAILABLE: the run
    continued as new while this one was in flight). The SDK retries both, for a while; under
    load, past its retries, the send goes on trying.

    UNAVAILABLE is also the answer of a Temporal that cannot be reached, and only its message,
    in Temporal's words, tells the two apart: a Temporal that describes the thread was reached.
    """
    if err.status == RPCStatusCode.RESOURCE_EXHAUSTED:
        return True
    if err.status != RPCStatusCode.UNAVAILABLE:
        return False
    try:
        await thread.describe(rpc_timeout=DESCRIBE_TIMEOUT)
    except RPCError:
        return False
    return True


class ThreadClosed(ClientError):
    """The thread has ended (closed after its idle time, or cancelled): it takes no message.
    Its history is kept; a new conversation takes a new thread id."""

    def __init__(self, thread_id: str) -> None:
        super().__init__(f"thread {thread_id} is closed: start a new thread for a new message")
        self.thread_id = thread_id


class MessageRefused(ClientError):
    """The thread refused the message, saying why (not a thread, busy under `reject`, too many
    queued, closing); nothing was recorded."""

    def __init__(self, thread_id: str, reason: str, code: str | None) -> None:
        super().__init__(f"thread {thread_id} refused the message: {reason}")
        self.thread_id = thread_id
        self.reason = reason
        self.code = code


@dataclass(frozen=True)
class SentMessage:
    """A message the thread took: its id, where it stands, and the key it is known by."""

    thread_id: str
    accepted: MessageAccepted
    key: str | None = None


def new_thread_id() -> str:
    """A fresh thread id."""
    return f"thread-{uuid.uuid4().hex[:12]}"


def new_message_key() -> str:
    """A fresh idempotency key, for a message sent without one: so that a send whose outcome
    is unknown can be retried as the same message."""
    return f"key-{uuid.uuid4().hex}"


def thread_input(
    *, agent: str | None = None, model: str | None = None, settings: ThreadSettings | None = None
) -> RunInput:
    """The input a thread starts with: of `agent` (its definition sets the rest), or with
    `model`; the thread's busy policy and idle time from `settings`."""
    fields: dict[str, object] = {"task": THREAD_TASK, "thread": settings or ThreadSettings()}
    if agent is not None:
        fields["agent"] = agent
    if model is not None:
        fields["model"] = model
    run_input = RunInput.model_validate(fields)
    if settings is None and run_input.agent_overrides is not None:
        # The agent's own thread settings, if it declares some, replace the defaults.
        run_input.agent_overrides.remove("thread")
    return run_input


class ThreadCalls(ClientBase):
    """What `WaitstateClient` does with threads: send a message, wait for its reply."""

    async def send_message(
        self,
        thread_id: str,
        text: str,
        *,
        key: str | None = None,
        sender: str | None = None,
        start: RunInput | None = None,
        task_queue: str | None = None,
        answer_within: timedelta = SEND_TIMEOUT,
        first: bool = False,
    ) -> SentMessage:
        """Send `text` to the thread `thread_id`, starting it with `start` (default: a plain
        thread, `thread_input()`) if no run ever had that id, in one call.

        Args:
            key: Idempotency key: a send retried with the same key is the same message. Without
                one, the send gets a fresh one (`SentMessage.key`, `OutcomeUnknown.key`).
            first: The message must be the thread's first: a thread that has messages (other
                than this send's earlier copy, by `key`) refuses it, `thread_exists`.

        Raises:
            MessageRefused: the thread refused it (not a thread, busy under `reject`...).
            ThreadClosed: the thread has ended.
            OutcomeUnknown: the thread did not answer within `answer_within`, after Temporal
                may have taken the message: it may still be taken once a worker runs; sent
                again with the error's `key`, it is the same message.
            NotAnswered: the thread had its cap of messages in flight all that time: nothing
                was recorded.
            Unreachable, TemporalFailed: Temporal could not be reached, or refused the call.
        """
        run_input = start or thread_input()
        if run_input.thread is None:
            raise ValueError("a thread's input sets `thread` (see thread_input)")
        key = key or new_message_key()
        send = SendMessage(text=text, key=key, sender=sender, first=first)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + answer_within.total_seconds()
        ended, pause = 0, BUSY_RETRY[0]
        # A thread that exists takes a plain Update, cheaper than Update-with-Start; one not
        # found (never started, or ended) gets the latter, which starts it or says it ended.
        # No update id from the key: the thread's keys answer a retried send (`duplicate`).
        plain = not first
        while True:
            try:
                async with asyncio.timeout_at(deadline):
                    if plain:
                        accepted: MessageAccepted = await self._client.get_workflow_handle(
                            thread_id
                        ).execute_update(SEND_MESSAGE_UPDATE, send, result_type=MessageAccepted)
                    else:
                        operation = self._start(thread_id, run_input, task_queue)
                        try:
                            accepted = await self._client.execute_update_with_start_workflow(
                                SEND_MESSAGE_UPDATE,
                                send,
                                start_workflow_operation=operation,
                                result_type=MessageAccepted,
                            )
                        finally:
                            _settle(operation)
                return SentMessage(thread_id, accepted, key)
            except WorkflowAlreadyStartedError as err:  # ended, and ids are never reused
                raise ThreadClosed(thread_id) from err
            except WorkflowUpdateFailedError as err:
                cause = err.cause
                code = cause.type if isinstance(cause, ApplicationError) else None
                raise MessageRefused(thread_id, first_line(cause), code) from err
            except RPCError as err:
                thread = self._client.get_workflow_handle(thread_id)
                if await _again(err, thread):
                    # Nothing was recorded: the run had its cap of Updates in flight (it is
                    # taking other messages), or continued as new with this one in flight.
                    wait = pause * random.uniform(0.5, 1.0)
                    if loop.time() + wait >= deadline:
                        seconds = f"busy for {answer_within.total_seconds():g} s"
                        raise NotAnswered(thread_id, seconds) from err
                    await asyncio.sleep(wait)
                    pause = min(2 * pause, BUSY_RETRY[1])
                    continue
                if err.status in (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED):
                    raise Unreachable(f"cannot reach Temporal: {first_line(err)}") from err
                refusal = await rpc_refusal(err, thread)
                if plain and refusal in ("unknown_run", "run_ended", "run_unavailable"):
                    # Not started, ended, or continued as new under the Update: Update-with-Start
                    # starts it, says it ended, or reaches the next run.
                    plain = False
                    continue
                # The update met the run as it continued as new: the next run takes it.
                if refusal in ("run_ended", "run_unavailable"):
                    ended += 1
                    if ended < SEND_ATTEMPTS:
                        await asyncio.sleep(SEND_RETRY)
                        continue
                    if refusal == "run_ended":
                        raise ThreadClosed(thread_id) from err
                raise TemporalFailed("Temporal refused the message", first_line(err)) from err
            except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError) as err:
                # Temporal may have admitted the Update: it holds it for a worker, which may
                # take it later (the timeout is the caller's, not the server's).
                seconds = f"no answer within {answer_within.total_seconds():g} s"
                raise OutcomeUnknown(thread_id, seconds, key) from err

    async def reply(
        self, thread_id: str, message_id: str, *, within: timedelta = REPLY_TIMEOUT
    ) -> ThreadMessage:
        """The message once the thread has answered it (`replied`), or ended it without an
        answer (`max_turns`, `failed`, with its `error`).

        Raises:
            NotAnswered: no reply within `within` (the thread goes on).
            RunNotFound: no such thread.
        """
        pause, longest = REPLY_POLL
        # Looks again as soon as the thread's history grows (its reply is an event of it), and
        # at the latest after `pause`.
        grew = asyncio.Event()
        growing = asyncio.create_task(growth(self._client, thread_id, grew))
        try:
            async with asyncio.timeout(within.total_seconds()):
                while True:
                    # A query no worker answers in time (one is starting, or took over a dead
                    # one's runs) is no answer yet: look again until `within` has passed.
                    with contextlib.suppress(NotAnswered):
                        message = await self.message(thread_id, message_id)
                        if message is not None and message.status in DONE:
                            return message
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(pause):
                            await grew.wait()
                    grew.clear()
                    pause = min(pause * 2, longest)
        except TimeoutError as err:
            seconds = f"no reply within {within.total_seconds():g} s"
            raise NotAnswered(thread_id, seconds) from err
        finally:
            growing.cancel()

    async def message(self, thread_id: str, message_id: str) -> ThreadMessage | None:
        """The thread's message `message_id` as it stands (None once it is older than what the
        thread keeps in its state, `KEEP_MESSAGES`)."""
        state = await self.query(thread_id)
        if state.thread is None:
            raise MessageRefused(thread_id, "this run is a task, not a thread", "not_a_thread")
        return next((m for m in state.thread.messages if m.message_id == message_id), None)

    def _start(
        self, thread_id: str, run_input: RunInput, task_queue: str | None
    ) -> WithStartWorkflowOperation[object, RunResult]:
        attributes = [
            SearchAttributePair(AGENT_STATUS, "waiting"),
            SearchAttributePair(THREAD_ID, thread_id),
        ]
        if run_input.agent is not None:
            attributes.append(SearchAttributePair(AGENT_NAME, run_input.agent))
        return WithStartWorkflowOperation(
            AGENT_RUN,
            self._with_model_queue(run_input),
            id=thread_id,
            task_queue=task_queue or self._task_queue,
            # A thread that exists takes the message; one that ended never starts again.
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            search_attributes=TypedSearchAttributes(attributes),
            static_summary=f"thread{f' of {run_input.agent}' if run_input.agent else ''}",
            result_type=RunResult,
        )


def _settle(operation: WithStartWorkflowOperation[Any, Any]) -> None:
    """Take the outcome of an Update-with-Start's start, if it failed. The SDK keeps it in a
    future only `workflow_handle()` reads; after a failed call (the thread had ended, say) nobody
    reads it, and asyncio logs "Future exception was never retrieved" when it is collected."""
    future = getattr(operation, "_workflow_handle", None)
    if isinstance(future, asyncio.Future) and future.done() and not future.cancelled():
        future.exception()
