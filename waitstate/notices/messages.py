"""What a notice says: an approval request or an operation's question, as a person reads it in
plain text, HTML or a Slack message.

Everything in a notice is untrusted text (a job writes its question, a model its reason): a
message bounds it, escapes it for HTML and Slack, and carries no token but the one in the page
link.
"""

from __future__ import annotations

import html
import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from waitstate.elicitation import answer_command, example_answer
from waitstate.names import cli_command

# How much of each untrusted value a message carries.
NAME_CHARS = 200  # a tool, a run's id, a group
TEXT_CHARS = 2000  # a reason, a question
ARGUMENTS_CHARS = 2000  # the arguments, or the answer's schema, as JSON
SUBJECT_CHARS = 150  # also the most a Slack header holds
# Slack refuses a section's text over 3,000 characters (escaping makes text longer).
SLACK_TEXT_CHARS = 2900

# Control characters (newline and tab stay) and the bidirectional overrides that make text read
# other than it is.
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_SLACK_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


@dataclass(frozen=True)
class Message:
    """A notice as a person reads it, its untrusted parts cleaned and bounded (not escaped)."""

    subject: str
    intro: str
    facts: tuple[tuple[str, str], ...]
    detail: tuple[str, str]  # a label, and JSON shown as code
    page: str | None
    action: str  # what the page link says
    fallback: str  # what to do when there is no page link


def compose(notice: Mapping[str, Any]) -> Message:
    """The message of `notice`, the body `notify_approval` or `notify_input` built."""
    run = one_line(notice.get("workflow_id"))
    tool = one_line(notice.get("tool"))
    group = one_line(notice.get("recipient"))
    escalation = bool(notice.get("escalation"))
    escalated = " (escalated: nobody answered in the first window)" if escalation else ""
    tag = " [escalated]" if escalation else ""
    page = notice.get("page")
    page = page if isinstance(page, str) and page else None
    expires = ("Expires", _when(notice.get("expires_at")))
    if notice.get("kind") == "question":
        question = one_line(notice.get("question_id"))
        schema = notice.get("requested_schema")
        values = (
            "the values are examples: put yours in"
            if example_answer(schema) is not None
            else "answer.json: a JSON object matching the form above"
        )
        subject = f"Question from {tool} (run {run})"
        intro = f"An operation of run {run} asks {group} a question"
        said = ("Question", _text(notice.get("message")))
        asked_by, named = f"{tool}, in run {run}", ("Question id", question)
        detail = ("The answer's form (JSON schema)", _json(schema))
        action = "Open the question to answer it"
        otherwise = f"answer with {answer_command(run, question, schema)} ({values})"
    else:
        request = one_line(notice.get("request_id"))
        subject = f"Approval needed: {tool} (run {run})"
        intro = f"Run {run} asks {group} to approve a call of {tool}"
        said = ("Reason", _text(notice.get("reason")))
        asked_by, named = f"run {run}", ("Request id", request)
        detail = ("Arguments", _json(notice.get("arguments")))
        action = "Open the request to approve or reject it"
        otherwise = (
            f"decide with {cli_command()} approve {shlex.quote(run)} "
            f"--request {shlex.quote(request)} (or reject)"
        )
    return Message(
        subject=one_line(subject + tag, SUBJECT_CHARS),
        intro=intro + escalated + ".",
        facts=(said, ("Asked by", asked_by), expires, named),
        detail=detail,
        page=page,
        action=action,
        fallback="No link was made (the worker has no token keys or gateway URL): " + otherwise,
    )


def _cut(text: str, limit: int) -> str:
    """`text`, at most `limit` characters: cut, it ends with `…`."""
    return text if len(text) <= limit else f"{text[: limit - 1]}…"


def _text(value: object, limit: int = TEXT_CHARS) -> str:
    """Untrusted text, without control characters (newlines stay), cut to `limit`."""
    return _cut(_CONTROLS.sub("", "" if value is None else str(value)), limit)


def one_line(value: object, limit: int = NAME_CHARS) -> str:
    """Untrusted text on one line (a header cannot hold a line break), cut to `limit`."""
    return _text(" ".join(("" if value is None else str(value)).split()), limit)


def _json(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False, indent=1, default=str)
    return _text(text, ARGUMENTS_CHARS)


def _when(value: object) -> str:
    try:
        moment = datetime.fromisoformat(str(value))
    except ValueError:
        return one_line(value)
    if moment.tzinfo is None:
        return one_line(value)
    return f"{moment.astimezone(UTC):%Y-%m-%d %H:%M} UTC"


def plain_text(message: Message) -> str:
    """The message as plain text (an email's first part)."""
    label, code = message.detail
    lines = [message.intro, ""]
    lines += [f"{name}: {value}" for name, value in message.facts]
    lines += ["", f"{label}:", code, ""]
    if message.page:
        lines += [f"{message.action}:", message.page]
    else:
        lines.append(message.fallback)
    return "\n".join(lines) + "\n"


def html_text(message: Message) -> str:
    """The message as an HTML page, every untrusted value escaped (an email's alternative)."""

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


def slack_payload(message: Message) -> dict[str, Any]:
    """The message as a Slack incoming webhook's JSON body, in blocks."""

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
