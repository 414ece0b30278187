"""What an AG-UI request asks of a thread, read from its `RunAgentInput` and bounded: a new
message of the person's (with the app's `context` after it), or the answers to the interrupts
of the thread's previous run. Pure, so
every refusal is tested without a server; nothing is sent until the whole input is read.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from ag_ui.core import Context, ResumeEntry, RunAgentInput, UserMessage
from pydantic import ValidationError

from waitstate.agui.mapping import APPROVAL, QUESTION, delivery_of, interrupt_key, message_key
from waitstate.schemas.approvals import DecideInput
from waitstate.schemas.questions import AnswerInput
from waitstate.schemas.threads import MAX_MESSAGE_CHARS

# A thread id the gateway takes (as its thread routes do), and a run id: one path segment.
THREAD_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
MAX_MESSAGES = 500  # in `messages`: the client sends its whole conversation each time
MAX_RESUMES = 16  # resume entries of one request
MAX_PAYLOAD_CHARS = 16_384  # of one resume entry's payload, as JSON
MAX_COMMENT_CHARS = 5_000
MAX_ID_CHARS = 200  # of an interrupt's or a message's id
SENDER = "agui:"  # a message's sender: this and the AG-UI run id that sent it
# The app's `context` (what it lets the agent read: the page, a selection): told after the
# person's message, under this line, one entry per line; the whole within a message's bound.
MAX_CONTEXT = 32
CONTEXT_HEADER = "Context from the app:"


class BadInput(ValueError):
    """An input that asks nothing a thread can take: refused, nothing sent."""


@dataclass(frozen=True)
class Resume:
    """One resume entry, as the decision or answer it is, and the Update id it is sent under."""

    interrupt_id: str
    reply: DecideInput | AnswerInput
    update_id: str


@dataclass(frozen=True)
class Asked:
    """What the request asks: the thread (or task run), the AG-UI run, and a message, resumes,
    or neither (a run followed: a task run's, or an AG-UI run of the thread's, by its id)."""

    thread_id: str
    run_id: str
    text: str | None  # the person's new message (None: a resume, or a run followed)
    key: str | None  # its idempotency key in the thread
    resumes: tuple[Resume, ...] = ()


def parse(body: bytes) -> RunAgentInput:
    """`body` as a `RunAgentInput`.

    Raises:
        BadInput: it is not JSON, or not a RunAgentInput.
    """
    try:
        return RunAgentInput.model_validate_json(body)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the body"
        raise BadInput(f"not a RunAgentInput: {where}: {first['msg']}") from None


def asked(given: RunAgentInput, reviewer: str) -> Asked:
    """What `given` asks of its thread, bounded.

    Raises:
        BadInput: an id out of bounds, too many messages or resume entries, a message that
            is not text or too long, or a resume entry of an unknown interrupt or with a
            payload that does not fit it.
    """
    if not THREAD_ID.fullmatch(given.thread_id):
        raise BadInput("threadId: 1 to 128 letters, digits, '.', '_' or '-'")
    if not RUN_ID.fullmatch(given.run_id):
        raise BadInput("runId: 1 to 128 letters, digits, '.', '_', ':' or '-'")
    if len(given.messages) > MAX_MESSAGES:
        raise BadInput(f"at most {MAX_MESSAGES} messages")
    resumes = given.resume or []
    if len(resumes) > MAX_RESUMES:
        raise BadInput(f"at most {MAX_RESUMES} resume entries")
    if resumes:
        read = tuple(_resume(given, entry, reviewer) for entry in resumes)
        if len({r.interrupt_id for r in read}) != len(read):
            raise BadInput("one resume entry per interrupt")
        return Asked(given.thread_id, given.run_id, None, None, read)
    last = given.messages[-1] if given.messages else None
    if not isinstance(last, UserMessage):
        return Asked(given.thread_id, given.run_id, None, None)  # a run to follow
    if len(last.id) > MAX_ID_CHARS:
        raise BadInput(f"a message id: at most {MAX_ID_CHARS} characters")
    text = _with_context(_text(last.content), given.context or [])
    return Asked(given.thread_id, given.run_id, text, message_key(given.thread_id, last.id))


def _with_context(text: str, context: list[Context]) -> str:
    """The person's message, and after it the app's `context`, one `- description: value`
    line each (a description's line breaks as spaces: an entry is one line)."""
    if len(context) > MAX_CONTEXT:
        raise BadInput(f"at most {MAX_CONTEXT} context entries")
    if not context:
        return text
    lines = [f"- {' '.join(c.description.split())}: {c.value}" for c in context]
    told = "\n".join([text, "", CONTEXT_HEADER, *lines])
    if len(told) > MAX_MESSAGE_CHARS:
        raise BadInput(f"the message with its context: at most {MAX_MESSAGE_CHARS} characters")
    return told


def _text(content: Any) -> str:
    if isinstance(content, str):
        text = content
    else:
        parts = [getattr(part, "text", None) for part in content]
        if any(part is None for part in parts):
            raise BadInput("a message is text: this agent takes no media")
        text = "\n".join(str(part) for part in parts)
    if not text.strip():
        raise BadInput("the message is empty: say something to the agent")
    if len(text) > MAX_MESSAGE_CHARS:
        raise BadInput(f"a message: at most {MAX_MESSAGE_CHARS} characters")
    return text


def _resume(given: RunAgentInput, entry: ResumeEntry, reviewer: str) -> Resume:
    interrupt = entry.interrupt_id
    if len(interrupt) > MAX_ID_CHARS:
        raise BadInput(f"an interruptId: at most {MAX_ID_CHARS} characters")
    if len(json.dumps(entry.payload, default=str)) > MAX_PAYLOAD_CHARS:
        raise BadInput(f"a resume payload: at most {MAX_PAYLOAD_CHARS} characters of JSON")
    delivery = delivery_of(given.run_id)
    update_id = interrupt_key(given.thread_id, interrupt, entry.status)
    reply: DecideInput | AnswerInput
    if interrupt.startswith(APPROVAL) and len(interrupt) > len(APPROVAL):
        request_id = interrupt.removeprefix(APPROVAL)
        decision, comment = _decision(entry)
        reply = DecideInput(
            request_id=request_id,
            decision=decision,
            reviewer=reviewer,
            comment=comment,
            delivery_id=delivery,
        )
    elif interrupt.startswith(QUESTION) and len(interrupt) > len(QUESTION):
        question_id = interrupt.removeprefix(QUESTION)
        if entry.status == "cancelled":
            reply = AnswerInput(
                question_id=question_id, action="decline", responder=reviewer, delivery_id=delivery
            )
        else:
            if not isinstance(entry.payload, dict):
                raise BadInput(f"{interrupt}: the payload is the answer, an object")
            reply = AnswerInput(
                question_id=question_id,
                action="accept",
                content=entry.payload,
                responder=reviewer,
                delivery_id=delivery,
            )
    else:
        raise BadInput(
            f"no interrupt {interrupt[:64]!r}: interrupt ids begin 'approval:' or 'question:'"
        )
    return Resume(interrupt, reply, update_id)


def _decision(entry: ResumeEntry) -> tuple[str, str]:
    """An approval's resume as a decision and its comment: `cancelled` rejects it."""
    if entry.status == "cancelled":
        return "reject", "cancelled by the person"
    payload = entry.payload
    if not isinstance(payload, dict) or payload.get("decision") not in ("approve", "reject"):
        raise BadInput("an approval's payload is {decision: 'approve' | 'reject', comment?}")
    comment = payload.get("comment", "")
    if not isinstance(comment, str) or len(comment) > MAX_COMMENT_CHARS:
        raise BadInput(f"an approval's comment is text of at most {MAX_COMMENT_CHARS} characters")
    return str(payload["decision"]), comment
