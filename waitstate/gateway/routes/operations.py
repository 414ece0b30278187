"""Reports on long operations: an external system's callback, with the resume token the
operation's job was handed.

    POST /v1/operations/{operation_id}/complete
    Authorization: Bearer <resume token>
    {"status": "succeeded", "result": {...}}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated
from uuid import uuid4

from fastapi import APIRouter, Header, Request, Security
from pydantic import Field

from waitstate.elicitation import schema_problem
from waitstate.gateway.gate import Acceptance, Admitted, Credentials, GateDep, json_body
from waitstate.gateway.refusals import OUTCOME_UNKNOWN, Refused, error_responses
from waitstate.schemas.operations import Completion, OperationStatus

COMPLETE_PATH = "/v1/operations/{operation_id}/complete"
MAX_REPORT_ID_CHARS = 200

router = APIRouter()


class Accepted(Acceptance):
    """The run took the completion."""

    operation_id: str
    operation_status: OperationStatus = Field(
        description="The operation's status after the run applied the completion."
    )


# Parameters of `admitted_report`, not of the route: FastAPI checks a dependency's parameters
# before it runs it, so a malformed header is refused (422) before the body is read.
_WebhookId = Annotated[
    str | None,
    Header(
        alias="Webhook-Id",
        min_length=1,
        max_length=MAX_REPORT_ID_CHARS,
        description="The sender's id for this report, the same for its retries and copies.",
    ),
]
_IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=MAX_REPORT_ID_CHARS,
        description="Read when there is no Webhook-Id.",
    ),
]


@dataclass(frozen=True)
class Report:
    """A report the checks admitted, and the sender's id for it (kept by its copies)."""

    admitted: Admitted[Completion]
    report_id: str | None


async def admitted_report(
    operation_id: str,
    request: Request,
    credentials: Credentials,
    gate: GateDep,
    webhook_id: _WebhookId = None,
    idempotency_key: _IdempotencyKey = None,
) -> Report:
    """Dependency: the request's report on the operation, once it passed the gate's checks
    and asks no question an answer could not fit."""
    admitted = await gate.admit(
        request,
        credentials,
        subject=operation_id,
        kind="operation",
        model=Completion,
        invalid_code="invalid_completion",
    )
    for i, question in enumerate(admitted.body.questions or ()):
        # A question no answer could fit would reach the run only to be refused there:
        # the job is told now, and why.
        if problem := schema_problem(question.requested_schema):
            where = f"questions.{i} ({question.key!r}).requested_schema"
            raise Refused(422, "invalid_question", f"{where}: {problem}")
    return Report(admitted, webhook_id or idempotency_key)


@router.post(
    COMPLETE_PATH,
    response_model=Accepted,
    response_description="Accepted: the run applied the completion.",
    responses=error_responses(
        {
            401: "Missing, malformed or forged token, a token for another operation, or a "
            "nonce the run does not know.",
            404: "No such run, or the run has no such operation.",
            409: "Not applied: the operation is already resolved, expired or cancelled, "
            "this is a duplicate of a completion already applied, a progress report the "
            "operation already shows (`duplicate_report`), or the run has ended. "
            "Do not retry.",
            422: "The body is not JSON, or not a valid completion, or it asks a question "
            "whose `requested_schema` takes no answer (`invalid_question`: one flat object of "
            "plain fields, as MCP elicitation allows; no `$ref`; patterns RE2 accepts).",
            504: OUTCOME_UNKNOWN + " The `key` goes in the `Idempotency-Key` header.",
        }
    ),
    operation_id="complete_operation",
    summary="Report on a long operation",
    description="An external system reports progress on a job, or its result or failure. "
    "Copies of one report (retries, at-least-once delivery) are applied once; give each "
    "report a `Webhook-Id` (or `Idempotency-Key`) header that its copies keep, so that two "
    "progress reports with the same body are told apart from a copy.",
    openapi_extra=json_body(Completion),
)
async def complete(
    operation_id: str,
    report: Annotated[Report, Security(admitted_report)],
    gate: GateDep,
) -> Accepted:
    claims, completion = report.admitted.claims, report.admitted.body
    outcome = await gate.deliver(
        gate.deliverer.complete(
            claims, completion, delivery_id=uuid4().hex, report_id=report.report_id
        ),
        f"a completion of operation {operation_id!r}",
    )
    gate.delivered(
        "complete",
        "delivered %s completion of operation %s to run %s: now %s",
        completion.status,
        operation_id,
        claims.workflow_id,
        outcome.status,
    )
    return Accepted(operation_id=operation_id, operation_status=outcome.status)
