"""What an AG-UI stream reads of a run's history that its event stream leaves out: the model's
replies (their text and tool calls, with their arguments), the tools' results, and where a
person's message or decision entered the run.

The run's event stream (`RunEvents`) tells each model and tool call by ids and names only, for
every holder of a view link; an AG-UI client is the conversation's own party (it holds an
operator key or the thread's token), and is shown what it would have read in the conversation
itself. Each fact is keyed by the id of the history event that recorded it, so a stream told
event by event, and a reader resuming after one, get the same facts at the same places.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client
from temporalio.service import RPCError

from waitstate.names import ANSWER_UPDATE, DECIDE_UPDATE, SEND_MESSAGE_UPDATE
from waitstate.schemas import Message, ModelCallInput, ModelResponse
from waitstate.schemas.approvals import DecideInput
from waitstate.schemas.calls import (
    AWAIT_MODEL_RESPONSE,
    CALL_MODEL,
    CALL_TOOL,
    CHECKPOINT_PROMPT,
    ToolCallInput,
    ToolResult,
)
from waitstate.schemas.questions import AnswerInput
from waitstate.schemas.threads import SendMessage

# What a decoded payload may weigh: larger ones (never written by our workflow) are skipped.
MAX_PAYLOAD_BYTES = 1_048_576
# The Updates of a person's reply, and what they carry (a delivery id among it).
_REPLIES: dict[str, type[DecideInput] | type[AnswerInput]] = {
    DECIDE_UPDATE: DecideInput,
    ANSWER_UPDATE: AnswerInput,
}
# How long reading one run's history may take (its pages together).
READ_SECONDS = 20.0


@dataclass
class ToolDone:
    """A tool call's result, as its `call_tool` activity returned it."""

    call_id: str
    name: str
    result: ToolResult


@dataclass
class RunRead:
    """One Temporal run of a chain, read: its facts by the history event that recorded them."""

    run: str  # the Temporal run id
    length: int = 0  # events read
    replies: dict[int, Message] = field(default_factory=dict)  # model call completed -> reply
    checkpoints: set[int] = field(default_factory=set)  # model calls that were notes, not turns
    tools: dict[int, ToolDone] = field(default_factory=dict)  # tool call completed -> result
    sends: dict[str, int] = field(default_factory=dict)  # a message's key -> its Update accepted
    senders: dict[str, int] = field(default_factory=dict)  # a message's sender -> the same
    updates: dict[str, int] = field(default_factory=dict)  # an Update id -> its accepted event
    # A decision's or an answer's delivery id -> its Update's accepted event.
    deliveries: dict[str, int] = field(default_factory=dict)


async def read_run(client: Client, workflow_id: str, run: str | None = None) -> RunRead | None:
    """The run `run` of `workflow_id` (its latest for None), read; None if it cannot be read
    (no such run, Temporal unreachable: the caller says so its own way)."""
    handle = client.get_workflow_handle(workflow_id, run_id=run)
    try:
        async with asyncio.timeout(READ_SECONDS):
            history = await handle.fetch_history()
    except (RPCError, TimeoutError):
        return None
    events = history.events
    if not events:
        return None
    started = events[0]
    run_id = run or _run_of(started, handle.run_id)
    read = RunRead(run=run_id, length=len(events))
    await _take(client, events, read)
    return read


def _run_of(started: HistoryEvent, known: str | None) -> str:
    attributes = started.workflow_execution_started_event_attributes
    return known or attributes.original_execution_run_id or attributes.first_execution_run_id


async def _take(client: Client, events: Sequence[HistoryEvent], read: RunRead) -> None:
    models: dict[int, Any] = {}  # model call scheduled -> its input's payloads
    tools: dict[int, Any] = {}  # tool call scheduled -> its input's payloads
    decode = client.data_converter.decode
    for event in events:
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled = event.activity_task_scheduled_event_attributes
            name = scheduled.activity_type.name
            if name in (CALL_MODEL, AWAIT_MODEL_RESPONSE):
                models[event.event_id] = (name, scheduled.input.payloads)
            elif name == CALL_TOOL:
                tools[event.event_id] = scheduled.input.payloads
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            completed = event.activity_task_completed_event_attributes
            payloads = completed.result.payloads
            if not payloads or payloads[0].ByteSize() > MAX_PAYLOAD_BYTES:
                continue
            if completed.scheduled_event_id in models:
                name, inputs = models[completed.scheduled_event_id]
                [response] = await decode(payloads, [ModelResponse])
                if response.background_id is not None:
                    continue  # its reply comes with the wait for it
                if name == CALL_MODEL and inputs:
                    [request] = await decode(inputs, [ModelCallInput])
                    if request.system_prompt == CHECKPOINT_PROMPT:
                        read.checkpoints.add(event.event_id)
                        continue
                read.replies[event.event_id] = response.message
            elif completed.scheduled_event_id in tools:
                [call] = await decode(tools[completed.scheduled_event_id], [ToolCallInput])
                [result] = await decode(payloads, [ToolResult])
                read.tools[event.event_id] = ToolDone(call.call.id, call.call.name, result)
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            accepted = event.workflow_execution_update_accepted_event_attributes.accepted_request
            read.updates.setdefault(accepted.meta.update_id, event.event_id)
            args = accepted.input.args.payloads
            if not args or args[0].ByteSize() > MAX_PAYLOAD_BYTES:
                continue
            if accepted.input.name == SEND_MESSAGE_UPDATE:
                [send] = await decode(args, [SendMessage])
                if send.key is not None:
                    read.sends.setdefault(send.key, event.event_id)
                if send.sender is not None:
                    read.senders.setdefault(send.sender, event.event_id)
            elif accepted.input.name in _REPLIES:
                [reply] = await decode(args, [_REPLIES[accepted.input.name]])
                if reply.delivery_id:
                    read.deliveries.setdefault(reply.delivery_id, event.event_id)
