"""A2A push notifications: the webhooks a client gives for its task (`PushConfig`, bounded and
checked here, so a bad one is refused before it reaches a run), what a run keeps of them
(`PushState`), the Update that sets or deletes one, and what the `post_push` activity is asked
to send: the task as it stands at one change of its state (`TaskSnapshot`)."""

from __future__ import annotations

import re
from datetime import datetime
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, field_validator

from waitstate.outbound import is_loopback
from waitstate.schemas.approvals import ApprovalRequest
from waitstate.schemas.questions import QuestionRequest

if TYPE_CHECKING:  # the run's state holds its pushes (`RunState.push`)
    from waitstate.schemas.run import RunState

POST_PUSH = "post_push"
MAX_PUSH_CONFIGS = 5  # per task
MAX_URL_CHARS = 2_000
MAX_TOKEN_CHARS = 512
MAX_SCHEME_CHARS = 32
CONFIG_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")

PushedState = Literal["working", "input-required", "completed", "failed", "canceled"]


def open_requests(state: RunState) -> list[ApprovalRequest | QuestionRequest]:
    """What a run asks of its caller (an A2A task's `input-required`), oldest first: its open
    approvals and the questions its tools' policies give to a person. The A2A server reads a
    task by it, and the run pushes the oldest."""
    asks: list[ApprovalRequest | QuestionRequest] = [r for r in state.approvals.values() if r.open]
    asks += [q for q in state.questions.values() if q.open and q.policy.answered_by == "person"]
    return sorted(asks, key=_asked_at)


def _asked_at(request: ApprovalRequest | QuestionRequest) -> datetime:
    return request.requested_at if isinstance(request, ApprovalRequest) else request.asked_at


class PushConfig(BaseModel):
    """Where a client wants its task's changes pushed: an `https` URL (plain `http` only to a
    loopback host), and the credentials the push carries back to it."""

    id: str = Field(description="The client's name for it, unique in the task.")
    url: str
    token: str | None = Field(
        default=None, description="Sent back as `X-A2A-Notification-Token` (the client's own)."
    )
    auth_scheme: str | None = Field(
        default=None, description="With `auth_credentials`: sent as `Authorization`."
    )
    auth_credentials: str | None = None

    @field_validator("id")
    @classmethod
    def _check_id(cls, value: str) -> str:
        if not CONFIG_ID.fullmatch(value):
            raise ValueError("a push config's id is 1 to 64 letters, digits, '_', '.', ':' or '-'")
        return value

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        if len(value) > MAX_URL_CHARS:
            raise ValueError(f"a push URL is at most {MAX_URL_CHARS} characters")
        try:
            parts = urlsplit(value)
            host = parts.hostname or ""
        except ValueError:
            raise ValueError("a push URL is an http(s) URL") from None
        if parts.scheme not in ("https", "http") or not host:
            raise ValueError("a push URL is an https URL with a host")
        if parts.scheme == "http" and not is_loopback(host):
            raise ValueError("a push URL is https (plain http only to a loopback host)")
        if parts.username is not None or parts.password is not None:
            raise ValueError("a push URL carries no credentials: give a token")
        return value

    @field_validator("token", "auth_credentials")
    @classmethod
    def _check_secret(cls, value: str | None) -> str | None:
        if value is not None and (
            len(value) > MAX_TOKEN_CHARS or not value.isprintable() or not value.isascii()
        ):
            raise ValueError(f"a push token is printable ASCII of at most {MAX_TOKEN_CHARS} chars")
        return value or None

    @field_validator("auth_scheme")
    @classmethod
    def _check_scheme(cls, value: str | None) -> str | None:
        if value and not SCHEME.fullmatch(value):
            raise ValueError("an authentication scheme is a word of at most 32 characters")
        return value or None


class TaskSnapshot(BaseModel):
    """The task at one change of its state, as the run saw it: what a push tells."""

    seq: int = Field(description="The change's number in the task, from 1.")
    state: PushedState
    at: datetime
    asked: ApprovalRequest | QuestionRequest | None = Field(
        default=None, description="While input-required: the oldest request it asks."
    )
    status: str = Field(description="The run's status (a failed task's says why).")
    agent: str | None = None
    answer: str | None = None
    error: str | None = None

    def key(self) -> tuple[str, str | None]:
        """What tells one state from the next: the state, and what it asks."""
        asked = self.asked
        if asked is None:
            return self.state, None
        if isinstance(asked, ApprovalRequest):
            return self.state, asked.request_id
        return self.state, asked.question_id


class PushState(BaseModel):
    """A task run's push configurations, and what it pushed."""

    configs: list[PushConfig] = Field(default_factory=list)
    last: TaskSnapshot | None = Field(default=None, description="The latest state pushed.")
    sent: dict[str, int] = Field(
        default_factory=dict,
        description="By config id: the latest change whose push ended (sent, or given up).",
    )


class PushConfigChange(BaseModel):
    """The `push_config` Update: set a configuration (`config`), or delete one (`delete`)."""

    config: PushConfig | None = None
    delete: str | None = None


class PushConfigs(BaseModel):
    """The `push_config` Update's answer: the task's configurations after it."""

    configs: list[PushConfig]


class PostPush(BaseModel):
    """The `post_push` activity's input: one state of the task, to one configuration."""

    config: PushConfig
    task: TaskSnapshot
