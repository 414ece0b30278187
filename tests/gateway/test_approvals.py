"""Approval links, fast and against stand-ins: the decision endpoint over real HTTP with a
recording deliverer, and `TemporalDeliverer.decide` with a fake workflow handle. What the
decision endpoint does as the answer endpoint does (a decision delivered, refused before the
run or by the other endpoints, the run's refusals passed on and mapped, its fields documented)
is in `test_replies.py`.

What these and those prove about runs is proved again against real runs, through the real
deliverer, in `test_real_server.py`, except the answers to outcomes no run gives today (a
decision recorded but not applied, a refusal of no known type, a run ending mid-Update: in
`test_replies.py`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.gateway.replies import (
    deliverer_for,
    link_claims,
)
from tests.helpers import assert_error
from tests.rigs import RUN, Gateway, running_gateway
from waitstate.auth.tokens import approval_subject
from waitstate.gateway.delivery import DeliveryRefused
from waitstate.names import DECIDE_UPDATE
from waitstate.schemas.approvals import DecideInput, DecideOutcome, DecisionBody

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


# TemporalDeliverer.decide, with a stand-in for the workflow handle (each refusal Temporal or the
# run can give is followed to its HTTP answer in test_replies.py).

CLAIMS = link_claims(approval_subject(REQUEST), "nonce-of-the-link")
BODY = DecisionBody(decision="reject", reviewer="ana", comment="too much")


async def test_decide_sends_the_decide_update_with_the_links_nonce() -> None:
    outcome = DecideOutcome(accepted=True, status="rejected")
    deliverer, client = deliverer_for(DecideOutcome, outcome)

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

    deliverer, client = deliverer_for(DecideOutcome, first_outcome, first_outcome)
    assert (await deliverer.decide(CLAIMS, REQUEST, BODY)).accepted
    with pytest.raises(DeliveryRefused) as copy:
        await deliverer.decide(CLAIMS, REQUEST, BODY)

    ids = [update_id for _, _, update_id in client.handle.updates]
    assert len(set(ids)) == 1 and ids[0].startswith(f"decide/{REQUEST}/")
    assert (copy.value.status, copy.value.code) == (409, "duplicate_decision")


async def test_decide_returns_an_outcome_the_run_did_not_accept() -> None:
    # The app answers it with 409; the deliverer reports what the run said.
    outcome = DecideOutcome(accepted=False, status="expired", reason="too late")
    deliverer, _ = deliverer_for(DecideOutcome, outcome)

    assert await deliverer.decide(CLAIMS, REQUEST, BODY) == outcome
