"""The gateway's own logic over real HTTP, fast: a recording deliverer stands in for Temporal.

Every behaviour proved here that involves a run is proved again end to end (real
`TemporalDeliverer`, dev server and worker) in `test_real_server.py`. Only the gateway's answer
to a deliverer that crashes is proved here alone: the real one cannot be made to.
"""

from __future__ import annotations

import logging
import random
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from tests.helpers import MALFORMED_COMPLETIONS, assert_error, random_request
from tests.rigs import (
    GATEWAY_SECRET,
    MAX_BODY,
    OP,
    RUN,
    Gateway,
    RecordingDeliverer,
)
from waitstate.auth.tokens import ResumeTokens
from waitstate.gateway.app import create_app
from waitstate.gateway.delivery import DeliveryRefused
from waitstate.schemas.operations import Completion, CompletionOutcome

URL = f"/v1/operations/{OP}/complete"
SUCCEEDED = {"status": "succeeded", "result": {"rows": 42}}


async def test_completion_is_delivered_once_with_its_claims(gw: Gateway) -> None:
    response = await gw.client.post(URL, json=SUCCEEDED, headers=gw.auth())

    assert response.status_code == 200
    assert response.json() == {
        "status": "accepted",
        "operation_id": OP,
        "operation_status": "succeeded",
    }
    [(claims, completion, delivery_id)] = gw.deliverer.calls
    assert (claims.workflow_id, claims.operation_id, claims.key_id) == (RUN, OP, "k1")
    assert completion == Completion(status="succeeded", result={"rows": 42})
    assert len(delivery_id) == 32 and int(delivery_id, 16) >= 0


async def test_each_request_gets_its_own_delivery_id(gw: Gateway) -> None:
    progress = {"status": "running", "progress": "40%"}
    for _ in range(2):
        assert (await gw.client.post(URL, json=progress, headers=gw.auth())).status_code == 200

    assert len({delivery_id for _, _, delivery_id in gw.deliverer.calls}) == 2


async def test_operation_status_is_the_runs_answer(gw: Gateway) -> None:
    gw.deliverer.script.append(
        CompletionOutcome(applied=True, status="input_required", delivery_id="ignored")
    )
    response = await gw.client.post(URL, json={"status": "input_required"}, headers=gw.auth())

    assert response.json()["operation_status"] == "input_required"


@pytest.mark.parametrize(
    ("headers", "code"),
    [
        ({}, "missing_token"),
        ({"Authorization": "Bearer"}, "missing_token"),
        ({"Authorization": "Basic dXNlcjpwYXNz"}, "missing_token"),
        ({"Authorization": "Bearer not-a-token"}, "invalid_token"),
    ],
)
async def test_missing_or_malformed_token_is_401(
    gw: Gateway, headers: dict[str, str], code: str
) -> None:
    response = await gw.client.post(URL, json=SUCCEEDED, headers=headers)

    assert_error(response, 401, code)
    assert response.headers["www-authenticate"] == "Bearer"
    assert gw.deliverer.calls == []


async def test_bad_signature_is_401(gw: Gateway) -> None:
    token = gw.token()
    forged = token[:-2] + ("A" if token[-2] != "A" else "B") + token[-1]

    response = await gw.client.post(
        URL, json=SUCCEEDED, headers={"Authorization": f"Bearer {forged}"}
    )

    assert_error(response, 401, "invalid_token")
    assert gw.deliverer.calls == []


async def test_token_of_another_key_is_401(gw: Gateway) -> None:
    other = ResumeTokens({"k2": GATEWAY_SECRET}, "k2").mint(
        RUN, OP, datetime.now(UTC) + timedelta(hours=1)
    )

    response = await gw.client.post(
        URL, json=SUCCEEDED, headers={"Authorization": f"Bearer {other.token}"}
    )

    assert_error(response, 401, "invalid_token")
    assert gw.deliverer.calls == []


async def test_token_for_another_operation_is_401(gw: Gateway) -> None:
    response = await gw.client.post(URL, json=SUCCEEDED, headers=gw.auth("op_2"))

    message = assert_error(response, 401, "wrong_operation")
    assert message == "token was issued for another operation"
    assert gw.deliverer.calls == []


async def test_expired_token_is_410(gw: Gateway) -> None:
    token = gw.token(expires_in=-timedelta(seconds=1))

    response = await gw.client.post(
        URL, json=SUCCEEDED, headers={"Authorization": f"Bearer {token}"}
    )

    assert_error(response, 410, "token_expired")
    assert gw.deliverer.calls == []


async def test_body_over_the_limit_is_413_before_auth(gw: Gateway) -> None:
    body = b'{"status": "succeeded", "result": "' + b"x" * MAX_BODY + b'"}'

    with_token = await gw.client.post(URL, content=body, headers=gw.auth())
    without_token = await gw.client.post(URL, content=body)

    assert_error(with_token, 413, "body_too_large")
    assert_error(without_token, 413, "body_too_large")
    assert gw.deliverer.calls == []


async def test_body_at_the_limit_is_read(gw: Gateway) -> None:
    body = b'{"status": "succeeded", "result": "' + b"x" * (MAX_BODY - 40) + b'"}'
    body += b" " * (MAX_BODY - len(body))

    response = await gw.client.post(URL, content=body, headers=gw.auth())

    assert response.status_code == 200
    assert len(gw.deliverer.calls) == 1


async def test_chunked_body_over_the_limit_is_413(gw: Gateway) -> None:
    # No Content-Length to check: the gateway counts what it reads.
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"status": "succeeded", "result": "'
        for _ in range(8):
            yield b"x" * 1024
        yield b'"}'

    response = await gw.client.post(URL, content=chunks(), headers=gw.auth())

    assert "content-length" not in response.request.headers
    assert_error(response, 413, "body_too_large")
    assert gw.deliverer.calls == []


async def test_lying_content_length_is_413() -> None:
    # An HTTP server holds a client to its Content-Length, so the lie is sent straight to the
    # ASGI app: the header says 10 bytes, the body is over the limit.
    deliverer = RecordingDeliverer()
    tokens = ResumeTokens({"k1": GATEWAY_SECRET}, "k1")
    app = create_app(deliverer, tokens, max_body_bytes=MAX_BODY)
    token = tokens.mint(RUN, OP, datetime.now(UTC) + timedelta(hours=1)).token
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        response = await client.post(
            URL,
            content=b"x" * (MAX_BODY * 2),
            headers={"Authorization": f"Bearer {token}", "Content-Length": "10"},
        )

    assert response.request.headers["content-length"] == "10"
    assert_error(response, 413, "body_too_large")
    assert deliverer.calls == []


@pytest.mark.parametrize(("body", "code", "says"), MALFORMED_COMPLETIONS)
async def test_malformed_body_is_422(gw: Gateway, body: bytes, code: str, says: str) -> None:
    response = await gw.client.post(
        URL, content=body, headers={**gw.auth(), "Content-Type": "application/json"}
    )

    assert says in assert_error(response, 422, code)
    assert gw.deliverer.calls == []


async def test_auth_is_checked_before_the_body(gw: Gateway) -> None:
    response = await gw.client.post(URL, content=b"not json")

    assert_error(response, 401, "missing_token")


@pytest.mark.parametrize(
    ("refusal", "code"),
    [
        (DeliveryRefused(404, "unknown run", code="unknown_run"), "unknown_run"),
        (DeliveryRefused(401, "token was not issued for this operation"), "unauthorized"),
        (DeliveryRefused(409, "operation already succeeded"), "conflict"),
        (DeliveryRefused(409, "duplicate completion: already applied"), "conflict"),
        (DeliveryRefused(503, "Temporal is unavailable; retry later"), "service_unavailable"),
    ],
)
async def test_delivery_refusals_pass_through(
    gw: Gateway, refusal: DeliveryRefused, code: str
) -> None:
    gw.deliverer.script.append(refusal)

    response = await gw.client.post(URL, json=SUCCEEDED, headers=gw.auth())

    assert assert_error(response, refusal.status, code) == refusal.message
    assert len(gw.deliverer.calls) == 1


async def test_a_failing_deliverer_is_a_500_with_the_error_shape(gw: Gateway) -> None:
    gw.deliverer.script.append(RuntimeError("secret internals"))

    response = await gw.client.post(URL, json=SUCCEEDED, headers=gw.auth())

    assert "secret internals" not in assert_error(response, 500, "internal_error")


async def test_refusals_are_logged_without_the_token(
    gw: Gateway, caplog: pytest.LogCaptureFixture
) -> None:
    token = gw.token(expires_in=-timedelta(seconds=1))
    with caplog.at_level(logging.INFO, logger="waitstate.gateway.app"):
        await gw.client.post(URL, json=SUCCEEDED, headers={"Authorization": f"Bearer {token}"})

    [record] = [r for r in caplog.records if r.name == "waitstate.gateway.app"]
    assert record.levelno == logging.INFO
    assert "410" in record.getMessage() and "token_expired" in record.getMessage()
    assert token not in caplog.text
    assert token.split(".")[1] not in caplog.text


async def test_healthz(gw: Gateway) -> None:
    response = await gw.client.get("/healthz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


async def test_unknown_route_and_wrong_method_use_the_error_shape(gw: Gateway) -> None:
    assert_error(await gw.client.get("/nowhere"), 404, "not_found")
    response = await gw.client.get(URL)
    assert_error(response, 405, "method_not_allowed")
    assert "POST" in response.headers["allow"]


async def test_openapi_documents_the_complete_endpoint(gw: Gateway) -> None:
    # test_openapi.py checks what every route documents (its body, answer, statuses and token)
    # and finds every body's schema; here, the complete endpoint's fields.
    schemas = (await gw.client.get("/openapi.json")).json()["components"]["schemas"]

    assert set(schemas["Completion"]["properties"]) >= {"status", "result", "error", "progress"}
    assert schemas["Completion"]["properties"]["error"]["anyOf"][0] == {
        "$ref": "#/components/schemas/OperationError"
    }
    assert "OperationError" in schemas


async def test_random_requests_never_cause_a_500(gw: Gateway) -> None:
    rng = random.Random(20240611)

    def token(expires_in: timedelta) -> str:
        return gw.token(expires_in=expires_in)

    statuses = set()
    for _ in range(200):
        url, content, headers = random_request(rng, gw.token(), token, [OP, "op_2"], MAX_BODY)
        response = await gw.client.post(url, content=content, headers=headers)

        assert response.status_code < 500, (response.status_code, response.text)
        if response.status_code != 200:
            assert_error(response, response.status_code)
        statuses.add(response.status_code)

    assert {200, 401, 413, 422} <= statuses


async def test_report_ids_are_checked_before_the_body_and_the_token(gw: Gateway) -> None:
    too_long = "w" * 201
    over_the_limit = b"x" * (MAX_BODY + 1)

    answers = [
        await gw.client.post(URL, content=over_the_limit, headers={"Webhook-Id": too_long}),
        await gw.client.post(URL, json=SUCCEEDED, headers={**gw.auth(), "Idempotency-Key": ""}),
    ]

    assert "header.Webhook-Id" in assert_error(answers[0], 422, "invalid_request")
    assert "header.Idempotency-Key" in assert_error(answers[1], 422, "invalid_request")
    assert gw.deliverer.calls == []


async def test_the_report_id_is_the_webhook_id_else_the_idempotency_key(gw: Gateway) -> None:
    for headers in (
        {"Webhook-Id": "wh-1", "Idempotency-Key": "key-1"},
        {"Idempotency-Key": "key-2"},
        {},
    ):
        response = await gw.client.post(URL, json=SUCCEEDED, headers={**gw.auth(), **headers})
        assert response.status_code == 200, response.text

    assert gw.deliverer.report_ids == ["wh-1", "key-2", None]


async def test_deliveries_are_logged_and_counted(
    gw: Gateway, caplog: pytest.LogCaptureFixture
) -> None:
    def accepted(metrics: str) -> float:
        prefix = 'waitstate_gateway_accepted_total{endpoint="complete"} '
        [line] = [line for line in metrics.splitlines() if line.startswith(prefix)]
        return float(line.removeprefix(prefix))

    before = accepted((await gw.client.get("/metrics")).text)
    with caplog.at_level(logging.INFO, logger="waitstate.gateway.app"):
        response = await gw.client.post(URL, json=SUCCEEDED, headers=gw.auth())
    after = accepted((await gw.client.get("/metrics")).text)

    assert response.status_code == 200
    assert after == before + 1
    [record] = [r for r in caplog.records if r.name == "waitstate.gateway.app"]
    assert record.getMessage() == (
        f"delivered succeeded completion of operation {OP} to run {RUN}: now succeeded"
    )


async def test_refusals_are_counted_by_code_and_status(gw: Gateway) -> None:
    def refused(metrics: str) -> float:
        prefix = 'waitstate_gateway_refusals_total{code="missing_token",status="401"} '
        lines = [line for line in metrics.splitlines() if line.startswith(prefix)]
        return sum(float(line.removeprefix(prefix)) for line in lines)

    before = refused((await gw.client.get("/metrics")).text)
    for _ in range(2):
        assert_error(await gw.client.post(URL, json=SUCCEEDED), 401, "missing_token")
    after = refused((await gw.client.get("/metrics")).text)

    assert after == before + 2
