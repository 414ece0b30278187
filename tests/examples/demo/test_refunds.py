"""The claim and refund tools through a ToolRegistry, against the real demo systems."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from examples.demo.catalog import all_tools
from examples.demo.refunds import IssueRefundArgs, refund_idempotency_key, refund_tools
from examples.demo.services import ServiceError
from examples.systems import serving
from tests.helpers import call_tool as call
from waitstate.schemas.approvals import ApprovalPolicy
from waitstate.tools.spec import ToolRegistry, ToolSpec


@pytest.fixture
def registry(http: httpx.AsyncClient, systems_url: str) -> ToolRegistry:
    return ToolRegistry(refund_tools(http, systems_url))


async def issued(http: httpx.AsyncClient, systems_url: str) -> list[dict[str, Any]]:
    body: list[dict[str, Any]] = (await http.get(f"{systems_url}/refunds")).json()
    return body


def spec(registry: ToolRegistry, name: str) -> ToolSpec:
    found = registry.get(name)
    assert found is not None
    return found


# --- check_claim ---------------------------------------------------------------------------


async def test_check_claim_returns_the_claim(registry: ToolRegistry) -> None:
    valid = await call(registry, "check_claim", claim_id="C-118")
    invalid = await call(registry, "check_claim", claim_id="C-999")

    assert valid == (
        {"claim_id": "C-118", "valid": True, "amount": 420.0, "customer": "Dana Whitfield"},
        False,
    )
    assert invalid == (
        {
            "claim_id": "C-999",
            "valid": False,
            "amount": 300.0,
            "customer": "Lena Vogt",
            "reason": "policy lapsed",
        },
        False,
    )


async def test_an_unknown_claim_is_an_error_the_model_reads(registry: ToolRegistry) -> None:
    assert await call(registry, "check_claim", claim_id="C-404") == ("no claim C-404", True)
    # Escaped into the path, not a way to reach another route.
    assert await call(registry, "check_claim", claim_id="../refunds") == (
        "no claim ../refunds",
        True,
    )


# --- issue_refund --------------------------------------------------------------------------


async def test_issue_refund_refunds_once_however_often_it_runs(
    registry: ToolRegistry, http: httpx.AsyncClient, systems_url: str
) -> None:
    first = await call(registry, "issue_refund", claim_id="C-200", amount=80)
    retried = await call(registry, "issue_refund", claim_id="C-200", amount=80.0)

    refund = {"refund_id": "rfd_1", "claim_id": "C-200", "amount": 80.0}
    assert first == retried == (refund, False)
    assert await issued(http, systems_url) == [refund]
    keys = (await http.get(f"{systems_url}/_test/stats")).json()["refund_keys"]
    assert keys == {"refund/C-200/80.0": {"requests": 2, "refund_id": "rfd_1"}}


async def test_a_retry_after_a_lost_answer_finds_the_refund(
    registry: ToolRegistry, http: httpx.AsyncClient, systems_url: str
) -> None:
    await http.post(f"{systems_url}/_test/faults", json={"accept_then_fail_next_refunds": 1})

    # The refund is issued but the answer is a 503: the activity fails and Temporal retries.
    with pytest.raises(ServiceError, match="refund service answered 503"):
        await call(registry, "issue_refund", claim_id="C-118", amount=420.0)
    retried = await call(registry, "issue_refund", claim_id="C-118", amount=420.0)

    assert retried == ({"refund_id": "rfd_1", "claim_id": "C-118", "amount": 420.0}, False)
    assert len(await issued(http, systems_url)) == 1


async def test_refusals_are_errors_the_model_reads(
    registry: ToolRegistry, http: httpx.AsyncClient, systems_url: str
) -> None:
    over = await call(registry, "issue_refund", claim_id="C-200", amount=500.0)
    invalid = await call(registry, "issue_refund", claim_id="C-999", amount=10.0)
    unknown = await call(registry, "issue_refund", claim_id="C-404", amount=10.0)
    zero = await call(registry, "issue_refund", claim_id="C-200", amount=0)

    assert over == (
        "refund service: refund of 500.00 exceeds what is left on claim C-200: 80.00 of 80.00",
        True,
    )
    assert invalid == (
        "refund service: claim C-999 is not valid (policy lapsed); no refund allowed",
        True,
    )
    assert unknown == ("refund service: no claim C-404; nothing to refund", True)
    assert zero[1] is True
    assert zero[0].startswith("invalid arguments for issue_refund: amount:")
    assert await issued(http, systems_url) == []


async def test_server_errors_and_lost_connections_propagate_for_a_retry(
    http: httpx.AsyncClient, closed_port: int
) -> None:
    async with serving(_failing_app()) as url:
        broken = ToolRegistry(refund_tools(http, url))
        with pytest.raises(ServiceError, match="claims service answered 500: database is down"):
            await call(broken, "check_claim", claim_id="C-118")
        with pytest.raises(ServiceError, match="refund service answered 502"):
            await call(broken, "issue_refund", claim_id="C-118", amount=1.0)

    unreachable = ToolRegistry(refund_tools(http, f"http://127.0.0.1:{closed_port}"))
    with pytest.raises(httpx.ConnectError):
        await call(unreachable, "issue_refund", claim_id="C-118", amount=1.0)


# --- Approval gating and declarations ------------------------------------------------------


def test_refunds_over_the_threshold_need_approval(registry: ToolRegistry) -> None:
    issue = spec(registry, "issue_refund")
    check = spec(registry, "check_claim")

    def needs(amount: float) -> bool:
        return issue.needs_approval(IssueRefundArgs(claim_id="C-118", amount=amount))

    assert needs(420.0) is True
    assert needs(80.0) is False
    assert needs(100.0) is False  # over the threshold, not at it
    assert needs(100.01) is True
    assert check.needs_approval(spec(registry, "check_claim").args(claim_id="C-118")) is False


def test_the_default_approval_policy_escalates_to_claims_managers(
    registry: ToolRegistry,
) -> None:
    assert spec(registry, "issue_refund").approval == ApprovalPolicy(
        timeout=timedelta(hours=24),
        on_timeout="escalate",
        approvers="claims-team",
        escalate_to="claims-managers",
    )


def test_threshold_and_policy_can_be_chosen(http: httpx.AsyncClient) -> None:
    policy = ApprovalPolicy(timeout=timedelta(minutes=5), on_timeout="fail")
    registry = ToolRegistry(
        refund_tools(http, "http://systems", approval_threshold=500.0, policy=policy)
    )
    issue = spec(registry, "issue_refund")

    assert issue.approval == policy
    assert issue.needs_approval(IssueRefundArgs(claim_id="C-118", amount=420.0)) is False
    assert issue.needs_approval(IssueRefundArgs(claim_id="C-118", amount=500.5)) is True
    assert "over 500.00" in issue.description


def test_the_idempotency_key_is_stable_for_the_same_arguments() -> None:
    from_int = IssueRefundArgs.model_validate({"claim_id": "C-118", "amount": 420})
    from_float = IssueRefundArgs.model_validate_json('{"claim_id": "C-118", "amount": 420.0}')

    assert refund_idempotency_key(from_int) == refund_idempotency_key(from_float)
    assert refund_idempotency_key(from_int) == "refund/C-118/420.0"
    assert refund_idempotency_key(IssueRefundArgs(claim_id="C-118", amount=0.1 + 0.2)) != (
        refund_idempotency_key(IssueRefundArgs(claim_id="C-118", amount=0.3))
    )


def test_refund_tools_are_sync_tools_with_described_arguments(registry: ToolRegistry) -> None:
    assert registry.names() == ["check_claim", "issue_refund"]
    for name in registry.names():
        tool = spec(registry, name)
        assert tool.kind == "sync"
        properties = tool.definition().parameters["properties"]
        assert all(prop.get("description") for prop in properties.values())
    amount = spec(registry, "issue_refund").definition().parameters["properties"]["amount"]
    assert amount["exclusiveMinimum"] == 0


async def test_the_catalog_offers_the_refund_tools_at_the_settings_url(
    http: httpx.AsyncClient, systems_url: str
) -> None:
    registry = ToolRegistry(all_tools(http, systems_url))

    claim = await call(registry, "check_claim", claim_id="C-200")

    assert claim[0]["amount"] == 80.0
    assert spec(registry, "issue_refund").needs_approval(
        IssueRefundArgs(claim_id="C-118", amount=420.0)
    )


def _failing_app() -> FastAPI:
    app = FastAPI()

    @app.get("/claims/{claim_id}")
    async def broken_claims(claim_id: str) -> JSONResponse:
        return JSONResponse({"detail": "database is down"}, status_code=500)

    @app.post("/refunds")
    async def broken_refunds() -> JSONResponse:
        return JSONResponse({"detail": "bad gateway"}, status_code=502)

    return app
