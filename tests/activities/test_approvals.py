"""The approval notice activity: it posts a request to the outbox with a form link and one-click
approve and reject links, signed for the request with the run's nonce until the request's last
deadline. Run in an ActivityEnvironment, with the demo systems' outbox over real HTTP."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import pytest
from temporalio.testing import ActivityEnvironment

from tests.activities.approval_notices import ASKED, LINKS_EXPIRE_AT, NONCE, approval_notice
from tests.rigs import Systems
from waitstate.activities import ApprovalActivities
from waitstate.auth.tokens import ResumeClaims, ResumeTokens, approval_subject, nonce_hash
from waitstate.schemas.approvals import (
    ApprovalNotice,
    ApprovalNoticeSent,
    OnTimeout,
)

TOKENS = ResumeTokens({"k1": "k" * 40}, "k1")
GATEWAY = "http://gateway.test/"
DECISION_URL = "http://gateway.test/v1/approvals/apr_1/decision"


def _notice(
    on_timeout: OnTimeout = "escalate", *, escalation: bool = False, **fields: Any
) -> ApprovalNotice:
    recipient = "managers" if escalation else "approvers"
    return approval_notice(recipient, on_timeout=on_timeout, escalation=escalation, **fields)


async def _notify(
    systems: Systems,
    notice: ApprovalNotice,
    tokens: ResumeTokens | None = TOKENS,
    gateway_url: str = GATEWAY,
) -> ApprovalNoticeSent:
    activities = ApprovalActivities(
        systems.http, f"{systems.url}/approvals/outbox", tokens, gateway_url
    )
    return await ActivityEnvironment().run(activities.notify_approval, notice)


def _claims(link: dict[str, Any]) -> ResumeClaims:
    return TOKENS.verify(link["authorization"].removeprefix("Bearer "), now=ASKED)


async def test_the_notice_reaches_the_outbox_with_the_request_and_its_links(
    systems: Systems,
) -> None:
    sent = await _notify(systems, _notice())

    [entry] = systems.state.outbox
    body = entry.body
    assert {k: body[k] for k in ("workflow_id", "request_id", "recipient", "escalation")} == {
        "workflow_id": "run-1",
        "request_id": "apr_1",
        "recipient": "approvers",
        "escalation": False,
    }
    assert (body["tool"], body["arguments"]) == (
        "issue_refund",
        {"claim_id": "C-118", "amount": 420.0},
    )
    assert body["expires_at"] == (ASKED + timedelta(hours=24)).isoformat()
    assert sent == ApprovalNoticeSent(nonce_hash=nonce_hash(NONCE), decision_url=DECISION_URL)
    # The form's link lets a person choose; each one-click link allows its own decision only.
    form, approve, reject = body["decision"], body["links"]["approve"], body["links"]["reject"]
    assert {form["url"], approve["url"], reject["url"]} == {DECISION_URL}
    assert (form["approve"], form["reject"]) == (
        {"decision": "approve"},
        {"decision": "reject", "comment": "<reason>"},
    )
    assert (approve["body"], reject["body"]) == ({"decision": "approve"}, {"decision": "reject"})
    subjects = [_claims(link).operation_id for link in (form, approve, reject)]
    assert subjects == [
        approval_subject("apr_1"),
        approval_subject("apr_1", "approve"),
        approval_subject("apr_1", "reject"),
    ]
    for link in (form, approve, reject):
        claims = _claims(link)
        assert (claims.workflow_id, claims.nonce) == ("run-1", NONCE)
        assert claims.expires_at == LINKS_EXPIRE_AT


async def test_the_escalation_carries_the_same_links_as_the_first_notice(
    systems: Systems,
) -> None:
    first = await _notify(systems, _notice())
    escalated = await _notify(systems, _notice(escalation=True))

    assert first == escalated
    before, after = (entry.body for entry in systems.state.outbox)
    assert (after["recipient"], after["escalation"]) == ("managers", True)
    assert (before["decision"], before["links"]) == (after["decision"], after["links"])


@pytest.mark.parametrize(
    ("on_timeout", "valid_for"),
    [("escalate", timedelta(hours=48)), ("fail", timedelta(hours=24))],
)
async def test_links_of_a_run_that_gives_no_expiry_last_through_every_window(
    systems: Systems, on_timeout: OnTimeout, valid_for: timedelta
) -> None:
    # Runs started before runs set links_expire_at: an escalating request has two windows.
    await _notify(systems, _notice(on_timeout, links_expire_at=None))

    [entry] = systems.state.outbox
    assert _claims(entry.body["decision"]).expires_at == ASKED + valid_for


@pytest.mark.parametrize(
    ("tokens", "gateway_url"), [(None, GATEWAY), (TOKENS, "")], ids=["no-keys", "no-gateway"]
)
async def test_without_keys_or_a_gateway_the_notice_goes_without_links(
    systems: Systems, tokens: ResumeTokens | None, gateway_url: str
) -> None:
    sent = await _notify(systems, _notice(), tokens, gateway_url)

    [entry] = systems.state.outbox
    assert "decision" not in entry.body and "links" not in entry.body
    assert entry.body["request_id"] == "apr_1"
    assert sent == ApprovalNoticeSent(nonce_hash="", decision_url="")


async def test_an_outbox_that_fails_fails_the_attempt_for_the_retry_policy(
    closed_port: int,
) -> None:
    async with httpx.AsyncClient() as http:
        activities = ApprovalActivities(
            http, f"http://127.0.0.1:{closed_port}/approvals/outbox", TOKENS, GATEWAY
        )
        with pytest.raises(httpx.ConnectError):
            await ActivityEnvironment().run(activities.notify_approval, _notice())


async def test_an_outbox_that_refuses_fails_the_attempt(systems: Systems) -> None:
    activities = ApprovalActivities(systems.http, f"{systems.url}/no-outbox-here", TOKENS, GATEWAY)

    with pytest.raises(httpx.HTTPStatusError) as refused:
        await ActivityEnvironment().run(activities.notify_approval, _notice())

    assert refused.value.response.status_code == 404
    assert systems.state.outbox == []
