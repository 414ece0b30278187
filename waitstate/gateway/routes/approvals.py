"""Decisions on approval requests: a person approves or rejects, through the token of the
request's links (a one-click link's token allows its own decision only).

    POST /v1/approvals/{request_id}/decision
    Authorization: Bearer <the approval link's token>
    {"decision": "approve", "reviewer": "ana", "comment": "ok"}

The approval page (routes/pages.py) applies a person's decision through `decision_allowed` and
`apply_decision` too: one path from a verified token to the run, whatever sent the decision.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Request, Security
from pydantic import Field

from waitstate.auth.tokens import ResumeClaims, approval_subject
from waitstate.gateway.gate import Acceptance, Admitted, Credentials, Gate, GateDep
from waitstate.gateway.refusals import OUTCOME_UNKNOWN, Refused
from waitstate.gateway.routes.replies import Reply
from waitstate.schemas.approvals import ApprovalStatus, DecideOutcome, DecisionBody, DecisionKind

DECISION_PATH = "/v1/approvals/{request_id}/decision"
DECISIONS = Reply(
    model=DecisionBody,
    kind="request",
    endpoint="decision",
    delivering="a decision on request {!r}",
)

router = APIRouter()


class DecisionAccepted(Acceptance):
    """The run took the decision."""

    request_id: str
    approval_status: ApprovalStatus = Field(
        description="The request's status after the run applied the decision."
    )


async def admitted_decision(
    request_id: str, request: Request, credentials: Credentials, gate: GateDep
) -> Admitted[DecisionBody]:
    """Dependency: the request's decision, once it passed the gate's checks with a token
    of the request's links that allows it."""
    links = frozenset(approval_subject(request_id, kind) for kind in (None, "approve", "reject"))
    admitted = await DECISIONS.admit(gate, request, credentials, links)
    decision_allowed(request_id, admitted.claims, admitted.body.decision)
    return admitted


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
    outcome = await DECISIONS.apply(gate, gate.deliverer.decide, request_id, admitted)
    DECISIONS.delivered(
        gate,
        "delivered %s by %r on request %s to run %s: now %s",
        admitted.body.decision,
        admitted.body.reviewer,
        request_id,
        admitted.claims.workflow_id,
        outcome.status,
    )
    return outcome


@DECISIONS.route(
    router,
    DECISION_PATH,
    accepted=DecisionAccepted,
    response_description="Accepted: the run applied the decision.",
    errors={
        401: "Missing, malformed or forged token, a token for another request, or a "
        "nonce the run does not know.",
        403: "The token is a one-click link's, for the other decision.",
        404: "No such run, or the run has no such approval request.",
        409: "Not applied: the request is already decided or has expired, this is a "
        "duplicate of a decision already applied, or the run has ended. Do not retry.",
        422: "The body is not JSON, or not a valid decision.",
        504: OUTCOME_UNKNOWN + " The same decision is the key: send it again as it was.",
    },
    operation_id="decide_approval",
    summary="Decide on an approval request",
    description="A person approves or rejects what a run asked to do, through the token "
    "of the request's links.",
)
async def decide(
    request_id: str,
    admitted: Annotated[Admitted[DecisionBody], Security(admitted_decision)],
    gate: GateDep,
) -> DecisionAccepted:
    outcome = await apply_decision(gate, request_id, admitted)
    return DecisionAccepted(request_id=request_id, approval_status=outcome.status)
