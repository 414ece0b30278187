"""Question links, fast and against stand-ins: the answer endpoint over real HTTP with a
recording deliverer, and the same endpoint over `TemporalDeliverer.answer` with a fake workflow
handle. What the answer endpoint does as the decision endpoint does (an answer delivered,
refused before the run or by the other endpoints, the run's refusals passed on, its fields
documented, each refusal of the run's `answer` Update followed to its HTTP answer) is in
`test_replies.py`.

Real runs asking real questions are proved in the workflow tests.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.gateway.replies import (
    FakeHandle,
    deliverer_for,
    link_claims,
    through_temporal,
)
from tests.helpers import assert_error
from tests.rigs import RUN, Gateway, running_gateway
from waitstate.auth.tokens import approval_subject, question_subject
from waitstate.client._updates import answer_update_id
from waitstate.gateway.delivery import DeliveryRefused
from waitstate.names import ANSWER_UPDATE
from waitstate.schemas.questions import AnswerBody, AnswerInput, AnswerOutcome

QUESTION = "q_1"
URL = f"/v1/questions/{QUESTION}/answer"
ACCEPT = {"action": "accept", "content": {"region": "EMEA", "rows": 3}, "responder": "ana"}


@pytest.fixture(scope="module")
async def served() -> AsyncIterator[Gateway]:
    async with running_gateway(question_subject(QUESTION)) as gateway:
        yield gateway


def answered(*, delivered: bool = True, reason: str = "") -> dict[str, Any]:
    """The gateway's answer to an answer the run applied to the question, and whether the job
    took it."""
    return {
        "status": "accepted",
        "question_id": QUESTION,
        "question_status": "answered",
        "delivered": delivered,
        "reason": reason,
    }


def test_question_subject_cannot_be_an_operation_id() -> None:
    assert question_subject(QUESTION) == f"question/{QUESTION}"
    assert question_subject(QUESTION) not in (QUESTION, approval_subject(QUESTION))


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
    assert response.json() == answered(delivered=False, reason="job exp_1 has ended")


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


# TemporalDeliverer.answer, with a stand-in for the workflow handle (behind the real app, or
# alone). Each refusal of the run's Update is followed to its HTTP answer in test_replies.py.

NONCE = "nonce-of-the-link"
CLAIMS = link_claims(question_subject(QUESTION), NONCE)
BODY = AnswerBody(action="accept", content={"region": "EMEA"}, responder="ana")


# The app's client and the fake handle of the Temporal client behind it.
ThroughTemporal = tuple[httpx.AsyncClient, FakeHandle[AnswerOutcome]]


@pytest.fixture
async def temporal_behind() -> AsyncIterator[ThroughTemporal]:
    """The app over the real deliverer and a fake Temporal client, and the fake handle."""
    async with through_temporal(AnswerOutcome, question_subject(QUESTION), NONCE) as app:
        yield app


async def test_the_answer_update_carries_the_links_nonce(
    temporal_behind: ThroughTemporal,
) -> None:
    http, handle = temporal_behind
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

    deliverer, client = deliverer_for(AnswerOutcome, first_outcome, first_outcome)
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
