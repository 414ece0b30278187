"""Mid-flight input: the questions a running job asks (an MCP task in `input_required`, or a long
tool's job reporting `input_required` with questions), who answers them, and how the answer
reaches the job.

A question is known by the key its job minted for it; the run gives it an id of its own
(`question_id`), which people and the model answer by. Workflows import this module, so it
stays pydantic-only (questions and answers are checked by `waitstate.elicitation`).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from operator import attrgetter
from typing import Any, ClassVar, Generic, Literal, TypeVar

from pydantic import BaseModel, Field

# `refused`: the run would not ask it (its schema takes no answer); the job was told no.
QuestionStatus = Literal["open", "answered", "declined", "expired", "cancelled", "refused"]
AnswerAction = Literal["accept", "decline"]
Responder = Literal["person", "model"]
QuestionTimeout = Literal["decline", "cancel", "escalate"]
# What is kept of a job's question text and schema (the rest is the job's to keep).
MAX_MESSAGE_CHARS = 5_000


class Question(BaseModel):
    """One question a job asks, as it reports it (`Completion.questions`)."""

    key: str = Field(
        min_length=1, max_length=200, description="The job's id for the question; echoed back."
    )
    message: str = Field(max_length=MAX_MESSAGE_CHARS, description="What the job asks.")
    requested_schema: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}},
        description="JSON Schema of the answer's content, in the shape MCP elicitation allows: "
        "one object of plain fields (strings, numbers, booleans, choices among strings), no "
        "`$ref`, patterns RE2 accepts. A question with another schema is refused "
        "(`waitstate.elicitation.schema_problem` says why).",
    )


class QuestionPolicy(BaseModel):
    """Who answers a tool's questions, how long they wait, and what happens when nobody does.

    Declared by the operator per long tool (`LongSpec.input`) or per MCP server
    (`McpServer.input`), never by the model.
    """

    answered_by: Responder = Field(
        default="person", description="`person` (notice, link, CLI) or `model` (a built-in tool)."
    )
    timeout: timedelta = timedelta(hours=1)
    on_timeout: QuestionTimeout = Field(
        default="decline",
        description="`decline`: the job is told no answer is coming; `cancel`: the operation "
        "is cancelled; `escalate`: `escalate_to` is told and gets a second window, then decline.",
    )
    recipients: str = Field(default="operators", description="Who a person's question goes to.")
    escalate_to: str = Field(default="managers", description="Who is told when it escalates.")


class Answer(BaseModel):
    """An answer to a question, as the run records it."""

    action: AnswerAction
    content: dict[str, Any] | None = None
    responder: str = Field(default="unknown", max_length=200)
    answered_at: datetime | None = None
    by_policy: bool = Field(default=False, description="Applied by on_timeout, not by anyone.")


class PersonRequest(BaseModel):
    """A request to a person, as the run tracks it: one model for every kind. A question asks
    for an answer that fits its job's schema; an approval (`ApprovalRequest`) is a question
    whose answer is fixed, approve or reject with a comment.

    Each kind keeps its own fields, under the names runs' histories record (a base class with
    fields would reorder them); what every request is, pages, notices and desks read here.
    """

    # Each kind names what every request has: what it is called, and its fields' names.
    noun: ClassVar[str]
    _id_field: ClassVar[str]
    _opened_field: ClassVar[str]
    _recipients_field: ClassVar[str]

    @property
    def ref(self) -> str:
        """Its id in the run, which people answer by."""
        return str(getattr(self, self._id_field))

    @property
    def opened_at(self) -> datetime:
        """When the run asked it."""
        opened: datetime = getattr(self, self._opened_field)
        return opened

    @property
    def addressed_to(self) -> str:
        """Who its policy sends it to first."""
        return str(attrgetter(self._recipients_field)(self))


_Asked = TypeVar("_Asked", bound=PersonRequest)


class QuestionRequest(PersonRequest):
    """One question of one operation, as the run tracks it."""

    noun = "question"
    _id_field = "question_id"
    _opened_field = "asked_at"
    _recipients_field = "policy.recipients"

    question_id: str
    operation_id: str
    tool: str
    key: str
    message: str
    requested_schema: dict[str, Any] = Field(
        description="What the answer's content must fit (empty for a refused question: its "
        "`refusal` says what was wrong with the job's)."
    )
    asked_at: datetime
    expires_at: datetime
    policy: QuestionPolicy
    status: QuestionStatus = "open"
    escalated: bool = False
    sent_to: list[str] = Field(default_factory=list)
    told: list[str] = Field(default_factory=list, description="Who was sent its notice.")
    answer: Answer | None = None
    delivery: Literal["sending", "sent", "failed"] | None = Field(
        default=None, description="The answer's way to the job (`answer_operation` activity)."
    )
    delivery_error: str | None = None
    refusal: str | None = Field(
        default=None,
        description="Why the run refused the question when the job asked it (its schema takes "
        "no answer): the job was told no, with this reason.",
    )
    link_nonce: str | None = Field(
        default=None,
        description="The nonce the run chose for the link's token, kept so that a continued run "
        "mints the escalation's link with it. Not a secret (a token needs the key).",
    )
    nonce_hash: str | None = Field(default=None, description="Of the answer link's token.")

    @property
    def open(self) -> bool:
        """Still waiting for an answer."""
        return self.status == "open"

    def view(self) -> dict[str, Any]:
        """What the model sees of an open question."""
        return {
            "question_id": self.question_id,
            "message": self.message,
            "requested_schema": self.requested_schema,
            "answered_by": "you (answer_question)"
            if self.policy.answered_by == "model"
            else "a person",
            "expires_at": self.expires_at.isoformat(),
        }


class AnswerInput(BaseModel):
    """Payload of the run's `answer` Update (CLI and gateway): answered synchronously."""

    question_id: str
    action: AnswerAction
    content: dict[str, Any] | None = None
    responder: str = Field(default="unknown", max_length=200)
    nonce: str | None = Field(default=None, description="Set by the gateway from a link token.")
    delivery_id: str = Field(default="", description="Unique per request, to tell copies apart.")


class AnswerOutcome(BaseModel):
    """What the run did with an answer, once it reached the job (or failed to)."""

    accepted: bool
    status: QuestionStatus
    delivered: bool = False
    reason: str = ""
    delivery_id: str = ""


class AnswerBody(BaseModel):
    """Body of `POST /v1/questions/{question_id}/answer` (a question's link)."""

    action: AnswerAction
    content: dict[str, Any] | None = None
    responder: str = Field(default="unknown", max_length=200)


class PersonNotice(BaseModel, Generic[_Asked]):
    """Input of a notifying activity (`notify_approval`, `notify_input`): who to tell, about
    which request to a person."""

    workflow_id: str
    request: _Asked
    recipient: str
    escalation: bool = False
    nonce: str | None = Field(
        default=None,
        description="Chosen by the run for the request: every link token carries it, whichever "
        "key signs it. Not a secret (a token needs the key).",
    )
    links_expire_at: datetime | None = Field(
        default=None, description="The request's last deadline: its links are valid until then."
    )


class QuestionNotice(PersonNotice[QuestionRequest]):
    """Input of the `notify_input` activity: who to tell about which question."""

    links_expire_at: datetime  # every question's notice says it


class DeliverAnswer(BaseModel):
    """Input of the `answer_operation` activity: one answer, to the job that asked."""

    operation_id: str
    tool: str
    job_id: str
    key: str
    action: AnswerAction
    content: dict[str, Any] | None = None
    responder: str = "unknown"
    reason: str | None = Field(
        default=None, description="Why the run declined on its own (a question it refused)."
    )


class AnswerQuestionArgs(BaseModel):
    """Arguments of the built-in `answer_question` tool."""

    question_id: str = Field(description="The question_id of an operation's open question.")
    action: AnswerAction = Field(
        default="accept", description="`accept` with `content`, or `decline` to refuse."
    )
    content: dict[str, Any] | None = Field(
        default=None, description="The answer, matching the question's requested_schema."
    )


# The names before 1.0, when a question to a person was called input (README, Changelog). The
# wire keeps that word where runs record it: the `notify_input` activity, `WaitingFor` `input`,
# a long tool's `input` policy.
InputRequest = QuestionRequest
InputPolicy = QuestionPolicy
InputNotice = QuestionNotice
InputTimeout = QuestionTimeout
