"""The payments researcher's tool through a ToolRegistry, against the real demo systems."""

from __future__ import annotations

import httpx
import pytest

from examples.demo.research import PaymentHistoryArgs, payment_history_tool
from tests.helpers import call_tool as call
from waitstate.tools.spec import ToolRegistry


@pytest.fixture
def registry(http: httpx.AsyncClient, systems_url: str) -> ToolRegistry:
    return ToolRegistry([payment_history_tool(http, systems_url)])


async def test_it_reads_the_refunds_paid_on_the_claim_and_their_total(
    registry: ToolRegistry, http: httpx.AsyncClient, systems_url: str
) -> None:
    assert await call(registry, "read_payment_history", claim_id="C-118") == (
        {"claim_id": "C-118", "refunds": [], "refunded": 0},
        False,
    )
    for claim_id, amount, key in [("C-118", 20.0, "a"), ("C-305", 5.0, "b"), ("C-118", 0.5, "c")]:
        refund = {"claim_id": claim_id, "amount": amount}
        sent = await http.post(
            f"{systems_url}/refunds", json=refund, headers={"Idempotency-Key": key}
        )
        assert sent.status_code == 201

    found, is_error = await call(registry, "read_payment_history", claim_id="C-118")

    assert not is_error
    assert [r["amount"] for r in found["refunds"]] == [20.0, 0.5]
    assert found["refunded"] == 20.5


async def test_an_unknown_claim_is_told_to_the_model(registry: ToolRegistry) -> None:
    assert await call(registry, "read_payment_history", claim_id="C-404") == (
        "no claim C-404",
        True,
    )


def test_every_read_needs_a_person_of_the_finance_team(registry: ToolRegistry) -> None:
    spec = registry.get("read_payment_history")

    assert spec is not None
    assert spec.needs_approval(PaymentHistoryArgs(claim_id="C-118"))
    assert spec.approval.approvers == "finance-team"
