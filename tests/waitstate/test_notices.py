"""Notices as people get them: routes per approver group read from their variable, email
submitted to a real SMTP server (aiosmtpd), Slack messages posted to a real HTTP server standing
in for a webhook, hostile text escaped and bounded, and failures raised for the retry."""

from __future__ import annotations

import html
import json
import re
import shlex
from collections.abc import Iterator, Mapping
from typing import Any

import httpx
import pytest

from tests.notice_servers import SLACK_PATH, SmtpStandIn, slack_webhook, smtp_server
from waitstate.elicitation import answer_problem
from waitstate.names import cli_command
from waitstate.notices import (
    EmailRoute,
    NoticeError,
    OutboxRoute,
    SlackRoute,
    SmtpServer,
    parse_routes,
    parse_smtp,
)
from waitstate.notices.messages import ARGUMENTS_CHARS, SUBJECT_CHARS, TEXT_CHARS
from waitstate.notices.senders import EmailSender, NoticeRouter, Sender, SlackSender

PAGE = "http://gateway.test/pages/approvals/apr_1?token=page-token"
HOSTILE = "<script>alert(1)</script> & <!channel> <https://evil.test|click>"
# The other links' tokens: a message carries the page's, never these.
OTHER_TOKENS = ("form-token", "approve-token", "reject-token")


def _approval(**fields: Any) -> dict[str, Any]:
    """An approval notice's body, as `notify_approval` builds it."""
    link = "http://gateway.test/v1/approvals/apr_1/decision"
    body = {
        "workflow_id": "run-1",
        "request_id": "apr_1",
        "recipient": "claims-team",
        "escalation": False,
        "tool": "issue_refund",
        "arguments": {"claim_id": "C-118", "amount": 420.0},
        "reason": "a refund over $100",
        "expires_at": "2030-01-02T12:00:00+00:00",
        "page": PAGE,
        "decision": {"method": "POST", "url": link, "authorization": "Bearer form-token"},
        "links": {
            kind: {"method": "POST", "url": link, "authorization": f"Bearer {kind}-token"}
            for kind in ("approve", "reject")
        },
    }
    return {**body, **fields}


def _question(**fields: Any) -> dict[str, Any]:
    """A question notice's body, as `notify_input` builds it."""
    body = {
        "kind": "question",
        "workflow_id": "run-2",
        "question_id": "q_1",
        "operation_id": "op-1",
        "recipient": "operators",
        "escalation": False,
        "tool": "export_transactions",
        "message": "Which quarter should the export cover?",
        "requested_schema": {"type": "object", "properties": {"quarter": {"type": "string"}}},
        "expires_at": "2030-01-02T13:00:00+00:00",
        "cli": f'{cli_command()} answer run-2 --question q_1 --accept \'{{"quarter":"..."}}\'',
        "page": "http://gateway.test/pages/questions/q_1?token=question-token",
        "answer": {"method": "POST", "authorization": "Bearer form-token"},
    }
    return {**body, **fields}


@pytest.fixture
def smtp() -> Iterator[SmtpStandIn]:
    with smtp_server() as server:
        yield server


def _server(smtp: SmtpStandIn, **fields: Any) -> SmtpServer:
    given: dict[str, Any] = {"implicit_tls": False, "sender": "Waitstate <noreply@example.com>"}
    return SmtpServer(smtp.host, smtp.port, **{**given, **fields})


# --- routes ------------------------------------------------------------------------------------


def test_routes_name_each_groups_senders_and_a_group_named_twice_gets_both() -> None:
    slack = "https://hooks.slack.com/services/T1/B1/secret"
    routes = parse_routes(
        "claims-team=email:claims@example.com, ops@example.com; finance=slack:"
        f"{slack};*=outbox;finance = email:finance@example.com;"
    )

    assert routes == {
        "claims-team": (EmailRoute(("claims@example.com", "ops@example.com")),),
        "finance": (SlackRoute(slack), EmailRoute(("finance@example.com",))),
        "*": (OutboxRoute(),),
    }
    assert "secret" not in repr(routes)  # the webhook's path is its secret
    assert "hooks.slack.com" in repr(routes)
    assert parse_routes("") == parse_routes(" ; ") == {}


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("claims-team", "entry 1 is not GROUP=DESTINATION"),
        ("*=outbox;=outbox", "entry 2 is not GROUP=DESTINATION"),
        ("claims-team=", "entry 1 is not GROUP=DESTINATION"),
        ("claims-team=fax:555", "group 'claims-team' has an unknown destination"),
        ("claims-team=outbox:http://elsewhere", "group 'claims-team' has an unknown destination"),
        ("finance=https://hooks.slack.com/services/T/B/secret", "unknown destination"),
        ("claims-team=email:", "group 'claims-team' has email: with no address"),
        ("claims-team=email:claims", "'claims' is not an address"),
        ("claims-team=email:a b@example.com", "'a b@example.com' is not an address"),
        ("finance=slack:http://hooks.slack.com/services/T/B/secret", "must be an https:// URL"),
        ("finance=slack:secret", "must be an https:// URL"),
    ],
)
def test_a_malformed_route_is_refused_naming_the_variable_never_a_webhook(
    value: str, says: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(says)) as refused:
        parse_routes(value)

    assert str(refused.value).startswith("WAITSTATE_NOTICE_ROUTES")
    assert "secret" not in str(refused.value)


def test_the_smtp_url_gives_server_login_and_sender_and_hides_the_password() -> None:
    server = parse_smtp("smtp://mailer:p%40ss-word@mail.example.com:587", "noreply@example.com")
    implicit = parse_smtp("smtps://mail.example.com", "Waitstate <noreply@example.com>")

    assert server == SmtpServer(
        "mail.example.com", 587, False, "noreply@example.com", "mailer", "p@ss-word"
    )
    assert "p@ss-word" not in repr(server) and "mailer" in repr(server)
    assert (implicit.port, implicit.implicit_tls, implicit.username) == (465, True, None)
    assert implicit.sender == "Waitstate <noreply@example.com>"


@pytest.mark.parametrize(
    ("url", "sender", "says"),
    [
        ("http://user:hunter2hunter2@mail.example.com", "a@example.com", "WAITSTATE_SMTP_URL is"),
        ("smtp://user:hunter2hunter2@", "a@example.com", "WAITSTATE_SMTP_URL names no host"),
        ("smtp://user:hunter2hunter2@host:port", "a@example.com", "malformed port"),
        ("smtp://user:hunter2hunter2@host/mail", "a@example.com", "has a path"),
        ("smtp://user@host", "a@example.com", "both a user and a password"),
        ("smtp://user:hunter2hunter2@host", None, "WAITSTATE_SMTP_FROM must be set"),
        ("smtp://user:hunter2hunter2@host", "nobody", "WAITSTATE_SMTP_FROM 'nobody' is not"),
        ("smtp://host", "a@example.com\r\nBcc: x@example.com", "WAITSTATE_SMTP_FROM"),
    ],
)
def test_a_malformed_smtp_setting_is_refused_without_repeating_the_password(
    url: str, sender: str | None, says: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(says)) as refused:
        parse_smtp(url, sender)

    assert "hunter2" not in str(refused.value)


# --- email ------------------------------------------------------------------------------------------


async def test_an_approval_email_reaches_its_recipients_with_the_page_link(
    smtp: SmtpStandIn,
) -> None:
    to = ["claims@example.com", "ops@example.com"]

    await EmailSender(_server(smtp), to).send(_approval())

    [mail] = smtp.received
    assert (mail.sender, mail.recipients) == ("noreply@example.com", to)
    assert mail.message["To"] == "claims@example.com, ops@example.com"
    assert mail.message["From"] == "Waitstate <noreply@example.com>"
    assert mail.message["Subject"] == "Approval needed: issue_refund (run run-1)"
    assert mail.message["Auto-Submitted"] == "auto-generated"
    plain, page = mail.part("plain"), mail.part("html")
    assert f"\n{PAGE}\n" in plain
    assert f'<a href="{html.escape(PAGE)}">' in page
    for text in (plain, page):
        assert "a refund over $100" in text  # what is asked and why
        assert "run-1" in text  # who asked
        assert "2030-01-02 12:00 UTC" in text  # until when
        assert "C-118" in text
        assert not any(token in text for token in OTHER_TOKENS)


async def test_hostile_text_is_escaped_in_html_and_bounded(smtp: SmtpStandIn) -> None:
    arguments = {"note": "x" * 10_000, "html": HOSTILE}
    notice = _approval(
        reason=HOSTILE + "y" * 10_000,
        arguments=arguments,
        workflow_id="run-1\r\nBcc: victim@example.com",
        tool="t" * 1_000,
    )

    await EmailSender(_server(smtp), ["claims@example.com"]).send(notice)

    [mail] = smtp.received
    plain, page = mail.part("plain"), mail.part("html")
    assert "<script>" not in page and html.escape("<script>alert(1)</script>") in page
    assert HOSTILE in plain  # plain text shows it as it is: nothing there runs
    # A line break in a run's id ends up no header of its own.
    assert mail.recipients == ["claims@example.com"] and mail.message["Bcc"] is None
    subject = mail.message["Subject"]
    assert len(subject) <= SUBJECT_CHARS and subject.startswith("Approval needed: ttt")
    # Bounded: the reason, the arguments' JSON and so the whole message.
    [reason] = re.findall(r"^Reason: (.*)$", plain, re.MULTILINE)
    assert len(reason) <= TEXT_CHARS and reason.endswith("…")
    arguments_shown = plain.split("Arguments:\n", 1)[1].split("\n\nOpen the request", 1)[0]
    assert len(arguments_shown) <= ARGUMENTS_CHARS and arguments_shown.endswith("…")
    assert len(plain) < TEXT_CHARS + ARGUMENTS_CHARS + 1_500
    assert PAGE in plain and PAGE in html.unescape(page)


async def test_a_question_email_says_what_is_asked_and_links_to_its_page(
    smtp: SmtpStandIn,
) -> None:
    await EmailSender(_server(smtp), ["ops@example.com"]).send(_question(escalation=True))

    [mail] = smtp.received
    plain = mail.part("plain")
    assert mail.message["Subject"] == "Question from export_transactions (run run-2) [escalated]"
    assert "Question: Which quarter should the export cover?" in plain
    assert '"quarter"' in plain
    assert "http://gateway.test/pages/questions/q_1?token=question-token" in plain
    assert "form-token" not in plain


async def test_without_a_page_link_the_email_says_how_to_decide_with_the_cli(
    smtp: SmtpStandIn,
) -> None:
    notice = _approval(workflow_id="run 1; rm -rf ~")
    for key in ("page", "decision", "links"):
        del notice[key]

    await EmailSender(_server(smtp), ["claims@example.com"]).send(notice)

    [mail] = smtp.received
    assert f"{cli_command()} approve 'run 1; rm -rf ~' --request apr_1" in mail.part("plain")


async def test_without_a_page_link_a_question_email_gives_a_command_that_works_as_pasted(
    smtp: SmtpStandIn,
) -> None:
    schema = {
        "type": "object",
        "properties": {
            "quarter": {"type": "string", "enum": ["Q3", "Q4"]},
            "rows": {"type": "integer", "minimum": 1},
        },
        "required": ["quarter"],
    }
    notice = _question(requested_schema=schema)
    del notice["page"], notice["answer"]

    await EmailSender(_server(smtp), ["ops@example.com"]).send(notice)

    [mail] = smtp.received
    plain = " ".join(mail.part("plain").split())
    command = plain.partition("answer with ")[2].partition(" (the values are examples")[0]
    words = shlex.split(command)
    assert words[:5] == [cli_command(), "answer", "run-2", "--question", "q_1"]
    assert words[5] == "--accept" and len(words) == 7
    assert answer_problem(schema, json.loads(words[6])) is None


async def test_an_smtp_server_out_of_reach_fails_the_send(closed_port: int) -> None:
    server = SmtpServer("127.0.0.1", closed_port, False, "noreply@example.com")

    with pytest.raises(NoticeError, match=f"email via 127.0.0.1:{closed_port} failed"):
        await EmailSender(server, ["claims@example.com"]).send(_approval())


async def test_a_password_is_not_sent_to_a_server_without_tls(smtp: SmtpStandIn) -> None:
    server = _server(smtp, username="mailer", password="hunter2hunter2")

    with pytest.raises(NoticeError, match="offers no STARTTLS") as refused:
        await EmailSender(server, ["claims@example.com"]).send(_approval())

    assert smtp.received == []
    assert "hunter2" not in str(refused.value)


# --- Slack ------------------------------------------------------------------------------------------


async def test_a_slack_message_carries_the_request_and_the_page_link() -> None:
    async with slack_webhook() as slack, httpx.AsyncClient() as http:
        await SlackSender(http, slack.url).send(_approval(reason=HOSTILE))

    [payload] = slack.received
    assert payload["text"] == (
        f"Approval needed: issue_refund (run run-1): <{PAGE}|Open the request to approve or "
        "reject it>"
    )
    [actions] = [block for block in payload["blocks"] if block["type"] == "actions"]
    assert actions["elements"][0]["url"] == PAGE
    texts = [block["text"]["text"] for block in payload["blocks"] if "text" in block]
    assert "*Reason*\n&lt;script&gt;alert(1)&lt;/script&gt; &amp; &lt;!channel&gt; " in texts[2]
    everything = json.dumps(payload)
    # Text makes no link, mention or markup of its own, and no other token travels.
    assert "<script>" not in everything and "<!channel>" not in everything
    assert "<https://evil.test" not in everything
    assert not any(token in everything for token in OTHER_TOKENS)
    assert "issue_refund" in everything and "C-118" in everything and "run-1" in everything


async def test_a_slack_message_keeps_within_slacks_limits() -> None:
    notice = _approval(reason="<" * 5_000, arguments={"a": "&" * 5_000}, tool="t" * 500)

    async with slack_webhook() as slack, httpx.AsyncClient() as http:
        await SlackSender(http, slack.url).send(notice)

    [payload] = slack.received
    header, *sections = payload["blocks"]
    assert len(header["text"]["text"]) <= 150
    assert all(len(block["text"]["text"]) <= 3_000 for block in sections if "text" in block)
    # Cut after escaping, never inside an escape.
    assert all(
        not re.search(r"&(?!lt;|gt;|amp;)", block["text"]["text"])
        for block in sections
        if "text" in block
    )


@pytest.mark.parametrize("status", [404, 500])
async def test_a_webhook_that_refuses_fails_the_send_without_its_url(status: int) -> None:
    async with slack_webhook() as slack, httpx.AsyncClient() as http:
        slack.status, slack.answer = status, "no_service"
        with pytest.raises(NoticeError, match=f"answered {status}: no_service") as refused:
            await SlackSender(http, slack.url).send(_approval())

    assert SLACK_PATH not in str(refused.value) and refused.value.__cause__ is None


async def test_a_webhook_out_of_reach_fails_the_send_without_its_url(closed_port: int) -> None:
    url = f"http://127.0.0.1:{closed_port}{SLACK_PATH}"
    async with httpx.AsyncClient() as http:
        with pytest.raises(NoticeError, match="unreachable: ConnectError") as refused:
            await SlackSender(http, url).send(_approval())

    assert SLACK_PATH not in str(refused.value) and refused.value.__cause__ is None


# --- routing ------------------------------------------------------------------------------------


class _Recording:
    """A sender that keeps what it is sent, or fails."""

    def __init__(self, fails: bool = False) -> None:
        self.sent: list[Mapping[str, Any]] = []
        self.fails = fails

    async def send(self, notice: Mapping[str, Any]) -> None:
        self.sent.append(notice)
        if self.fails:
            raise NoticeError("out of order")


def _router(senders: Mapping[str, list[Sender]], outbox: Sender) -> NoticeRouter:
    return NoticeRouter(senders, [outbox])


async def test_each_group_gets_its_senders_and_others_the_default() -> None:
    email, slack, outbox = _Recording(), _Recording(), _Recording()
    fallback = _Recording()
    with_default = _router({"claims-team": [email, slack], "*": [outbox]}, fallback)
    without_default = _router({"claims-team": [email]}, fallback)

    await with_default.send(_approval(recipient="claims-team"))
    await with_default.send(_approval(recipient="managers"))
    await without_default.send(_approval(recipient="managers"))

    assert [n["recipient"] for n in email.sent] == ["claims-team"]
    assert [n["recipient"] for n in slack.sent] == ["claims-team"]
    assert [n["recipient"] for n in outbox.sent] == ["managers"]
    assert [n["recipient"] for n in fallback.sent] == ["managers"]


async def test_a_notice_fails_if_any_sender_fails_and_the_others_still_get_it() -> None:
    working, broken, also_broken = _Recording(), _Recording(fails=True), _Recording(fails=True)
    one = _router({"claims-team": [working, broken]}, _Recording())
    two = _router({"claims-team": [working, broken, also_broken]}, _Recording())

    with pytest.raises(NoticeError, match="^out of order$"):
        await one.send(_approval())
    with pytest.raises(NoticeError, match="2 of 3 senders failed"):
        await two.send(_approval())

    assert len(working.sent) == 2 and len(broken.sent) == 2


async def test_a_route_sending_email_without_an_smtp_server_is_refused_when_built() -> None:
    routes = parse_routes("claims-team=email:claims@example.com")

    async with httpx.AsyncClient() as http:
        with pytest.raises(ValueError, match="sends group 'claims-team' email: set WAITSTATE_SMTP"):
            NoticeRouter.build(routes, http=http, outbox_url="http://outbox.test")
