"""A run's events told as AG-UI events: pure functions over the run's `RunEvent`s, the facts its
history holds (`history.RunRead`) and its state, so each mapping is tested without a server.

One `Telling` per connection: it knows which steps, text messages and tool calls that
connection opened, so it never finishes what it did not start (the AG-UI client refuses that),
and closes what is open before the run's end. Every AG-UI event told of a run event carries
that run event's id (`<run>.<event>`) on the last of them, where a reader resumes.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from typing import Any

from ag_ui.core import (
    BaseEvent,
    Interrupt,
    RunErrorEvent,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StateSnapshotEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

from waitstate.agui.history import RunRead, ToolDone
from waitstate.client import RunEvent
from waitstate.schemas import RunState
from waitstate.schemas.approvals import ApprovalRequest
from waitstate.schemas.questions import QuestionRequest

PROTOCOL_VERSION = "1.0"
APPROVAL = "approval:"  # an interrupt's id: what it asks, then the request's or question's id
QUESTION = "question:"
MAX_RESULT_CHARS = 65_536  # of a tool's result told in TOOL_CALL_RESULT
MAX_ARGUMENTS_CHARS = 65_536  # of a tool call's arguments told in TOOL_CALL_ARGS
# An approval's answer: the decision, and why (the model reads the comment).
DECISION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decision": {"type": "string", "enum": ["approve", "reject"]},
        "comment": {"type": "string", "maxLength": 5000},
    },
    "required": ["decision"],
}
_ENDED_BADLY = {
    "run.failed": "the run failed",
    "run.timed_out": "the run timed out",
    "run.canceled": "the run was cancelled",
    "run.terminated": "the run was terminated",
}


def now_ms() -> int:
    return int(time.time() * 1000)


def message_id(event_id: str) -> str:
    """The AG-UI id of the model's text that the run event `event_id` recorded."""
    return f"msg-{event_id}"


def interrupts_of(state: RunState) -> list[Interrupt]:
    """The run's open approval requests and the questions its tools give a person, as AG-UI
    interrupts, oldest first."""
    found: list[tuple[str, Interrupt]] = []
    for request in state.approvals.values():
        if request.open:
            found.append((request.requested_at.isoformat(), _approval(request)))
    for question in state.questions.values():
        if question.open and question.policy.answered_by == "person":
            found.append((question.asked_at.isoformat(), _question(question)))
    return [interrupt for _, interrupt in sorted(found, key=lambda pair: pair[0])]


def _approval(request: ApprovalRequest) -> Interrupt:
    arguments = json.dumps(request.arguments, sort_keys=True, default=str)[:1000]
    return Interrupt(
        id=APPROVAL + request.request_id,
        reason="approval",
        message=f"Approve {request.tool} {arguments}? {request.reason}".strip()[:2000],
        tool_call_id=request.tool_call_id or None,
        response_schema=DECISION_SCHEMA,
        expires_at=request.expires_at.isoformat(),
    )


def _question(question: QuestionRequest) -> Interrupt:
    return Interrupt(
        id=QUESTION + question.question_id,
        reason="input",
        message=f"{question.tool} asks: {question.message}"[:2000],
        response_schema=question.requested_schema or None,
        expires_at=question.expires_at.isoformat(),
    )


def board(state: RunState) -> dict[str, Any]:
    """The run's board, as a STATE_SNAPSHOT shows it: its status, counts, and what it waits
    on (its pending operations, approval requests and questions, by id)."""
    return {
        "status": state.status,
        "turns": state.turns,
        "tool_calls": state.tool_calls,
        "operations": {
            op.operation_id: {"tool": op.tool, "status": op.status}
            for op in state.operations.values()
            if op.status in ("running", "input_required")
        },
        "approvals": [r.request_id for r in state.approvals.values() if r.open],
        "questions": [q.question_id for q in state.questions.values() if q.open],
    }


@dataclass
class Telling:
    """What one connection has told of an AG-UI run, and what it has open."""

    thread_id: str
    run_id: str
    steps: dict[str, list[str]] = field(default_factory=dict)  # summary -> open step names
    streaming: dict[str, str] = field(default_factory=dict)  # model call -> open message id
    answered: bool = False  # a model reply with no tool calls was told: an answer
    finished: bool = False

    def started(self) -> list[BaseEvent]:
        return [
            RunStartedEvent(
                thread_id=self.thread_id,
                run_id=self.run_id,
                protocol_version=PROTOCOL_VERSION,
                timestamp=now_ms(),
            )
        ]

    def delta(self, call: str, text: str) -> list[BaseEvent]:
        """A piece of the model's text as it is written (a model call's delta)."""
        told: list[BaseEvent] = []
        message = self.streaming.get(call)
        if message is None:
            message = self.streaming[call] = f"msg-delta-{call}"
            told.append(TextMessageStartEvent(message_id=message, role="assistant"))
        told.append(TextMessageContentEvent(message_id=message, delta=text))
        return told

    def event(self, event: RunEvent, read: RunRead | None) -> list[BaseEvent]:
        """What the run event `event` is told as, given its run's history `read` (None if it
        could not be read: calls are then told as steps only)."""
        number = int(event.id.rsplit(".", 1)[1])
        kind = event.kind
        if kind in ("model.started", "tool.started"):
            return [self._open_step(event.summary or kind.split(".")[0], event.id)]
        if kind.startswith(("model.", "tool.")) and kind.endswith(
            (".ended", ".failed", ".timed_out", ".canceled")
        ):
            told: list[BaseEvent] = []
            if kind == "model.ended" and read is not None:
                told += self._reply(event.id, number, read)
            if kind == "tool.ended" and read is not None and number in read.tools:
                told += self._result(event.id, read.tools[number])
            told += self._close_step(event.summary or kind.split(".")[0])
            return told
        if kind in _ENDED_BADLY:
            return self.error(_ENDED_BADLY[kind], kind.replace(".", "_"))
        return []

    def _reply(self, event_id: str, number: int, read: RunRead) -> list[BaseEvent]:
        reply = read.replies.get(number)
        if reply is None:
            return []
        told: list[BaseEvent] = []
        message = message_id(event_id)
        streamed = list(self.streaming.values())
        if streamed:  # its text came as deltas: the message ends with the call
            for open_message in streamed:
                told.append(TextMessageEndEvent(message_id=open_message))
            self.streaming.clear()
            message = streamed[-1]
        elif reply.content:
            told += [
                TextMessageStartEvent(message_id=message, role="assistant"),
                TextMessageContentEvent(message_id=message, delta=reply.content),
                TextMessageEndEvent(message_id=message),
            ]
        for call in reply.tool_calls:
            told += [
                ToolCallStartEvent(
                    tool_call_id=call.id, tool_call_name=call.name, parent_message_id=message
                ),
                ToolCallArgsEvent(tool_call_id=call.id, delta=call.arguments[:MAX_ARGUMENTS_CHARS]),
                ToolCallEndEvent(tool_call_id=call.id),
            ]
        return told

    def _result(self, event_id: str, done: ToolDone) -> list[BaseEvent]:
        result = done.result
        if result.approval_needed is not None:
            return []  # no result yet: the call waits for a person (an interrupt)
        return [
            ToolCallResultEvent(
                message_id=f"result-{event_id}",
                tool_call_id=done.call_id,
                content=result.content[:MAX_RESULT_CHARS],
                role="tool",
            )
        ]

    def forget(self) -> None:
        """Forget the steps and messages opened so far: a reconnect's earlier connection
        opened them, and the new one may not close what it never opened."""
        self.steps.clear()
        self.streaming.clear()

    def _open_step(self, summary: str, event_id: str) -> BaseEvent:
        name = f"{summary} [{event_id}]"
        self.steps.setdefault(summary, []).append(name)
        return StepStartedEvent(step_name=name)

    def _close_step(self, summary: str) -> list[BaseEvent]:
        names = self.steps.get(summary)
        if not names:
            return []  # started before this connection began: not ours to finish
        name = names.pop(0)
        return [StepFinishedEvent(step_name=name)]

    def _close_all(self) -> list[BaseEvent]:
        told: list[BaseEvent] = [TextMessageEndEvent(message_id=m) for m in self.streaming.values()]
        self.streaming.clear()
        for names in self.steps.values():
            told += [StepFinishedEvent(step_name=name) for name in names]
        self.steps.clear()
        return told

    def interrupted(self, state: RunState) -> list[BaseEvent]:
        """The run's end as a pause: its board, and what it waits on (none: nothing told)."""
        interrupts = interrupts_of(state)
        if not interrupts:
            return []
        self.finished = True
        return [
            *self._close_all(),
            StateSnapshotEvent(snapshot=board(state)),
            RunFinishedEvent(
                thread_id=self.thread_id,
                run_id=self.run_id,
                outcome=RunFinishedInterruptOutcome(interrupts=interrupts),
                timestamp=now_ms(),
            ),
        ]

    def succeeded(self, state: RunState | None, answer: str | None) -> list[BaseEvent]:
        """The run's end with its answer."""
        self.finished = True
        snapshot = [StateSnapshotEvent(snapshot=board(state))] if state is not None else []
        return [
            *self._close_all(),
            *snapshot,
            RunFinishedEvent(
                thread_id=self.thread_id,
                run_id=self.run_id,
                result=answer,
                outcome=RunFinishedSuccessOutcome(),
                timestamp=now_ms(),
            ),
        ]

    def error(self, message: str, code: str) -> list[BaseEvent]:
        """The run's end as a failure."""
        self.finished = True
        return [RunErrorEvent(message=message[:2000], code=code, timestamp=now_ms())]


def interrupt_key(thread_id: str, interrupt_id: str, status: str) -> str:
    """The Update id a resume of `interrupt_id` in `thread_id` with `status` is sent under:
    every copy of that resume shares it, so Temporal applies it once."""
    digest = hashlib.sha256(json.dumps([thread_id, interrupt_id, status]).encode()).hexdigest()
    return f"agui/{digest[:32]}"


def delivery_of(run_id: str) -> str:
    """The delivery id of a resume sent by the AG-UI run `run_id`: its copies (a retry, a
    reconnect with the same run id) are told its outcome; another run's resume of the same
    interrupt is refused as already applied."""
    return "agui-" + hashlib.sha256(run_id.encode()).hexdigest()[:32]


def message_key(thread_id: str, message: str) -> str:
    """A user message's idempotency key in its thread, from the AG-UI message id: the same
    input sent again is the same message."""
    digest = hashlib.sha256(json.dumps([thread_id, message]).encode()).hexdigest()
    return f"agui-{digest[:40]}"


def sse(event: BaseEvent, event_id: str | None = None) -> str:
    """One event as server-sent events' text (with its id, where a reader resumes)."""
    head = f"id: {event_id}\n" if event_id else ""
    return f"{head}data: {event.model_dump_json(by_alias=True)}\n\n"
