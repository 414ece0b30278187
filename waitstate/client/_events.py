"""A run's events, read from its history as Temporal appends to it: what the gateway streams
(`GET /v1/runs/{run_id}/events`), and what `follow` (`watch`, `run --wait`) wakes on.

Each event is one event of the run's history, told the way a person follows a run: a model
call or a tool call started and ended, an operation polled or completed, an approval or a
question noticed, decided or answered, a message taken, a wait's timer, the run's status as the
Web UI's list shows it, and its end. Its id is the run's Temporal run id and the history
event's id (`<run>.<event>`): ordered, the same for every reader, and where a reader that lost
its connection resumes (`Last-Event-ID`). A run that continues as new is followed into its next
run; the stream ends with the chain.

Why the history, rather than a channel the workflow publishes to (temporalio's
`contrib.workflow_streams`): the history is already written, durably and in order, by every run
there is, recorded histories included; reading it changes no workflow (no marker, no replay
hazard), needs no worker (a run whose worker is down still streams what it did, and its timers
and Updates as they come), and a long poll (`wait_new_event`) brings each event as the server
appends it. What it cannot carry is what is never in history: a model's text deltas.

What a run's history holds came partly from outside (its start's summary, an Update's
arguments): an event carries only ids, names and statuses picked from it (never the task, a
comment, a message's text, a nonce or an answer's content), each bounded. Summaries are told as
the workflow wrote them (a call's, a timer's), but not the run's own: its static summary is its
task as its starter typed it, which only the Web UI shows, to those who may open it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, Field
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.api.failure.v1 import Failure
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowExecutionDescription, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from waitstate import names
from waitstate.client._errors import RunNotFound
from waitstate.client._tree_events import CHILD_EVENTS, CHILD_KINDS, child_event
from waitstate.schemas import run as run_names

log = logging.getLogger("waitstate.client.events")

MAX_EVENT_ID_CHARS = 200
# `<run>.0` is before the run's first event: a reader that wants a run of the chain whole.
_EVENT_ID = re.compile(r"([A-Za-z0-9-]{1,100})\.(0|[1-9][0-9]{0,11})")
# What is read of a payload that came from outside (an Update's arguments, an outcome): more
# is not decoded, and each string kept is cut here.
MAX_PAYLOAD_BYTES = 65_536
MAX_FIELD_CHARS = 200
# What an Update's arguments and outcome may show, by name: ids, choices and statuses.
_SHOWN_FIELDS = (
    "request_id",
    "decision",
    "reviewer",
    "question_id",
    "action",
    "responder",
    "operation_id",
    "message_id",
    "accepted",
    "applied",
    "status",
    "duplicate",
    "progress",
)
# How long a reader waits after Temporal could not be reached before it reads on.
RETRY_SECONDS = (0.2, 5.0)

# What a history's last page may end with before it is written: a workflow task in flight that
# is transient (the retry of one that failed or timed out) or speculative (an Update's, dropped
# if its validator refuses it). Temporal sends them after the events it wrote; once one is
# dropped, the next events written take its ids, and a reader whose position went past them
# would skip those. Nothing of a run is told by them, so they move no reader.
_MAYBE_UNWRITTEN = frozenset(
    {EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED, EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED}
)

# The summary of a person's wait's timer (the desk's `expiry_summary`).
_EXPIRY = re.compile(r"(approval|question) (\S{1,150}) expires")

# Activities whose retries a reader should see as they happen (a poll's retries are its
# schedule, not a failure): they are not in history, only in the run's pending activities.
RETRIED_CALLS = {run_names.CALL_MODEL: "model call", run_names.CALL_TOOL: "tool call"}

# An activity's type -> what its events are called.
_ACTIVITY_KINDS = {
    run_names.CALL_MODEL: "model",
    run_names.CALL_TOOL: "tool",
    run_names.POLL_OPERATION: "operation.poll",
    run_names.CANCEL_OPERATION: "operation.cancel",
    run_names.ANSWER_OPERATION: "question.deliver",
    run_names.NOTIFY_APPROVAL: "approval.notice",
    run_names.NOTIFY_QUESTION: "question.notice",
    run_names.RESOLVE_AGENT: "agent",
    run_names.LIST_MCP_TOOLS: "mcp.tools",
}
# A job's report to its operation (a webhook's: an Update, or a signal), its status and progress.
REPORTED = "operation.reported"
# An Update's or a signal's name -> the event it is.
_HANDLER_KINDS = {
    names.COMPLETE_OPERATION_UPDATE: REPORTED,
    names.OPERATION_COMPLETED_SIGNAL: REPORTED,
    names.DECIDE_UPDATE: "approval.decided",
    names.APPROVE_SIGNAL: "approval.decided",
    names.REJECT_SIGNAL: "approval.decided",
    names.ANSWER_UPDATE: "question.answered",
    names.SEND_MESSAGE_UPDATE: "message.received",
}
_ENDS = {
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED: "completed",
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED: "failed",
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT: "timed_out",
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED: "canceled",
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED: "terminated",
}
_ACTIVITY_ENDS = {
    EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED: ("ended", "activity_task_completed"),
    EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED: ("failed", "activity_task_failed"),
    EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT: ("timed_out", "activity_task_timed_out"),
    EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED: ("canceled", "activity_task_canceled"),
}


# Every kind a stream may send (a browser's `EventSource` hands a named event only to listeners
# of that name), and those that end a chain: from the tables above, the rest as `_Reading`
# writes them.
_ACTIVITY_PHASES = ("started", *(phase for phase, _ in _ACTIVITY_ENDS.values()))
END_KINDS = tuple(f"run.{end}" for end in _ENDS.values())
EVENT_KINDS = tuple(
    dict.fromkeys(
        [
            "run.started",
            "run.continued",
            *END_KINDS,
            *(
                f"{what}.{phase}"
                for what in (*_ACTIVITY_KINDS.values(), "activity")
                for phase in _ACTIVITY_PHASES
            ),
            "timer.started",
            "timer.fired",
            "approval.expired",
            "question.expired",
            *_HANDLER_KINDS.values(),
            "update.accepted",
            "update.completed",
            "signal",
            "status",
            *CHILD_KINDS,
        ]
    )
)


class RunEvent(BaseModel):
    """One event of a run, as a reader of its stream gets it (the `data` of an SSE event)."""

    id: str = Field(description="`<Temporal run id>.<history event id>`: resume after it.")
    kind: str = Field(
        description="What happened: `run.started`, `model.started`, `tool.ended`, "
        "`approval.decided`, `status`, `run.completed`, ..."
    )
    at: datetime
    summary: str = Field(default="", description="What the Web UI shows of it, if anything.")
    detail: dict[str, Any] = Field(default_factory=dict)


class BadPosition(ValueError):
    """A `Last-Event-ID` that is not an event id of ours."""


@dataclass(frozen=True)
class Position:
    """Where a reader is: after event `event_id` of the run `run` (a Temporal run id)."""

    run: str
    event_id: int

    @classmethod
    def parse(cls, text: str) -> Position:
        """The position an event id names.

        Raises:
            BadPosition: it is not `<run>.<event>`.
        """
        match = _EVENT_ID.fullmatch(text) if len(text) <= MAX_EVENT_ID_CHARS else None
        if match is None:
            raise BadPosition("Last-Event-ID is not an event id of this stream (`<run>.<event>`)")
        return cls(match[1], int(match[2]))


@dataclass
class _Reading:
    """What reading one run's history remembers from one event to a later one: which activity
    a result is of, which Update an outcome is of, and the run it continues as."""

    run: str
    activities: dict[int, tuple[str, str]] = field(default_factory=dict)
    updates: dict[str, str] = field(default_factory=dict)
    timers: dict[str, str] = field(default_factory=dict)  # a started timer's id -> its summary
    next_run: str | None = None

    def take(self, event: HistoryEvent) -> RunEvent | None:
        """The run event `event` is, if it is one a reader follows."""
        at = event.event_time.ToDatetime(tzinfo=UTC)
        made = self._told(event)
        if made is None:
            return None
        kind, summary, detail = made
        return RunEvent(
            id=f"{self.run}.{event.event_id}", kind=kind, at=at, summary=summary, detail=detail
        )

    def _told(self, event: HistoryEvent) -> tuple[str, str, dict[str, Any]] | None:
        summary = _text(event.user_metadata.summary) if event.HasField("user_metadata") else ""
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            started = event.workflow_execution_started_event_attributes
            detail: dict[str, Any] = {"workflow": started.workflow_type.name}
            if started.continued_execution_run_id:
                detail["continued_from"] = started.continued_execution_run_id
            # Its summary is the task (`WaitstateClient.start`): the Web UI's, never a stream's.
            return "run.started", "", detail
        if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            activity = event.activity_task_scheduled_event_attributes.activity_type.name
            what = _ACTIVITY_KINDS.get(activity, "activity")
            self.activities[event.event_id] = (what, summary)
            return f"{what}.started", summary, {"activity": activity}
        if kind in _ACTIVITY_ENDS:
            phase, name = _ACTIVITY_ENDS[kind]
            scheduled = getattr(event, f"{name}_event_attributes").scheduled_event_id
            what, summary = self.activities.get(scheduled, ("activity", ""))
            return f"{what}.{phase}", summary, {}
        if kind == EventType.EVENT_TYPE_TIMER_STARTED:
            timer = event.timer_started_event_attributes
            self.timers[timer.timer_id] = summary
            seconds = timer.start_to_fire_timeout.ToTimedelta().total_seconds()
            return "timer.started", summary, {"timer": timer.timer_id, "seconds": seconds}
        if kind == EventType.EVENT_TYPE_TIMER_FIRED:
            timer_id = event.timer_fired_event_attributes.timer_id
            return _fired(timer_id, self.timers.pop(timer_id, ""))
        if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            return self._update_accepted(event)
        if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED:
            return self._update_completed(event)
        if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            signaled = event.workflow_execution_signaled_event_attributes
            args = signaled.input.payloads
            detail = {"signal": signaled.signal_name[:MAX_FIELD_CHARS]}
            detail |= _shown(args[0]) if args else {}
            return _HANDLER_KINDS.get(signaled.signal_name, "signal"), "", detail
        if kind == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
            upserted = event.upsert_workflow_search_attributes_event_attributes.search_attributes
            status = {name: _value(p) for name, p in upserted.indexed_fields.items()}
            return "status", str(status.get(names.AGENT_STATUS.name) or ""), status
        if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            continued = event.workflow_execution_continued_as_new_event_attributes
            self.next_run = continued.new_execution_run_id
            return "run.continued", "", {"next_run": self.next_run}
        if kind in _ENDS:
            return f"run.{_ENDS[kind]}", "", {}
        if kind in CHILD_EVENTS:  # a sub-agent's run
            return child_event(event, MAX_FIELD_CHARS)
        return None

    def _update_accepted(self, event: HistoryEvent) -> tuple[str, str, dict[str, Any]]:
        request = event.workflow_execution_update_accepted_event_attributes.accepted_request
        handler = request.input.name
        self.updates[request.meta.update_id] = handler
        args = request.input.args.payloads
        return _HANDLER_KINDS.get(handler, "update.accepted"), "", _shown(args[0]) if args else {}

    def _update_completed(self, event: HistoryEvent) -> tuple[str, str, dict[str, Any]]:
        completed = event.workflow_execution_update_completed_event_attributes
        outcome = completed.outcome
        detail: dict[str, Any] = {
            "update": self.updates.get(completed.meta.update_id, ""),
            "ok": outcome.HasField("success"),
        }
        if outcome.HasField("success") and outcome.success.payloads:
            detail |= _shown(outcome.success.payloads[0])
        return "update.completed", "", detail


class RunEvents:
    """Reads runs' events from Temporal, for the gateway's event streams."""

    def __init__(self, client: Client) -> None:
        self._client = client

    async def where(self, run_id: str, after: Position | None) -> tuple[Position, bool]:
        """Where a reader of `run_id` starts, and whether the stream has anything left to send
        it: a reader resuming after a chain's last event is told so (an SSE client is stopped
        by 204), rather than kept open on a run that is over.

        Raises:
            RunNotFound: no run has this id, or `after` names none of its runs.
            RPCError: Temporal could not be reached.
        """
        handle = self._client.get_workflow_handle(run_id, run_id=after.run if after else None)
        try:
            described = await handle.describe()
        except RPCError as err:
            if err.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT):
                raise RunNotFound(run_id) from None
            raise
        closed = described.status not in (None, WorkflowExecutionStatus.RUNNING)
        over = (
            after is not None
            and closed
            and described.status != WorkflowExecutionStatus.CONTINUED_AS_NEW
            and after.event_id >= described.history_length
        )
        return after or Position(described.run_id, 0), not over

    async def retries(self, run_id: str) -> list[Retry]:
        """The calls of `run_id` (its latest run) that failed and are tried again, now: what
        its history does not tell until the call ends. None if it could not be read."""
        try:
            return retries_of(await self._client.get_workflow_handle(run_id).describe())
        except RPCError:
            return []

    async def follow(self, run_id: str, start: Position) -> AsyncIterator[RunEvent]:
        """The events of `run_id` after `start`, as they are appended, run after run of its
        chain, until the chain ends. Temporal unreachable for a while: read on from the last
        event sent once it answers, never twice an event."""
        position = start
        backoff = RETRY_SECONDS[0]
        while True:
            reading = _Reading(position.run)
            handle = self._client.get_workflow_handle(run_id, run_id=position.run)
            try:
                async for event in handle.fetch_history_events(wait_new_event=True):
                    if event.event_type in _MAYBE_UNWRITTEN:
                        continue  # no position: its id may yet be another event's
                    told = reading.take(event)
                    if event.event_id <= position.event_id:
                        continue  # read again to know what a later event is of; sent before
                    position = Position(position.run, event.event_id)
                    backoff = RETRY_SECONDS[0]
                    if told is not None:
                        yield told
            except RPCError as err:
                if err.status == RPCStatusCode.NOT_FOUND:
                    return  # the run is gone (its retention passed): nothing more to read
                log.warning("reading %s: %s; reading on in %.1f s", run_id, err, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, RETRY_SECONDS[1])
                continue
            if reading.next_run is None:
                return
            position = Position(reading.next_run, 0)


def told(run: str, events: Iterable[HistoryEvent]) -> tuple[list[RunEvent], str | None]:
    """The run events a reader gets of the history `events` of the run `run` (a Temporal run
    id), and the run it continued as, if it did: what a stream of it sends, for a check."""
    reading = _Reading(run)
    return [e for event in events if (e := reading.take(event)) is not None], reading.next_run


async def growth(
    client: Client, run_id: str, grew: asyncio.Event, reports: list[RunEvent] | None = None
) -> None:
    """Set `grew` at each event of `run_id`'s history as Temporal appends it (its steps, its
    waits' ends, its Updates), into the runs it continues as: what a caller that looks at the
    run's state (`follow`, `reply`) looks again at once for, rather than at its next interval.
    With `reports`, each job's report with a progress (`operation.reported`) is added to it, in
    order: the state shows only the latest. Returns when the chain ends, or quietly if the run
    cannot be read (the caller's interval still holds)."""
    events = RunEvents(client)
    try:
        start, _ = await events.where(run_id, None)
        async for event in events.follow(run_id, start):
            if reports is not None and event.kind == REPORTED and event.detail.get("progress"):
                reports.append(event)
            grew.set()
    except (RunNotFound, RPCError):
        return


def _fired(timer_id: str, summary: str) -> tuple[str, str, dict[str, Any]]:
    """A timer's firing: a person's wait that passed with the request still open
    (`approval.expired`, `question.expired`: its summary names it, see the desk's `window`),
    or another timer's."""
    expired = _EXPIRY.fullmatch(summary)
    if expired is None:
        return "timer.fired", "", {"timer": timer_id}
    what, request = expired[1], expired[2]
    name = "request_id" if what == "approval" else "question_id"
    return f"{what}.expired", summary, {"timer": timer_id, name: request}


@dataclass(frozen=True)
class Retry:
    """A model or tool call that failed and is being tried again."""

    call: str  # what it is: `model call`, `tool call`
    activity_id: str
    attempt: int  # the attempt under way or to come (2: the first retry)
    maximum_attempts: int | None
    last_error: str  # its last attempt's failure, as the call's error said it
    error_type: str = ""  # the failure's type: an error's name, or `timeout`


def retries_of(description: WorkflowExecutionDescription) -> list[Retry]:
    """Model and tool calls of the run that failed and are being retried, from the server's
    record of its pending activities (no worker needed): what no history event tells."""
    return [
        Retry(
            call=RETRIED_CALLS[pending.activity_type.name],
            activity_id=pending.activity_id,
            attempt=pending.attempt,
            maximum_attempts=pending.maximum_attempts or None,  # 0: unlimited
            last_error=_failure_message(pending.last_failure),
            error_type=_failure_type(pending.last_failure),
        )
        for pending in description.raw_description.pending_activities
        if pending.activity_type.name in RETRIED_CALLS
        and (pending.attempt > 1 or pending.HasField("last_failure"))
    ]


def _failure_message(failure: Failure) -> str:
    if failure.HasField("server_failure_info") and failure.HasField("cause"):
        # Temporal's own failure in place of the activity's past 4 KB, keeping the start of the
        # original as its cause (an activity's own failures are never the server's).
        return f"{failure.cause.message} (truncated by Temporal: over its failure size limit)"
    return failure.message


def _failure_type(failure: Failure) -> str:
    """An application error's type (`ProviderError`, ...), `timeout`, or what else it is."""
    if failure.HasField("application_failure_info"):
        return failure.application_failure_info.type[:MAX_FIELD_CHARS]
    which = failure.WhichOneof("failure_info")
    return "" if which is None else which.removesuffix("_failure_info")


def _text(payload: Payload) -> str:
    value = _value(payload)
    return value[:MAX_FIELD_CHARS] if isinstance(value, str) else ""


def _value(payload: Payload) -> Any:
    """A JSON payload's value (a search attribute's, a summary's), or None."""
    if len(payload.data) > MAX_PAYLOAD_BYTES:
        return None
    try:
        value = json.loads(payload.data)
    except (ValueError, RecursionError):
        return None
    if isinstance(value, str):
        return value[:MAX_FIELD_CHARS]
    if isinstance(value, list):  # a keyword list attribute: its first value
        return str(value[0])[:MAX_FIELD_CHARS] if value else None
    return value if isinstance(value, int | float | bool) or value is None else None


def _shown(payload: Payload) -> dict[str, Any]:
    """What an event may show of an argument or an outcome: `_SHOWN_FIELDS`, each a short
    string, a number or a boolean."""
    if len(payload.data) > MAX_PAYLOAD_BYTES:
        return {}
    try:
        value = json.loads(payload.data)
    except (ValueError, RecursionError):
        return {}
    if not isinstance(value, dict):
        return {}
    completion = value.get("completion")  # an operation's report: its status and progress
    if isinstance(completion, dict):
        value = {**completion, "operation_id": value.get("operation_id")}
    shown: dict[str, Any] = {}
    for name in _SHOWN_FIELDS:
        item = value.get(name)
        if isinstance(item, str):
            shown[name] = item[:MAX_FIELD_CHARS]
        elif isinstance(item, bool | int | float):
            shown[name] = item
    return shown
