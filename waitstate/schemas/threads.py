"""Threads: an agent run that takes a person's messages, one turn of the conversation each."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

from pydantic import BaseModel, Field

from waitstate.schemas.messages import Usage

# What the agent does with a message sent while it works on another.
BusyPolicy = Literal["queue", "interrupt", "reject"]
# `interrupted`: a later message came while the agent worked on it (under `interrupt`): the
# later message's reply answers both.
MessageStatus = Literal["queued", "working", "replied", "interrupted", "max_turns", "failed"]

# Bounds on what a sender may put in a thread's history (a message is an input from outside).
MAX_MESSAGE_CHARS = 32_000
MAX_KEY_CHARS = 128
MAX_SENDER_CHARS = 200
MAX_QUEUED = 50  # messages waiting for their turn; past it a send is refused
# What a thread carries from one run to the next: its recent messages (with their replies)
# and the idempotency keys of its recent sends. Older ones are in its history and ledger.
KEEP_MESSAGES = 20
KEEP_KEYS = 200
PREVIEW_CHARS = 500  # what `status` keeps of a message's text once the model has it

# Validator refusals (ApplicationError types): the sender is told why, the run is unchanged.
NOT_A_THREAD = "not_a_thread"
THREAD_BUSY = "thread_busy"
THREAD_FULL = "thread_full"
THREAD_CLOSING = "thread_closing"
THREAD_EXISTS = "thread_exists"  # a send that was to start the thread found it had messages


class ThreadSettings(BaseModel):
    """How a thread takes messages (an agent declares it; a run's starter may set it)."""

    busy: BusyPolicy = Field(
        default="queue",
        description="A message sent while the agent works on another: `queue` (taken at the "
        "next turn boundary, in order), `interrupt` (a model call in flight is abandoned and "
        "the turn goes on with the new message too; tools already started carry on), or "
        "`reject` (refused, saying why).",
    )
    close_after: timedelta = Field(
        default=timedelta(days=30),
        gt=timedelta(0),
        description="The thread closes after this long with no message; a message sent to a "
        "closed thread is refused (its history is kept).",
    )


class MessageFields(BaseModel):
    """What a person's message is: its text, idempotency key and sender."""

    text: str = Field(min_length=1, max_length=MAX_MESSAGE_CHARS)
    key: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_KEY_CHARS,
        description="Idempotency key: a send retried with the same key is the same message "
        f"(among the thread's last {KEEP_KEYS} keys).",
    )
    sender: str | None = Field(default=None, max_length=MAX_SENDER_CHARS)


class SendMessage(MessageFields):
    """A person's message to a thread (the `send_message` update's input)."""

    first: bool = Field(
        default=False,
        description="The message must be the thread's first (a start): refused with "
        "`thread_exists` if the thread has messages, unless it is that first message's retry "
        "(same key).",
    )


class MessageAccepted(BaseModel):
    """What a send returns at once: the message's id, and where it stands."""

    message_id: str
    status: MessageStatus
    ahead: int = Field(description="Messages the agent takes before this one.")
    duplicate: bool = Field(
        default=False, description="The key was seen: this is the earlier send's message."
    )


class ThreadMessage(BaseModel):
    """One message of a thread and its reply: one turn of the conversation."""

    message_id: str
    key: str | None = None
    sender: str | None = None
    text: str = Field(description="The message (its start, once the model has it).")
    status: MessageStatus = "queued"
    sent_at: datetime
    started_at: datetime | None = None
    replied_at: datetime | None = None
    reply: str | None = None
    model_calls: int = Field(default=0, description="Model calls the reply took.")
    usage: Usage = Field(default_factory=Usage)
    turns_before: int = Field(
        default=0,
        description="Model calls of the thread before this message's first: its steps are "
        "those of the turns after (`Step.turn`).",
    )
    error: str | None = None


class ThreadState(BaseModel):
    """A thread's conversation, in its run's state (`RunState.thread`)."""

    settings: ThreadSettings = Field(default_factory=ThreadSettings)
    messages: list[ThreadMessage] = Field(
        default_factory=list,
        description=f"Its last {KEEP_MESSAGES} messages, and every one still queued.",
    )
    received: int = Field(default=0, description="Messages accepted, all time.")
    keys: dict[str, str] = Field(
        default_factory=dict, description="Recent idempotency keys, to their message ids."
    )
    idle_since: datetime | None = Field(
        default=None, description="When its last reply was given (None while it works)."
    )
