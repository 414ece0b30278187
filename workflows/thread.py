"""A thread's conversation: the messages a person sends, taken one turn at a time, and what a
thread carries from one run to the next.

A thread is an agent run with `RunInput.thread` set. It starts idle; each message is a turn of
the conversation (model calls and tools until an answer, the reply); between turns the run
continues as new, so each run's history holds one message's work. A message sent while the
agent works waits its turn (`queue`) or is refused (`reject`); an idle thread holds no worker,
and closes after `close_after` with no message.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

from waitstate.schemas import Message
from waitstate.schemas.threads import (
    KEEP_KEYS,
    KEEP_MESSAGES,
    MAX_QUEUED,
    NOT_A_THREAD,
    PREVIEW_CHARS,
    THREAD_BUSY,
    THREAD_CLOSING,
    THREAD_EXISTS,
    THREAD_FULL,
    MessageAccepted,
    MessageStatus,
    SendMessage,
    ThreadMessage,
    ThreadState,
)
from waitstate.wording import count_of, span

from . import ledger
from .parts import Part, RunParts

# Messages a run answers before the thread continues as new: each run's history holds a bounded
# number of turns (and a new run's first task comes no sooner than a second after its start on
# a Temporal cluster, so continuing after every message would hold a quick reply that long).
MESSAGES_PER_RUN = 20
# What a context rebuilt for a thread shows of the conversation before the new message.
REBUILD_MESSAGES = 10
REBUILD_PREVIEW = 300


Answered = TypeVar("Answered")


class Interrupted(Exception):
    """A thread's message came while its model call was in flight (under `interrupt`): the
    call is abandoned, the message joins the turn, and the model is called again."""


class MessageFailed(Exception):
    """A thread's message could not be answered (its model call failed, an approval expired
    under `fail`): the message ends `failed`, the thread goes on."""


class Conversation(Part):
    """The thread's messages: accepted by the `send_message` update, taken one at a time."""

    def __init__(self, run: RunParts) -> None:
        super().__init__(run)
        self._closing = False
        self._answered = 0  # messages this run answered
        # The messages that ended a wait of a turn already (each ends one, once).
        self._woke: set[str] = set()
        # The message answered aside while the turn waits for operations (see `take_aside`).
        self._aside: ThreadMessage | None = None
        self._outer: list[ThreadMessage | None] = []  # the asides an aside was taken in
        if run.plan.input.thread is not None and run.state.thread is None:
            run.state.thread = ThreadState(
                settings=run.plan.input.thread, idle_since=workflow.now()
            )
            fork = run.plan.input.fork
            recording = fork.recording if fork is not None else None
            for text in recording.thread_messages if recording is not None else ():
                self.accept(SendMessage(text=text))  # a thread's fork: its messages again

    @property
    def on(self) -> bool:
        """Whether the run is a thread."""
        return self._state.thread is not None

    @property
    def _thread(self) -> ThreadState:
        assert self._state.thread is not None
        return self._state.thread

    # --- the update ----------------------------------------------------------------------

    def validate(self, send: SendMessage) -> None:
        """Refuse a message the thread cannot take, saying why (the run is unchanged)."""
        if self._state.thread is None:
            raise ApplicationError(
                "this run is a task, not a thread: it takes no messages", type=NOT_A_THREAD
            )
        thread = self._thread
        self._not_taken(send)
        if send.key is not None and send.key in thread.keys:
            return  # the earlier send's message, answered again
        if self._closing:
            raise ApplicationError(
                f"the thread is closing: no message for {span(thread.settings.close_after)}",
                type=THREAD_CLOSING,
            )
        # Under `reject` the agent has one message at a time: working on, or about to take.
        busy = self._working() or next(iter(self._queued()), None)
        if busy is not None and thread.settings.busy == "reject":
            raise ApplicationError(
                f"the agent is busy with message {busy.message_id} and its policy is "
                "`reject`: send again once it has replied",
                type=THREAD_BUSY,
            )
        if len(self._queued()) >= MAX_QUEUED:
            raise ApplicationError(
                f"{MAX_QUEUED} messages already wait for their turn", type=THREAD_FULL
            )

    def accept(self, send: SendMessage) -> MessageAccepted:
        """Queue the message (validated); a known key is its earlier send's message."""
        thread = self._thread
        # Again: two starts of one new thread can be validated in one activation, before
        # either is accepted.
        self._not_taken(send)
        if send.key is not None and send.key in thread.keys:
            known = thread.keys[send.key]
            message = next((m for m in thread.messages if m.message_id == known), None)
            status = message.status if message is not None else "replied"
            return MessageAccepted(message_id=known, status=status, ahead=0, duplicate=True)
        thread.received += 1
        message = ThreadMessage(
            message_id=f"m{thread.received}",
            key=send.key,
            sender=send.sender,
            text=send.text,
            sent_at=workflow.now(),
        )
        thread.messages.append(message)
        if send.key is not None:
            thread.keys[send.key] = message.message_id
        ahead = len(self._queued()) - 1 + (self._working() is not None)
        ledger.step(self._state, "event", "message", f"{message.message_id} queued")
        return MessageAccepted(message_id=message.message_id, status="queued", ahead=ahead)

    def _not_taken(self, send: SendMessage) -> None:
        """Refuse a start (`first`) of a thread that has messages, unless it is its retry."""
        thread = self._thread
        if send.first and thread.received > 0 and thread.keys.get(send.key or "") != "m1":
            raise ApplicationError(
                "the thread has messages already: this start came after another",
                type=THREAD_EXISTS,
            )

    # --- the run's turns -----------------------------------------------------------------

    async def begin(self) -> bool:
        """The run's message: the one a run continued mid-message goes on with, or the next
        one, once it comes (False: the thread closed with none)."""
        if self._working() is not None:
            return True
        if not await self.next_message():
            return False
        await self.take()
        return True

    def interruptible(self) -> bool:
        """Whether a message may interrupt the turn (the thread's policy is `interrupt`)."""
        return self.on and self._thread.settings.busy == "interrupt"

    def steering(self, nested: bool = False) -> bool:
        """Whether a message waits while the turn waits for operations: between turns, it is
        answered aside (`take_aside`) and the wait goes on.
        `nested`: also while the turn is itself an aside's (an approval's wait in it)."""
        return (
            self.on
            and (nested or self._aside is None)
            and self._working() is not None
            and bool(self._queued())
        )

    def wakes(self) -> bool:
        """Whether a message came that no wait of the turn ended for yet: a tool call that
        waits for operations ends, answering with where its jobs stand (they go on, as
        handles), so the model can end its turn and the message get its own."""
        return self.steering() and any(m.message_id not in self._woke for m in self._queued())

    def woke(self) -> None:
        """A wait of the turn ended: the messages queued now ended one."""
        if self.on:
            self._woke.update(m.message_id for m in self._queued())

    def take_aside(self, during: str = "a wait", keep: bool = True) -> ThreadMessage:
        """The next queued message is answered now, in a turn of its own, while the turn of
        the message before it waits (for operations, or `during` an approval): the model gets
        it after what it has said (`keep`), or in a call of its own (see workflows/asides.py)."""
        message = self._queued()[0]
        self._start(message)
        self._outer.append(self._aside)
        self._aside = message
        ledger.step(
            self._state,
            "event",
            "message",
            f"{message.message_id} during {during}: {ledger.preview(message.text)}",
        )
        if keep:
            self._memory.unsent.append(Message(role="user", content=message.text))
        self._board.show()
        return message

    def end_aside(self) -> None:
        """The aside turn ended (its message answered, or not): the waiting turn goes on (an
        aside's own, if it was taken in one)."""
        self._aside = self._outer.pop() if self._outer else None

    def interrupting(self) -> bool:
        """Whether a message waits that interrupts the turn."""
        return self.interruptible() and self._working() is not None and bool(self._queued())

    def interrupt(self) -> None:
        """The messages that came while the agent worked join the turn: the model gets them
        (after what it has not been sent yet), the latest becomes the turn's message, and the
        ones before it end `interrupted` (its reply answers them all)."""
        latest = self._queued()[-1]
        for message in [self._working(), *self._queued()[:-1]]:
            if message is not None:
                message.status = "interrupted"
                message.error = f"interrupted by {latest.message_id}: its reply answers both"
                message.replied_at = workflow.now()
                message.text = ledger.cut(message.text, PREVIEW_CHARS)
        for message in self._queued():
            self._memory.unsent.append(Message(role="user", content=message.text))
        self._start(latest)
        if self._aside is not None:
            self._aside = latest
        ledger.step(self._state, "event", "message", f"{latest.message_id} interrupts the turn")

    async def unless_interrupted(self, calling: Coroutine[Any, Any, Answered]) -> Answered:
        """A thread's model call under `interrupt`: abandoned (its activity cancelled) when a
        message comes meanwhile, which then joins the turn (raises Interrupted)."""
        if self.interrupting():  # came while the tools ran: the model gets it now
            calling.close()  # never started
            self.interrupt()
            raise Interrupted
        task = asyncio.ensure_future(calling)
        await workflow.wait_condition(lambda: task.done() or self.interrupting())
        if task.done():
            return task.result()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, ActivityError):
            await task
        self.interrupt()
        raise Interrupted

    def turn_limit(self) -> int:
        """The model calls the run may reach: `max_turns` per message for a thread."""
        working = self._working() if self._state.thread is not None else None
        base = working.turns_before if working is not None else 0
        return base + self._input.max_turns

    async def next_message(self) -> bool:
        """Wait, idle and holding no worker, for a message; False once `close_after` passed
        with none (the thread closes)."""
        thread = self._thread
        if self._queued():
            return True
        idle_since = thread.idle_since or workflow.now()
        close_at = idle_since + thread.settings.close_after
        with self._board.waiting(
            "message",
            "a person's next message",
            "the next message",
            until=close_at,
            began=idle_since,
        ) as wait:
            wait.parked = True  # measured from `idle_since` when taken (see `take`)
            try:
                await workflow.wait_condition(
                    lambda: bool(self._queued()),
                    timeout=max(close_at - workflow.now(), timedelta(0)),
                )
            except TimeoutError:
                self._closing = True
                ledger.step(
                    self._state,
                    "event",
                    "thread",
                    f"closed: no message for {span(thread.settings.close_after)}",
                )
                return False
        return True

    async def take(self) -> None:
        """The next queued message becomes the turn's: the model gets it, in the transcript it
        has, or in a context rebuilt from the ledger after a long idle time."""
        thread = self._thread
        message = self._queued()[0]
        now = workflow.now()
        self._start(message)
        idle = now - (thread.idle_since or now)
        thread.idle_since = None
        ledger.step(
            self._state, "event", "message", f"{message.message_id}: {ledger.preview(message.text)}"
        )
        if idle > self._input.rebuild_after:
            self._memory.transcript_ref = None
            self._memory.unsent = [Message(role="user", content=self._rebuilt(message))]
            ledger.context_rebuilt(self._state, f"rebuilt from the ledger after {idle} idle")
        else:
            self._memory.unsent.append(Message(role="user", content=message.text))
        self._board.show()

    def out_of_turns(self) -> None:
        """The turn's message used the run's turns without an answer."""
        self.replied(None, "max_turns", f"no answer in {count_of(self._input.max_turns, 'call')}")

    def replied(
        self, reply: str | None, status: MessageStatus = "replied", error: str | None = None
    ) -> None:
        """The turn's message is answered, or ended without an answer (`max_turns`, `failed`,
        with `error`): the thread is idle again."""
        message = self._working()
        if message is None:
            return
        before = message.usage
        message.status = status
        message.reply = reply
        message.error = error
        message.replied_at = workflow.now()
        message.model_calls = self._state.turns - message.turns_before
        message.usage = self._state.usage - before
        message.text = ledger.cut(message.text, PREVIEW_CHARS)
        if self._aside is None:  # else the turn of the message before it goes on
            self._thread.idle_since = message.replied_at
        self._answered += 1
        self._trim()
        ledger.answered(self._state, reply)
        ledger.step(self._state, "event", "reply", f"{message.message_id} {message.status}")

    def run_is_full(self) -> bool:
        """Whether the run has answered enough messages to continue as new before the next
        (besides when Temporal suggests it): a replay, or a worker rebuilding the run, then
        reads at most `MESSAGES_PER_RUN` messages' work."""
        return self.on and self._answered >= MESSAGES_PER_RUN

    def _trim(self) -> None:
        """Bound what the thread keeps (and its next run carries): its last messages, every
        queued one, its recent keys."""
        thread = self._thread
        done = [m for m in thread.messages if m.status not in ("queued", "working")]
        drop = {m.message_id for m in done[:-KEEP_MESSAGES]}
        thread.messages = [m for m in thread.messages if m.message_id not in drop]
        keys = list(thread.keys.items())[-KEEP_KEYS:]
        thread.keys = dict(keys)

    # --- helpers -------------------------------------------------------------------------

    def _working(self) -> ThreadMessage | None:
        """The message the turn is for: the one answered aside, while it is."""
        if self._aside is not None:
            return self._aside if self._aside.status == "working" else None
        return next((m for m in self._thread.messages if m.status == "working"), None)

    def _start(self, message: ThreadMessage) -> None:
        message.status = "working"
        message.started_at = workflow.now()
        message.turns_before = self._state.turns
        message.usage = self._state.usage.model_copy()  # until replied: the usage before it

    def _queued(self) -> list[ThreadMessage]:
        return [m for m in self._thread.messages if m.status == "queued"]

    def _rebuilt(self, message: ThreadMessage) -> str:
        """The one message a thread's model starts afresh from after a long idle time: what the
        thread is for, its rules, the conversation so far (bounded), what its tools did, and
        the new message."""
        state = self._state
        earlier = [m for m in self._thread.messages if m.reply is not None][-REBUILD_MESSAGES:]
        lines = [
            f"Task: {state.task}",
            f"Constraints: {'; '.join(state.constraints) or 'none'}",
            "Conversation so far (oldest first):",
            *(
                f"- the person: {ledger.cut(m.text, REBUILD_PREVIEW)} / you: "
                f"{ledger.cut(m.reply or '', REBUILD_PREVIEW)}"
                for m in earlier
            ),
            "Completed:",
            *(f"- {line}" for line in state.completed[-REBUILD_MESSAGES:]),
            f"Event: the person writes: {message.text}",
            "Remaining: answer the person's message",
        ]
        return "\n".join(lines)
