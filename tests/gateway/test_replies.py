"""What both routes of a person's reply through a link do alike, each case run for decisions on
approval requests and for answers to questions: the one reply delivered with its claims, a
reply with the body's defaults, every refusal before the run is asked, a token of their links
refused by the other endpoints, the run's refusals passed on, the fields their OpenAPI document
gives, and each refusal of the run's Update followed through the real deliverer to its HTTP
answer.

What only one family does is in `test_approvals.py` and `test_questions.py`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any

import httpx
import pytest
from pydantic import BaseModel
from temporalio.client import WorkflowExecutionStatus, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from tests.gateway.replies import (
    TEMPORAL_REFUSALS,
    FakeHandle,
    Refusal,
    refusals_before_the_run,
    refused,
    the_one_reply,
    through_temporal,
    update_failed,
)
from tests.helpers import assert_error, not_json
from tests.rigs import MAX_BODY, Gateway
from tests.upstream import pydantic_says
from waitstate.auth.tokens import approval_subject, question_subject
from waitstate.gateway.delivery import DeliveryRefused
from waitstate.schemas.approvals import DecideOutcome, DecisionBody
from waitstate.schemas.errors import (
    APPROVAL_DECIDED,
    APPROVAL_NONCE_MISMATCH,
    APPROVAL_UNKNOWN,
    QUESTION_CLOSED,
    QUESTION_INVALID_ANSWER,
    QUESTION_NONCE_MISMATCH,
    QUESTION_NOT_YOURS,
    QUESTION_UNKNOWN,
)
from waitstate.schemas.questions import AnswerBody, AnswerOutcome

DELIVERIES = ("calls", "decisions", "answers")  # the recording deliverer's lists


@dataclass(frozen=True)
class Family:
    """A route of replies as its tests need it: where it is, what its links' tokens are for,
    a valid reply and one over the gateway's limit, how its refusals name it (as its route's
    `Reply` does), where the recording deliverer keeps its replies and what the run's Update
    answers."""

    url: str
    subject: str
    reply_to: str
    another: str  # the subject of another one of the kind
    valid: dict[str, Any]
    too_large: bytes
    kind: str
    invalid_code: str
    deliveries: str
    body: type[BaseModel]  # what a reply's body is read as
    outcome: type[BaseModel]

    def delivered(self, gw: Gateway) -> list[Any]:
        """The replies of this family the recording deliverer took."""
        replies: list[Any] = getattr(gw.deliverer, self.deliveries)
        return replies


REQUEST = "apr_1"
DECISIONS = Family(
    url=f"/v1/approvals/{REQUEST}/decision",
    subject=approval_subject(REQUEST),
    reply_to=REQUEST,
    another=approval_subject("apr_2"),
    valid={"decision": "approve", "reviewer": "ana", "comment": "fine by me"},
    too_large=b'{"decision": "approve", "comment": "' + b"x" * MAX_BODY + b'"}',
    kind="request",
    invalid_code="invalid_decision",
    deliveries="decisions",
    body=DecisionBody,
    outcome=DecideOutcome,
)
QUESTION = "q_1"
ANSWERS = Family(
    url=f"/v1/questions/{QUESTION}/answer",
    subject=question_subject(QUESTION),
    reply_to=QUESTION,
    another=question_subject("q_2"),
    valid={"action": "accept", "content": {"region": "EMEA", "rows": 3}, "responder": "ana"},
    too_large=b'{"action": "decline", "responder": "' + b"x" * MAX_BODY + b'"}',
    kind="question",
    invalid_code="invalid_answer",
    deliveries="answers",
    body=AnswerBody,
    outcome=AnswerOutcome,
)


def cases(family: Family, *family_cases: Any) -> list[Any]:
    """`family_cases` (`pytest.param`s) with `family` first in each, named after it."""
    return [
        pytest.param(family, *case.values, marks=case.marks, id=f"{family.deliveries}-{case.id}")
        for case in family_cases
    ]


@pytest.fixture
def gw(served: Gateway, family: Family) -> Gateway:
    """The module's gateway, cleared, its tokens minted for the family's links."""
    served.deliverer.clear()
    return replace(served, subject=family.subject)


@pytest.mark.parametrize(
    ("family", "accepted", "body"),
    [
        *cases(
            DECISIONS,
            pytest.param(
                {"status": "accepted", "request_id": REQUEST, "approval_status": "approved"},
                DecisionBody(decision="approve", reviewer="ana", comment="fine by me"),
                id="approve",
            ),
        ),
        *cases(
            ANSWERS,
            pytest.param(
                {
                    "status": "accepted",
                    "question_id": QUESTION,
                    "question_status": "answered",
                    "delivered": True,
                    "reason": "",
                },
                AnswerBody(action="accept", content={"region": "EMEA", "rows": 3}, responder="ana"),
                id="accept",
            ),
        ),
    ],
)
async def test_a_reply_is_delivered_once_with_its_claims(
    gw: Gateway, family: Family, accepted: dict[str, Any], body: BaseModel
) -> None:
    response = await gw.client.post(family.url, json=family.valid, headers=gw.auth())

    assert response.status_code == 200, response.text
    assert response.json() == accepted
    assert the_one_reply(family.delivered(gw), family.subject, family.reply_to) == body
    for others in DELIVERIES:
        if others != family.deliveries:
            assert getattr(gw.deliverer, others) == [], others


@pytest.mark.parametrize(
    ("family", "sent", "status", "body"),
    [
        *cases(
            DECISIONS,
            pytest.param(
                {"decision": "reject"},
                {"approval_status": "rejected"},
                DecisionBody(decision="reject", reviewer="unknown", comment=""),
                id="reject",
            ),
        ),
        *cases(
            ANSWERS,
            pytest.param(
                {"action": "decline"},
                {"question_status": "declined"},
                AnswerBody(action="decline", content=None, responder="unknown"),
                id="decline",
            ),
        ),
    ],
)
async def test_a_reply_with_the_bodys_defaults(
    gw: Gateway, family: Family, sent: dict[str, Any], status: dict[str, str], body: BaseModel
) -> None:
    response = await gw.client.post(family.url, json=sent, headers=gw.auth())

    [(field, value)] = status.items()
    assert response.json()[field] == value
    [(_, _, delivered)] = family.delivered(gw)
    assert delivered == body


def refusals(family: Family, *own: Any) -> list[Any]:
    """The cases of `test_refused_before_the_run` for `family`: those of every reply route,
    then its `own` (`refused` params)."""
    valid = json.dumps(family.valid).encode()
    every_route = refusals_before_the_run(
        kind=family.kind,
        reply_to=family.reply_to,
        another=family.another,
        valid=valid,
        too_large=family.too_large,
        model=family.body,
        invalid_code=family.invalid_code,
    )
    return cases(family, *every_route, *own)


def invalid_field(family: Family, body: bytes, field: str, kind: str, *, id: str) -> Any:
    """A `refused` case: a body the family's model refuses for `field` (pydantic's error
    `kind`), answered with the family's invalid code, the field's path and pydantic's reason."""
    says = f"{field}: {pydantic_says(family.body, body, kind)}"
    return refused(Gateway.auth, body, 422, family.invalid_code, says, id=id)


# Every refusal the gateway answers before the run is asked: checks cheapest first.
@pytest.mark.parametrize(
    ("family", "refusal"),
    [
        *refusals(
            DECISIONS,
            refused(
                Gateway.auth,
                b'{"decision": "approve",',
                422,
                "invalid_json",
                not_json(DecisionBody, b'{"decision": "approve",'),
                id="cut-short",
            ),
            invalid_field(
                DECISIONS,
                b'{"decision": "maybe"}',
                "decision",
                "literal_error",
                id="unknown-decision",
            ),
            invalid_field(
                DECISIONS, b'{"reviewer": "ana"}', "decision", "missing", id="no-decision"
            ),
            refused(
                Gateway.auth,
                b'{"decision": "approve", "reviewer": "' + b"r" * 201 + b'"}',
                422,
                "invalid_decision",
                "reviewer",
                id="reviewer-too-long",
            ),
        ),
        *refusals(
            ANSWERS,
            refused(
                # An approval request's link, for a request named like the question.
                lambda gw: gw.auth(approval_subject(QUESTION)),
                json.dumps(ANSWERS.valid).encode(),
                401,
                "wrong_question",
                "token was issued for another question",
                id="approval-token",
            ),
            refused(
                lambda gw: gw.auth(approval_subject(QUESTION, "approve")),
                json.dumps(ANSWERS.valid).encode(),
                401,
                "wrong_question",
                "token was issued for another question",
                id="one-click-approval-token",
            ),
            invalid_field(
                ANSWERS, b'{"action": "maybe"}', "action", "literal_error", id="unknown-action"
            ),
            invalid_field(
                ANSWERS, b'{"content": {"region": "EMEA"}}', "action", "missing", id="no-action"
            ),
            refused(
                Gateway.auth,
                b'{"action": "accept", "content": ["EMEA"]}',
                422,
                "invalid_answer",
                "content",
                id="content-not-an-object",
            ),
            refused(
                Gateway.auth,
                b'{"action": "decline", "responder": "' + b"r" * 201 + b'"}',
                422,
                "invalid_answer",
                "responder",
                id="responder-too-long",
            ),
        ),
    ],
)
async def test_refused_before_the_run(gw: Gateway, family: Family, refusal: Refusal) -> None:
    await refusal.check(gw, family.url)

    assert family.delivered(gw) == []


@pytest.mark.parametrize(
    ("family", "url", "body", "status", "code"),
    [
        *cases(
            DECISIONS,
            pytest.param(
                f"/v1/operations/{REQUEST}/complete",
                {"status": "succeeded", "result": 1},
                401,
                "wrong_operation",
                id="operations",
            ),
            pytest.param(
                # The path's operation id is one segment, so the subject itself cannot be sent:
                # an encoded slash is decoded before routing and matches no route.
                f"/v1/operations/approval%2F{REQUEST}/complete",
                {"status": "succeeded", "result": 1},
                404,
                "not_found",
                id="operations-subject",
            ),
        ),
        *cases(
            ANSWERS,
            pytest.param(
                f"/v1/operations/{QUESTION}/complete",
                {"status": "succeeded"},
                401,
                "wrong_operation",
                id="operations",
            ),
            pytest.param(
                f"/v1/approvals/{QUESTION}/decision",
                {"decision": "approve"},
                401,
                "wrong_request",
                id="approvals",
            ),
        ),
    ],
)
async def test_a_replys_token_is_refused_by_the_other_endpoints(
    gw: Gateway, family: Family, url: str, body: dict[str, Any], status: int, code: str
) -> None:
    response = await gw.client.post(url, json=body, headers=gw.auth())

    assert_error(response, status, code)
    for deliveries in DELIVERIES:
        assert getattr(gw.deliverer, deliveries) == [], deliveries


def passed_on(refused: DeliveryRefused, code: str, id: str) -> Any:
    """A case of a refusal the caller gets as the run gave it: its status and message, and
    `code` (the refusal's own, else its status's)."""
    return pytest.param(refused, refused.status, code, refused.message, id=id)


# What the run (or the deliverer on its behalf) answers, passed on to the caller.
@pytest.mark.parametrize(
    ("family", "answer", "status", "code", "message"),
    [
        *cases(
            DECISIONS,
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
            passed_on(
                DeliveryRefused(409, "request already rejected", code="approval_decided"),
                "approval_decided",
                id="decided",
            ),
            passed_on(DeliveryRefused(409, "the run has ended"), "conflict", id="ended"),
            passed_on(
                DeliveryRefused(404, "no approval request apr_1", code="approval_unknown"),
                "approval_unknown",
                id="unknown",
            ),
            passed_on(
                DeliveryRefused(401, "link was not issued for this request"),
                "unauthorized",
                id="nonce",
            ),
            passed_on(
                DeliveryRefused(503, "Temporal is unavailable; retry later"),
                "service_unavailable",
                id="unavailable",
            ),
            pytest.param(
                RuntimeError("secret internals"),
                500,
                "internal_error",
                "the gateway failed; retry later",
                id="deliverer-bug",
            ),
        ),
        *cases(
            ANSWERS,
            pytest.param(
                AnswerOutcome(accepted=False, status="expired"),
                409,
                "not_accepted",
                "the question is expired",
                id="not-accepted-no-reason",
            ),
        ),
    ],
)
async def test_the_runs_refusals_pass_through(
    gw: Gateway,
    family: Family,
    answer: DecideOutcome | AnswerOutcome | Exception,
    status: int,
    code: str,
    message: str,
) -> None:
    gw.deliverer.script.append(answer)

    response = await gw.client.post(family.url, json=family.valid, headers=gw.auth())

    assert assert_error(response, status, code) == message
    assert len(family.delivered(gw)) == 1


@pytest.mark.parametrize(
    ("family", "body", "fields", "required", "choices", "accepted", "accepted_fields"),
    [
        *cases(
            DECISIONS,
            pytest.param(
                "DecisionBody",
                {"decision", "reviewer", "comment"},
                ["decision"],
                ("decision", ["approve", "reject"]),
                "DecisionAccepted",
                {"status", "request_id", "approval_status"},
                id="openapi",
            ),
        ),
        *cases(
            ANSWERS,
            pytest.param(
                "AnswerBody",
                {"action", "content", "responder"},
                ["action"],
                ("action", ["accept", "decline"]),
                "AnswerAccepted",
                {"status", "question_id", "question_status", "delivered", "reason"},
                id="openapi",
            ),
        ),
    ],
)
async def test_openapi_documents_the_reply_fields(
    gw: Gateway,
    family: Family,
    body: str,
    fields: set[str],
    required: list[str],
    choices: tuple[str, list[str]],
    accepted: str,
    accepted_fields: set[str],
) -> None:
    # test_openapi.py checks what every route documents (its body, answer, statuses and token)
    # and finds every body's schema; here, the reply routes' fields.
    schemas = (await gw.client.get("/openapi.json")).json()["components"]["schemas"]

    assert set(schemas[body]["properties"]) == fields
    choice, values = choices
    assert schemas[body]["properties"][choice]["enum"] == values
    assert schemas[body]["required"] == required
    assert set(schemas[accepted]["properties"]) == accepted_fields


# `TemporalDeliverer` behind the real app, with a stand-in for the workflow handle: each refusal
# Temporal or the run's validator can give, followed to its HTTP answer.

ThroughTemporal = tuple[httpx.AsyncClient, FakeHandle[Any]]


@pytest.fixture
async def temporal_behind(family: Family) -> AsyncIterator[ThroughTemporal]:
    """The app over the real deliverer and a fake Temporal client, sending a token of the
    family's link, and the fake handle."""
    async with through_temporal(family.outcome, family.subject, "nonce-of-the-link") as app:
        yield app


def mapped(
    error: BaseException,
    status: int,
    code: str,
    run: WorkflowExecutionStatus | None = WorkflowExecutionStatus.RUNNING,
) -> Any:
    """A case of `test_the_runs_refusals_are_mapped_to_http_answers`: the `error` an Update
    fails with, the sender's answer, and the `run` as Temporal describes it (None: no such
    run)."""
    kind = error.status.name if isinstance(error, RPCError) else type(error).__name__
    shown = "none" if run is None else run.name.lower()
    return pytest.param(error, run, status, code, id=f"{code}-{kind}-{shown}")


@pytest.mark.parametrize(
    ("family", "error", "run", "status", "code"),
    [
        *cases(
            DECISIONS,
            mapped(
                update_failed(APPROVAL_UNKNOWN, "no approval request apr_1"),
                404,
                "approval_unknown",
            ),
            mapped(
                update_failed(APPROVAL_NONCE_MISMATCH, "link was not issued for this request"),
                401,
                "nonce_mismatch",
            ),
            mapped(
                update_failed(APPROVAL_DECIDED, "request already approved"), 409, "approval_decided"
            ),
            *[mapped(error, *answer, run) for error, run, *answer in TEMPORAL_REFUSALS],
        ),
        *cases(
            ANSWERS,
            mapped(update_failed(QUESTION_UNKNOWN, "no question q_1"), 404, "question_unknown"),
            mapped(
                update_failed(QUESTION_NONCE_MISMATCH, "link was not issued for this question"),
                401,
                "nonce_mismatch",
            ),
            mapped(
                update_failed(QUESTION_CLOSED, "question already answered"), 409, "question_closed"
            ),
            mapped(
                update_failed(QUESTION_NOT_YOURS, "question q_1 is the model's to answer"),
                403,
                "question_not_yours",
            ),
            mapped(
                update_failed(
                    QUESTION_INVALID_ANSWER, "invalid answer: rows: 'x' is not an integer"
                ),
                422,
                "invalid_answer",
            ),
            *[mapped(error, *answer, run) for error, run, *answer in TEMPORAL_REFUSALS],
        ),
    ],
)
async def test_the_runs_refusals_are_mapped_to_http_answers(
    temporal_behind: ThroughTemporal,
    family: Family,
    error: BaseException,
    run: WorkflowExecutionStatus | None,
    status: int,
    code: str,
) -> None:
    http, handle = temporal_behind
    handle.script.append(error)
    handle.run = run

    response = await http.post(family.url, json=family.valid)

    message = assert_error(response, status, code)
    if isinstance(error, WorkflowUpdateFailedError):
        assert isinstance(error.cause, ApplicationError)
        assert message == error.cause.message
    assert len(handle.updates) == 1
