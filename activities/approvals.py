"""The notification activities: tell people a run needs their decision, or that an operation's
job asks them a question."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

import httpx
from temporalio import activity

from waitstate.gateway.tokens import approval_subject, question_subject
from waitstate.schemas.approvals import ApprovalNotice, ApprovalNoticeSent, DecisionKind
from waitstate.schemas.questions import InputNotice
from waitstate.schemas.run import NOTIFY_APPROVAL, NOTIFY_INPUT

if TYPE_CHECKING:
    from waitstate.gateway.tokens import MintedToken, ResumeTokens

# How long one post to the outbox may take before the attempt fails and is retried.
OUTBOX_TIMEOUT = timedelta(seconds=10)


class ApprovalActivities:
    """Posts approval requests and operations' questions, with signed links to answer them,
    to an outbox (an HTTP endpoint)."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        outbox_url: str,
        tokens: ResumeTokens | None = None,
        gateway_url: str = "",
    ) -> None:
        self._http = http
        self._outbox_url = outbox_url
        self._tokens = tokens
        self._gateway_url = gateway_url.rstrip("/")

    @activity.defn(name=NOTIFY_APPROVAL)
    async def notify_approval(self, notice: ApprovalNotice) -> ApprovalNoticeSent:
        """Post the request and its approve/reject links; return the links' nonce hash.

        The token is deterministic for the request, so the escalation notice carries the same
        link as the first one, and a retried post sends the same token again.
        """
        request = notice.request
        body: dict[str, object] = {
            "workflow_id": notice.workflow_id,
            "request_id": request.request_id,
            "recipient": notice.recipient,
            "escalation": notice.escalation,
            "tool": request.tool,
            "arguments": request.arguments,
            "reason": request.reason,
            "expires_at": request.expires_at.isoformat(),
        }
        sent = ApprovalNoticeSent(nonce_hash="", decision_url="")
        if self._tokens is not None and self._gateway_url:
            link_expiry = notice.links_expire_at
            if link_expiry is None:
                # A request of a run started before runs set it: valid through an escalation's
                # second window.
                windows = 2 if request.policy.on_timeout == "escalate" else 1
                link_expiry = request.requested_at + request.policy.timeout * windows
            url = f"{self._gateway_url}/v1/approvals/{request.request_id}/decision"

            def token(decision: DecisionKind | None) -> MintedToken:
                assert self._tokens is not None
                subject = approval_subject(request.request_id, decision)
                return self._tokens.mint(
                    notice.workflow_id, subject, link_expiry, nonce=notice.nonce
                )

            minted = token(None)
            sent = ApprovalNoticeSent(nonce_hash=minted.nonce_hash, decision_url=url)
            # One link for a form that lets the person choose (and give a reason), and one
            # per decision for one-click buttons: each of those allows its own decision only.
            body["decision"] = {
                "method": "POST",
                "url": url,
                "authorization": f"Bearer {minted.token}",
                "approve": {"decision": "approve"},
                "reject": {"decision": "reject", "comment": "<reason>"},
            }
            body["links"] = {
                kind: {
                    "method": "POST",
                    "url": url,
                    "authorization": f"Bearer {token(kind).token}",
                    "body": {"decision": kind},
                }
                for kind in ("approve", "reject")
            }
        await self._post(
            body, f"approval {request.request_id}", notice.recipient, notice.escalation
        )
        return sent

    @activity.defn(name=NOTIFY_INPUT)
    async def notify_input(self, notice: InputNotice) -> None:
        """Post an operation's question and the link to answer it (one token for the question,
        with the nonce the run chose: the escalation's notice carries the same link)."""
        request = notice.request
        body: dict[str, object] = {
            "kind": "question",
            "workflow_id": notice.workflow_id,
            "question_id": request.question_id,
            "operation_id": request.operation_id,
            "recipient": notice.recipient,
            "escalation": notice.escalation,
            "tool": request.tool,
            "message": request.message,
            "requested_schema": request.requested_schema,
            "expires_at": request.expires_at.isoformat(),
            "cli": f"python starter.py answer {notice.workflow_id} --question "
            f"{request.question_id} --accept '{{...}}'",
        }
        if self._tokens is not None and self._gateway_url:
            minted = self._tokens.mint(
                notice.workflow_id,
                question_subject(request.question_id),
                notice.links_expire_at,
                nonce=notice.nonce,
            )
            body["answer"] = {
                "method": "POST",
                "url": f"{self._gateway_url}/v1/questions/{request.question_id}/answer",
                "authorization": f"Bearer {minted.token}",
                "accept": {"action": "accept", "content": "<matching requested_schema>"},
                "decline": {"action": "decline"},
            }
        await self._post(
            body, f"question {request.question_id}", notice.recipient, notice.escalation
        )

    async def _post(
        self, body: dict[str, object], what: str, recipient: str, escalation: bool
    ) -> None:
        """Post a notice to the outbox (an HTTP error fails the attempt, for Temporal to retry)
        and log that `what` was sent."""
        response = await self._http.post(
            self._outbox_url, json=body, timeout=OUTBOX_TIMEOUT.total_seconds()
        )
        response.raise_for_status()
        activity.logger.info(
            "%s sent to %s%s", what, recipient, " (escalation)" if escalation else ""
        )
