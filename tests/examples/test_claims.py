"""The demo claims desk and approvals outbox over real HTTP: claims, refunds, outbox, hooks."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.examples.systems_helpers import set_faults, stats


async def refund(
    client: httpx.AsyncClient, key: str | None, claim_id: str, amount: Any
) -> httpx.Response:
    headers = {"Idempotency-Key": key} if key is not None else {}
    return await client.post(
        "/refunds", json={"claim_id": claim_id, "amount": amount}, headers=headers
    )


async def refunds(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    body: list[dict[str, Any]] = (await client.get("/refunds")).json()
    return body


# --- Claims --------------------------------------------------------------------------------


async def test_valid_claims_are_seeded(client: httpx.AsyncClient) -> None:
    big = await client.get("/claims/C-118")
    small = await client.get("/claims/C-200")

    assert big.status_code == small.status_code == 200
    assert big.json() == {
        "claim_id": "C-118",
        "valid": True,
        "amount": 420.0,
        "customer": "Dana Whitfield",
    }
    assert small.json() == {
        "claim_id": "C-200",
        "valid": True,
        "amount": 80.0,
        "customer": "Omar Haddad",
    }


async def test_an_invalid_claim_says_why(client: httpx.AsyncClient) -> None:
    response = await client.get("/claims/C-999")

    assert response.status_code == 200
    assert response.json() == {
        "claim_id": "C-999",
        "valid": False,
        "amount": 300.0,
        "customer": "Lena Vogt",
        "reason": "policy lapsed",
    }


async def test_an_unknown_claim_is_404(client: httpx.AsyncClient) -> None:
    response = await client.get("/claims/C-404")

    assert response.status_code == 404
    assert response.json() == {"detail": "no claim C-404"}


# --- Refunds -------------------------------------------------------------------------------


async def test_a_refund_is_issued_once_per_key(client: httpx.AsyncClient) -> None:
    first = await refund(client, "key-1", "C-200", 80.0)
    again = await refund(client, "key-1", "C-200", 80)

    assert first.status_code == 201
    assert again.status_code == 200
    assert (
        first.json() == again.json() == {"refund_id": "rfd_1", "claim_id": "C-200", "amount": 80.0}
    )
    assert await refunds(client) == [first.json()]
    assert (await stats(client))["refund_keys"] == {"key-1": {"requests": 2, "refund_id": "rfd_1"}}


async def test_concurrent_requests_with_one_key_issue_one_refund(
    client: httpx.AsyncClient,
) -> None:
    answers = await asyncio.gather(*(refund(client, "key-c", "C-118", 420.0) for _ in range(5)))

    assert sorted(answer.status_code for answer in answers) == [200, 200, 200, 200, 201]
    assert {answer.json()["refund_id"] for answer in answers} == {"rfd_1"}
    assert len(await refunds(client)) == 1


async def test_a_refund_without_a_key_is_refused(client: httpx.AsyncClient) -> None:
    response = await refund(client, None, "C-200", 10.0)

    assert response.status_code == 400
    assert response.json() == {"detail": "the Idempotency-Key header is required"}
    assert await refunds(client) == []


async def test_a_key_reused_for_another_refund_is_refused(client: httpx.AsyncClient) -> None:
    await refund(client, "key-r", "C-200", 50.0)
    other = await refund(client, "key-r", "C-200", 30.0)

    assert other.status_code == 422
    assert "already used for a different refund" in other.json()["detail"]
    assert [r["amount"] for r in await refunds(client)] == [50.0]


async def test_more_than_the_claim_is_refused(client: httpx.AsyncClient) -> None:
    response = await refund(client, "key-o", "C-200", 80.01)

    assert response.status_code == 422
    assert response.json() == {
        "detail": "refund of 80.01 exceeds what is left on claim C-200: 80.00 of 80.00"
    }
    assert await refunds(client) == []


async def test_refunds_of_one_claim_add_up_to_its_amount_at_most(
    client: httpx.AsyncClient,
) -> None:
    first = await refund(client, "key-a", "C-118", 400.0)
    too_much = await refund(client, "key-b", "C-118", 30.0)
    rest = await refund(client, "key-c", "C-118", 20.0)

    assert (first.status_code, too_much.status_code, rest.status_code) == (201, 422, 201)
    assert too_much.json()["detail"] == (
        "refund of 30.00 exceeds what is left on claim C-118: 20.00 of 420.00 "
        "(400.00 already refunded)"
    )
    assert [r["amount"] for r in await refunds(client)] == [400.0, 20.0]


async def test_invalid_and_unknown_claims_are_refused(client: httpx.AsyncClient) -> None:
    invalid = await refund(client, "key-i", "C-999", 10.0)
    unknown = await refund(client, "key-u", "C-404", 10.0)

    assert invalid.status_code == unknown.status_code == 422
    assert invalid.json() == {
        "detail": "claim C-999 is not valid (policy lapsed); no refund allowed"
    }
    assert unknown.json() == {"detail": "no claim C-404; nothing to refund"}
    assert await refunds(client) == []
    assert (await stats(client))["refund_keys"] == {}


@pytest.mark.parametrize("amount", [0, -5, "lots"])
async def test_amounts_must_be_positive_numbers(client: httpx.AsyncClient, amount: Any) -> None:
    response = await refund(client, "key-n", "C-200", amount)

    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "amount"]
    assert await refunds(client) == []


async def test_accept_then_fail_issues_the_refund_the_caller_never_sees(
    client: httpx.AsyncClient,
) -> None:
    fault = await set_faults(client, accept_then_fail_next_refunds=1)
    lost = await refund(client, "key-f", "C-118", 420.0)
    retried = await refund(client, "key-f", "C-118", 420.0)

    assert fault["accept_then_fail_next_refunds"] == 1
    assert lost.status_code == 503
    assert retried.status_code == 200
    assert retried.json() == {"refund_id": "rfd_1", "claim_id": "C-118", "amount": 420.0}
    assert await refunds(client) == [retried.json()]
    assert (await stats(client))["faults"]["accept_then_fail_next_refunds"] == 0


# --- Approvals outbox ----------------------------------------------------------------------


async def test_the_outbox_keeps_what_runs_post_oldest_first(client: httpx.AsyncClient) -> None:
    before = datetime.now(UTC)
    first = await client.post("/approvals/outbox", json={"request_id": "apr_1", "tool": "x"})
    second = await client.post("/approvals/outbox", json={"nested": {"a": [1, 2]}})

    listed = (await client.get("/approvals/outbox")).json()

    assert (first.status_code, second.status_code) == (201, 201)
    assert (first.json(), second.json()) == ({"id": "out_1"}, {"id": "out_2"})
    assert [(e["id"], e["index"], e["body"]) for e in listed] == [
        ("out_1", 1, {"request_id": "apr_1", "tool": "x"}),
        ("out_2", 2, {"nested": {"a": [1, 2]}}),
    ]
    times = [datetime.fromisoformat(entry["received_at"]) for entry in listed]
    assert before - timedelta(seconds=1) <= times[0] <= times[1] <= datetime.now(UTC)
    assert (await stats(client))["outbox"] == 2


@pytest.mark.parametrize("body", [[1, 2], "text", 3])
async def test_the_outbox_takes_only_json_objects(client: httpx.AsyncClient, body: Any) -> None:
    response = await client.post("/approvals/outbox", json=body)

    assert response.status_code == 422
    assert (await client.get("/approvals/outbox")).json() == []


# --- Reset ---------------------------------------------------------------------------------


async def test_reset_forgets_refunds_and_the_outbox_but_keeps_the_claims(
    client: httpx.AsyncClient,
) -> None:
    await refund(client, "key-z", "C-200", 80.0)
    await client.post("/approvals/outbox", json={"request_id": "apr_1"})

    assert (await client.post("/_test/reset")).status_code == 204

    seen = await stats(client)
    assert await refunds(client) == []
    assert (await client.get("/approvals/outbox")).json() == []
    assert (seen["refund_keys"], seen["outbox"]) == ({}, 0)
    assert (await client.get("/claims/C-200")).json()["amount"] == 80.0
    # Counters start again, and the claim can be refunded in full once more.
    again = await refund(client, "key-z", "C-200", 80.0)
    posted = await client.post("/approvals/outbox", json={"request_id": "apr_2"})
    assert (again.status_code, again.json()["refund_id"]) == (201, "rfd_1")
    assert posted.json() == {"id": "out_1"}
