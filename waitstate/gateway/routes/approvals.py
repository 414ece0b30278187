"""Decisions on approval requests: a person approves or rejects, through the token of the
request's links (a one-click link's token allows its own decision only).

    POST /v1/approvals/{request_id}/decision
    Authorization: Bearer <the approval link's token>
    {"decision": "approve", "reviewer": "ana", "comment": "ok"}
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Request, Security
from pydantic import Field

from waitstate.gateway.gate import Acceptance, Admitted, Credentials, GateDep
from waitstate.gateway.refusals import Refused
from waitstate.gateway.routes.replies import Reply
from waitstate.gateway.tokens import approval_subject
from waitstate.schemas.approvals import ApprovalStatus, DecisionBody

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
    decision = admitted.body.decision
    if admitted.claims.operation_id not in (
        approval_subject(request_id),
        approval_subject(request_id, decision),
    ):
        # A one-click link (approve, say) allows its own decision only.
        raise Refused(
            403,
            "decision_not_allowed",
            f"this link's token does not allow the decision {decision!r}",
        )
    return admitted


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
    return DecisionAccepted(request_id=request_id, approval_status=outcome.status)
