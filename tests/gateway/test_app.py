"""The gateway's own logic over real HTTP, fast: a recording deliverer stands in for Temporal.

Every behaviour proved here that involves a run is proved again end to end (real
`TemporalDeliverer`, dev server and worker) in `test_real_server.py`. Only the gateway's answer
to a deliverer that crashes is proved here alone: the real one cannot be made to.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import string
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TypeVar
from urllib.parse import quote

import httpx
import pytest
import uvicorn

from gateway.app import create_app
from gateway.delivery import DeliveryRefused
from gateway.tokens import ResumeClaims, ResumeTokens
from schemas.approvals import DecideOutcome, DecisionBody
from schemas.operations import Completion, CompletionOutcome

SECRET = "test-secret-0123456789abcdef0123456789"
MAX_BODY = 4096
RUN = "run-1"
OP = "op_1"
URL = f"/v1/operations/{OP}/complete"
SUCCEEDED = {"status": "succeeded", "result": {"rows": 42}}

Answer = TypeVar("Answer", CompletionOutcome, DecideOutcome)


@dataclass
class RecordingDeliverer:
    """Records every delivery; answers from `script` (an outcome or a refusal), else applies.

    Completions are recorded in `calls`, decisions in `decisions`; one script serves both.
    """

    calls: list[tuple[ResumeClaims, Completion, str]] = field(default_factory=list)
    decisions: list[tuple[ResumeClaims, str, DecisionBody]] = field(default_factory=list)
    script: list[CompletionOutcome | DecideOutcome | Exception] = field(default_factory=list)

    async def complete(
        self,
        claims: ResumeClaims,
        completion: Completion,
        delivery_id: str,
        report_id: str | None = None,
    ) -> CompletionOutcome:
        self.calls.append((claims, completion, delivery_id))
        if self.script:
            return self._answer(CompletionOutcome)
        return CompletionOutcome(applied=True, status=completion.status, delivery_id=delivery_id)

    async def decide(
        self, claims: ResumeClaims, request_id: str, body: DecisionBody
    ) -> DecideOutcome:
        self.decisions.append((claims, request_id, body))
        if self.script:
            return self._answer(DecideOutcome)
        status = "approved" if body.decision == "approve" else "rejected"
        return DecideOutcome(accepted=True, status=status)

    def _answer(self, kind: type[Answer]) -> Answer:
        answer = self.script.pop(0)
        if isinstance(answer, Exception):
            raise answer
        assert isinstance(answer, kind), answer
        return answer

    def clear(self) -> None:
        self.calls.clear()
        self.decisions.clear()
        self.script.clear()


@dataclass
class Gateway:
    client: httpx.AsyncClient
    deliverer: RecordingDeliverer
    tokens: ResumeTokens
    subject: str = OP  # what tokens are minted for unless a test says otherwise

    def token(
        self, subject: str | None = None, *, expires_in: timedelta = timedelta(hours=1)
    ) -> str:
        expires_at = datetime.now(UTC) + expires_in
        return self.tokens.mint(RUN, subject or self.subject, expires_at).token

    def auth(self, subject: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token(subject)}"}


@asynccontextmanager
async def running_gateway(subject: str = OP) -> AsyncIterator[Gateway]:
    """The app on a free port of 127.0.0.1, served by uvicorn in the test's event loop."""
    deliverer = RecordingDeliverer()
    tokens = ResumeTokens({"k1": SECRET}, "k1")
    app = create_app(deliverer, tokens, max_body_bytes=MAX_BODY)
    # Bound and listening before uvicorn starts, so the first request never races startup.
    # IPPROTO_TCP, not the default 0: asyncio sets TCP_NODELAY only on sockets that say TCP,
    # and without it every keep-alive response waits 40 ms for a delayed ACK.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, lifespan="off"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            yield Gateway(client, deliverer, tokens, subject)
    finally:
        server.should_exit = True
        await serving
        sock.close()


@pytest.fixture(scope="module")
async def served() -> AsyncIterator[Gateway]:
    async with running_gateway() as gateway:
        yield gateway


@pytest.fixture
def gw(served: Gateway) -> Iterator[Gateway]:
    served.deliverer.clear()
    yield served


def assert_error(response: httpx.Response, status: int, code: str | None = None) -> str:
    """The response is `status` with the gateway's error shape; returns its message."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message"}
    assert body["error"]["code"] and body["error"]["message"]
    if code is not None:
        assert body["error"]["code"] == code
    return str(body["error"]["message"])


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
    other = ResumeTokens({"k2": SECRET}, "k2").mint(RUN, OP, datetime.now(UTC) + timedelta(hours=1))

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
    tokens = ResumeTokens({"k1": SECRET}, "k1")
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


# Bodies refused with 422 (body, error code, what the message says), here and against a real
# run in test_real_server.py.
MALFORMED_COMPLETIONS = [
    (b"not json", "invalid_json", "JSON"),
    (b"", "invalid_json", "JSON"),
    (b'{"status": "succeeded",', "invalid_json", "JSON"),
    (b"\xff\xfe", "invalid_json", "JSON"),
    (b"[]", "invalid_completion", "body"),
    (b'{"status": "failed"}', "invalid_completion", "needs an error"),
    (b'{"status": "exploded"}', "invalid_completion", "status"),
    (b'{"result": 1}', "invalid_completion", "status: Field required"),
    (
        b'{"status": "succeeded", "result": 1, "result_ref": "r"}',
        "invalid_completion",
        "not both",
    ),
]


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

    assert assert_error(response, refusal.status_code, code) == refusal.message
    assert len(gw.deliverer.calls) == 1


async def test_a_failing_deliverer_is_a_500_with_the_error_shape(gw: Gateway) -> None:
    gw.deliverer.script.append(RuntimeError("secret internals"))

    response = await gw.client.post(URL, json=SUCCEEDED, headers=gw.auth())

    assert "secret internals" not in assert_error(response, 500, "internal_error")


async def test_refusals_are_logged_without_the_token(
    gw: Gateway, caplog: pytest.LogCaptureFixture
) -> None:
    token = gw.token(expires_in=-timedelta(seconds=1))
    with caplog.at_level(logging.INFO, logger="gateway.app"):
        await gw.client.post(URL, json=SUCCEEDED, headers={"Authorization": f"Bearer {token}"})

    [record] = [r for r in caplog.records if r.name == "gateway.app"]
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
    doc = (await gw.client.get("/openapi.json")).json()

    post = doc["paths"]["/v1/operations/{operation_id}/complete"]["post"]
    assert post["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Completion"
    }
    assert post["requestBody"]["required"] is True
    responses = post["responses"]
    assert set(responses) == {"200", "401", "404", "409", "410", "413", "422", "503"}
    for status in set(responses) - {"200"}:
        schema = responses[status]["content"]["application/json"]["schema"]
        assert schema == {"$ref": "#/components/schemas/ErrorBody"}, status
    assert responses["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Accepted"
    }
    schemas = doc["components"]["schemas"]
    assert set(schemas["Completion"]["properties"]) >= {"status", "result", "error", "progress"}
    assert schemas["Completion"]["properties"]["error"]["anyOf"][0] == {
        "$ref": "#/components/schemas/OperationError"
    }
    assert "OperationError" in schemas
    assert set(schemas["ErrorDetail"]["properties"]) == {"code", "message"}
    [scheme_name] = post["security"][0]
    assert doc["components"]["securitySchemes"][scheme_name]["scheme"] == "bearer"


def random_request(
    rng: random.Random,
    genuine: str,
    token: Callable[[timedelta], str],
    operation_ids: Sequence[str],
) -> tuple[str, bytes, dict[str, str]]:
    """A random completion request: (path, body, headers). Bodies are random bytes, text,
    valid completions and corrupted ones; tokens are missing, `genuine`, garbage, corrupted
    or expired (`token(expires_in)` mints one); paths name `operation_ids` or garbage."""
    printable = string.ascii_letters + string.digits + string.punctuation + " "

    def text(limit: int) -> str:
        return "".join(rng.choice(printable) for _ in range(rng.randint(0, limit)))

    def body() -> bytes:
        kind = rng.randrange(4)
        if kind == 0:
            return rng.randbytes(rng.randint(0, MAX_BODY * 2))
        if kind == 1:
            return text(200).encode()
        valid = rng.choice(
            [
                b'{"status": "succeeded", "result": {"a": [1, 2]}}',
                b'{"status": "failed", "error": {"code": "x", "message": "y"}}',
                b'{"status": "running", "progress": "10%"}',
            ]
        )
        if kind == 2:
            return valid
        cut = rng.randrange(len(valid))
        return valid[:cut] + bytes([rng.randrange(256)]) + valid[cut + 1 :]

    def authorization() -> dict[str, str]:
        choice = rng.randrange(6)
        if choice == 0:
            return {}
        if choice == 1:
            return {"Authorization": f"Bearer {genuine}"}
        if choice == 2:
            return {"Authorization": f"Bearer {text(300)}"}
        if choice == 3:
            cut = rng.randrange(len(genuine))
            corrupted = f"{genuine[:cut]}{rng.choice(printable)}{genuine[cut + 1 :]}"
            return {"Authorization": f"Bearer {corrupted}"}
        if choice == 4:
            return {"Authorization": text(100)}
        return {"Authorization": f"Bearer {token(-timedelta(seconds=1))}"}

    operation_id = rng.choice([*operation_ids, quote(text(20), safe="") or "x"])
    headers = {**authorization(), "Content-Type": rng.choice(["application/json", text(30)])}
    if rng.random() < 0.2:
        headers["X-" + "".join(rng.choices(string.ascii_letters, k=8))] = text(50)
    # Header values cannot start or end with spaces (httpx refuses to send them).
    headers = {name: value.strip() for name, value in headers.items()}
    return f"/v1/operations/{operation_id}/complete", body(), headers


async def test_random_requests_never_cause_a_500(gw: Gateway) -> None:
    rng = random.Random(20240611)

    def token(expires_in: timedelta) -> str:
        return gw.token(expires_in=expires_in)

    statuses = set()
    for _ in range(200):
        url, content, headers = random_request(rng, gw.token(), token, [OP, "op_2"])
        response = await gw.client.post(url, content=content, headers=headers)

        assert response.status_code < 500, (response.status_code, response.text)
        if response.status_code != 200:
            assert_error(response, response.status_code)
        statuses.add(response.status_code)

    assert {200, 401, 413, 422} <= statuses
