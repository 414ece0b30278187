"""Long-running operations: what the workflow keeps, what the gateway and activities exchange."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from waitstate.schemas.builtin import GET_OPERATION_STATUS
from waitstate.schemas.messages import Usage
from waitstate.schemas.questions import Question, QuestionPolicy

OperationStatus = Literal[
    "running", "input_required", "succeeded", "failed", "expired", "cancelled"
]
# Terminal statuses are absorbing: once reached, an operation never changes again.
TERMINAL_OPERATION_STATUSES: frozenset[str] = frozenset(
    {"succeeded", "failed", "expired", "cancelled"}
)
CompletionMode = Literal["callback", "poll"]
ResultMode = Literal["await", "handle"]
# Polls of a minute or more are one check per attempt, the retry policy being the poller, so
# no worker slot is held in between; shorter ones loop inside one heartbeating activity.
LONG_POLL_INTERVAL = timedelta(seconds=60)


class OperationError(BaseModel):
    """Why an operation failed, in terms the model can act on."""

    code: str = Field(min_length=1, max_length=200)
    message: str = Field(max_length=10_000)
    retryable: bool = False


def non_finite_at(value: Any, where: str = "") -> str | None:
    """Where `value` holds a number JSON cannot carry (`NaN`, `Infinity`, `-Infinity`), as a
    dotted path below `where` (`result.rows`); None if it holds none. Such a number would be
    stored as null: a result or report that has one is refused, never changed silently."""
    pending: list[tuple[str, Any]] = [(where, value)]
    while pending:
        at, item = pending.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return at or "(value)"
        if isinstance(item, dict):
            pending.extend((f"{at}.{key}".lstrip("."), child) for key, child in item.items())
        elif isinstance(item, list | tuple):
            pending.extend((f"{at}.{index}".lstrip("."), child) for index, child in enumerate(item))
    return None


class Completion(BaseModel):
    """An external system's report on a job: the webhook body, and what a poll returns.

    `running` and `input_required` are progress reports; the others end the operation.
    """

    status: Literal["running", "input_required", "succeeded", "failed"]
    result: Any = None
    result_ref: str | None = Field(default=None, max_length=2000)
    error: OperationError | None = None
    progress: str | None = Field(default=None, max_length=500, description="e.g. '40%'")
    questions: list[Question] | None = Field(
        default=None,
        max_length=20,
        description="With `input_required`: what the job asks, each under a key of its own.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> Completion:
        if self.questions and self.status != "input_required":
            raise ValueError("only an input_required report carries questions")
        if self.status == "failed" and self.error is None:
            raise ValueError("a failed completion needs an error {code, message, retryable}")
        if self.status != "failed" and self.error is not None:
            raise ValueError("only a failed completion carries an error")
        if self.result is not None and self.result_ref is not None:
            raise ValueError("send result or result_ref, not both")
        return self

    @classmethod
    def failed(cls, code: str, message: str, *, retryable: bool = False) -> Completion:
        """The report of a job that failed with `code`."""
        error = OperationError(code=code, message=message, retryable=retryable)
        return cls(status="failed", error=error)


class CompleteOperation(BaseModel):
    """The Update (or Signal) a gateway sends to the run that owns the operation."""

    operation_id: str
    nonce: str = Field(description="From the verified resume token; the workflow has its hash.")
    delivery_id: str = Field(description="Unique per HTTP request, to tell duplicates apart.")
    completion: Completion


class CompletionOutcome(BaseModel):
    """What the run did with a completion."""

    applied: bool
    status: OperationStatus
    delivery_id: str
    reason: str = ""


class CheckOperation(BaseModel):
    """The Update a gateway sends when the job's system said it ended without saying its
    result (an A2A status update `completed`, whose artifacts came apart): the run checks the
    job's status now, not at its next reconcile."""

    operation_id: str
    nonce: str = Field(description="From the verified resume token; the workflow has its hash.")


class CheckOutcome(BaseModel):
    """What the run did with a request to check an operation's job now."""

    operation_id: str
    checking: bool = Field(description="True: the job's status is being checked now.")
    reason: str = ""


class Operation(BaseModel):
    """A long tool's job, as the run tracks it."""

    operation_id: str
    tool: str
    tool_call_id: str
    turn: int
    completion: CompletionMode
    mode: ResultMode
    job_id: str
    status: OperationStatus = "running"
    started_at: datetime
    expires_at: datetime
    eta_seconds: int | None = None
    poll_interval_seconds: float = 5.0
    reconcile_seconds: float | None = Field(
        default=None,
        description="Callback: seconds between checks of the job's status, in case its webhook "
        "was lost (None: checked only before it would expire).",
    )
    nonce_hash: str | None = None
    progress: str | None = None
    result: Any = None
    result_ref: str | None = None
    error: OperationError | None = None
    resolved_at: datetime | None = None
    reported_status: OperationStatus | None = Field(
        default=None, description="The status the model was last told of."
    )
    reported_questions: list[str] = Field(
        default_factory=list,
        description="The open questions (ids) the model was last told of with that status.",
    )
    late_completions: int = Field(default=0, description="Completions refused after it ended.")
    input: QuestionPolicy | None = Field(
        default=None, description="Who answers the job's questions (the tool's policy)."
    )
    asking: list[dict[str, Any]] = Field(
        default_factory=list, description="The job's open questions, as the model sees them."
    )
    cancel: Literal["owed", "sent", "failed"] | None = Field(
        default=None,
        description="The cancel an expired or cancelled operation's job is owed: `owed` until "
        "the external system confirms it (a continued run sends it if it is still owed).",
    )

    @property
    def terminal(self) -> bool:
        """The operation has ended and never changes again."""
        return self.status in TERMINAL_OPERATION_STATUSES

    def handle(self) -> dict[str, Any]:
        """What the model sees while the operation runs."""
        return {
            "operation_id": self.operation_id,
            "tool": self.tool,
            "status": self.status,
            "eta_seconds": self.eta_seconds,
            "check_with": GET_OPERATION_STATUS,
        }

    def outcome(self) -> dict[str, Any]:
        """What the model sees once the operation changed state."""
        body: dict[str, Any] = {
            "operation_id": self.operation_id,
            "tool": self.tool,
            "status": self.status,
        }
        if self.progress:
            body["progress"] = self.progress
        if self.result is not None:
            body["result"] = self.result
        if self.result_ref is not None:
            body["result_ref"] = self.result_ref
        if self.error is not None:
            body["error"] = self.error.model_dump()
        if self.asking and not self.terminal:
            body["questions"] = self.asking
        return body


class OperationStarted(BaseModel):
    """A long tool's start activity accepted the job: how the run should wait for it."""

    job_id: str
    completion: CompletionMode
    mode: ResultMode
    expires_at: datetime
    eta_seconds: int | None = None
    poll_interval_seconds: float = 5.0
    reconcile_seconds: float | None = Field(
        default=None,
        description="Callback: seconds between checks of the job's status, in case its webhook "
        "was lost (the tool's `reconcile_every`; None: checked only before it would expire).",
    )
    nonce_hash: str | None = Field(default=None, description="Callback only; never the token.")
    input: QuestionPolicy | None = Field(
        default=None, description="Who answers the job's questions, if it asks any."
    )


class PollOperationInput(BaseModel):
    """Input of the `poll_operation` activity."""

    operation_id: str
    tool: str
    job_id: str
    poll_interval_seconds: float
    once: bool = Field(
        default=False,
        description="One check per attempt, whatever the interval: a job still running is a "
        "retryable error, the retry policy being the checker (a callback operation's checks "
        "in case its webhook was lost, and the check before an operation expires).",
    )
    known_questions: list[str] | None = Field(
        default=None,
        description="Runs that take questions: the poll returns when the job asks one whose "
        "key is not among these (None: it polls on through `input_required`).",
    )
    model: str | None = Field(
        default=None,
        description="The run's model (`provider:model`): it answers an MCP server's sampling "
        "requests, where the server's policy allows it.",
    )


class PolledCompletion(Completion):
    """What a poll returns: the job's report, and what the run's model spent answering the
    job's own requests meanwhile (an MCP server's sampling), for the run's usage. Never a
    webhook's body: a report from outside says nothing of the run's spending."""

    usage: Usage | None = None


@dataclass(frozen=True)
class PollHeartbeat:
    """What the `poll_operation` activity heartbeats after each check, in this order: the
    checks made so far (a worker that takes the poll over counts on from there), the job's
    status, its progress, and the job's id. Readers (`status`, `watch`) find a job's latest
    progress there, at no cost to the run's history."""

    polls: int
    status: str
    progress: str | None
    job_id: str

    def details(self) -> tuple[int, str, str | None, str]:
        """The heartbeat's details, positionally (older readers take `polls` first)."""
        return (self.polls, self.status, self.progress, self.job_id)

    @classmethod
    def read(cls, values: Sequence[Any], max_chars: int = 500) -> PollHeartbeat | None:
        """A heartbeat's details as sent (a job id of "" when a worker sent none, as workers
        did before it was sent), its progress cut to `max_chars`; None if they are not a
        poll's."""
        if len(values) < 3 or not isinstance(values[0], int) or not isinstance(values[1], str):
            return None
        progress = values[2] if isinstance(values[2], str) and values[2] else None
        job_id = values[3] if len(values) > 3 and isinstance(values[3], str) else ""
        return cls(values[0], values[1], progress[:max_chars] if progress else None, job_id)


class CancelOperationInput(BaseModel):
    """Input of the `cancel_operation` activity."""

    operation_id: str
    tool: str
    job_id: str
    reason: Literal["expired", "cancelled"]
