"""Notices to people: an approval request, or an operation's job's question, delivered where the
group it is for reads them.

A notice is the JSON body the `notify_approval` and `notify_input` activities build (its
`recipient` is the approver group, its `page` the link a person opens in a browser). By concern:

- `routing`: who is told what, the routes `WAITSTATE_NOTICE_ROUTES` names for each group (the
  HTTP outbox by default, email over SMTP, a Slack incoming webhook) and the SMTP server;
- `messages`: what a notice says, bounded and escaped (its text is untrusted);
- `senders`: delivering it, and `NoticeRouter`, which sends it to every sender of its group.

The routing names load with the package (the settings of every process read them); the rest on
first use, so a process that only reads its settings loads no sender, message or answer-checking
code (the checker's jsonschema).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from waitstate.notices.routing import (
    DEFAULT_GROUP,
    ROUTES_VARIABLE,
    SMTP_FROM_VARIABLE,
    SMTP_URL_VARIABLE,
    EmailRoute,
    NoticeError,
    NoticeRoutes,
    OutboxRoute,
    Route,
    SlackRoute,
    SmtpServer,
    parse_routes,
    parse_smtp,
)

if TYPE_CHECKING:
    from waitstate.notices.messages import ARGUMENTS_CHARS, SUBJECT_CHARS, TEXT_CHARS
    from waitstate.notices.senders import (
        SEND_TIMEOUT,
        EmailSender,
        NoticeRouter,
        OutboxSender,
        Sender,
        SlackSender,
    )

_EXPORTS = {
    "ARGUMENTS_CHARS": "waitstate.notices.messages",
    "SUBJECT_CHARS": "waitstate.notices.messages",
    "TEXT_CHARS": "waitstate.notices.messages",
    "SEND_TIMEOUT": "waitstate.notices.senders",
    "EmailSender": "waitstate.notices.senders",
    "NoticeRouter": "waitstate.notices.senders",
    "OutboxSender": "waitstate.notices.senders",
    "Sender": "waitstate.notices.senders",
    "SlackSender": "waitstate.notices.senders",
}

__all__ = [
    "ARGUMENTS_CHARS",
    "DEFAULT_GROUP",
    "ROUTES_VARIABLE",
    "SEND_TIMEOUT",
    "SMTP_FROM_VARIABLE",
    "SMTP_URL_VARIABLE",
    "SUBJECT_CHARS",
    "TEXT_CHARS",
    "EmailRoute",
    "EmailSender",
    "NoticeError",
    "NoticeRouter",
    "NoticeRoutes",
    "OutboxRoute",
    "OutboxSender",
    "Route",
    "Sender",
    "SlackRoute",
    "SlackSender",
    "SmtpServer",
    "parse_routes",
    "parse_smtp",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
