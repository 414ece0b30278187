"""What a run is, as an A2A task: its ids, its state, what it asks, its answer; and what a
client's message means to it (a new task, or the reply to what the task asks). Pure functions of
a run's state and a message, so each mapping is tested without a server.

A task id is the caller's to hold, not a run id: it is derived from the caller and the client's
message id (`task_id_of`), so a send retried with the same message id names the same task, and
the run's id from the caller and the task id (`run_id_of`), so another caller's task id names a
run that does not exist.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from a2a.helpers.proto_helpers import new_data_part, new_text_part
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Artifact,
    HTTPAuthSecurityScheme,
    Message,
    Part,
    Role,
    SecurityRequirement,
    SecurityScheme,
    StringList,
    Task,
    TaskState,
    TaskStatus,
)
from google.protobuf.json_format import MessageToDict

from waitstate.agents import Agent
from waitstate.schemas.approvals import ApprovalRequest, DecideInput
from waitstate.schemas.questions import MAX_MESSAGE_CHARS, AnswerInput, QuestionRequest
from waitstate.schemas.run import RunState

RUN_PREFIX = "a2a-"
BEARER = "bearer"
# A context id a client may choose: it is part of the task id, so it is a plain name.
CONTEXT = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MESSAGE_ID_CHARS = 200  # of a client's message id (it is digested, never stored)
MAX_TEXT_CHARS = 20_000  # of a message's text: a run's task travels in its history
MAX_PARTS = 16
MAX_DATA_CHARS = 64_000  # of a message's data parts, as JSON
MAX_COMMENT_CHARS = 5_000
MAX_ARGUMENTS_SHOWN = 1_000
MAX_HISTORY = 20  # messages a task shows at most, whatever `historyLength` asks
MAX_EARLIER_CHARS = 8_000  # of an earlier task and its answer, told to a context's thread
ANSWER_ARTIFACT = "answer"
FINAL_STATES = frozenset(
    {
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_REJECTED,
    }
)
# States a stream ends on: the task is over, or waits for the client's next message.
SETTLED_STATES = FINAL_STATES | {TaskState.TASK_STATE_INPUT_REQUIRED}
# How a run that ended without its answer is told (every one is `failed` but a cancel).
ENDED_WITHOUT_ANSWER = {
    "max_turns": "the agent ran out of turns",
    "approval_expired": "an approval expired",
    "output_invalid": "the answer did not fit the agent's output type",
    "budget_exceeded": "the run's budget was spent",
}


class Refused(ValueError):
    """A message that cannot apply: said to the client as invalid params, nothing changed."""


def _digest(text: str, chars: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:chars]


def message_digest(caller: str, message_id: str) -> str:
    """A digest of the caller's message id: 128 bits, telling nothing of either."""
    raw = hashlib.sha256(json.dumps([caller, message_id]).encode()).digest()[:16]
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def task_id_of(caller: str, context_id: str | None, message_id: str) -> str:
    """The task a caller's message with no task id starts: `CONTEXT.DIGEST`, its context and a
    digest of the caller and the message id (the same message sent again is the same task). A
    message that names no context starts one of its own, named by the digest (`DIGEST.DIGEST`):
    a task run. A message that names a context is a message in the context's conversation."""
    digest = message_digest(caller, message_id)
    return f"{context_id or digest}.{digest}"


def context_of(task_id: str) -> str | None:
    """The context id a task id carries; None if it is no task id of ours."""
    context, dot, digest = task_id.partition(".")
    if not dot or not CONTEXT.fullmatch(context) or not CONTEXT.fullmatch(digest):
        return None
    return context


def in_conversation(task_id: str) -> bool:
    """Whether the task is a message in its context's conversation (a thread), not a task run
    (whose context is its own, `DIGEST.DIGEST`)."""
    context, _, digest = task_id.partition(".")
    return context != digest


def message_key(task_id: str) -> str:
    """The idempotency key, in its context's thread, of the message a task is."""
    return f"a2a:{task_id.partition('.')[2]}"


def run_id_of(caller: str, agent: str, task_id: str) -> str:
    """The workflow id of `caller`'s task `task_id` of `agent`: for a task run, a digest of the
    caller (never its name, which the Web UI would show), then the task id; for a message in a
    conversation, its context's thread (`thread_id_of`)."""
    if in_conversation(task_id):
        return thread_id_of(caller, agent, task_id.partition(".")[0])
    return f"{RUN_PREFIX}{_digest(caller, 16)}-{task_id}"


def task_runs_of(caller: str, context_id: str | None = None) -> str:
    """What the workflow ids of `caller`'s task runs begin with (those of the context
    `context_id`, if given: a task run's context is its own)."""
    runs = f"{RUN_PREFIX}{_digest(caller, 16)}-"
    return f"{runs}{context_id}." if context_id else runs


def task_of_run(run_id: str) -> str:
    """The task id of a task run, from its workflow id (`run_id_of`'s inverse)."""
    return run_id.partition("-")[2].partition("-")[2]


def thread_id_of(caller: str, agent: str, context_id: str) -> str:
    """The workflow id of the thread of `caller`'s context `context_id` with `agent`."""
    return f"{RUN_PREFIX}{_digest(caller, 16)}.{_digest(agent, 8)}.{context_id}"


def earlier(task: str, answer: str) -> str:
    """What a context's thread is told first of the task run the context began with."""
    return (
        f"Earlier in this conversation you were given this task:\n{task[:MAX_EARLIER_CHARS]}\n"
        f"and you answered:\n{answer[:MAX_EARLIER_CHARS]}\n\nNow:\n"
    )


def update_id_of(task_id: str, caller: str, message_id: str) -> str:
    """The Update id of the reply a caller's message makes to its task: the same message sent
    again is the same Update, applied once."""
    return f"a2a-{task_id}-{message_digest(caller, message_id)}"


# --- the client's message -------------------------------------------------------------------


@dataclass(frozen=True)
class Said:
    """What a client's message says: its text parts joined, and its data parts."""

    text: str
    data: list[Any]


def said(message: Message) -> Said:
    """The text and data of a client's message, within bounds.

    Raises:
        Refused: no message id, no part, too many parts, a file part, or over the bounds.
    """
    if not message.message_id or len(message.message_id) > MESSAGE_ID_CHARS:
        raise Refused(f"a message has a messageId of 1 to {MESSAGE_ID_CHARS} characters")
    if not message.parts or len(message.parts) > MAX_PARTS:
        raise Refused(f"a message has 1 to {MAX_PARTS} parts")
    texts: list[str] = []
    data: list[Any] = []
    for part in message.parts:
        kind = part.WhichOneof("content")
        if kind == "text":
            texts.append(part.text)
        elif kind == "data":
            data.append(MessageToDict(part.data))
        else:
            raise Refused("this agent reads text and data parts only")
    text = "\n".join(texts)
    if len(text) > MAX_TEXT_CHARS:
        raise Refused(f"a message's text is at most {MAX_TEXT_CHARS} characters")
    if len(json.dumps(data, default=str)) > MAX_DATA_CHARS:
        raise Refused(f"a message's data is at most {MAX_DATA_CHARS} characters as JSON")
    return Said(text, data)


def task_text(content: Said) -> str:
    """The run's task, from the message that starts it: its text, and its data as JSON."""
    pieces = [content.text] if content.text.strip() else []
    pieces += [json.dumps(item, sort_keys=True) for item in content.data]
    text = "\n".join(pieces)
    if not text.strip():
        raise Refused("a message that starts a task says what to do: a text or data part")
    return text


def decision_of(request: ApprovalRequest, content: Said, caller: str) -> DecideInput:
    """A message as the decision on `request`: text `approve` / `reject <reason>`, or a data
    part `{"decision": "approve"|"reject", "reason": ...}`.

    Raises:
        Refused: it is neither.
    """
    decision: Any = None
    reason: Any = ""
    if content.data:
        first = content.data[0]
        if isinstance(first, dict):
            decision, reason = first.get("decision"), first.get("reason", "")
    else:
        word, _, rest = content.text.strip().partition(" ")
        decision, reason = word.lower(), rest.strip()
    if decision not in ("approve", "reject"):
        raise Refused(
            "this task waits for a decision: 'approve', 'reject <reason>', or a data part "
            '{"decision": "approve"|"reject", "reason": "..."}'
        )
    if not isinstance(reason, str) or len(reason) > MAX_COMMENT_CHARS:
        raise Refused(f"a decision's reason is text of at most {MAX_COMMENT_CHARS} characters")
    return DecideInput(
        request_id=request.request_id,
        decision=decision,
        reviewer=f"a2a:{caller}"[:200],
        comment=reason,
    )


def answer_of(question: QuestionRequest, content: Said, caller: str) -> AnswerInput:
    """A message as the answer to `question`: its data part (an object, checked against the
    question's schema by the run), or its text, when the schema has a single property and it
    is a string (`{"region": "emea"}` from the text `emea`).

    Raises:
        Refused: it has no object to answer with.
    """
    answer: Any = content.data[0] if content.data else None
    if answer is None and content.text.strip():
        answer = _text_answer(question.requested_schema, content.text.strip())
    if not isinstance(answer, dict):
        raise Refused(
            "this task waits for an answer: a data part with an object that fits the question's "
            "schema (shown in the task's status message)"
        )
    return AnswerInput(
        question_id=question.question_id,
        action="accept",
        content=answer,
        responder=f"a2a:{caller}"[:200],
    )


def _text_answer(schema: dict[str, Any], text: str) -> dict[str, Any] | None:
    """A text as the answer to a question whose schema has one string property."""
    properties = schema.get("properties") or {}
    strings = [name for name, spec in properties.items() if spec.get("type") == "string"]
    if len(properties) == 1 and len(strings) == 1:
        return {strings[0]: text}
    return None


# --- the run, as a task ---------------------------------------------------------------------


def asking(request: ApprovalRequest | QuestionRequest) -> tuple[str, dict[str, Any]]:
    """What a request says to the caller, in words and as data."""
    if isinstance(request, ApprovalRequest):
        arguments = json.dumps(request.arguments, sort_keys=True, default=str)
        if len(arguments) > MAX_ARGUMENTS_SHOWN:
            arguments = arguments[:MAX_ARGUMENTS_SHOWN] + "…"
        text = (
            f"Approve {request.tool} {arguments}? {request.reason} "
            "(reply 'approve' or 'reject <reason>')"
        )
        data = {
            "kind": "approval",
            "request_id": request.request_id,
            "tool": request.tool,
            "arguments": request.arguments,
            "reason": request.reason,
            "expires_at": request.expires_at.isoformat(),
        }
        return text[:MAX_MESSAGE_CHARS], data
    data = {
        "kind": "question",
        "question_id": request.question_id,
        "tool": request.tool,
        "message": request.message,
        "schema": request.requested_schema,
        "expires_at": request.expires_at.isoformat(),
    }
    return f"{request.tool} asks: {request.message}"[:MAX_MESSAGE_CHARS], data


def agent_message(task_id: str, context_id: str, key: str, text: str, data: Any = None) -> Message:
    """A message of the agent's in the task (a status's), its id derived from `key`."""
    parts = [new_text_part(text)]
    if data is not None:
        parts.append(new_data_part(data))
    return Message(
        message_id=f"{task_id}:{_digest(key, 12)}",
        context_id=context_id,
        task_id=task_id,
        role=Role.ROLE_AGENT,
        parts=parts,
    )


def status(state: TaskState, when: datetime, message: Message | None = None) -> TaskStatus:
    """A task's status at `when`."""
    status = TaskStatus(state=state, message=message)
    status.timestamp.FromDatetime(when)
    return status


def answer_artifact(text: str, structured: bool) -> Artifact:
    """A completed run's answer: its text, and (for an agent with an output type) the object
    it parsed as, in a data part."""
    parts: list[Part] = [new_text_part(text)]
    if structured:
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        if parsed is not None:
            parts.append(new_data_part(parsed))
    return Artifact(artifact_id=ANSWER_ARTIFACT, name=ANSWER_ARTIFACT, parts=parts)


def task(
    task_id: str,
    context_id: str,
    task_status: TaskStatus,
    *,
    artifacts: Sequence[Artifact] = (),
    history: Sequence[Message] = (),
) -> Task:
    """A task of ours, as A2A carries it."""
    return Task(
        id=task_id,
        context_id=context_id,
        status=task_status,
        artifacts=list(artifacts),
        history=list(history),
    )


def ended(outcome: RunState) -> tuple[TaskState, str]:
    """How a run that ended stands as a task: completed with its answer, canceled, or failed
    saying why."""
    if outcome.status == "completed":
        return TaskState.TASK_STATE_COMPLETED, ""
    if outcome.status == "cancelled":
        return TaskState.TASK_STATE_CANCELED, "the task was cancelled"
    reason = ENDED_WITHOUT_ANSWER.get(outcome.status, "the run failed")
    error = f": {outcome.error}" if outcome.error else ""
    return TaskState.TASK_STATE_FAILED, f"{reason}{error}"[:MAX_MESSAGE_CHARS]


def working_text(status_text: str, waiting_for: str) -> str:
    """What a working run is doing, in a line."""
    if waiting_for in ("", "none"):
        return status_text
    return f"{status_text}, waiting for {waiting_for}"


# --- the card -------------------------------------------------------------------------------


def card(agent: Agent, url: str, version: str) -> AgentCard:
    """The agent card of `agent`, served at `url` (its JSON-RPC endpoint): one skill, the
    agent's own, streaming, and a bearer token required."""
    description = agent.description or (
        f"The agent {agent.name}, run durably: a task may take minutes or days, and may ask "
        "for approvals and answers while it runs."
    )
    output_modes = ["text/plain", "application/json"] if agent.output_type else ["text/plain"]
    return AgentCard(
        name=agent.name,
        description=description,
        version=version,
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=True),
        security_schemes={
            BEARER: SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(
                    scheme="Bearer", description="A caller key of the server's operator"
                )
            )
        },
        security_requirements=[SecurityRequirement(schemes={BEARER: StringList(list=[])})],
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=output_modes,
        skills=[
            AgentSkill(
                id=agent.name,
                name=agent.name,
                description=description,
                tags=["waitstate", "durable"],
                input_modes=["text/plain", "application/json"],
                output_modes=output_modes,
            )
        ],
    )
