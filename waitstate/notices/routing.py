"""Who is told what: the routes of each approver group's notices (`WAITSTATE_NOTICE_ROUTES`) and
the SMTP server email notices go through (`WAITSTATE_SMTP_URL`, `WAITSTATE_SMTP_FROM`), parsed
from the environment by the settings.

The standard library only: every process reads its settings, so this loads no sender and no
message code.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from email.utils import parseaddr
from urllib.parse import unquote, urlsplit

ROUTES_VARIABLE = "WAITSTATE_NOTICE_ROUTES"
SMTP_URL_VARIABLE = "WAITSTATE_SMTP_URL"
SMTP_FROM_VARIABLE = "WAITSTATE_SMTP_FROM"
# The group whose route every other group takes; without it, the outbox.
DEFAULT_GROUP = "*"

_SMTP_PORTS = {"smtp": 25, "smtps": 465}
_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})


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
