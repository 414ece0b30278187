"""A remote A2A agent's task as JSON (protocol 1.0, the protobuf JSON both official SDKs write and
push), read into bounded models, and its state as a long operation's report: what the gateway
makes of a push, and what a status check makes of `GetTask`, by one mapping.

Pydantic only: the gateway reads pushes without the a2a SDK (an optional extra).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from waitstate.schemas.operations import Completion, OperationError
from waitstate.schemas.questions import Question

# Where a remote agent pushes its task's changes: the operation's own URL on the gateway.
PUSH_PATH = "/v1/operations/{operation_id}/a2a"
# What the legacy `token` of a push config travels in (the official SDKs' default).
TOKEN_HEADER = "X-A2A-Notification-Token"
# What is kept of a remote's answer: a hostile remote cannot fill a run's history.
MAX_PARTS = 50
MAX_ARTIFACTS = 20
MAX_TEXT_CHARS = 20_000
MAX_RESULT_CHARS = 64_000
MAX_PROGRESS_CHARS = 500
# A question the remote asks is answered in words: its A2A message says what it wants.
ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "string", "description": "Your answer to the agent."}},
    "required": ["answer"],
}
_FAILED = {"FAILED": "a2a_failed", "REJECTED": "a2a_rejected", "CANCELED": "a2a_canceled"}
_RUNNING = {"SUBMITTED", "WORKING"}


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class A2APart(_Wire):
    """One part of a message or an artifact: text, data, or a file (by URL or bytes)."""

    text: str | None = Field(default=None, max_length=MAX_TEXT_CHARS)
    data: Any = None
    url: str | None = Field(default=None, max_length=2_000)
    raw: str | None = Field(default=None, max_length=MAX_TEXT_CHARS * 2)
    filename: str | None = Field(default=None, max_length=500)
    media_type: str | None = Field(default=None, alias="mediaType", max_length=200)


class A2AMessage(_Wire):
    message_id: str | None = Field(default=None, alias="messageId", max_length=200)
    parts: list[A2APart] = Field(default_factory=list, max_length=MAX_PARTS)


class A2AStatus(_Wire):
    state: str = Field(max_length=40)
    message: A2AMessage | None = None


class A2AArtifact(_Wire):
    name: str | None = Field(default=None, max_length=500)
    parts: list[A2APart] = Field(default_factory=list, max_length=MAX_PARTS)


class A2ATask(_Wire):
    """A task as `GetTask` returns it and a push may carry it (`StreamResponse.task`)."""

    id: str = Field(min_length=1, max_length=512)
    status: A2AStatus
    artifacts: list[A2AArtifact] = Field(default_factory=list, max_length=MAX_ARTIFACTS)


class A2AStatusUpdate(_Wire):
    task_id: str = Field(alias="taskId", min_length=1, max_length=512)
    status: A2AStatus


class A2APush(_Wire):
    """A push notification's body: one `StreamResponse` (a task, a status update, an artifact
    update, or a message), or a bare task as protocol 0.3 pushed it."""

    task: A2ATask | None = None
    status_update: A2AStatusUpdate | None = Field(default=None, alias="statusUpdate")
    artifact_update: dict[str, Any] | None = Field(default=None, alias="artifactUpdate")
    message: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _bare_task(cls, value: Any) -> Any:
        if isinstance(value, dict) and "id" in value and "status" in value:
            return {"task": value}
        return value

    @model_validator(mode="after")
    def _one(self) -> A2APush:
        given = [self.task, self.status_update, self.artifact_update, self.message]
        if sum(item is not None for item in given) != 1:
            raise ValueError(
                "a push carries exactly one of task, statusUpdate, artifactUpdate, message"
            )
        return self


def state_name(state: str) -> str:
    """`TASK_STATE_INPUT_REQUIRED`, `input-required` (0.3) -> `INPUT_REQUIRED`."""
    return state.upper().replace("-", "_").removeprefix("TASK_STATE_")


def task_report(
    state: str, message: A2AMessage | None, artifacts: list[A2AArtifact]
) -> Completion | None:
    """A task's state as an operation's report (None for a state that says nothing: unknown,
    unspecified).

    `completed` succeeds with the artifacts' text and data as the result; `failed`, `rejected`
    and `canceled` fail; `input-required` asks one question (keyed by the status message's id);
    `auth-required` fails: this client gives a remote no credentials mid-task.
    """
    name, said = state_name(state), _text(message.parts if message else [])
    if name == "COMPLETED":
        parts = [part for artifact in artifacts for part in artifact.parts]
        return Completion(
            status="succeeded", result=_result(parts or (message.parts if message else []))
        )
    if name in _FAILED:
        word = name.lower()
        reason = f"the remote agent's task ended {word}" + (f": {said}" if said else "")
        return Completion(
            status="failed", error=OperationError(code=_FAILED[name], message=reason[:10_000])
        )
    if name == "AUTH_REQUIRED":
        reason = (
            "the remote agent asks for authentication mid-task, which waitstate does not give; "
            "configure the agent's credentials (A2AAgent headers) and call it again"
        )
        return Completion(
            status="failed", error=OperationError(code="a2a_auth_required", message=reason)
        )
    if name == "INPUT_REQUIRED":
        key = (message.message_id if message else None) or "input"
        ask = said or "The remote agent asks for more input."
        question = Question(key=key, message=ask[:5_000], requested_schema=ANSWER_SCHEMA)
        return Completion(status="input_required", questions=[question])
    if name in _RUNNING:
        return Completion(status="running", progress=(said or name.lower())[:MAX_PROGRESS_CHARS])
    return None


def ended_without_artifacts(push: A2APush) -> bool:
    """Whether the push is a status update saying `completed`: the task ended, and its
    artifacts are not in it (its status check reads them)."""
    update = push.status_update
    return update is not None and state_name(update.status.state) == "COMPLETED"


def push_report(push: A2APush) -> tuple[Completion | None, str]:
    """What a push says of its task, and why nothing when it says nothing the run can take: a
    status update saying `completed` does not carry the artifacts (the task's status check
    reads them: `ended_without_artifacts`), nor do artifact updates and messages."""
    if push.task is not None:
        status = push.task.status
        report = task_report(status.state, status.message, push.task.artifacts)
        return report, "" if report else f"a task in state {status.state!r} says nothing new"
    if push.status_update is not None:
        status = push.status_update.status
        if state_name(status.state) == "COMPLETED":
            return (
                None,
                "a completed status without the task's artifacts: its status check reads them",
            )
        report = task_report(status.state, status.message, [])
        return report, "" if report else f"a status {status.state!r} says nothing new"
    return None, "an artifact update or a message: the task's state comes with its status"


def _text(parts: list[A2APart]) -> str:
    return " ".join(part.text for part in parts if part.text).strip()


def _result(parts: list[A2APart]) -> Any:
    """The parts as the model reads them: their text, or {text, data} when some carry data (a
    file as its URL or name and size); cut to MAX_RESULT_CHARS, saying so."""
    texts: list[str] = []
    data: list[Any] = []
    budget = MAX_RESULT_CHARS
    for part in parts:
        if part.text is not None:
            texts.append(part.text[:budget])
            budget -= len(part.text)
        else:
            value = (
                {"file": part.url or part.filename or "(bytes)", "media_type": part.media_type}
                if part.url is not None or part.raw is not None
                else part.data
            )
            size = len(json.dumps(value, default=str))
            data.append(value if size <= budget else "(cut: too large)")
            budget -= size
        if budget <= 0:
            texts.append(f"(cut: the agent's answer is over {MAX_RESULT_CHARS} characters)")
            break
    text = "\n".join(texts)
    return {"text": text, "data": data} if data else text
