"""Answers to the questions operations' jobs ask: a person answers (or declines to), through the
token of the question's link; the gateway replies once the run has handed the answer to the job.

    POST /v1/questions/{question_id}/answer
    Authorization: Bearer <the question link's token>
    {"action": "accept", "content": {"region": "EMEA"}, "responder": "ana"}

The question page (routes/pages.py) delivers a person's answer through `apply_answer` too.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Request, Security
from pydantic import Field

from waitstate.auth.tokens import question_subject
from waitstate.gateway.gate import Acceptance, Admitted, Credentials, Gate, GateDep
from waitstate.gateway.refusals import OUTCOME_UNKNOWN
from waitstate.gateway.routes.replies import Reply
from waitstate.schemas.questions import AnswerBody, AnswerOutcome, QuestionStatus

ANSWER_PATH = "/v1/questions/{question_id}/answer"
ANSWERS = Reply(
    model=AnswerBody,
    kind="question",
    endpoint="answer",
    delivering="an answer to question {!r}",
)

router = APIRouter()


class AnswerAccepted(Acceptance):
    """The run took the answer, and handed it to the job that asked."""

    question_id: str
    question_status: QuestionStatus = Field(
        description="The question's status after the run applied the answer: `answered` or "
        "`declined`."
    )
    delivered: bool = Field(description="Whether the job that asked took the answer.")
    reason: str = Field(default="", description="Why the job did not take it, if it did not.")


async def admitted_answer(
    question_id: str, request: Request, credentials: Credentials, gate: GateDep
) -> Admitted[AnswerBody]:
    """Dependency: the request's answer, once it passed the gate's checks with the token of
    the question's link."""
    return await ANSWERS.admit(gate, request, credentials, question_subject(question_id))


@ANSWERS.route(
    router,
    ANSWER_PATH,
    accepted=AnswerAccepted,
    response_description="Accepted: the run applied the answer and handed it to the job; "
    "`delivered` says whether the job took it.",
    errors={
        401: "Missing, malformed or forged token, a token for another question, or a "
        "nonce the run does not know.",
        403: "The tool's policy gives this question to the model, not to a person.",
        404: "No such run, or the run has no such question.",
        409: "Not applied: the question is already answered, declined, expired or "
        "cancelled (by another answer), or the run has ended. Do not retry.",
        422: "The body is not JSON, or not a valid answer: an `accept` carries content "
        "matching the question's `requested_schema`, a `decline` none.",
        504: OUTCOME_UNKNOWN + " The same answer is the key: send it again as it was.",
    },
    operation_id="answer_question",
    summary="Answer an operation's question",
    description="A person answers a question a long operation's job asked (or declines "
    "to), through the token of the question's link. The gateway replies once the run has "
    "handed the answer to the job: `delivered` says whether the job took it. Copies of an "
    "answer (a link used twice, a retry with the same body) are applied once and get its "
    "outcome.",
)
async def answer(
    question_id: str,
    admitted: Annotated[Admitted[AnswerBody], Security(admitted_answer)],
    gate: GateDep,
) -> AnswerAccepted:
    outcome = await apply_answer(gate, question_id, admitted)
    return AnswerAccepted(
        question_id=question_id,
        question_status=outcome.status,
        delivered=outcome.delivered,
        reason=outcome.reason,
    )


async def apply_answer(
    gate: Gate, question_id: str, admitted: Admitted[AnswerBody]
) -> AnswerOutcome:
    """The run's outcome of an admitted answer to question `question_id`, once the job that
    asked has it (or refused it), delivered, logged and counted.

    Raises:
        Refused: the run refused it, or did not apply it (see `Reply.apply`).
        Failed: the deliverer failed (a bug).
    """
    outcome = await ANSWERS.apply(gate, gate.deliverer.answer, question_id, admitted)
    ANSWERS.delivered(
        gate,
        "delivered %s by %r to question %s of run %s: now %s, %s",
        admitted.body.action,
        admitted.body.responder,
        question_id,
        admitted.claims.workflow_id,
        outcome.status,
        "the job has it" if outcome.delivered else f"the job refused it: {outcome.reason}",
    )
    return outcome
