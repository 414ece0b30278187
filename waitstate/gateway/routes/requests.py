"""The routes of a person's reply to a request: a decision on an approval request, and an answer
to an operation's question, each sent through the token of its link. One family, as the request
is one model: an approval is a question whose answer is fixed (approve or reject, with a
comment), so its route differs only in its body, its path, and the one-click links' check.

    POST /v1/approvals/{request_id}/decision
    Authorization: Bearer <the approval link's token>
    {"decision": "approve", "reviewer": "ana", "comment": "ok"}

    POST /v1/questions/{question_id}/answer
    Authorization: Bearer <the question link's token>
    {"action": "accept", "content": {"region": "EMEA"}, "responder": "ana"}

An answer's reply comes once the run has handed it to the job that asked. The pages
(routes/pages.py) apply a person's reply through `apply_decision` and `apply_answer` too: one
path from a verified token to the run, whatever sent it.

Each route declares its `Reply` (its body, what it replies to, and how refusals, logs and counts
name it) and keeps only what differs: its path and documentation, its own checks, and what it
answers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Generic, Protocol, TypeVar

from fastapi import APIRouter, Request, Security
from fastapi.security import HTTPAuthorizationCredentials
from pydantic import BaseModel, Field

from waitstate.auth.tokens import ResumeClaims, approval_subject, question_subject
from waitstate.gateway.gate import Acceptance, Admitted, Credentials, Gate, GateDep, json_body
from waitstate.gateway.refusals import OUTCOME_UNKNOWN, Refused, error_responses
from waitstate.schemas.approvals import ApprovalStatus, DecideOutcome, DecisionBody, DecisionKind
from waitstate.schemas.questions import AnswerBody, AnswerOutcome, QuestionStatus

_Body = TypeVar("_Body", bound=BaseModel)
_Endpoint = TypeVar("_Endpoint", bound=Callable[..., Any])


class _RunVerdict(Protocol):
    @property
    def accepted(self) -> bool: ...
    @property
    def status(self) -> str: ...
    @property
    def reason(self) -> str: ...


_Verdict = TypeVar("_Verdict", bound=_RunVerdict)


@dataclass(frozen=True)
class Reply(Generic[_Body]):
    """A family of replies a person sends through a link.

    Attributes:
        model: The body's model.
        kind: What a reply is to (`request`, `question`), as refusals name it: a token for
            another one is `wrong_<kind>`, and one no longer open is "the <kind> is <status>".
        endpoint: What a reply is (`decision`, `answer`): the label of the count of the
            replies the runs took, and in `invalid_<endpoint>`, the code of a refusal of a JSON
            body that is not a valid `model`.
        delivering: How the log of a failed delivery names one reply, formatted with the id
            of what it replies to (`"a decision on request {!r}"`).
    """

    model: type[_Body]
    kind: str
    endpoint: str
    delivering: str

    @property
    def invalid_code(self) -> str:
        """The code of a refusal of a JSON body that is not a valid `model`."""
        return f"invalid_{self.endpoint}"

    def route(
        self,
        router: APIRouter,
        path: str,
        *,
        accepted: type[Acceptance],
        response_description: str,
        errors: Mapping[int, str],
        operation_id: str,
        summary: str,
        description: str,
    ) -> Callable[[_Endpoint], _Endpoint]:
        """`router.post` for the reply's route, documented with the body `admit` reads (FastAPI
        does not read it) and the route's own refusals beside every route's."""
        return router.post(
            path,
            response_model=accepted,
            response_description=response_description,
            responses=error_responses(errors),
            operation_id=operation_id,
            summary=summary,
            description=description,
            openapi_extra=json_body(self.model),
        )

    async def admit(
        self,
        gate: Gate,
        request: Request,
        credentials: HTTPAuthorizationCredentials | None,
        subject: str | frozenset[str],
    ) -> Admitted[_Body]:
        """The request's reply, once it passed the gate's checks with a token for `subject`
        (or one of them)."""
        return await gate.admit(
            request,
            credentials,
            subject=subject,
            kind=self.kind,
            model=self.model,
            invalid_code=self.invalid_code,
        )

    async def apply(
        self,
        gate: Gate,
        send: Callable[[ResumeClaims, str, _Body], Awaitable[_Verdict]],
        reply_to: str,
        admitted: Admitted[_Body],
    ) -> _Verdict:
        """The run's outcome of the `admitted` reply to `reply_to`, delivered with `send` (the
        deliverer's method for such replies).

        Raises:
            Refused: the run refused it or could not be reached (see `Gate.deliver`), or 409
                `not_accepted`: the run recorded it without applying it, as what it replies
                to was no longer open, so retrying cannot help.
            Failed: the deliverer failed (a bug).
        """
        delivery = send(admitted.claims, reply_to, admitted.body)
        outcome = await gate.deliver(delivery, self.delivering.format(reply_to))
        if not outcome.accepted:
            message = outcome.reason or f"the {self.kind} is {outcome.status}"
            raise Refused(409, "not_accepted", message)
        return outcome

    def delivered(self, gate: Gate, message: str, *args: object) -> None:
        """Log a reply the run took (`message % args`) and count it."""
        gate.delivered(self.endpoint, message, *args)


def _errors(asked: str, reply: str, **own: str) -> dict[int, str]:
    """A reply route's refusals, documented: what every one says of the `asked` (`approval
    request`) it replies to and of its `reply` (`decision`), and its `own` (`403`, `409`, `422`)."""
    token_for = asked.rpartition(" ")[2]
    return {
        401: f"Missing, malformed or forged token, a token for another {token_for}, or a "
        "nonce the run does not know.",
        403: own["forbidden"],
        404: f"No such run, or the run has no such {asked}.",
        409: own["conflict"],
        422: own["invalid"],
        504: OUTCOME_UNKNOWN + f" The same {reply} is the key: send it again as it was.",
    }


DECISION_PATH = "/v1/approvals/{request_id}/decision"
ANSWER_PATH = "/v1/questions/{question_id}/answer"
DECISIONS = Reply(DecisionBody, "request", "decision", "a decision on request {!r}")
ANSWERS = Reply(AnswerBody, "question", "answer", "an answer to question {!r}")

router = APIRouter()


class DecisionAccepted(Acceptance):
    """The run took the decision."""

    request_id: str
    approval_status: ApprovalStatus = Field(
        description="The request's status after the run applied the decision."
    )


class AnswerAccepted(Acceptance):
    """The run took the answer, and handed it to the job that asked."""

    question_id: str
    question_status: QuestionStatus = Field(
        description="The question's status after the run applied the answer: `answered` or "
        "`declined`."
    )
    delivered: bool = Field(description="Whether the job that asked took the answer.")
    reason: str = Field(default="", description="Why the job did not take it, if it did not.")


async def admitted_decision(
    request_id: str, request: Request, credentials: Credentials, gate: GateDep
) -> Admitted[DecisionBody]:
    """Dependency: the request's decision, once it passed the gate's checks with a token
    of the request's links that allows it."""
    links = frozenset(approval_subject(request_id, kind) for kind in (None, "approve", "reject"))
    admitted = await DECISIONS.admit(gate, request, credentials, links)
    decision_allowed(request_id, admitted.claims, admitted.body.decision)
    return admitted


async def admitted_answer(
    question_id: str, request: Request, credentials: Credentials, gate: GateDep
) -> Admitted[AnswerBody]:
    """Dependency: the request's answer, once it passed the gate's checks with the token of
    the question's link."""
    return await ANSWERS.admit(gate, request, credentials, question_subject(question_id))


# A route's body, once the gate admitted it (see `admitted_decision`, `admitted_answer`).
AdmittedDecision = Annotated[Admitted[DecisionBody], Security(admitted_decision)]
AdmittedAnswer = Annotated[Admitted[AnswerBody], Security(admitted_answer)]


def decision_allowed(request_id: str, claims: ResumeClaims, decision: DecisionKind) -> None:
    """Check that a token of the request's links allows `decision`: the form's token allows
    either, a one-click link's (approve, say) its own decision only.

    Raises:
        Refused: 403 `decision_not_allowed`.
    """
    if claims.operation_id not in (
        approval_subject(request_id),
        approval_subject(request_id, decision),
    ):
        raise Refused(
            403,
            "decision_not_allowed",
            f"this link's token does not allow the decision {decision!r}",
        )


async def apply_decision(
    gate: Gate, request_id: str, admitted: Admitted[DecisionBody]
) -> DecideOutcome:
    """The run's outcome of an admitted decision on request `request_id`, delivered, logged and
    counted.

    Raises:
        Refused: the run refused it, or did not apply it (see `Reply.apply`).
        Failed: the deliverer failed (a bug).
    """
    body, run = admitted.body, admitted.claims.workflow_id
    outcome = await DECISIONS.apply(gate, gate.deliverer.decide, request_id, admitted)
    said = "delivered %s by %r on request %s to run %s: now %s"
    DECISIONS.delivered(gate, said, body.decision, body.reviewer, request_id, run, outcome.status)
    return outcome


async def apply_answer(
    gate: Gate, question_id: str, admitted: Admitted[AnswerBody]
) -> AnswerOutcome:
    """The run's outcome of an admitted answer to question `question_id`, once the job that
    asked has it (or refused it), delivered, logged and counted.

    Raises:
        Refused: the run refused it, or did not apply it (see `Reply.apply`).
        Failed: the deliverer failed (a bug).
    """
    body, run = admitted.body, admitted.claims.workflow_id
    outcome = await ANSWERS.apply(gate, gate.deliverer.answer, question_id, admitted)
    job = "the job has it" if outcome.delivered else f"the job refused it: {outcome.reason}"
    said = "delivered %s by %r to question %s of run %s: now %s, %s"
    ANSWERS.delivered(
        gate, said, body.action, body.responder, question_id, run, outcome.status, job
    )
    return outcome


@DECISIONS.route(
    router,
    DECISION_PATH,
    accepted=DecisionAccepted,
    response_description="Accepted: the run applied the decision.",
    errors=_errors(
        "approval request",
        "decision",
        forbidden="The token is a one-click link's, for the other decision.",
        conflict="Not applied: the request is already decided or has expired, this is a "
        "duplicate of a decision already applied, or the run has ended. Do not retry.",
        invalid="The body is not JSON, or not a valid decision.",
    ),
    operation_id="decide_approval",
    summary="Decide on an approval request",
    description="A person approves or rejects what a run asked to do, through the token "
    "of the request's links.",
)
async def decide(request_id: str, admitted: AdmittedDecision, gate: GateDep) -> DecisionAccepted:
    outcome = await apply_decision(gate, request_id, admitted)
    return DecisionAccepted(request_id=request_id, approval_status=outcome.status)


@ANSWERS.route(
    router,
    ANSWER_PATH,
    accepted=AnswerAccepted,
    response_description="Accepted: the run applied the answer and handed it to the job; "
    "`delivered` says whether the job took it.",
    errors=_errors(
        "question",
        "answer",
        forbidden="The tool's policy gives this question to the model, not to a person.",
        conflict="Not applied: the question is already answered, declined, expired or "
        "cancelled (by another answer), or the run has ended. Do not retry.",
        invalid="The body is not JSON, or not a valid answer: an `accept` carries content "
        "matching the question's `requested_schema`, a `decline` none.",
    ),
    operation_id="answer_question",
    summary="Answer an operation's question",
    description="A person answers a question a long operation's job asked (or declines "
    "to), through the token of the question's link. The gateway replies once the run has "
    "handed the answer to the job: `delivered` says whether the job took it. Copies of an "
    "answer (a link used twice, a retry with the same body) are applied once and get its "
    "outcome.",
)
async def answer(question_id: str, admitted: AdmittedAnswer, gate: GateDep) -> AnswerAccepted:
    outcome = await apply_answer(gate, question_id, admitted)
    return AnswerAccepted(
        question_id=question_id,
        question_status=outcome.status,
        delivered=outcome.delivered,
        reason=outcome.reason,
    )
