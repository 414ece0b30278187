"""Question links, fast and against stand-ins: the answer endpoint over real HTTP with a
recording deliverer, and the same endpoint over `TemporalDeliverer.answer` with a fake workflow
handle, so each refusal of the run's `answer` Update is followed to its HTTP answer.

Real runs asking real questions are proved in the workflow tests.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import httpx
import pytest
from temporalio.client import (
    Client,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from tests.helpers import assert_error
from tests.rigs import GATEWAY_SECRET, MAX_BODY, OP, RUN, Gateway, running_gateway
from waitstate.gateway.app import create_app
from waitstate.gateway.delivery import DeliveryRefused, TemporalDeliverer, answer_update_id
from waitstate.gateway.tokens import (
    ResumeClaims,
    ResumeTokens,
    approval_subject,
    question_subject,
)
from waitstate.names import ANSWER_UPDATE
from waitstate.schemas.errors import (
    QUESTION_CLOSED,
    QUESTION_INVALID_ANSWER,
    QUESTION_NONCE_MISMATCH,
    QUESTION_NOT_YOURS,
    QUESTION_UNKNOWN,
)
from waitstate.schemas.questions import AnswerBody, AnswerInput, AnswerOutcome

QUESTION = "q_1"
URL = f"/v1/questions/{QUESTION}/answer"
ACCEPT = {"action": "accept", "content": {"region": "EMEA", "rows": 3}, "responder": "ana"}


@pytest.fixture(scope="module")
async def served() -> AsyncIterator[Gateway]:
    async with running_gateway(question_subject(QUESTION)) as gateway:
        yield gateway


def test_question_subject_cannot_be_an_operation_id() -> None:
    assert question_subject(QUESTION) == f"question/{QUESTION}"
    assert question_subject(QUESTION) not in (QUESTION, approval_subject(QUESTION))


async def test_answer_is_delivered_once_with_its_claims(gw: Gateway) -> None:
    response = await gw.client.post(URL, json=ACCEPT, headers=gw.auth())

    assert response.status_code == 200, response.text
    assert response.json() == {
        "status": "accepted",
        "question_id": QUESTION,
        "question_status": "answered",
        "delivered": True,
        "reason": "",
    }
    [(claims, question_id, body)] = gw.deliverer.answers
    assert (claims.workflow_id, claims.operation_id, claims.key_id) == (
        RUN,
        f"question/{QUESTION}",
        "k1",
    )
    assert claims.nonce
    assert question_id == QUESTION
    assert body == AnswerBody(
        action="accept", content={"region": "EMEA", "rows": 3}, responder="ana"
    )
    assert gw.deliverer.calls == [] and gw.deliverer.decisions == []


async def test_decline_with_defaults(gw: Gateway) -> None:
    response = await gw.client.post(URL, json={"action": "decline"}, headers=gw.auth())

    assert response.json()["question_status"] == "declined"
    [(_, _, body)] = gw.deliverer.answers
    assert body == AnswerBody(action="decline", content=None, responder="unknown")


@pytest.mark.parametrize("number", [b"NaN", b"-Infinity", b"1e999"])
async def test_an_answer_with_a_number_json_cannot_keep_is_refused(
    gw: Gateway, number: bytes
) -> None:
    body = b'{"action": "accept", "content": {"region": "EMEA", "rows": ' + number + b"}}"

    response = await gw.client.post(
        URL, content=body, headers={**gw.auth(), "Content-Type": "application/json"}
    )

    assert assert_error(response, 422, "non_finite_number").startswith("content.rows: NaN, ")
    assert gw.deliverer.answers == []


async def test_an_answer_the_job_did_not_take_is_still_accepted(gw: Gateway) -> None:
    # The run applied it (the question is closed): the job refusing it is news, not an error
    # the sender could fix by retrying.
    gw.deliverer.script.append(
        AnswerOutcome(
            accepted=True, status="answered", delivered=False, reason="job exp_1 has ended"
        )
    )

    response = await gw.client.post(URL, json=ACCEPT, headers=gw.auth())

    assert response.status_code == 200, response.text
    assert response.json() == {
        "status": "accepted",
        "question_id": QUESTION,
        "question_status": "answered",
        "delivered": False,
        "reason": "job exp_1 has ended",
    }


async def test_an_answer_the_run_did_not_accept_is_409(gw: Gateway) -> None:
    gw.deliverer.script.append(AnswerOutcome(accepted=False, status="expired"))

    response = await gw.client.post(URL, json=ACCEPT, headers=gw.auth())

    assert assert_error(response, 409, "not_accepted") == "the question is expired"


async def test_accepted_answers_are_counted(gw: Gateway) -> None:
    def accepted(metrics: str) -> float:
        prefix = 'waitstate_gateway_accepted_total{endpoint="answer"} '
        return sum(
            float(line[len(prefix) :]) for line in metrics.splitlines() if line.startswith(prefix)
        )

    before = accepted((await gw.client.get("/metrics")).text)
    await gw.client.post(URL, json=ACCEPT, headers=gw.auth())
    gw.deliverer.script.append(DeliveryRefused(409, "already answered", code="question_closed"))
    await gw.client.post(URL, json=ACCEPT, headers=gw.auth())
    after = accepted((await gw.client.get("/metrics")).text)

    assert after - before == 1


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


VALID = json.dumps(ACCEPT).encode()
TOO_LARGE = b'{"action": "decline", "responder": "' + b"x" * MAX_BODY + b'"}'
ANOTHER_QUESTION = "token was issued for another question"


# Every refusal the gateway answers before the run is asked: checks cheapest first.
@pytest.mark.parametrize(
    ("headers", "body", "status", "code", "says"),
    [
        pytest.param(lambda gw: {}, VALID, 401, "missing_token", "Bearer", id="no-token"),
        pytest.param(
            lambda gw: bearer("not-a-token"), VALID, 401, "invalid_token", "token", id="garbage"
        ),
        pytest.param(
            lambda gw: gw.auth(OP), VALID, 401, "wrong_question", ANOTHER_QUESTION, id="op-token"
        ),
        pytest.param(
            # An operation that happens to be named like the question.
            lambda gw: gw.auth(QUESTION),
            VALID,
            401,
            "wrong_question",
            ANOTHER_QUESTION,
            id="op-token-same-name",
        ),
        pytest.param(
            # An approval request's link, for a request named like the question.
            lambda gw: gw.auth(approval_subject(QUESTION)),
            VALID,
            401,
            "wrong_question",
            ANOTHER_QUESTION,
            id="approval-token",
        ),
        pytest.param(
            lambda gw: gw.auth(approval_subject(QUESTION, "approve")),
            VALID,
            401,
            "wrong_question",
            ANOTHER_QUESTION,
            id="one-click-approval-token",
        ),
        pytest.param(
            lambda gw: gw.auth(question_subject("q_2")),
            VALID,
            401,
            "wrong_question",
            ANOTHER_QUESTION,
            id="another-question",
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
        pytest.param(lambda gw: {}, b"not json", 401, "missing_token", "Bearer", id="auth-first"),
        pytest.param(Gateway.auth, b"not json", 422, "invalid_json", "JSON", id="not-json"),
        pytest.param(Gateway.auth, b"", 422, "invalid_json", "JSON", id="empty"),
        pytest.param(Gateway.auth, b"[]", 422, "invalid_answer", "body", id="not-an-object"),
        pytest.param(
            Gateway.auth,
            b'{"action": "maybe"}',
            422,
            "invalid_answer",
            "action: Input should be 'accept' or 'decline'",
            id="unknown-action",
        ),
        pytest.param(
            Gateway.auth,
            b'{"content": {"region": "EMEA"}}',
            422,
            "invalid_answer",
            "action: Field required",
            id="no-action",
        ),
        pytest.param(
            Gateway.auth,
            b'{"action": "accept", "content": ["EMEA"]}',
            422,
            "invalid_answer",
            "content",
            id="content-not-an-object",
        ),
        pytest.param(
            Gateway.auth,
            b'{"action": "decline", "responder": "' + b"r" * 201 + b'"}',
            422,
            "invalid_answer",
            "responder",
            id="responder-too-long",
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
    assert gw.deliverer.answers == []


@pytest.mark.parametrize(
    ("url", "body", "code"),
    [
        (f"/v1/operations/{QUESTION}/complete", {"status": "succeeded"}, "wrong_operation"),
        (f"/v1/approvals/{QUESTION}/decision", {"decision": "approve"}, "wrong_request"),
    ],
)
async def test_a_question_token_is_refused_by_the_other_endpoints(
    gw: Gateway, url: str, body: dict[str, Any], code: str
) -> None:
    response = await gw.client.post(url, json=body, headers=gw.auth())

    assert_error(response, 401, code)
    assert gw.deliverer.calls == [] and gw.deliverer.decisions == []


async def test_openapi_documents_the_answer_endpoint(gw: Gateway) -> None:
    doc = (await gw.client.get("/openapi.json")).json()

    post = doc["paths"]["/v1/questions/{question_id}/answer"]["post"]
    assert post["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/AnswerBody"
    }
    responses = post["responses"]
    assert set(responses) == {"200", "401", "403", "404", "409", "410", "413", "422", "503"}
    for status in set(responses) - {"200"}:
        schema = responses[status]["content"]["application/json"]["schema"]
        assert schema == {"$ref": "#/components/schemas/ErrorBody"}, status
    assert "question" in responses["401"]["description"]
    assert responses["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/AnswerAccepted"
    }
    schemas = doc["components"]["schemas"]
    assert set(schemas["AnswerBody"]["properties"]) == {"action", "content", "responder"}
    assert schemas["AnswerBody"]["required"] == ["action"]
    assert set(schemas["AnswerAccepted"]["properties"]) == {
        "status",
        "question_id",
        "question_status",
        "delivered",
        "reason",
    }
    [scheme_name] = post["security"][0]
    assert doc["components"]["securitySchemes"][scheme_name]["scheme"] == "bearer"
    assert {"Completion", "DecisionBody"} <= set(schemas)


# TemporalDeliverer.answer, with a stand-in for the workflow handle, behind the real app: each
# refusal Temporal or the run's validator can give, followed to its HTTP answer.

Scripted = AnswerOutcome | BaseException | Callable[[AnswerInput], AnswerOutcome]


@dataclass
class FakeHandle:
    """Records `execute_update` calls; answers from `script` (an outcome, an error, or how to
    answer the Update's input)."""

    script: list[Scripted] = field(default_factory=list)
    updates: list[tuple[Any, AnswerInput, str]] = field(default_factory=list)

    async def execute_update(
        self, update: Any, arg: AnswerInput, *, id: str, result_type: type[Any]
    ) -> AnswerOutcome:
        assert result_type is AnswerOutcome
        self.updates.append((update, arg, id))
        answer = self.script.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer if isinstance(answer, AnswerOutcome) else answer(arg)


@dataclass
class FakeClient:
    handle: FakeHandle = field(default_factory=FakeHandle)
    workflow_ids: list[str] = field(default_factory=list)

    def get_workflow_handle(self, workflow_id: str) -> FakeHandle:
        self.workflow_ids.append(workflow_id)
        return self.handle


TOKENS = ResumeTokens({"k1": GATEWAY_SECRET}, "k1")
NONCE = "nonce-of-the-link"
CLAIMS = ResumeClaims(
    workflow_id=RUN,
    operation_id=question_subject(QUESTION),
    nonce=NONCE,
    expires_at=datetime(2030, 1, 1, tzinfo=UTC),
    key_id="k1",
)
BODY = AnswerBody(action="accept", content={"region": "EMEA"}, responder="ana")


@pytest.fixture
async def through_temporal() -> AsyncIterator[tuple[httpx.AsyncClient, FakeHandle]]:
    """The app over the real deliverer and a fake Temporal client, and the fake handle."""
    client = FakeClient()
    app = create_app(TemporalDeliverer(cast(Client, client)), TOKENS, max_body_bytes=MAX_BODY)
    token = TOKENS.mint(
        RUN, question_subject(QUESTION), datetime.now(UTC) + timedelta(hours=1), nonce=NONCE
    ).token
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://gateway", headers=bearer(token)
    ) as http:
        yield http, client.handle


def _update_failed(error_type: str | None, message: str) -> WorkflowUpdateFailedError:
    return WorkflowUpdateFailedError(ApplicationError(message, type=error_type))


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (_update_failed(QUESTION_UNKNOWN, "no question q_1"), 404, "question_unknown"),
        (
            _update_failed(QUESTION_NONCE_MISMATCH, "link was not issued for this question"),
            401,
            "nonce_mismatch",
        ),
        (_update_failed(QUESTION_CLOSED, "question already answered"), 409, "question_closed"),
        (
            _update_failed(QUESTION_NOT_YOURS, "question q_1 is the model's to answer"),
            403,
            "question_not_yours",
        ),
        (
            _update_failed(QUESTION_INVALID_ANSWER, "invalid answer: rows: 'x' is not an integer"),
            422,
            "invalid_answer",
        ),
        (_update_failed(None, "the run was cancelled"), 409, "refused"),
        (
            RPCError("workflow execution already completed", RPCStatusCode.NOT_FOUND, b""),
            409,
            "run_ended",
        ),
        (
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
async def test_the_runs_refusals_are_mapped_to_http_answers(
    through_temporal: tuple[httpx.AsyncClient, FakeHandle],
    error: BaseException,
    status: int,
    code: str,
) -> None:
    http, handle = through_temporal
    handle.script.append(error)

    response = await http.post(URL, json=ACCEPT)

    message = assert_error(response, status, code)
    if isinstance(error, WorkflowUpdateFailedError):
        assert isinstance(error.cause, ApplicationError)
        assert message == error.cause.message
    assert len(handle.updates) == 1


async def test_the_answer_update_carries_the_links_nonce(
    through_temporal: tuple[httpx.AsyncClient, FakeHandle],
) -> None:
    http, handle = through_temporal
    handle.script.append(
        lambda arg: AnswerOutcome(
            accepted=True, status="answered", delivered=True, delivery_id=arg.delivery_id
        )
    )

    response = await http.post(URL, json=ACCEPT)

    assert response.status_code == 200, response.text
    assert response.json()["delivered"] is True
    [(update, arg, update_id)] = handle.updates
    assert update == ANSWER_UPDATE
    assert arg == AnswerInput(
        question_id=QUESTION,
        action="accept",
        content={"region": "EMEA", "rows": 3},
        responder="ana",
        nonce=NONCE,
        delivery_id=arg.delivery_id,
    )
    assert arg.delivery_id, "each request has its own delivery id"
    assert update_id.startswith(f"answer/{QUESTION}/")


def deliverer_for(*script: Scripted) -> tuple[TemporalDeliverer, FakeClient]:
    client = FakeClient(FakeHandle(list(script)))
    return TemporalDeliverer(cast(Client, client)), client


async def test_identical_answers_share_one_update_and_copies_get_its_outcome() -> None:
    # A burst of identical answers is one Update, applied once (Temporal caps a run's in-flight
    # Updates, and answers every request reusing an Update id with the first one's outcome).
    # Unlike a decision's copy, an answer's is not refused: the Update lasts until the job has
    # the answer, long enough for a sender to time out and retry, and the retry must learn what
    # became of it.
    sent: list[AnswerInput] = []

    def first_outcome(arg: AnswerInput) -> AnswerOutcome:
        sent.append(arg)
        return AnswerOutcome(
            accepted=True, status="answered", delivered=True, delivery_id=sent[0].delivery_id
        )

    deliverer, client = deliverer_for(first_outcome, first_outcome)
    first = await deliverer.answer(CLAIMS, QUESTION, BODY)
    copy = await deliverer.answer(CLAIMS, QUESTION, BODY)

    ids = [update_id for _, _, update_id in client.handle.updates]
    assert ids == [answer_update_id(QUESTION, BODY)] * 2
    assert copy == first and first.delivered
    assert sent[0].delivery_id != sent[1].delivery_id, "each request has its own delivery id"
    assert client.workflow_ids == [RUN] * 2


def test_answers_are_known_by_their_question_and_body() -> None:
    same = AnswerBody.model_validate(
        {"responder": "ana", "content": {"region": "EMEA"}, "action": "accept"}
    )
    assert answer_update_id(QUESTION, BODY) == answer_update_id(QUESTION, same)
    assert answer_update_id(QUESTION, BODY).startswith(f"answer/{QUESTION}/")
    assert answer_update_id(QUESTION, BODY) != answer_update_id("q_2", BODY)
    for other in (
        BODY.model_copy(update={"responder": "lee"}),
        BODY.model_copy(update={"content": {"region": "APAC"}}),
        AnswerBody(action="decline", responder="ana"),
    ):
        assert answer_update_id(QUESTION, BODY) != answer_update_id(QUESTION, other)
