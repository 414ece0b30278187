"""The approval notice the notice activities' tests send: a refund of 420 on claim C-118 asked
at ASKED, signed for with NONCE until LINKS_EXPIRE_AT."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tests.helpers import approval_request
from waitstate.schemas.approvals import ApprovalNotice, ApprovalPolicy, OnTimeout

NONCE = "nonce-of-the-request"
ASKED = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
# The request's last deadline as the run gives it (any time will do: the run's word wins).
LINKS_EXPIRE_AT = ASKED + timedelta(hours=30)


def approval_notice(
    recipient: str,
    *,
    reason: str = 'issue_refund {"claim_id":"C-118","amount":420.0}',
    on_timeout: OnTimeout = "escalate",
    escalation: bool = False,
    **fields: Any,
) -> ApprovalNotice:
    """The notice of run-1's request apr_1 (24 hours to decide) to `recipient`; `fields`: the
    notice's others (e.g. `links_expire_at=None`)."""
    policy = ApprovalPolicy(timeout=timedelta(hours=24), on_timeout=on_timeout)
    arguments = {"claim_id": "C-118", "amount": 420.0}
    request = approval_request(
        "apr_1", "issue_refund", ASKED, policy, arguments=arguments, reason=reason
    )
    given: dict[str, Any] = {"nonce": NONCE, "links_expire_at": LINKS_EXPIRE_AT}
    return ApprovalNotice(
        workflow_id="run-1",
        request=request,
        recipient=recipient,
        escalation=escalation,
        **{**given, **fields},
    )
