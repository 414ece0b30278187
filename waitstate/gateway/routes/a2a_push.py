"""A remote A2A agent's pushes about the task a long tool's operation follows (`A2AAgent`): the
push config the operation's start sent names this URL and the operation's resume token, which
the agent's sender sends back as `Authorization: Bearer <token>` (or, from a config's legacy
`token`, in `X-A2A-Notification-Token`).

    POST /v1/operations/{operation_id}/a2a
    Authorization: Bearer <resume token>
    {"task": {"id": "...", "status": {"state": "TASK_STATE_COMPLETED"}, "artifacts": [...]}}

Checked as the complete endpoint checks a webhook (size, token, body), then read as the task's
state (`waitstate.schemas.a2a_tasks`: the same mapping as the tool's status check) and delivered
as the operation's report, once: a copy is refused as the complete endpoint refuses one. A
status update saying `completed` does not carry the task's artifacts (the official SDKs push
each event: the artifacts came apart, before it): the run is asked to check the task now
(`GetTask`, its status check), and the push is answered 202 `checking`. A push that says
nothing the run can take (an artifact update, a message) is answered 202 and changes nothing.
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Literal
from uuid import uuid4

from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials
from pydantic import BaseModel, Field

from waitstate.gateway.gate import Credentials, GateDep, json_body
from waitstate.gateway.refusals import OUTCOME_UNKNOWN, error_responses
from waitstate.gateway.routes.operations import Accepted
from waitstate.schemas.a2a_tasks import (
    PUSH_PATH,
    TOKEN_HEADER,
    A2APush,
    ended_without_artifacts,
    push_report,
)

router = APIRouter()


class Read(BaseModel):
    """The push was read: it says nothing the run can take (`ignored`, nothing changed), or
    that the task ended without its artifacts (`checking`: the run reads the task now)."""

    status: Literal["ignored", "checking"]
    operation_id: str
    reason: str = Field(description="What the push says, and what became of it.")


_Token = Annotated[
    str | None,
    Header(alias=TOKEN_HEADER, min_length=1, max_length=4_000, description="The resume token, "
           "from a push config's `token`, when no Authorization header carries it."),
]  # fmt: skip


@router.post(
    PUSH_PATH,
    response_model=Accepted,
    response_description="Accepted: the run applied the task's state to the operation.",
    responses={
        202: {
            "model": Read,
            "description": "Read: it says nothing the run can take, or the run checks the "
            "task now.",
        },
        **error_responses(
            {
                401: "Missing, malformed or forged token, or a token for another operation.",
                404: "No such run, or the run has no such operation.",
                409: "Not applied: the operation has ended, or this push is a copy of one "
                "applied. Do not retry.",
                422: "The body is not JSON, or not an A2A push (one StreamResponse, or a task).",
                504: OUTCOME_UNKNOWN,
            }
        ),
    },
    operation_id="a2a_push",
    summary="A remote A2A agent's push about an operation's task",
    description="A remote A2A agent, called as a long tool, pushes a change of the task the "
    "operation follows; the run applies the task's state once. A completed status without the "
    "task's artifacts has the run read the task now; a push that carries nothing the run can "
    "take is answered 202.",
    openapi_extra=json_body(A2APush),
)
async def a2a_push(
    operation_id: str,
    request: Request,
    credentials: Credentials,
    gate: GateDep,
    token: _Token = None,
) -> Accepted | JSONResponse:
    if credentials is None and token is not None:
        credentials = HTTPAuthorizationCredentials(scheme="Bearer", credentials=token)
    admitted = await gate.admit(
        request,
        credentials,
        subject=operation_id,
        kind="operation",
        model=A2APush,
        invalid_code="invalid_push",
    )
    report, reason = push_report(admitted.body)
    claims = admitted.claims
    if report is None and ended_without_artifacts(admitted.body):
        # Copies of one push (its sender's retries) are one ask: it is known by its bytes, so
        # a later push (its timestamp another) asks again, up to the run's bound.
        push_id = "a2a-" + hashlib.sha256(admitted.raw).hexdigest()[:32]
        asked = await gate.deliver(
            gate.deliverer.check(claims, push_id),
            f"an A2A push about operation {operation_id!r}",
        )
        gate.delivered(
            "a2a_push",
            "an A2A push said operation %s's task completed, without its artifacts: run %s "
            "checks it now",
            operation_id,
            claims.workflow_id,
        )
        read = Read(status="checking", operation_id=asked.operation_id, reason=reason)
        return JSONResponse(read.model_dump(), status_code=202)
    if report is None:
        read = Read(status="ignored", operation_id=operation_id, reason=reason)
        return JSONResponse(read.model_dump(), status_code=202)
    # Copies of one push (the sender's retries) are one report, and two pushes alike say one
    # thing: the report is known by what it says.
    said = report.model_dump_json().encode()
    report_id = "a2a-" + hashlib.sha256(said).hexdigest()[:32]
    outcome = await gate.deliver(
        gate.deliverer.complete(claims, report, delivery_id=uuid4().hex, report_id=report_id),
        f"an A2A push about operation {operation_id!r}",
    )
    gate.delivered(
        "a2a_push",
        "delivered an A2A push (%s) about operation %s to run %s: now %s",
        report.status,
        operation_id,
        claims.workflow_id,
        outcome.status,
    )
    return Accepted(operation_id=operation_id, operation_status=outcome.status)
