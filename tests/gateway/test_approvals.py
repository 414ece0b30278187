"""Approval links, fast and against stand-ins: the decision endpoint over real HTTP with a
recording deliverer, and `TemporalDeliverer.decide` with a fake workflow handle.

What these prove about runs is proved again against real runs, through the real deliverer, in
`test_real_server.py`. Proved here alone: the answers to outcomes no run gives today (a
decision recorded but not applied, a refusal of no known type, a run ending mid-Update) and
the retries of a decision through a link its run has not confirmed yet.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from temporalio.client import (
    Client,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from tests.helpers import assert_error
from tests.rigs import MAX_BODY, RUN, Gateway, running_gateway
from waitstate.gateway import delivery
from waitstate.gateway.delivery import DeliveryRefused, TemporalDeliverer
from waitstate.gateway.tokens import ResumeClaims, approval_subject
from waitstate.names import DECIDE_UPDATE
from waitstate.schemas.approvals import DecideInput, DecideOutcome, DecisionBody
from waitstate.schemas.errors import (
    APPROVAL_DECIDED,
    APPROVAL_NONCE_MISMATCH,
    APPROVAL_NOT_READY,
    APPROVAL_UNKNOWN,
)

REQUEST = "apr_1"
URL = f"/v1/approvals/{REQUEST}/decision"
APPROVE = {"decision": "approve", "reviewer": "ana", "comment": "fine by me"}


@pytest.fixture(scope="module")
async def served() -> AsyncIterator[Gateway]:
    async with running_gateway(approval_subject(REQUEST)) as gateway:
        yield gateway


def test_approval_subject_cannot_be_an_operation_id() -> None:
    assert approval_subject(REQUEST) == f"approval/{REQUEST}"
    assert "/" in approval_subject(REQUEST)


async def test_decision_is_delivered_once_with_its_claims(gw: Gateway) -> None:
    response = await gw.client.post(URL, json=APPROVE, headers=gw.auth())

    assert response.status_code == 200, response.text
    assert response.json() == {
        "status": "accepted",
        "request_id": REQUEST,
        "approval_status": "approved",
    }
    [(claims, request_id, body)] = gw.deliverer.decisions
    assert (claims.workflow_id, claims.operation_id, claims.key_id) == (
        RUN,
        f"approval/{REQUEST}",
        "k1",
    )
    assert claims.nonce
    assert request_id == REQUEST
    assert body == DecisionBody(decision="approve", reviewer="ana", comment="fine by me")
    assert gw.deliverer.calls == []


async def test_rejection_with_defaults(gw: Gateway) -> None:
    response = await gw.client.post(URL, json={"decision": "reject"}, headers=gw.auth())

    assert response.json()["approval_status"] == "rejected"
    [(_, _, body)] = gw.deliverer.decisions
    assert body == DecisionBody(decision="reject", reviewer="unknown", comment="")


async def test_each_use_of_a_link_reaches_the_run(gw: Gateway) -> None:
    # The gateway does not deduplicate decisions: the run says whether one is already taken.
    gw.deliverer.script.append(DecideOutcome(accepted=True, status="approved"))
    gw.deliverer.script.append(
        DeliveryRefused(409, "request already approved", code="approval_decided")
    )

    first = await gw.client.post(URL, json=APPROVE, headers=gw.auth())
    second = await gw.client.post(URL, json=APPROVE, headers=gw.auth())

    assert first.status_code == 200
    assert assert_error(second, 409, "approval_decided") == "request already approved"
    assert len(gw.deliverer.decisions) == 2


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def forged(gw: Gateway) -> dict[str, str]:
    token = gw.token()
    return bearer(token[:-2] + ("A" if token[-2] != "A" else "B") + token[-1])


VALID = json.dumps(APPROVE).encode()
TOO_LARGE = b'{"decision": "approve", "comment": "' + b"x" * MAX_BODY + b'"}'
ANOTHER_REQUEST = "token was issued for another request"


# Every refusal the gateway answers before the run is asked: checks cheapest first.
@pytest.mark.parametrize(
    ("headers", "body", "status", "code", "says"),
    [
        pytest.param(lambda gw: {}, VALID, 401, "missing_token", "Bearer", id="no-token"),
        pytest.param(
            lambda gw: {"Authorization": "Basic dXNlcjpwYXNz"},
            VALID,
            401,
            "missing_token",
            "Bearer",
            id="basic-auth",
        ),
        pytest.param(
            lambda gw: bearer("not-a-token"), VALID, 401, "invalid_token", "token", id="garbage"
        ),
        pytest.param(forged, VALID, 401, "invalid_token", "signature", id="forged"),
        pytest.param(
            lambda gw: gw.auth("op_1"), VALID, 401, "wrong_request", ANOTHER_REQUEST, id="op-token"
        ),
        pytest.param(
            # An operation that happens to be named like the request.
            lambda gw: gw.auth(REQUEST),
            VALID,
            401,
            "wrong_request",
            ANOTHER_REQUEST,
            id="op-token-same-name",
        ),
        pytest.param(
            lambda gw: gw.auth(approval_subject("apr_2")),
            VALID,
            401,
            "wrong_request",
            ANOTHER_REQUEST,
            id="another-request",
        ),
        pytest.param(
            lambda gw: bearer(gw.token(expires_in=-timedelta(seconds=1))),
            VALID,
            410,
            "token_expired",
            "expired",
            id="expired",
        ),
        pytest.param(Gateway.auth, TOO_LARGE, 413, "body_too_large", "bytes", id="too-large"),
        pytest.param(
            lambda gw: {}, TOO_LARGE, 413, "body_too_large", "bytes", id="too-large-no-token"
        ),
        pytest.param(lambda gw: {}, b"not json", 401, "missing_token", "Bearer", id="auth-first"),
        pytest.param(Gateway.auth, b"not json", 422, "invalid_json", "JSON", id="not-json"),
        pytest.param(Gateway.auth, b"", 422, "invalid_json", "JSON", id="empty"),
        pytest.param(
            Gateway.auth, b'{"decision": "approve",', 422, "invalid_json", "JSON", id="cut-short"
        ),
        pytest.param(Gateway.auth, b"[]", 422, "invalid_decision", "body", id="not-an-object"),
        pytest.param(
            Gateway.auth,
            b'{"decision": "maybe"}',
            422,
            "invalid_decision",
            "decision: Input should be 'approve' or 'reject'",
            id="unknown-decision",
        ),
        pytest.param(
            Gateway.auth,
            b'{"reviewer": "ana"}',
            422,
            "invalid_decision",
            "decision: Field required",
            id="no-decision",
        ),
        pytest.param(
            Gateway.auth,
            b'{"decision": "approve", "reviewer": "' + b"r" * 201 + b'"}',
            422,
            "invalid_decision",
            "reviewer",
            id="reviewer-too-long",
        ),
    ],
)
async def test_refused_before_the_run(
    gw: Gateway,
    headers: Callable[[Gateway], dict[str, str]],
    body: bytes,
    status: int,
    code: str,
    says: str,
) -> None:
    response = await gw.client.post(
        URL, content=body, headers={**headers(gw), "Content-Type": "application/json"}
    )

    assert says in assert_error(response, status, code)
    if status == 401:
        assert response.headers["www-authenticate"] == "Bearer"
    assert gw.deliverer.decisions == []


@pytest.mark.parametrize(
    ("operation_id", "status", "code"),
    [
        (REQUEST, 401, "wrong_operation"),
        # The path's operation id is one segment, so the subject itself cannot be sent: an
        # encoded slash is decoded before routing and matches no route.
        (f"approval%2F{REQUEST}", 404, "not_found"),
    ],
)
async def test_approval_token_is_refused_by_the_operations_endpoint(
    gw: Gateway, operation_id: str, status: int, code: str
) -> None:
    response = await gw.client.post(
        f"/v1/operations/{operation_id}/complete",
        json={"status": "succeeded", "result": 1},
        headers=gw.auth(),
    )

    assert_error(response, status, code)
    assert gw.deliverer.calls == [] and gw.deliverer.decisions == []


# What the run (or the deliverer on its behalf) answers, passed on to the caller.
@pytest.mark.parametrize(
    ("answer", "status", "code", "message"),
    [
        pytest.param(
            DecideOutcome(accepted=False, status="expired", reason="request expired"),
            409,
            "not_accepted",
            "request expired",
            id="not-accepted",
        ),
        pytest.param(
            DecideOutcome(accepted=False, status="rejected"),
            409,
            "not_accepted",
            "the request is rejected",
            id="not-accepted-no-reason",
        ),
        pytest.param(
            DeliveryRefused(409, "request already rejected", code="approval_decided"),
            409,
            "approval_decided",
            "request already rejected",
            id="decided",
        ),
        pytest.param(
            DeliveryRefused(409, "the run has ended"),
            409,
            "conflict",
            "the run has ended",
            id="ended",
        ),
        pytest.param(
            DeliveryRefused(404, "no approval request apr_1", code="approval_unknown"),
            404,
            "approval_unknown",
            "no approval request apr_1",
            id="unknown",
        ),
        pytest.param(
            DeliveryRefused(401, "link was not issued for this request"),
            401,
            "unauthorized",
            "link was not issued for this request",
            id="nonce",
        ),
        pytest.param(
            DeliveryRefused(503, "Temporal is unavailable; retry later"),
            503,
            "service_unavailable",
            "Temporal is unavailable; retry later",
            id="unavailable",
        ),
        pytest.param(
            RuntimeError("secret internals"),
            500,
            "internal_error",
            "the gateway failed; retry later",
            id="deliverer-bug",
        ),
    ],
)
async def test_run_refusals_pass_through(
    gw: Gateway, answer: DecideOutcome | Exception, status: int, code: str, message: str
) -> None:
    gw.deliverer.script.append(answer)

    response = await gw.client.post(URL, json=APPROVE, headers=gw.auth())

    assert assert_error(response, status, code) == message
    assert len(gw.deliverer.decisions) == 1


async def test_openapi_documents_the_decision_endpoint(gw: Gateway) -> None:
    doc = (await gw.client.get("/openapi.json")).json()

    post = doc["paths"]["/v1/approvals/{request_id}/decision"]["post"]
    assert post["requestBody"]["required"] is True
    assert post["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/DecisionBody"
    }
    responses = post["responses"]
    assert set(responses) == {"200", "401", "403", "404", "409", "410", "413", "422", "503"}
    for status in set(responses) - {"200"}:
        schema = responses[status]["content"]["application/json"]["schema"]
        assert schema == {"$ref": "#/components/schemas/ErrorBody"}, status
    assert "request" in responses["401"]["description"]
    assert responses["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/DecisionAccepted"
    }
    schemas = doc["components"]["schemas"]
    assert set(schemas["DecisionBody"]["properties"]) == {"decision", "reviewer", "comment"}
    assert schemas["DecisionBody"]["properties"]["decision"]["enum"] == ["approve", "reject"]
    assert schemas["DecisionBody"]["required"] == ["decision"]
    assert set(schemas["DecisionAccepted"]["properties"]) == {
        "status",
        "request_id",
        "approval_status",
    }
    [scheme_name] = post["security"][0]
    assert doc["components"]["securitySchemes"][scheme_name]["scheme"] == "bearer"
    # Both endpoints' bodies are documented, whichever schema was added first.
    assert "Completion" in schemas
    complete = doc["paths"]["/v1/operations/{operation_id}/complete"]["post"]
    assert "operation" in complete["responses"]["401"]["description"]


# TemporalDeliverer.decide, with a stand-in for the workflow handle: each refusal Temporal or the
# run can give, mapped to its HTTP answer.

Scripted = DecideOutcome | BaseException | Callable[[DecideInput], DecideOutcome]


@dataclass
class FakeHandle:
    """Records `execute_update` calls; answers from `script` (an outcome, an error, or how to
    answer the Update's input)."""

    script: list[Scripted] = field(default_factory=list)
    updates: list[tuple[Any, DecideInput, str]] = field(default_factory=list)

    async def execute_update(
        self, update: Any, arg: DecideInput, *, id: str, result_type: type[Any]
    ) -> DecideOutcome:
        assert result_type is DecideOutcome
        self.updates.append((update, arg, id))
        answer = self.script.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer if isinstance(answer, DecideOutcome) else answer(arg)


@dataclass
class FakeClient:
    handle: FakeHandle = field(default_factory=FakeHandle)
    workflow_ids: list[str] = field(default_factory=list)

    def get_workflow_handle(self, workflow_id: str) -> FakeHandle:
        self.workflow_ids.append(workflow_id)
        return self.handle


CLAIMS = ResumeClaims(
    workflow_id=RUN,
    operation_id=approval_subject(REQUEST),
    nonce="nonce-of-the-link",
    expires_at=datetime(2030, 1, 1, tzinfo=UTC),
    key_id="k1",
)
BODY = DecisionBody(decision="reject", reviewer="ana", comment="too much")


def deliverer_for(*script: Scripted) -> tuple[TemporalDeliverer, FakeClient]:
    client = FakeClient(FakeHandle(list(script)))
    return TemporalDeliverer(cast(Client, client)), client


async def test_decide_sends_the_decide_update_with_the_links_nonce() -> None:
    outcome = DecideOutcome(accepted=True, status="rejected")
    deliverer, client = deliverer_for(outcome)

    assert await deliverer.decide(CLAIMS, REQUEST, BODY) == outcome

    assert client.workflow_ids == [RUN]
    [(update, arg, _)] = client.handle.updates
    assert update == DECIDE_UPDATE
    assert arg == DecideInput(
        request_id=REQUEST,
        decision="reject",
        reviewer="ana",
        comment="too much",
        nonce="nonce-of-the-link",
        delivery_id=arg.delivery_id,
    )
    assert arg.delivery_id, "each request has its own delivery id"


async def test_identical_decisions_share_one_update_and_copies_are_refused() -> None:
    # A burst of identical decisions is one Update (Temporal caps a run's in-flight Updates);
    # Temporal answers the copies with the first one's outcome, whose delivery id is not theirs.
    sent: list[DecideInput] = []

    def first_outcome(arg: DecideInput) -> DecideOutcome:
        sent.append(arg)
        return DecideOutcome(accepted=True, status="rejected", delivery_id=sent[0].delivery_id)

    deliverer, client = deliverer_for(first_outcome, first_outcome)
    assert (await deliverer.decide(CLAIMS, REQUEST, BODY)).accepted
    with pytest.raises(DeliveryRefused) as copy:
        await deliverer.decide(CLAIMS, REQUEST, BODY)

    ids = [update_id for _, _, update_id in client.handle.updates]
    assert len(set(ids)) == 1 and ids[0].startswith(f"decide/{REQUEST}/")
    assert (copy.value.status_code, copy.value.code) == (409, "duplicate_decision")


def _not_ready() -> WorkflowUpdateFailedError:
    return _update_failed(APPROVAL_NOT_READY, "the request's links are not confirmed yet")


async def test_a_link_used_before_its_run_confirmed_it_is_retried_until_it_is() -> None:
    # Found by the chaos suite: a link used the moment it reached the outbox, or while the
    # run's worker restarted, must not be refused as a forgery.
    outcome = DecideOutcome(accepted=True, status="approved")
    deliverer, client = deliverer_for(_not_ready(), _not_ready(), outcome)

    assert await deliverer.decide(CLAIMS, REQUEST, BODY) == outcome

    ids = {update_id for _, _, update_id in client.handle.updates}
    assert len(client.handle.updates) == 3 and len(ids) == 1


async def test_a_link_its_run_never_confirms_gets_503(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(delivery, "NOT_READY_PATIENCE", timedelta(milliseconds=300))
    deliverer, client = deliverer_for(*[_not_ready() for _ in range(10)])

    with pytest.raises(DeliveryRefused) as refused:
        await deliverer.decide(CLAIMS, REQUEST, BODY)

    assert (refused.value.status_code, refused.value.code) == (503, "approval_not_ready")
    assert 2 <= len(client.handle.updates) < 10


async def test_decide_returns_an_outcome_the_run_did_not_accept() -> None:
    # The app answers it with 409; the deliverer reports what the run said.
    outcome = DecideOutcome(accepted=False, status="expired", reason="too late")
    deliverer, _ = deliverer_for(outcome)

    assert await deliverer.decide(CLAIMS, REQUEST, BODY) == outcome


def _update_failed(error_type: str | None, message: str) -> WorkflowUpdateFailedError:
    return WorkflowUpdateFailedError(ApplicationError(message, type=error_type))


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (_update_failed(APPROVAL_UNKNOWN, "no approval request apr_1"), 404, "approval_unknown"),
        (
            _update_failed(APPROVAL_NONCE_MISMATCH, "link was not issued for this request"),
            401,
            "nonce_mismatch",
        ),
        (_update_failed(APPROVAL_DECIDED, "request already approved"), 409, "approval_decided"),
        (_update_failed(None, "the run was cancelled"), 409, "refused"),
        (
            RPCError("workflow execution already completed", RPCStatusCode.NOT_FOUND, b""),
            409,
            "run_ended",
        ),
        (
            # The run ended while the Update was in flight (found by the chaos suite).
            RPCError(
                "workflow update was aborted by closing workflow", RPCStatusCode.NOT_FOUND, b""
            ),
            409,
            "run_ended",
        ),
        (RPCError("workflow not found", RPCStatusCode.NOT_FOUND, b""), 404, "unknown_run"),
        (
            RPCError("connection refused", RPCStatusCode.UNAVAILABLE, b""),
            503,
            "temporal_unavailable",
        ),
        (WorkflowUpdateRPCTimeoutOrCancelledError(), 503, "run_unavailable"),
    ],
)
async def test_decide_maps_refusals(error: BaseException, status: int, code: str) -> None:
    deliverer, _ = deliverer_for(error)

    with pytest.raises(DeliveryRefused) as refused:
        await deliverer.decide(CLAIMS, REQUEST, BODY)

    assert (refused.value.status_code, refused.value.code) == (status, code)
    if isinstance(error, WorkflowUpdateFailedError):
        assert isinstance(error.cause, ApplicationError)
        assert refused.value.message == error.cause.message
