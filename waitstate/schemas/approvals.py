"""Human approval: requests a run sends to people, and the decisions they send back."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, Field

from waitstate.schemas.questions import PersonNotice, PersonRequest

OnTimeout = Literal["escalate", "default", "fail"]
DecisionKind = Literal["approve", "reject"]
ApprovalStatus = Literal["pending", "approved", "rejected", "expired"]


class ApprovalPolicy(BaseModel):
    """How long a request waits for a person, and what happens when nobody answers."""

    timeout: timedelta = timedelta(hours=24)
    on_timeout: OnTimeout = "fail"
    default_decision: DecisionKind = Field(
        default="reject", description="Applied when on_timeout is `default`."
    )
    approvers: str = Field(default="approvers", description="Who the request is sent to.")
    escalate_to: str = Field(default="managers", description="Who is told when it escalates.")


class ApprovalNeeded(BaseModel):
    """A gated tool's arguments were valid, but the call needs a person's approval first."""

    reason: str
    policy: ApprovalPolicy


class Decision(BaseModel):
    """A person's decision (or the timeout policy's), as the run records it."""

    decision: DecisionKind
    reviewer: str = Field(default="unknown", max_length=200)
    comment: str = Field(default="", max_length=5000, description="Comment, or reason to reject.")
    decided_at: datetime | None = None
    by_policy: bool = Field(default=False, description="Applied by on_timeout `default`.")


class DecisionSignal(BaseModel):
    """Payload of the `approve` and `reject` signals."""

    request_id: str
    reviewer: str = Field(default="unknown", max_length=200)
    comment: str = Field(default="", max_length=5000)


class DecideInput(BaseModel):
    """Payload of the `decide` Update (CLI and gateway): answered synchronously."""

    request_id: str
    decision: DecisionKind
    reviewer: str = Field(default="unknown", max_length=200)
    comment: str = Field(default="", max_length=5000)
    nonce: str | None = Field(default=None, description="Set by the gateway from a link token.")
    delivery_id: str = Field(
        default="", description="Unique per gateway request, to tell duplicates apart."
    )


class DecideOutcome(BaseModel):
    """What the run did with a decision."""

    accepted: bool
    status: ApprovalStatus
    reason: str = ""
    delivery_id: str = Field(default="", description="Of the decision the run applied.")


class ApprovalRequest(PersonRequest):
    """One request for a person's decision, as the run tracks it: a question whose answer is
    fixed (`Decision`: approve or reject, with a comment)."""

    noun = "approval"
    _id_field = "request_id"
    _opened_field = "requested_at"
    _recipients_field = "policy.approvers"

    request_id: str
    tool: str
    tool_call_id: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    reason: str
    requested_at: datetime
    expires_at: datetime
    policy: ApprovalPolicy
    sent_to: list[str] = Field(default_factory=list)
    escalated: bool = False
    status: ApprovalStatus = "pending"
    decision: Decision | None = None
    nonce_hash: str | None = Field(default=None, description="Of the approval links' token.")
    ignored: list[str] = Field(
        default_factory=list, description="Decisions that arrived and were not applied, and why."
    )

    @property
    def open(self) -> bool:
        """Still waiting for a decision."""
        return self.status == "pending"


class ApprovalNotice(PersonNotice[ApprovalRequest]):
    """Input of the `notify_approval` activity: who to tell, about what."""


class ApprovalNoticeSent(BaseModel):
    """What `notify_approval` returns: the nonce hash of the links' token (never the token)."""

    nonce_hash: str
    decision_url: str


class DecisionBody(BaseModel):
    """Body of `POST /v1/approvals/{request_id}/decision` (an approval link)."""

    decision: DecisionKind
    reviewer: str = Field(default="unknown", max_length=200)
    comment: str = Field(default="", max_length=5000)
