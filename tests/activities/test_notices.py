"""Where the notice activities send: each approver group to the senders its route names (email
to a real SMTP server, Slack to a real HTTP server standing in for a webhook), other groups to
`*`'s or the outbox, every notice with the page a person opens, signed like its form link. Run
in an ActivityEnvironment."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest
from temporalio.testing import ActivityEnvironment

from tests.activities.approval_notices import ASKED, LINKS_EXPIRE_AT, NONCE, approval_notice
from tests.helpers import text_question
from tests.notice_servers import SlackStandIn, SmtpStandIn, slack_webhook, smtp_server
from tests.rigs import Systems
from waitstate.activities import ApprovalActivities
from waitstate.auth.tokens import ResumeTokens, approval_subject, question_subject
from waitstate.notices import NoticeError, SmtpServer, parse_routes
from waitstate.schemas.approvals import ApprovalNotice
from waitstate.schemas.questions import InputNotice, InputPolicy

TOKENS = ResumeTokens({"k1": "k" * 40}, "k1")
GATEWAY = "http://gateway.test"
APPROVAL_PAGE = re.compile(r"http://gateway\.test/pages/approvals/apr_1\?token=([\w.-]+)")
QUESTION_PAGE = re.compile(r"http://gateway\.test/pages/questions/q_1\?token=([\w.-]+)")


@dataclass
class Places:
    """Where notices may go: the outbox (the demo systems'), an SMTP server and a webhook."""

    systems: Systems
    smtp: SmtpStandIn
    slack: SlackStandIn

    def activities(self, routes: str) -> ApprovalActivities:
        """The notice activities, with `routes` as WAITSTATE_NOTICE_ROUTES gives them."""
        server = SmtpServer(self.smtp.host, self.smtp.port, False, "noreply@example.com")
        return ApprovalActivities(
            self.systems.http,
            f"{self.systems.url}/approvals/outbox",
            TOKENS,
            GATEWAY,
            routes=parse_routes(routes.replace("SLACK", self.slack.url)),
            smtp=server,
        )


@pytest.fixture
def smtp() -> Iterator[SmtpStandIn]:
    with smtp_server() as server:
        yield server


@pytest.fixture
async def places(systems: Systems, smtp: SmtpStandIn) -> AsyncIterator[Places]:
    async with slack_webhook() as slack:
        yield Places(systems, smtp, slack)


ROUTES = "claims-team=email:claims@example.com,ops@example.com;finance=slack:SLACK;*=outbox"


def _approval(recipient: str, *, escalation: bool = False) -> ApprovalNotice:
    reason = "<script>alert(1)</script> wants a refund"
    return approval_notice(recipient, reason=reason, escalation=escalation)


def _question(recipient: str) -> InputNotice:
    request = text_question(
        "q_1",
        "export_transactions",
        "quarter",
        "Which quarter should the export cover?",
        ASKED,
        InputPolicy(recipients=recipient),
    )
    return InputNotice(
        workflow_id="run-2",
        request=request,
        recipient=recipient,
        nonce=NONCE,
        links_expire_at=LINKS_EXPIRE_AT,
    )


def _subject(token: str, workflow_id: str) -> str:
    """What a page's token allows, once checked to be the run's, with its nonce and deadline."""
    claims = TOKENS.verify(token, now=ASKED)
    assert (claims.workflow_id, claims.nonce) == (workflow_id, NONCE)
    assert claims.expires_at == LINKS_EXPIRE_AT
    return claims.operation_id


async def test_a_group_routed_to_email_gets_an_email_with_the_page_and_nothing_else(
    places: Places,
) -> None:
    activities = places.activities(ROUTES)

    await ActivityEnvironment().run(activities.notify_approval, _approval("claims-team"))

    [mail] = places.smtp.received
    assert mail.recipients == ["claims@example.com", "ops@example.com"]
    assert mail.message["Subject"] == "Approval needed: issue_refund (run run-1)"
    plain, page = mail.part("plain"), mail.part("html")
    [token] = APPROVAL_PAGE.findall(plain)
    # The form's token: it allows either decision.
    assert _subject(token, "run-1") == approval_subject("apr_1")
    assert "&lt;script&gt;" in page and "<script>" not in page
    assert (places.systems.state.outbox, places.slack.received) == ([], [])


async def test_a_group_routed_to_slack_gets_a_message_with_the_page(places: Places) -> None:
    activities = places.activities(ROUTES)

    await ActivityEnvironment().run(activities.notify_approval, _approval("finance"))

    [payload] = places.slack.received
    [token] = APPROVAL_PAGE.findall(payload["text"])
    assert _subject(token, "run-1") == approval_subject("apr_1")
    assert (places.systems.state.outbox, places.smtp.received) == ([], [])


async def test_other_groups_take_the_default_route_with_the_page_beside_the_links(
    places: Places,
) -> None:
    activities = places.activities(ROUTES)

    await ActivityEnvironment().run(
        activities.notify_approval, _approval("managers", escalation=True)
    )

    [entry] = places.systems.state.outbox
    body = entry.body
    assert (body["recipient"], body["escalation"]) == ("managers", True)
    page = APPROVAL_PAGE.fullmatch(body["page"])
    assert page and body["decision"]["authorization"] == f"Bearer {page[1]}"
    assert {"links", "arguments", "reason", "expires_at"} <= body.keys()
    assert (places.smtp.received, places.slack.received) == ([], [])


async def test_a_question_goes_where_its_group_is_routed_with_its_page(places: Places) -> None:
    activities = places.activities(f"{ROUTES};operators=slack:SLACK;operators=email:o@example.com")

    await ActivityEnvironment().run(activities.notify_input, _question("operators"))

    [payload], [mail] = places.slack.received, places.smtp.received
    [from_slack] = QUESTION_PAGE.findall(payload["text"])
    [from_email] = QUESTION_PAGE.findall(mail.part("plain"))
    assert from_slack == from_email and _subject(from_slack, "run-2") == question_subject("q_1")
    assert mail.recipients == ["o@example.com"]
    assert places.systems.state.outbox == []


async def test_without_routes_every_notice_goes_to_the_outbox_as_before(places: Places) -> None:
    activities = places.activities("")

    await ActivityEnvironment().run(activities.notify_approval, _approval("claims-team"))
    await ActivityEnvironment().run(activities.notify_input, _question("finance"))

    approval, question = (entry.body for entry in places.systems.state.outbox)
    assert APPROVAL_PAGE.fullmatch(approval["page"])
    assert QUESTION_PAGE.fullmatch(question["page"])
    assert question["answer"]["authorization"].endswith(QUESTION_PAGE.findall(question["page"])[0])
    assert (places.smtp.received, places.slack.received) == ([], [])


async def test_a_sender_that_fails_fails_the_attempt_after_the_others_sent(
    places: Places,
) -> None:
    activities = places.activities("finance=slack:SLACK;finance=outbox")
    places.slack.status, places.slack.answer = 500, "rollup_error"

    with pytest.raises(NoticeError, match="answered 500"):
        await ActivityEnvironment().run(activities.notify_approval, _approval("finance"))

    # The outbox has it: the retry sends it there again, with the same link.
    [entry] = places.systems.state.outbox
    places.slack.status = 200
    await ActivityEnvironment().run(activities.notify_approval, _approval("finance"))
    first, again = (e.body for e in places.systems.state.outbox)
    assert first["page"] == again["page"] and len(places.slack.received) == 2
    assert entry.body == first


def test_a_route_sending_email_without_smtp_stops_the_wiring(systems: Systems) -> None:
    with pytest.raises(ValueError, match="set WAITSTATE_SMTP_URL"):
        ApprovalActivities(
            systems.http,
            f"{systems.url}/approvals/outbox",
            TOKENS,
            GATEWAY,
            routes=parse_routes("claims-team=email:claims@example.com"),
        )
