"""Notices to people: an approval request, or an operation's job's question, delivered where the
group it is for reads them.

A notice is the JSON body the `notify_approval` and `notify_input` activities build (its
`recipient` is the approver group, its `page` the link a person opens in a browser). It goes to
the senders `WAITSTATE_NOTICE_ROUTES` names for that group: the HTTP outbox (the default), email
over SMTP, or a Slack incoming webhook. Every sender raises when it could not deliver, so the
activity's attempt fails and Temporal retries it.

Everything in a notice is untrusted text (a job writes its question, a model its reason): the
messages bound it, escape it for HTML and Slack, and carry no token but the one in the page link.
This module uses the standard library and httpx only, so it is tested without Temporal.
"""

from __future__ import annotations

import asyncio
import html
import json
import logging
import re
import shlex
import smtplib
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.message import EmailMessage
from email.utils import formatdate, make_msgid, parseaddr
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

import httpx

from waitstate.names import cli_command

log = logging.getLogger(__name__)

ROUTES_VARIABLE = "WAITSTATE_NOTICE_ROUTES"
SMTP_URL_VARIABLE = "WAITSTATE_SMTP_URL"
SMTP_FROM_VARIABLE = "WAITSTATE_SMTP_FROM"
# The group whose route every other group takes; without it, the outbox.
DEFAULT_GROUP = "*"

# How long one sender may take: the activity's start-to-close timeout is 12 s
# (workflows/policies.py NOTIFY_TIMEOUT), and the senders of a notice run side by side.
SEND_TIMEOUT = timedelta(seconds=10)
# How much of each untrusted value a message carries.
NAME_CHARS = 200  # a tool, a run's id, a group
TEXT_CHARS = 2000  # a reason, a question
ARGUMENTS_CHARS = 2000  # the arguments, or the answer's schema, as JSON
SUBJECT_CHARS = 150  # also the most a Slack header holds
# Slack refuses a section's text over 3,000 characters (escaping makes text longer).
SLACK_TEXT_CHARS = 2900

_SMTP_PORTS = {"smtp": 25, "smtps": 465}
_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})
# Control characters (newline and tab stay) and the bidirectional overrides that make text read
# other than it is.
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_SLACK_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


class NoticeError(Exception):
    """A notice was not delivered; the message names the sender, never a secret."""


# --- where each group's notices go --------------------------------------------------------------


@dataclass(frozen=True)
class OutboxRoute:
    """The HTTP outbox, `APPROVALS_OUTBOX_URL`: each notice POSTed as JSON."""


@dataclass(frozen=True)
class EmailRoute:
    """Email to these addresses, through the worker's SMTP server."""

    addresses: tuple[str, ...]


@dataclass(frozen=True)
class SlackRoute:
    """A Slack incoming webhook. Its URL is a secret: its repr shows the host only."""

    webhook_url: str

    def __repr__(self) -> str:
        parts = urlsplit(self.webhook_url)
        return f"SlackRoute('{parts.scheme}://{parts.hostname}/…')"


Route = OutboxRoute | EmailRoute | SlackRoute
# Approver group (or `*`) -> where its notices go.
NoticeRoutes = Mapping[str, tuple[Route, ...]]


def parse_routes(value: str, variable: str = ROUTES_VARIABLE) -> dict[str, tuple[Route, ...]]:
    """Parse `GROUP=DESTINATION;...`, e.g.
    `claims-team=email:claims@example.com,ops@example.com;finance=slack:https://hooks...;*=outbox`.

    A destination is `outbox`, `email:ADDRESS,...` or `slack:WEBHOOK_URL`; a group named twice
    goes to both destinations. `*` is every other group's; without it they go to the outbox.

    Raises:
        ValueError: an entry is malformed; the message names `variable` and the group, and never
            repeats a webhook URL.
    """
    routes: dict[str, tuple[Route, ...]] = {}
    entries = [entry.strip() for entry in value.split(";")]
    for number, entry in enumerate(filter(None, entries), start=1):
        group, sep, destination = (part.strip() for part in entry.partition("="))
        if not sep or not group or not destination:
            raise ValueError(
                f"{variable}: entry {number} is not GROUP=DESTINATION "
                "(e.g. claims-team=email:claims@example.com;*=outbox)"
            )
        routes[group] = (*routes.get(group, ()), _route(group, destination, variable))
    return routes


def _route(group: str, destination: str, variable: str) -> Route:
    kind, _, target = destination.partition(":")
    kind, target = kind.strip().lower(), target.strip()
    if kind == "outbox" and not target:
        return OutboxRoute()
    if kind == "email":
        addresses = tuple(filter(None, (a.strip() for a in target.split(","))))
        if not addresses:
            raise ValueError(f"{variable}: group {group!r} has email: with no address")
        for address in addresses:
            if not _is_address(address):
                raise ValueError(f"{variable}: group {group!r}: {address!r} is not an address")
        return EmailRoute(addresses)
    if kind == "slack":
        parts = urlsplit(target)
        secure = parts.scheme == "https" or (parts.scheme == "http" and parts.hostname in _LOOPBACK)
        if not (secure and parts.hostname):
            # The URL is not repeated: its path is the webhook's secret.
            raise ValueError(
                f"{variable}: group {group!r}: the Slack webhook must be an https:// URL"
            )
        return SlackRoute(target)
    # The destination is not repeated: it may be a webhook URL missing its `slack:`.
    raise ValueError(
        f"{variable}: group {group!r} has an unknown destination; expected outbox, "
        "email:ADDRESS,... or slack:WEBHOOK_URL"
    )


def _is_address(address: str) -> bool:
    _, parsed = parseaddr(address)
    local, at, domain = address.rpartition("@")
    return (
        parsed == address
        and bool(at and local and "." in domain)
        and address.isprintable()
        and not any(char.isspace() for char in address)
    )


# --- the SMTP server -----------------------------------------------------------------------------


@dataclass(frozen=True)
class SmtpServer:
    """Where email notices are submitted, and who they are from.

    Attributes:
        host: The server's name or address.
        port: Its port (default 25 for `smtp://`, 465 for `smtps://`).
        implicit_tls: `smtps://`: TLS from the first byte. Otherwise the connection turns to
            TLS by STARTTLS when the server offers it; a password is never sent without TLS.
        username: Login, if the server wants one.
        password: Its password (never in a repr).
        sender: The From address.
    """

    host: str
    port: int
    implicit_tls: bool
    sender: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)


def parse_smtp(url: str, sender: str | None) -> SmtpServer:
    """The server of `WAITSTATE_SMTP_URL` (`smtp://[USER:PASSWORD@]HOST[:PORT]`, or `smtps://`)
    with `WAITSTATE_SMTP_FROM` as the sender.

    Raises:
        ValueError: either is malformed or the sender is missing; the message names the
            variable and never repeats the URL (it holds a password).
    """
    expected = "expected smtp://[USER:PASSWORD@]HOST[:PORT] or smtps://..."
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    if scheme not in _SMTP_PORTS:
        raise ValueError(f"{SMTP_URL_VARIABLE} is not an smtp:// or smtps:// URL; {expected}")
    try:
        port = parts.port or _SMTP_PORTS[scheme]
    except ValueError:  # urllib's own message repeats the URL's netloc
        raise ValueError(f"{SMTP_URL_VARIABLE} has a malformed port; {expected}") from None
    if not parts.hostname:
        raise ValueError(f"{SMTP_URL_VARIABLE} names no host; {expected}")
    if parts.path.strip("/") or parts.query or parts.fragment:
        raise ValueError(f"{SMTP_URL_VARIABLE} has a path, query or fragment; {expected}")
    if (parts.username is None) != (parts.password is None):
        raise ValueError(f"{SMTP_URL_VARIABLE} must give both a user and a password, or neither")
    sender = (sender or "").strip()
    if not sender:
        raise ValueError(f"{SMTP_FROM_VARIABLE} must be set with {SMTP_URL_VARIABLE}")
    if not _is_address(parseaddr(sender)[1]) or not sender.isprintable():
        raise ValueError(f"{SMTP_FROM_VARIABLE} {sender!r} is not an address")
    return SmtpServer(
        host=parts.hostname,
        port=port,
        implicit_tls=scheme == "smtps",
        sender=sender,
        username=unquote(parts.username) if parts.username is not None else None,
        password=unquote(parts.password) if parts.password is not None else None,
    )


# --- what a message says ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Message:
    """A notice as a person reads it, its untrusted parts cleaned and bounded (not escaped)."""

    subject: str
    intro: str
    facts: tuple[tuple[str, str], ...]
    detail: tuple[str, str]  # a label, and JSON shown as code
    page: str | None
    action: str  # what the page link says
    fallback: str  # what to do when there is no page link


def _message(notice: Mapping[str, Any]) -> _Message:
    run = _line(notice.get("workflow_id"))
    tool = _line(notice.get("tool"))
    group = _line(notice.get("recipient"))
    escalation = bool(notice.get("escalation"))
    escalated = " (escalated: nobody answered in the first window)" if escalation else ""
    tag = " [escalated]" if escalation else ""
    page = notice.get("page")
    page = page if isinstance(page, str) and page else None
    expires = ("Expires", _when(notice.get("expires_at")))
    if notice.get("kind") == "question":
        # Here, not at the top: settings import this module in every process (the CLI's
        # commands too), and the checker's jsonschema costs ~0.1 s to load.
        from waitstate.elicitation import answer_command, example_answer

        question = _line(notice.get("question_id"))
        schema = notice.get("requested_schema")
        values = (
            "the values are examples: put yours in"
            if example_answer(schema) is not None
            else "answer.json: a JSON object matching the form above"
        )
        return _Message(
            subject=_line(f"Question from {tool} (run {run}){tag}", SUBJECT_CHARS),
            intro=f"An operation of run {run} asks {group} a question{escalated}.",
            facts=(
                ("Question", _text(notice.get("message"))),
                ("Asked by", f"{tool}, in run {run}"),
                expires,
                ("Question id", question),
            ),
            detail=("The answer's form (JSON schema)", _json(notice.get("requested_schema"))),
            page=page,
            action="Open the question to answer it",
            fallback="No link was made (the worker has no token keys or gateway URL): answer "
            f"with {answer_command(run, question, schema)} ({values})",
        )
    request = _line(notice.get("request_id"))
    return _Message(
        subject=_line(f"Approval needed: {tool} (run {run}){tag}", SUBJECT_CHARS),
        intro=f"Run {run} asks {group} to approve a call of {tool}{escalated}.",
        facts=(
            ("Reason", _text(notice.get("reason"))),
            ("Asked by", f"run {run}"),
            expires,
            ("Request id", request),
        ),
        detail=("Arguments", _json(notice.get("arguments"))),
        page=page,
        action="Open the request to approve or reject it",
        fallback="No link was made (the worker has no token keys or gateway URL): decide with "
        f"{cli_command()} approve {shlex.quote(run)} --request {shlex.quote(request)} "
        "(or reject)",
    )


def _cut(text: str, limit: int) -> str:
    """`text`, at most `limit` characters: cut, it ends with `…`."""
    return text if len(text) <= limit else f"{text[: limit - 1]}…"


def _text(value: object, limit: int = TEXT_CHARS) -> str:
    """Untrusted text, without control characters (newlines stay), cut to `limit`."""
    return _cut(_CONTROLS.sub("", "" if value is None else str(value)), limit)


def _line(value: object, limit: int = NAME_CHARS) -> str:
    """Untrusted text on one line (a header cannot hold a line break), cut to `limit`."""
    return _text(" ".join(("" if value is None else str(value)).split()), limit)


def _json(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False, indent=1, default=str)
    return _text(text, ARGUMENTS_CHARS)


def _when(value: object) -> str:
    try:
        moment = datetime.fromisoformat(str(value))
    except ValueError:
        return _line(value)
    if moment.tzinfo is None:
        return _line(value)
    return f"{moment.astimezone(UTC):%Y-%m-%d %H:%M} UTC"


def _plain(message: _Message) -> str:
    label, code = message.detail
    lines = [message.intro, ""]
    lines += [f"{name}: {value}" for name, value in message.facts]
    lines += ["", f"{label}:", code, ""]
    if message.page:
        lines += [f"{message.action}:", message.page]
    else:
        lines.append(message.fallback)
    return "\n".join(lines) + "\n"


def _html(message: _Message) -> str:
    def e(text: str) -> str:
        return html.escape(text, quote=True)

    label, code = message.detail
    rows = "".join(
        f'<tr><th align="left" valign="top">{e(name)}</th>'
        f'<td style="white-space:pre-wrap">{e(value)}</td></tr>'
        for name, value in message.facts
    )
    link = (
        f'<p><a href="{e(message.page)}">{e(message.action)}</a></p>'
        if message.page
        else f"<p>{e(message.fallback)}</p>"
    )
    return (
        "<!DOCTYPE html>\n<html><body>\n"
        f"<p>{e(message.intro)}</p>\n<table>{rows}</table>\n"
        f"<p><b>{e(label)}</b></p>\n<pre>{e(code)}</pre>\n{link}\n</body></html>\n"
    )


def _mrkdwn(text: str, limit: int = SLACK_TEXT_CHARS) -> str:
    """Text for Slack's mrkdwn: `&`, `<` and `>` escaped (so text makes no link or mention),
    cut to `limit` characters after escaping, never inside an escape."""
    pieces: list[str] = []
    size = 0
    for char in text:
        piece = _SLACK_ESCAPES.get(char, char)
        if size + len(piece) > limit:
            pieces.append("…")
            break
        pieces.append(piece)
        size += len(piece)
    return "".join(pieces)


def _slack_payload(message: _Message) -> dict[str, Any]:
    def section(name: str, value: str, fence: str = "") -> dict[str, Any]:
        room = SLACK_TEXT_CHARS - len(name) - 2 * len(fence) - 3
        text = f"*{name}*\n{fence}{_mrkdwn(value, room)}{fence}"
        return {"type": "section", "text": {"type": "mrkdwn", "text": text}}

    label, code = message.detail
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": message.subject}},
        {"type": "section", "text": {"type": "mrkdwn", "text": _mrkdwn(message.intro)}},
        *(section(name, value) for name, value in message.facts),
        # A run of backticks in the JSON would close its code block early.
        section(label, code.replace("```", "`\u200b`\u200b`"), fence="```"),
    ]
    subject = _mrkdwn(message.subject)
    if not message.page:
        fallback = {"type": "mrkdwn", "text": _mrkdwn(message.fallback)}
        return {"text": subject, "blocks": [*blocks, {"type": "section", "text": fallback}]}
    button = {"type": "button", "text": {"type": "plain_text", "text": message.action}}
    blocks.append({"type": "actions", "elements": [{**button, "url": message.page}]})
    return {"text": f"{subject}: <{_mrkdwn(message.page)}|{message.action}>", "blocks": blocks}


# --- the senders ------------------------------------------------------------------------------------


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
        payload = _slack_payload(_message(notice))
        try:
            response = await self._http.post(
                self._url, json=payload, timeout=SEND_TIMEOUT.total_seconds()
            )
        except httpx.HTTPError as err:
            raise NoticeError(f"Slack webhook unreachable: {type(err).__name__}") from None
        if response.is_error:
            said = _line(response.text, 100)
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
        message = _email(_message(notice), self._server.sender, self._to)
        try:
            await asyncio.to_thread(_submit, self._server, message, self._to)
        except (smtplib.SMTPException, OSError) as err:
            where = f"{self._server.host}:{self._server.port}"
            raise NoticeError(f"email via {where} failed: {type(err).__name__}: {err}") from err


def _email(message: _Message, sender: str, to: Sequence[str]) -> EmailMessage:
    email = EmailMessage()
    email["Subject"] = message.subject
    email["From"] = sender
    email["To"] = ", ".join(to)
    email["Date"] = formatdate(usegmt=True)
    # The sender's domain, rather than the machine's name, which make_msgid would look up.
    email["Message-ID"] = make_msgid(domain=parseaddr(sender)[1].rpartition("@")[2])
    # RFC 3834: no auto-replies (vacation notices) to a machine's message.
    email["Auto-Submitted"] = "auto-generated"
    email.set_content(_plain(message))
    email.add_alternative(_html(message), subtype="html")
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


# --- routing ---------------------------------------------------------------------------------------


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
