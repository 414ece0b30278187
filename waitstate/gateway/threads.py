"""What the gateway's thread routes stand on: the client that sends people's messages to threads
and reads their replies, the operator keys that may start a thread, and the lifetime of the
thread tokens it hands out (see `routes/threads.py` for the HTTP side).

Every call is bounded in time, and every way Temporal or a thread says no is a
`DeliveryRefused` with its status and code, as the deliverer's are: the routes answer them the
same way (`Gate.deliver`).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field, field_validator
from temporalio.client import Client, WorkflowExecutionStatus

from waitstate.auth.operators import OperatorKeys
from waitstate.client import (
    ClientError,
    RunNotFound,
    WaitstateClient,
    new_thread_id,
    thread_input,
)
from waitstate.gateway.delivery import (
    DELIVERY_TIMEOUT,
    DeliveryRefused,
    refusal,
    thread_closed,
)
from waitstate.schemas import RunInput, RunState
from waitstate.schemas.run import RunStatus
from waitstate.schemas.threads import (
    MessageAccepted,
    MessageFields,
    ThreadMessage,
    ThreadState,
)
from waitstate.settings import DEFAULT_THREAD_TOKEN_LIFETIME, Settings

# How long a reader may wait for a reply in one request (`?wait=`), and how often the thread is
# looked at meanwhile: doubling from the first to the last, as the client does.
MAX_WAIT_SECONDS = 30.0
WAIT_POLL = (0.05, 1.0)
# Requests waiting for a reply at once: each looks at its thread (a query its worker answers)
# about once a second, so a token holder may not open them without bound.
MAX_WAITS_PER_THREAD = 4
MAX_WAITS = 256
DESCRIBE_TIMEOUT = timedelta(seconds=5)
# A thread id the gateway takes: one path segment, nothing a log or URL could trip on.
THREAD_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
MAX_AGENT_CHARS = 200
# A message is done when the thread has answered it, or ended it without an answer.
_OPEN_MESSAGES = frozenset({"queued", "working"})
_OPEN_RUNS: frozenset[RunStatus] = frozenset({"running", "waiting"})


class MessageBody(MessageFields):
    """A person's message to a thread."""

    # Unknown fields are refused, not dropped: a sender must not think one was heeded.
    model_config = ConfigDict(extra="forbid")

    @field_validator("text")
    @classmethod
    def _says_something(cls, text: str) -> str:
        if not text.strip():
            raise ValueError("the message is empty: say something to the agent")
        return text


class ThreadStart(MessageBody):
    """A new thread and its first message."""

    thread_id: str | None = Field(
        default=None,
        pattern=THREAD_ID_PATTERN,
        description="The new thread's id (letters, digits, `.`, `_`, `-`; at most 128); the "
        "gateway picks one if it is not given. Give it, with a `key`, to make a retried "
        "request start one thread.",
    )
    agent: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_AGENT_CHARS,
        pattern=r"^[^\x00-\x1f\x7f]+$",
        description="The agent the thread is of (its definition sets the model, tools and "
        "busy policy); without one, the gateway's default model (`WAITSTATE_MODEL`).",
    )


class ThreadToken(BaseModel):
    """A fresh token for a thread."""

    thread_id: str
    thread_token: str = Field(description="Posts the thread's messages and reads them.")
    token_expires_at: datetime


class ThreadStarted(BaseModel):
    """The thread was started with its first message: its id, and the token for it."""

    thread_id: str
    thread_token: str = Field(
        description="The thread's token: send it as `Authorization: Bearer <it>` to post "
        "messages to this thread and read them, and to no other thread. Keep it secret."
    )
    token_expires_at: datetime
    message: MessageAccepted


class ThreadView(BaseModel):
    """A thread as it stands: its run's status and its conversation."""

    thread_id: str
    status: RunStatus = Field(
        description="`waiting` for a message, `running` while the agent works on one; "
        "`completed` once it closed after its idle time; `failed` or `cancelled` if it ended "
        "otherwise (`error` says why)."
    )
    error: str | None = None
    thread: ThreadState


@dataclass
class _Waits:
    """How many requests wait for a reply, in all and per thread."""

    per_thread: Counter[str] = field(default_factory=Counter)

    @asynccontextmanager
    async def hold(self, thread_id: str) -> AsyncIterator[None]:
        """A place to wait for a reply in `thread_id`.

        Raises:
            DeliveryRefused: 429, too many requests wait already.
        """
        if self.per_thread[thread_id] >= MAX_WAITS_PER_THREAD:
            raise DeliveryRefused(
                429,
                f"{MAX_WAITS_PER_THREAD} requests already wait for a reply in this thread: "
                "wait for one of them, or ask without `wait`",
                code="too_many_waits",
            )
        if self.per_thread.total() >= MAX_WAITS:
            raise DeliveryRefused(
                429, "too many requests wait for a reply: retry later", code="too_many_waits"
            )
        self.per_thread[thread_id] += 1
        try:
            yield
        finally:
            self.per_thread[thread_id] -= 1
            if not self.per_thread[thread_id]:
                del self.per_thread[thread_id]


@dataclass
class ThreadDesk:
    """Starts threads, sends them people's messages and reads their replies, for the routes.

    Attributes:
        client: Reaches the threads (on the worker's task queue).
        operators: The keys that may start a thread.
        token_lifetime: How long a new thread's token stays valid.
        default_model: The model of a thread started without an agent (None: the run's
            default).
        answer_within: How long a send waits for the thread to take the message; past it,
            the outcome is unknown (504).
    """

    client: WaitstateClient
    operators: OperatorKeys
    token_lifetime: timedelta = DEFAULT_THREAD_TOKEN_LIFETIME
    default_model: str | None = None
    answer_within: timedelta = DELIVERY_TIMEOUT
    _waits: _Waits = field(default_factory=_Waits, init=False, repr=False)

    @classmethod
    def from_settings(cls, client: Client, settings: Settings) -> ThreadDesk:
        """The desk of the gateway process: its operator keys, token lifetime and default
        model, starting threads on the worker's task queue (their model calls on the model
        queue, if there is one)."""
        return cls(
            WaitstateClient(
                client,
                task_queue=settings.task_queue,
                model_task_queue=settings.model_task_queue,
            ),
            OperatorKeys(settings.operator_keys),
            settings.thread_token_lifetime,
            settings.default_model,
        )

    def token_expiry(self) -> datetime:
        """When a token handed out now expires."""
        return datetime.now(UTC) + self.token_lifetime

    async def start(self, body: ThreadStart) -> tuple[str, MessageAccepted]:
        """Start a thread with its first message: the thread's id and the message.

        A thread id that exists is refused, unless the request is a retry of the one that
        started it (its `key` is the first message's): it gets that message again.

        Raises:
            DeliveryRefused: 409 `thread_exists`, the thread's refusals, 503 Temporal or the
                thread could not be reached (nothing recorded), 504 the thread did not answer
                in time (with the thread's id and the message's key, its own or the one the
                client gave it: the retry with both is the same start).
        """
        thread_id = body.thread_id or new_thread_id()
        if await self._status(thread_id) is not None and not await self._is_retry(
            thread_id, body.key
        ):
            raise DeliveryRefused(
                409,
                f"thread {thread_id} exists: post to /v1/threads/{thread_id}/messages with its "
                "token, or start a thread with a new id",
                code="thread_exists",
            )
        start = self._start_input(body.agent)
        # The check above is a look; the thread itself refuses a start that came second.
        accepted = await self._send(thread_id, body, start, first=True)
        return thread_id, accepted

    async def post(self, thread_id: str, body: MessageBody) -> MessageAccepted:
        """Send a message to a thread that exists (it is never started here).

        Raises:
            DeliveryRefused: 404 `unknown_thread`, 410 `thread_closed` (or closing), the
                thread's refusals, 503 Temporal or the thread could not be reached (nothing
                recorded), 504 the thread did not answer in time (with the message's key).
        """
        status = await self._status(thread_id)
        if status is None:
            raise DeliveryRefused(404, f"no thread {thread_id}", code="unknown_thread")
        if status != WorkflowExecutionStatus.RUNNING:
            raise thread_closed(thread_id)
        return await self._send(thread_id, body, self._start_input(None))

    async def open_thread(self, thread_id: str) -> None:
        """Check that a thread with this id is open (a token may be renewed for it).

        Raises:
            DeliveryRefused: 404 `unknown_thread`, 409 `not_a_thread`, 410 `thread_closed`,
                503 Temporal or the thread could not be reached.
        """
        status = await self._status(thread_id)
        if status is None:
            raise DeliveryRefused(404, f"no thread {thread_id}", code="unknown_thread")
        if status != WorkflowExecutionStatus.RUNNING:
            raise thread_closed(thread_id)
        await self._query(thread_id)  # a task is no thread

    async def view(self, thread_id: str) -> ThreadView:
        """The thread's status and conversation, as its run answers.

        Raises:
            DeliveryRefused: 404 `unknown_thread`, 409 `not_a_thread`, 503 no worker answered.
        """
        state = await self._query(thread_id)
        assert state.thread is not None  # `_query` refuses a run that is no thread
        return ThreadView(
            thread_id=thread_id, status=state.status, error=state.error, thread=state.thread
        )

    async def message(self, thread_id: str, message_id: str, wait: float) -> ThreadMessage:
        """A message of the thread, once it is answered (or ended without an answer), once the
        thread has ended, or after `wait` seconds, whichever comes first.

        Raises:
            DeliveryRefused: 404 `unknown_thread` or `unknown_message` (never sent, or older than
                what the thread keeps), 429 too many waits, 503 no worker answered.
        """
        if wait <= 0:
            return _find(await self._query(thread_id), thread_id, message_id)
        async with self._waits.hold(thread_id):
            loop = asyncio.get_running_loop()
            deadline = loop.time() + wait
            pause, longest = WAIT_POLL
            while True:
                state = await self._query(thread_id)
                message = _find(state, thread_id, message_id)
                left = deadline - loop.time()
                if message.status not in _OPEN_MESSAGES or state.status not in _OPEN_RUNS:
                    return message
                if left <= 0:
                    return message
                await asyncio.sleep(min(pause, left))
                pause = min(pause * 2, longest)

    # --- helpers -------------------------------------------------------------------------

    def _start_input(self, agent: str | None) -> RunInput:
        if agent is not None:
            return thread_input(agent=agent)
        return thread_input(model=self.default_model)

    async def _send(
        self, thread_id: str, body: MessageFields, start: RunInput, first: bool = False
    ) -> MessageAccepted:
        try:
            sent = await self.client.send_message(
                thread_id,
                body.text,
                key=body.key,
                sender=body.sender,
                start=start,
                answer_within=self.answer_within,
                first=first,
            )
        except ClientError as err:
            raise refusal(err, thread_id=thread_id, start=first) from err
        return sent.accepted

    async def _status(self, thread_id: str) -> WorkflowExecutionStatus | None:
        """The status Temporal has for the id's latest run; None if no run has it."""
        try:
            description = await self.client.describe(thread_id, rpc_timeout=DESCRIBE_TIMEOUT)
        except RunNotFound:
            return None
        except ClientError as err:
            raise refusal(err, thread_id=thread_id) from err
        return description.status

    async def _is_retry(self, thread_id: str, key: str | None) -> bool:
        """Whether a start with `key` is a retry of the one that started the thread: its key
        is the first message's (while the thread keeps it)."""
        if key is None:
            return False
        state = await self._query(thread_id)
        assert state.thread is not None
        return state.thread.keys.get(key) == "m1"

    async def _query(self, thread_id: str) -> RunState:
        """The thread's state, as its run answers (a worker must).

        Raises:
            DeliveryRefused: 404 no such thread, 409 the run is no thread, 503 no answer.
        """
        try:
            state = await self.client.query(thread_id)
        except ClientError as err:
            raise refusal(err, thread_id=thread_id) from err
        if state.thread is None:
            raise DeliveryRefused(
                409, f"run {thread_id} is a task, not a thread", code="not_a_thread"
            )
        return state


def _find(state: RunState, thread_id: str, message_id: str) -> ThreadMessage:
    assert state.thread is not None
    for message in state.thread.messages:
        if message.message_id == message_id:
            return message
    raise DeliveryRefused(
        404,
        f"thread {thread_id} has no message {message_id} (or no longer keeps it: it keeps its "
        "last messages)",
        code="unknown_message",
    )
