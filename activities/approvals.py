"""The notification activities: tell people a run needs their decision, or that an operation's
job asks them a question."""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx
from temporalio import activity

from waitstate.auth.tokens import approval_subject, question_subject
from waitstate.elicitation import answer_command
from waitstate.notices import NoticeRoutes, SmtpServer
from waitstate.notices.senders import NoticeRouter
from waitstate.schemas.approvals import ApprovalNotice, ApprovalNoticeSent, DecisionKind
from waitstate.schemas.questions import QuestionNotice
from waitstate.schemas.run import NOTIFY_APPROVAL, NOTIFY_QUESTION

if TYPE_CHECKING:
    from waitstate.auth.tokens import MintedToken, ResumeTokens


class ApprovalActivities:
    """Sends approval requests and operations' questions, with signed links to answer them, to
    the senders of their recipient group (`waitstate.notices`): the outbox (an HTTP endpoint),
    email or Slack."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        outbox_url: str,
        tokens: ResumeTokens | None = None,
        gateway_url: str = "",
        *,
        routes: NoticeRoutes | None = None,
        smtp: SmtpServer | None = None,
    ) -> None:
        """Build the senders of every approver group once, for every notice.

        Args:
            http: The client the outbox and Slack are posted with.
            outbox_url: The outbox, where groups without a route (all, without `routes`) go.
            tokens: The keys links are signed with (None: notices go without links).
            gateway_url: The gateway's public base URL, which links point at.
            routes: Where each approver group's notices go (`WAITSTATE_NOTICE_ROUTES`).
            smtp: The server email notices are submitted to.

        Raises:
            ValueError: a route sends email and there is no `smtp`.
        """
        self._notices = NoticeRouter.build(
            routes or {}, http=http, outbox_url=outbox_url, smtp=smtp
        )
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
            # The page a person opens in a browser (email and chat messages link to it), with
            # the form's token: it allows either decision.
            body["page"] = (
                f"{self._gateway_url}/pages/approvals/{request.request_id}?token={minted.token}"
            )
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
        await self._send(
            body, f"approval {request.request_id}", notice.recipient, notice.escalation
        )
        return sent

    @activity.defn(name=NOTIFY_QUESTION)
    async def notify_input(self, notice: QuestionNotice) -> None:
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
            "cli": answer_command(
                notice.workflow_id, request.question_id, request.requested_schema
            ),
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
            body["page"] = (
                f"{self._gateway_url}/pages/questions/{request.question_id}?token={minted.token}"
            )
        await self._send(
            body, f"question {request.question_id}", notice.recipient, notice.escalation
        )

    async def _send(
        self, body: dict[str, object], what: str, recipient: str, escalation: bool
    ) -> None:
        """Send a notice to its recipient group's senders and log that `what` was sent.

        Any sender failing fails the attempt, for Temporal to retry: the retry sends to every
        sender again, so a person may get a notice twice, with the same links (their tokens are
        minted the same every time).
        """
        await self._notices.send(body)
        activity.logger.info(
            "%s sent to %s%s", what, recipient, " (escalation)" if escalation else ""
        )
