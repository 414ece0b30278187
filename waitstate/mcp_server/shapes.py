"""What a run is, as an MCP task (the `io.modelcontextprotocol/tasks` extension, SEP-2663): its
id, its status, its result, and the requests it waits on as `inputRequests`. Pure functions of
a run's state, so each mapping is tested without a server.

A task's id is the caller's to hold, not a run id: the run's workflow id is derived from the
caller and the task id (`run_id_of`), so a task id presented by another caller names a run
that does not exist, and a run cannot be reached over MCP by its own id.

A call that carries an idempotency key (`IDEMPOTENCY_KEY` in its `_meta`) names its task by it:
a task run's id is derived from the caller and the key (`keyed_task_id`), and a thread
message's idempotency key in its thread from the key and the message (`message_key`), so the
same call sent again reaches the same run or the same message.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import mcp_types
from pydantic import BaseModel, ValidationError

from waitstate.schemas.approvals import ApprovalRequest, DecideInput
from waitstate.schemas.messages import Usage
from waitstate.schemas.questions import MAX_MESSAGE_CHARS, AnswerInput, InputRequest
from waitstate.schemas.run import RunState
from waitstate.schemas.threads import ThreadMessage

TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]
RUN_PREFIX = "mcp-"
APPROVAL_KEY = "approval:"
QUESTION_KEY = "question:"
MAX_TASK_CHARS = 20_000  # of the `task` argument: a run's task travels in its history
MAX_RESPONSES = 64  # keys of one `tasks/update`
MAX_COMMENT_CHARS = 5_000  # of a decision's comment (`DecideInput.comment`)
MAX_ARGUMENTS_SHOWN = 1_000  # characters of a tool call's arguments, in an approval's message
THREAD_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
THREAD_PART = re.compile(r"[A-Za-z0-9_-]{1,64}")
# The idempotency key a call may carry in its `_meta` (namespaced: MCP defines none; SEP-3182's
# `idempotencyKey` was proposed and closed), and what one may be.
IDEMPOTENCY_KEY = "io.waitstate/idempotency-key"
KEY = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
KEY_PREFIX = "mcp:"  # of a thread message's key made from a call's (`message_key`)
# An approval, asked as a form: the decision, and why (the agent reads the comment).
DECISION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decision": {"type": "string", "enum": ["approve", "reject"], "title": "Decision"},
        "comment": {"type": "string", "maxLength": MAX_COMMENT_CHARS, "title": "Why"},
    },
    "required": ["decision"],
}


def new_task_id() -> str:
    """A task id no one can guess (128 bits)."""
    return secrets.token_urlsafe(16)


def idempotency_key(meta: Mapping[str, Any] | None) -> str | None:
    """The idempotency key a request's `_meta` carries, or None.

    Raises:
        Refused: it is not a key: 1 to 128 letters, digits, `.`, `_`, `:` or `-`.
    """
    key = (meta or {}).get(IDEMPOTENCY_KEY)
    if key is None:
        return None
    if not isinstance(key, str) or not KEY.fullmatch(key):
        raise Refused(
            f"'{IDEMPOTENCY_KEY}' is 1 to 128 letters, digits, '.', '_', ':' or '-' (a UUID, "
            "say): one key for one call, sent again with it when its answer was lost"
        )
    return key


def keyed_task_id(caller: str, key: str) -> str:
    """The task id of `caller`'s call with the idempotency key `key`: a digest of both (as
    long as `new_task_id`'s, and telling nothing of the key)."""
    digest = hashlib.sha256(json.dumps([caller, key]).encode()).digest()[:16]
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def message_key(key: str, text: str) -> str:
    """A thread message's idempotency key, from the call's `key` and the message's `text`: the
    same call sent again is the same message; the key with another text is another key (see
    `other_message_of`), so it can never be answered with the other's message."""
    return f"{_key_prefix(key)}{_digest(text, 16)}"


def other_message_of(key: str, text: str, keys: Mapping[str, str]) -> str | None:
    """The message id a thread's `keys` give `key` for another text than `text`, if any: the
    key was used for another message."""
    prefix, mine = _key_prefix(key), message_key(key, text)
    return next((m for k, m in keys.items() if k.startswith(prefix) and k != mine), None)


def _key_prefix(key: str) -> str:
    return f"{KEY_PREFIX}{_digest(key, 32)}:"


def run_id_of(caller: str, task_id: str) -> str:
    """The workflow id of `caller`'s task `task_id`: a digest of the caller (never the caller's
    name, which the Web UI would show), then the task id; for a thread's message, the thread's
    (`thread_of`)."""
    if (thread := thread_of(task_id)) is not None:
        return _thread_run(caller, thread[0], thread[1])
    return f"{runs_of(caller)}-{task_id}"


def runs_of(caller: str) -> str:
    """What the workflow ids of `caller`'s runs begin with: its task runs' with this and `-`,
    its threads' with this and `.`."""
    return f"{RUN_PREFIX}{_digest(caller, 16)}"


def thread_run_id(caller: str, agent: str, thread: str) -> str:
    """The workflow id of `caller`'s thread `thread` with `agent`."""
    return _thread_run(caller, _digest(agent, 8), thread)


def _thread_run(caller: str, agent_digest: str, thread: str) -> str:
    return f"{runs_of(caller)}.{agent_digest}.{thread}"


def message_task_id(agent: str, thread: str, message_id: str) -> str:
    """The task of a message to `caller`'s thread `thread` with `agent`: `DIGEST.THREAD.MESSAGE`,
    the agent's digest, the thread's name and the message's id (a caller's threads are its own
    per agent: the same name with another agent is another thread)."""
    return f"{_digest(agent, 8)}.{thread}.{message_id}"


def thread_of(task_id: str) -> tuple[str, str, str] | None:
    """The agent's digest, the thread's name and the message's id of a message's task id; None
    for a task run's (a task run's id has no `.`)."""
    parts = task_id.split(".")
    if len(parts) != 3 or not all(THREAD_PART.fullmatch(part) for part in parts):
        return None
    return parts[0], parts[1], parts[2]


def _digest(text: str, chars: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:chars]


def input_tool_schema(max_task_chars: int = MAX_TASK_CHARS) -> dict[str, Any]:
    """The arguments of every agent's tool: the task, in words; and a thread to send it to, to
    talk with the agent rather than give it a task."""
    return {
        "type": "object",
        "properties": {
            "task": {
                "type": "string",
                "minLength": 1,
                "maxLength": max_task_chars,
                "description": "What the agent should do, or your message in the thread.",
            },
            "thread": {
                "type": "string",
                "pattern": THREAD_NAME.pattern,
                "description": "A conversation of yours with the agent, by a name you choose: "
                "the task is a message in it, and the agent remembers the thread's earlier "
                "messages. Omitted: a task of its own.",
            },
        },
        "required": ["task"],
        "additionalProperties": False,
    }


@dataclass(frozen=True)
class TaskArguments:
    """The arguments of an agent's tool, checked against `input_tool_schema`."""

    task: str
    thread: str | None = None


def task_arguments(arguments: Mapping[str, Any] | None) -> TaskArguments:
    """The arguments of a call of an agent's tool, as its input schema allows them.

    Raises:
        Refused: an argument the schema does not have (`additionalProperties: false`: a
            misspelled `Thread` is not taken for no thread), or one outside its bounds.
    """
    given = dict(arguments or {})
    unknown = sorted(set(given) - {"task", "thread"})
    if unknown:
        names = ", ".join(repr(name[:64]) for name in unknown[:8])
        raise Refused(f"unknown arguments {names}: an agent takes 'task' and 'thread'")
    task = given.get("task")
    if not isinstance(task, str) or not task.strip() or len(task) > MAX_TASK_CHARS:
        raise Refused(f"'task' is the agent's task in words: 1 to {MAX_TASK_CHARS} characters")
    thread = given.get("thread")
    if thread is not None and not (isinstance(thread, str) and THREAD_NAME.fullmatch(thread)):
        raise Refused("'thread' names a conversation: 1 to 64 letters, digits, '_' or '-'")
    return TaskArguments(task, thread)


def output_schema(output_type: type[BaseModel] | None) -> dict[str, Any]:
    """The structured content of an agent's result: its answer (an object of the agent's output
    type, or text), the run that gave it, and what it spent. The output type's own definitions
    move to the top, where its `$ref`s point."""
    answer: dict[str, Any] = {"type": "string"}
    definitions: dict[str, Any] = {}
    if output_type is not None:
        answer = output_type.model_json_schema()
        definitions = answer.pop("$defs", {})
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "answer": answer,
            "run_id": {"type": "string"},
            "turns": {"type": "integer"},
            "tool_calls": {"type": "integer"},
            "usage": {
                "type": "object",
                "properties": {
                    name: {"type": "integer"}
                    for name in ("model_calls", "input_tokens", "output_tokens")
                },
            },
        },
        "required": ["answer", "run_id"],
    }
    if definitions:
        schema["$defs"] = definitions
    return schema


def result_of(run_id: str, outcome: RunState, structured: bool) -> dict[str, Any]:
    """A finished run as a `CallToolResult`: its answer as text, and as structured content
    (parsed, for an agent with an output type). A run that ended without answering (out of
    turns, an approval expired, an answer its output type refused, a failure of its own) is
    a tool error the caller's model can read."""
    if outcome.status != "completed":
        return tool_error(f"the run ended {outcome.status}: {outcome.error or outcome.status}")
    counts = {"turns": outcome.turns, "tool_calls": outcome.tool_calls}
    return _answered(run_id, outcome.final_output or "", structured, outcome.usage, counts)


def message_result(run_id: str, message: ThreadMessage, structured: bool) -> dict[str, Any] | None:
    """A thread's message as a `CallToolResult` once it is done: its reply, as `result_of`
    shows a run's answer, or a tool error if it ended without one; None while it waits or is
    worked on."""
    if message.status in ("queued", "working"):
        return None
    if message.status != "replied":
        return tool_error(f"the message ended {message.status}: {message.error or 'no reply'}")
    counts = {"turns": message.model_calls}
    return _answered(run_id, message.reply or "", structured, message.usage, counts)


def message_times(
    message: ThreadMessage, state: RunState, approvals: bool
) -> tuple[datetime, datetime]:
    """When a thread's message was sent, and when its task last changed: the latest of its own
    times (taken, answered) and, while it is not answered, of the thread's open requests for
    the caller (their asking is the task's change to `input_required`)."""
    times = [t for t in (message.sent_at, message.started_at, message.replied_at) if t]
    if message.status in ("queued", "working"):
        if approvals:
            times += [r.requested_at for r in state.approvals.values() if r.open]
        times += [
            q.asked_at
            for q in state.questions.values()
            if q.open and q.policy.answered_by == "person"
        ]
    return message.sent_at, max(times)


def tool_error(text: str) -> dict[str, Any]:
    """A `CallToolResult` that is an error, saying `text`."""
    return _dump(mcp_types.CallToolResult(content=[_text(text)], is_error=True))


def _answered(
    run_id: str, text: str, structured: bool, usage: Usage, counts: dict[str, int]
) -> dict[str, Any]:
    answer: Any = text
    if structured:
        try:
            answer = json.loads(text)
        except ValueError:
            answer = text
    content = {"answer": answer, "run_id": run_id, **counts, "usage": usage.model_dump()}
    return _dump(mcp_types.CallToolResult(content=[_text(text)], structured_content=content))


def working_message(state: RunState) -> str:
    """What a working run is doing, in a line: its status, turns, and its last finished call."""
    line = f"{state.status}, turn {state.turns}, {state.tool_calls} tool calls"
    if state.completed:
        line += f"; last: {state.completed[-1]}"
    return line[:MAX_MESSAGE_CHARS]


def wait_message(status: str, waiting_for: str) -> str:
    """What a run that asks nothing of the caller is doing: its status, and what it waits for."""
    if waiting_for == "none":
        return status
    return f"{status}, waiting for {waiting_for}"


def input_requests_of(state: RunState, approvals: bool) -> dict[str, Any]:
    """The run's open requests a person answers, as elicitations by key: its approvals (when
    the caller decides them) and the questions its tools' policies give to a person."""
    requests: dict[str, Any] = {}
    if approvals:
        for request in state.approvals.values():
            if request.open:
                requests[APPROVAL_KEY + request.request_id] = _elicit(
                    _approval_message(request), DECISION_SCHEMA
                )
    for question in state.questions.values():
        if question.open and question.policy.answered_by == "person":
            requests[QUESTION_KEY + question.question_id] = _elicit(
                _question_message(question), question.requested_schema
            )
    return requests


class Refused(ValueError):
    """A response that cannot apply to its request: said to the caller, nothing changed."""


def decision_of(request_id: str, response: Any, caller: str) -> DecideInput | None:
    """An approval's response as a decision: `accept` with the form's decision, `decline` as a
    rejection; `cancel` (the person dismissed the form) decides nothing.

    Raises:
        Refused: the response is not an elicitation result, or its form is not the decision's.
    """
    result = _elicit_result(response)
    if result.action == "cancel":
        return None
    reviewer = f"mcp:{caller}"[:200]
    if result.action == "decline":
        reason = str((result.meta or {}).get("io.waitstate/reason") or "declined")
        return DecideInput(
            request_id=request_id,
            decision="reject",
            reviewer=reviewer,
            comment=reason[:MAX_COMMENT_CHARS],
        )
    content = result.content or {}
    decision = content.get("decision")
    comment = content.get("comment", "")
    if decision not in ("approve", "reject"):
        raise Refused("an approval's answer is {decision: 'approve' | 'reject', comment?}")
    if not isinstance(comment, str) or len(comment) > MAX_COMMENT_CHARS:
        raise Refused(f"an approval's comment is text of at most {MAX_COMMENT_CHARS} characters")
    return DecideInput(request_id=request_id, decision=decision, reviewer=reviewer, comment=comment)


def answer_of(question_id: str, response: Any, caller: str) -> AnswerInput | None:
    """A question's response as an answer: `accept` with its content, or `decline`; `cancel`
    (the person dismissed the form) answers nothing.

    Raises:
        Refused: the response is not an elicitation result.
    """
    result = _elicit_result(response)
    if result.action == "cancel":
        return None
    content = dict(result.content or {}) if result.action == "accept" else None
    return AnswerInput(
        question_id=question_id,
        action=result.action,
        content=content,
        responder=f"mcp:{caller}"[:200],
    )


def _elicit_result(response: Any) -> mcp_types.ElicitResult:
    try:
        return mcp_types.ElicitResult.model_validate(response)
    except ValidationError:
        raise Refused(
            "a response is an elicitation result: {action: accept|decline|cancel, content?}"
        ) from None


def _approval_message(request: ApprovalRequest) -> str:
    arguments = json.dumps(request.arguments, sort_keys=True, default=str)
    if len(arguments) > MAX_ARGUMENTS_SHOWN:
        arguments = arguments[:MAX_ARGUMENTS_SHOWN] + "…"
    message = f"Approve {request.tool} {arguments}? {request.reason}".strip()
    return message[:MAX_MESSAGE_CHARS]


def _question_message(question: InputRequest) -> str:
    return f"{question.tool} asks: {question.message}"[:MAX_MESSAGE_CHARS]


def _elicit(message: str, schema: dict[str, Any]) -> dict[str, Any]:
    request = mcp_types.ElicitRequest(
        params=mcp_types.ElicitRequestFormParams(message=message, requested_schema=schema)
    )
    return request.model_dump(by_alias=True, mode="json", exclude_none=True)


def _text(text: str) -> mcp_types.TextContent:
    return mcp_types.TextContent(type="text", text=text)


def _dump(result: mcp_types.CallToolResult) -> dict[str, Any]:
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)
