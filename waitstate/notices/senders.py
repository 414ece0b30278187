"""Delivering notices: the HTTP outbox, a Slack incoming webhook, email over SMTP; and the router
that sends each notice to every sender of its recipient group, side by side.

Every sender raises when it could not deliver, so the activity's attempt fails and Temporal
retries it. The standard library and httpx only, so this is tested without Temporal.
"""

from __future__ import annotations

import asyncio
import logging
import smtplib
import ssl
from collections.abc import Mapping, Sequence
from datetime import timedelta
from email.message import EmailMessage
from email.utils import formatdate, make_msgid, parseaddr
from typing import Any, Protocol

import httpx

from waitstate.notices.messages import (
    Message,
    compose,
    html_text,
    one_line,
    plain_text,
    slack_payload,
)
from waitstate.notices.routing import (
    DEFAULT_GROUP,
    ROUTES_VARIABLE,
    SMTP_FROM_VARIABLE,
    SMTP_URL_VARIABLE,
    NoticeError,
    NoticeRoutes,
    OutboxRoute,
    Route,
    SlackRoute,
    SmtpServer,
)

log = logging.getLogger(__name__)

# How long one sender may take: the activity's start-to-close timeout is 12 s
# (workflows/policies.py NOTIFY_TIMEOUT), and the senders of a notice run side by side.
SEND_TIMEOUT = timedelta(seconds=10)


class Sender(Protocol):
    """Delivers a notice somewhere; raises if it could not (the activity's attempt fails and is
    retried)."""

    async def send(self, notice: Mapping[str, Any]) -> None:
        """Deliver `notice`, the body `notify_approval` or `notify_input` built."""
        ...


class OutboxSender:
    """POSTs the notice as it is, JSON, to the outbox."""

    def __init__(self, http: httpx.AsyncClient, url: str) -> None:
        self._http = http
        self._url = url

    async def send(self, notice: Mapping[str, Any]) -> None:
        """POST the notice; an HTTP error or a status of 400 or more raises (httpx's error)."""
        response = await self._http.post(
            self._url, json=dict(notice), timeout=SEND_TIMEOUT.total_seconds()
        )
        response.raise_for_status()


class SlackSender:
    """Posts a message with the notice's page link to a Slack incoming webhook."""

    def __init__(self, http: httpx.AsyncClient, webhook_url: str) -> None:
        self._http = http
        self._url = webhook_url

    async def send(self, notice: Mapping[str, Any]) -> None:
        """Post the message.

        Raises:
            NoticeError: Slack could not be reached or refused it; the error says which, and
                carries neither the webhook's URL nor httpx's error (whose text holds it).
        """
        payload = slack_payload(compose(notice))
        try:
            response = await self._http.post(
                self._url, json=payload, timeout=SEND_TIMEOUT.total_seconds()
            )
        except httpx.HTTPError as err:
            raise NoticeError(f"Slack webhook unreachable: {type(err).__name__}") from None
        if response.is_error:
            said = one_line(response.text, 100)
            raise NoticeError(f"Slack webhook answered {response.status_code}: {said}")


class EmailSender:
    """Emails a plain-text and an HTML message with the notice's page link, over SMTP."""

    def __init__(self, server: SmtpServer, to: Sequence[str]) -> None:
        self._server = server
        self._to = list(to)

    async def send(self, notice: Mapping[str, Any]) -> None:
        """Submit the email (smtplib, in a thread: it blocks).

        A thread cannot be cancelled: when the router's timeout gives up on it, it ends on its
        own within its sockets' timeout, and a message it still submits is one more duplicate
        of those a retry may send anyway.

        Raises:
            NoticeError: the server could not be reached, refused the login or every
                recipient, or offers no TLS for the password. A recipient refused while others
                were accepted is logged, not raised: a retry would not take it either.
        """
        message = _email(compose(notice), self._server.sender, self._to)
        try:
            await asyncio.to_thread(_submit, self._server, message, self._to)
        except (smtplib.SMTPException, OSError) as err:
            where = f"{self._server.host}:{self._server.port}"
            raise NoticeError(f"email via {where} failed: {type(err).__name__}: {err}") from err


def _email(message: Message, sender: str, to: Sequence[str]) -> EmailMessage:
    email = EmailMessage()
    email["Subject"] = message.subject
    email["From"] = sender
    email["To"] = ", ".join(to)
    email["Date"] = formatdate(usegmt=True)
    # The sender's domain, rather than the machine's name, which make_msgid would look up.
    email["Message-ID"] = make_msgid(domain=parseaddr(sender)[1].rpartition("@")[2])
    # RFC 3834: no auto-replies (vacation notices) to a machine's message.
    email["Auto-Submitted"] = "auto-generated"
    email.set_content(plain_text(message))
    email.add_alternative(html_text(message), subtype="html")
    return email


def _submit(server: SmtpServer, message: EmailMessage, to: Sequence[str]) -> None:
    """Submit `message` to `to` on `server` (blocking)."""
    context = ssl.create_default_context()
    timeout = SEND_TIMEOUT.total_seconds()
    smtp = (
        smtplib.SMTP_SSL(server.host, server.port, timeout=timeout, context=context)
        if server.implicit_tls
        else smtplib.SMTP(server.host, server.port, timeout=timeout)
    )
    with smtp:
        if not server.implicit_tls:
            smtp.ehlo()
            if smtp.has_extn("starttls"):
                smtp.starttls(context=context)
                smtp.ehlo()
            elif server.username is not None:
                raise NoticeError(
                    f"{server.host}:{server.port} offers no STARTTLS: the SMTP password is "
                    "not sent without TLS (use smtps://, or a server that offers STARTTLS)"
                )
        if server.username is not None:
            smtp.login(server.username, server.password or "")
        refused = smtp.send_message(message, server.sender, list(to))
    if refused:
        log.warning("email notice: the server refused %s", ", ".join(sorted(refused)))


# --- each group's senders ---------------------------------------------------------------------------------------


class NoticeRouter:
    """Sends each notice to the senders of its recipient group (`*`'s for any other group, the
    outbox if there is no `*`)."""

    def __init__(self, senders: Mapping[str, Sequence[Sender]], default: Sequence[Sender]) -> None:
        self._senders = {group: list(found) for group, found in senders.items()}
        self._default = list(self._senders.get(DEFAULT_GROUP, default))

    @classmethod
    def build(
        cls,
        routes: NoticeRoutes,
        *,
        http: httpx.AsyncClient,
        outbox_url: str,
        smtp: SmtpServer | None = None,
    ) -> NoticeRouter:
        """The senders `routes` name, on `http` and `smtp`; no routes: the outbox for all.

        Raises:
            ValueError: a route sends email and there is no SMTP server.
        """
        outbox = OutboxSender(http, outbox_url)

        def sender(group: str, route: Route) -> Sender:
            if isinstance(route, OutboxRoute):
                return outbox
            if isinstance(route, SlackRoute):
                return SlackSender(http, route.webhook_url)
            if smtp is None:
                raise ValueError(
                    f"{ROUTES_VARIABLE} sends group {group!r} email: set {SMTP_URL_VARIABLE} "
                    f"and {SMTP_FROM_VARIABLE}"
                )
            return EmailSender(smtp, route.addresses)

        senders = {
            group: [sender(group, route) for route in group_routes]
            for group, group_routes in routes.items()
        }
        return cls(senders, [outbox])

    def senders_for(self, recipient: str) -> list[Sender]:
        """The senders of `recipient`'s notices."""
        return self._senders.get(recipient, self._default)

    async def send(self, notice: Mapping[str, Any]) -> None:
        """Send `notice` to every sender of its `recipient`, side by side.

        All must succeed: if one fails, this raises once the others are done (its own error if
        it is the only one). The activity's retry then sends the notice again to every sender, so
        a person may get it twice, with the same link (its token is the same every time).
        """
        senders = self.senders_for(str(notice.get("recipient", "")))

        async def send(sender: Sender) -> None:
            async with asyncio.timeout(SEND_TIMEOUT.total_seconds()):
                await sender.send(notice)

        outcomes = await asyncio.gather(*(send(s) for s in senders), return_exceptions=True)
        failed = [
            (sender, outcome)
            for sender, outcome in zip(senders, outcomes, strict=True)
            if isinstance(outcome, BaseException)
        ]
        for _, outcome in failed:
            if not isinstance(outcome, Exception):  # cancellation and the like: not ours
                raise outcome
        if len(failed) == 1:
            raise failed[0][1]
        if failed:
            said = "; ".join(
                f"{type(sender).__name__}: {type(err).__name__}: {err}" for sender, err in failed
            )
            raise NoticeError(f"{len(failed)} of {len(senders)} senders failed: {said}")
