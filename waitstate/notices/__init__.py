"""Notices to people: an approval request, or an operation's job's question, delivered where the
group it is for reads them.

A notice is the JSON body the `notify_approval` and `notify_input` activities build (its
`recipient` is the approver group, its `page` the link a person opens in a browser). By concern:

- `routing`: who is told what, the routes `WAITSTATE_NOTICE_ROUTES` names for each group (the
  HTTP outbox by default, email over SMTP, a Slack incoming webhook) and the SMTP server;
- `messages`: what a notice says, bounded and escaped (its text is untrusted);
- `senders`: delivering it, and `NoticeRouter`, which sends it to every sender of its group.

The package exports the routing names (the settings of every process read them); senders and
messages are imported from their modules, so a process that only reads its settings loads no
sender, message or answer-checking code (the checker's jsonschema).
"""

from __future__ import annotations

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

__all__ = [
    "DEFAULT_GROUP",
    "ROUTES_VARIABLE",
    "SMTP_FROM_VARIABLE",
    "SMTP_URL_VARIABLE",
    "EmailRoute",
    "NoticeError",
    "NoticeRoutes",
    "OutboxRoute",
    "Route",
    "SlackRoute",
    "SmtpServer",
    "parse_routes",
    "parse_smtp",
]
