"""Stand-ins for where notices go, served for real on free ports: an SMTP server (aiosmtpd, in
a thread of its own) and an HTTP server taking Slack incoming-webhook posts."""

from __future__ import annotations

import email
import email.policy
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from email.message import EmailMessage
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session
from fastapi import FastAPI, Request, Response

from examples.systems import serving
from tests.rigs import free_port

# The path of a webhook URL is its secret.
SLACK_PATH = "/services/T0000/B0000/webhook-secret-path"


@dataclass
class Mail:
    """One email as the server received it: the envelope and the message."""

    sender: str
    recipients: list[str]
    message: EmailMessage

    def part(self, subtype: str) -> str:
        """The text of the `text/<subtype>` part."""
        body = self.message.get_body(preferencelist=(subtype,))
        assert body is not None, f"no text/{subtype} part"
        assert body.get_content_subtype() == subtype, f"no text/{subtype} part"
        return str(body.get_content()).replace("\r\n", "\n")


@dataclass
class SmtpStandIn:
    """The SMTP server's address and the mail it received."""

    host: str
    port: int
    received: list[Mail] = field(default_factory=list)

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        """aiosmtpd's hook for a message: keep it."""
        assert isinstance(envelope.content, bytes)
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        assert isinstance(message, EmailMessage)
        recipients = [str(r) for r in envelope.rcpt_tos]
        self.received.append(Mail(str(envelope.mail_from), recipients, message))
        return "250 OK"


@contextmanager
def smtp_server() -> Iterator[SmtpStandIn]:
    """An SMTP server on a free loopback port, offering no STARTTLS and no login."""
    stand_in = SmtpStandIn("127.0.0.1", free_port())
    controller = Controller(stand_in, hostname=stand_in.host, port=stand_in.port)
    controller.start()
    try:
        yield stand_in
    finally:
        controller.stop()


@dataclass
class SlackStandIn:
    """The webhook's URL, the payloads it received, and what it answers (Slack's answers)."""

    url: str = ""
    received: list[dict[str, Any]] = field(default_factory=list)
    status: int = 200
    answer: str = "ok"


@asynccontextmanager
async def slack_webhook() -> AsyncIterator[SlackStandIn]:
    """An HTTP server taking posts at `SLACK_PATH` as Slack's webhooks do, on a free port."""
    stand_in = SlackStandIn()
    app = FastAPI()

    @app.post(SLACK_PATH)
    async def post(request: Request) -> Response:
        stand_in.received.append(await request.json())
        return Response(stand_in.answer, status_code=stand_in.status, media_type="text/plain")

    async with serving(app) as url:
        stand_in.url = f"{url}{SLACK_PATH}"
        yield stand_in
