"""The refund invariant of the reliability suite (`chaos.invariants`): an approved refund the
refund service issued, or refused on its merits, passes; one it never saw fails. Against the
real demo systems (in-process, over HTTP) and the demo's refund tool. Across runs
(`refunds_once`), a refund issued twice, or under no key, fails too.

Full size, seed 2: the mix approves five of claim C-118's refunds (504.56 in all) and the
claim holds 420.00, so the service refuses whichever comes last: chaos-a-0074's 101.24 came
after the other four (403.32), and the check called its refusal a lost refund."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from chaos.invariants import REFUNDS, check_run, refunds_once
from chaos.runs import RunOutcome, _refund
from examples.demo.refunds import refund_tools
from examples.systems import create_app, serving
from tests.helpers import approval_request
from waitstate.schemas.approvals import ApprovalPolicy, Decision
from waitstate.schemas.messages import ToolCall
from waitstate.schemas.run import RunState, Step
from waitstate.tools.spec import ToolRegistry
from waitstate.workflows.ledger import preview

# Seed 2's other approved refunds of C-118 (chaos-a-0012, -0010, -0050, -0060), in the order
# the repeated run issued them, then chaos-a-0074's.
OTHERS = (100.62, 100.6, 101.0, 101.1)
PLAN = _refund("chaos-a-0074", 74)
TAG = "chaos-a-0074 (refund)"


@dataclass
class Systems:
    url: str
    http: httpx.AsyncClient
    registry: ToolRegistry

    async def refund(self, amount: float) -> tuple[str, bool]:
        """Issue a refund of C-118 through the demo's tool: what the model reads, and whether
        it is an error."""
        arguments = json.dumps({"claim_id": "C-118", "amount": amount})
        result = await self.registry.run(
            ToolCall(id="call_1_0", name="issue_refund", arguments=arguments)
        )
        return result.content, result.is_error

    async def stats(self) -> dict[str, Any]:
        """What the suite's driver hands the invariants: the systems' records and refunds."""
        stats: dict[str, Any] = (await self.http.get(f"{self.url}/_test/stats")).json()
        return {**stats, "refunds": (await self.http.get(f"{self.url}/refunds")).json()}


@pytest.fixture
async def systems() -> AsyncIterator[Systems]:
    async with serving(create_app()) as url, httpx.AsyncClient() as http:
        yield Systems(url, http, ToolRegistry(refund_tools(http, url)))


def approved(*steps: Step) -> RunOutcome:
    """chaos-a-0074 as it ended: its refund approved by a person, then these steps."""
    now = datetime.now(UTC)
    request = approval_request(
        "req-1",
        "issue_refund",
        now,
        ApprovalPolicy(),  # a day to decide
        tool_call_id="call_1_0",
        status="approved",
        decision=Decision(decision="approve", reviewer="chaos-signal", decided_at=now),
    )
    state = RunState(status="completed", approvals={"req-1": request}, steps=list(steps))
    return RunOutcome(PLAN, status="completed", state=state)


def tool_step(content: str, is_error: bool) -> Step:
    """The ledger's line of the `issue_refund` call, as the workflow records it."""
    return Step(
        turn=2, kind="tool", name="issue_refund", detail=preview(content), is_error=is_error
    )


async def test_an_approved_refund_its_claim_had_no_room_for_is_refused_not_lost(
    systems: Systems,
) -> None:
    for amount in OTHERS:
        assert (await systems.refund(amount))[1] is False
    content, is_error = await systems.refund(101.24)
    stats = await systems.stats()

    assert is_error, content
    assert "exceeds what is left on claim C-118: 16.68 of 420.00" in content
    assert check_run(approved(tool_step(content, is_error)), stats)[REFUNDS] == []
    # Without the systems' refunds, the claim's room is unknown: the refund counts as lost.
    unknown = {k: v for k, v in stats.items() if k != "refunds"}
    assert check_run(approved(tool_step(content, is_error)), unknown)[REFUNDS] == [
        f"{TAG}: approved refund {PLAN.refund_key} never issued"
    ]


async def test_an_approved_refund_never_issued_with_room_on_its_claim_is_lost(
    systems: Systems,
) -> None:
    for amount in OTHERS[:3]:
        assert (await systems.refund(amount))[1] is False
    stats = await systems.stats()
    lost = [f"{TAG}: approved refund {PLAN.refund_key} never issued"]
    said = "refund service: refund of 101.24 exceeds what is left on claim C-118: 0.00 of 420.00"

    # The call failed (its attempts used up), or never ran, or said no room the claim has.
    failed = tool_step("tool issue_refund failed: activity StartToClose timeout", True)
    assert check_run(approved(failed), stats)[REFUNDS] == lost
    assert check_run(approved(), stats)[REFUNDS] == lost
    assert check_run(approved(tool_step(said, True)), stats)[REFUNDS] == lost


async def test_an_issued_refund_passes_and_one_issued_unapproved_fails(systems: Systems) -> None:
    content, is_error = await systems.refund(101.24)
    stats = await systems.stats()
    outcome = approved(tool_step(content, is_error))

    assert not is_error, content
    assert check_run(outcome, stats)[REFUNDS] == []
    assert outcome.state is not None
    outcome.state.approvals["req-1"].status = "rejected"
    assert check_run(outcome, stats)[REFUNDS] == [
        f"{TAG}: refund {PLAN.refund_key} issued without approval"
    ]


async def test_across_runs_a_refund_issued_twice_or_under_no_key_fails(systems: Systems) -> None:
    content, is_error = await systems.refund(101.24)
    stats = await systems.stats()
    refunds = stats["refunds"]
    assert not is_error, content
    [refund] = refunds
    assert refunds_once(stats, refunds) == []

    assert refunds_once(stats, [refund, refund]) == [f"refund {refund['refund_id']} issued 2 times"]
    unkeyed = {**stats, "refund_keys": {}}
    assert refunds_once(unkeyed, refunds) == [f"refund {refund['refund_id']} issued under no key"]
