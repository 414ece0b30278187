"""The operators' inbox: a page listing what waits for a person (as `starter.py pending` does),
and approving or rejecting a request from it.

    GET  /pages/inbox                 the list, or the sign-in form without a session
    POST /pages/inbox/session         an operator key in a form: a session (a cookie), 12 hours
    POST /pages/inbox/decide          a decision on one request, as the signed-in operator
    POST /pages/inbox/answer          an answer to one question (a form built from its schema)
    POST /pages/inbox/signout         the session ends

An operator key is never kept by the browser: signing in exchanges it for a session, a token
signed with the gateway's keys that names the key's id and an expiry (`mint_session`), in an
`HttpOnly`, `SameSite=Strict` cookie scoped to the inbox. A decision is a form posted from the
inbox page itself: it carries a form key derived from the session, and a form from another site
is refused (`guard.cross_site`), as the links' pages do. The decision reaches the run as the
CLI's does (the `decide` Update), with the operator's key id as its reviewer.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated
from urllib.parse import parse_qs

from fastapi import APIRouter, Cookie, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from waitstate.auth.tokens import ExpiredToken, InvalidToken
from waitstate.client import ClientError, PendingQuestion, PendingRequest, WaitstateClient
from waitstate.gateway.delivery import TemporalDeliverer
from waitstate.gateway.gate import Gate, GateDep
from waitstate.gateway.pages.fields import content_from, fields
from waitstate.gateway.pages.guard import cross_site
from waitstate.gateway.pages.html import (
    HEADERS,
    Html,
    banner,
    document,
    join,
    render,
    text,
    when,
)
from waitstate.gateway.refusals import REQUEST_LOG, Refused
from waitstate.schemas.approvals import DecideInput
from waitstate.schemas.questions import AnswerInput

log = logging.getLogger(REQUEST_LOG)

INBOX = "/pages/inbox"
COOKIE = "waitstate_inbox"
SESSION_LIFETIME = timedelta(hours=12)
MAX_FORM_BYTES = 16_384
MAX_REASON_CHARS = 2_000
_FORM_LABEL = b"waitstate inbox form\x00"
# The operator's inbox session token, as its cookie brings it (None: signed out).
InboxSession = Annotated[str | None, Cookie(alias=COOKIE)]

router = APIRouter(include_in_schema=False)


@router.get(INBOX, response_class=HTMLResponse)
async def inbox(gate: GateDep, session: InboxSession = None) -> Response:
    operators_configured(gate)
    operator = session_operator(gate, session)
    if operator is None:
        return _page(document("Operators' inbox", _sign_in()), 401 if session else 200)
    assert session is not None
    return _page(await _listing(gate, operator, session))


@router.post(f"{INBOX}/session", response_class=HTMLResponse)
async def sign_in(request: Request, gate: GateDep) -> Response:
    operators_configured(gate)
    if (refused := cross_site(request.headers)) is not None:
        return _page(_error("Not sent from this page", refused), 403)
    form = await _form(request)
    assert gate.events is not None
    operator = gate.events.operators.identify(form.get("key", ""))
    if operator is None:
        log.info("inbox: a sign-in with no operator key refused")
        body = join(
            [banner("no", text("That is not an operator key of this gateway.")), _sign_in()]
        )
        return _page(document("Operators' inbox", body), 401)
    session = gate.tokens.mint_session(operator, datetime.now(UTC) + SESSION_LIFETIME)
    log.info("inbox: operator %s signed in", operator)
    response = RedirectResponse(INBOX, status_code=303, headers=dict(HEADERS))
    response.set_cookie(
        COOKIE,
        session,
        max_age=int(SESSION_LIFETIME.total_seconds()),
        path=INBOX,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


@router.post(f"{INBOX}/decide", response_class=HTMLResponse)
async def decide(request: Request, gate: GateDep, session: InboxSession = None) -> Response:
    posted = await _posted(request, gate, session, "request_id", "decision", _DECISIONS)
    if isinstance(posted, Response):
        return posted
    run_id, request_id, operator = posted.run_id, posted.item_id, posted.operator
    decided = DecideInput(
        request_id=request_id,
        decision=posted.action,
        reviewer=f"operator:{operator}",
        comment=posted.form.get("reason", "")[:MAX_REASON_CHARS],
    )
    try:
        outcome = await _client(gate).decide(run_id, decided)
    except ClientError as err:
        news = banner("no", text(f"{request_id} of {run_id}: {err}"))
    else:
        verb = "approved" if posted.action == "approve" else "rejected"
        if outcome.accepted:
            said = f"{request_id} of {run_id}: {verb} by operator:{operator}."
        else:
            said = f"{request_id} of {run_id}: not applied ({outcome.status}). {outcome.reason}"
        news = banner("ok" if outcome.accepted else "no", text(said))
    return await _sent(gate, posted, news)


@router.post(f"{INBOX}/answer", response_class=HTMLResponse)
async def answer(request: Request, gate: GateDep, session: InboxSession = None) -> Response:
    posted = await _posted(request, gate, session, "question_id", "action", _ANSWERS)
    if isinstance(posted, Response):
        return posted
    action, run_id, question_id = posted.action, posted.run_id, posted.item_id
    client = _client(gate)
    try:
        state = await client.query(run_id)
        question = state.questions.get(question_id)
        if question is None:
            raise ClientError(f"run {run_id} has no question {question_id}")
        schema = question.requested_schema
        content = content_from(schema, posted.sent) if action == "accept" else None
        outcome = await client.answer(
            run_id,
            AnswerInput(
                question_id=question_id,
                action=action,
                content=content,
                responder=f"operator:{posted.operator}",
            ),
        )
    except ClientError as err:
        news = banner("no", text(f"{question_id} of {run_id}: {err}"))
    else:
        said = f"{question_id} of {run_id}: {outcome.status}"
        if outcome.reason:
            said += f" ({outcome.reason})"
        news = banner("ok" if outcome.accepted else "no", text(said + "."))
    return await _sent(gate, posted, news)


@router.post(f"{INBOX}/signout", response_class=HTMLResponse)
async def sign_out(request: Request, gate: GateDep) -> Response:
    if (refused := cross_site(request.headers)) is not None:
        return _page(_error("Not sent from this page", refused), 403)
    response = RedirectResponse(INBOX, status_code=303, headers=dict(HEADERS))
    response.delete_cookie(COOKIE, path=INBOX)
    return response


async def _admitted(
    request: Request, gate: Gate, session: str | None
) -> tuple[str, str, dict[str, list[str]]] | Response:
    """What an inbox form's POST passes with: its operator, session and fields; or the page
    that refuses it (signed out, or not sent from the inbox's own page)."""
    operators_configured(gate)
    operator = session_operator(gate, session)
    if operator is None or session is None:
        return _page(_error("Signed out", "sign in to the inbox again"), 401)
    if (refused := cross_site(request.headers)) is not None:
        return _page(_error("Not sent from this page", refused), 403)
    sent = await _fields(request)
    key = sent.get("form_key", [""])[0]
    if not hmac.compare_digest(key.encode(), _form_key(session).encode()):
        return _page(_error("Not sent from this page", "the form's key does not match"), 403)
    return operator, session, sent


@dataclass(frozen=True)
class _Posted:
    """An inbox form's POST that passed: who sent it, with which session, every field's values
    (`sent`) and the first of each (`form`), and the run, item and action it names."""

    operator: str
    session: str
    sent: dict[str, list[str]]
    form: dict[str, str]
    run_id: str
    item_id: str
    action: str


@dataclass(frozen=True)
class _Actions:
    """What a form may do to its item, and what a form that does none of it is told."""

    allowed: tuple[str, ...]
    refused: str
    why: str


_DECISIONS = _Actions(("approve", "reject"), "Not a decision", "approve or reject one request")
_ANSWERS = _Actions(("accept", "decline"), "Not an answer", "accept or decline one question")


async def _posted(
    request: Request,
    gate: Gate,
    session: str | None,
    item_field: str,
    action_field: str,
    actions: _Actions,
) -> _Posted | Response:
    """An inbox form's POST naming a run, an item (its `item_field`) and one of `actions` (its
    `action_field`); or the page that refuses it, as `_admitted`, or as naming none of them."""
    admitted = await _admitted(request, gate, session)
    if isinstance(admitted, Response):
        return admitted
    operator, session, sent = admitted
    form = {name: values[0] for name, values in sent.items() if values}
    run_id, item_id, action = form.get("run_id"), form.get(item_field), form.get(action_field)
    if action not in actions.allowed or not run_id or not item_id:
        return _page(_error(actions.refused, actions.why), 422)
    return _Posted(operator, session, sent, form, run_id, item_id, action)


async def _sent(gate: Gate, posted: _Posted, news: Html) -> Response:
    """The inbox again, with `news` of what became of `posted`."""
    log.info(
        "inbox: operator %s sent %s on %s of %s",
        posted.operator,
        posted.action,
        posted.item_id,
        posted.run_id,
    )
    return _page(await _listing(gate, posted.operator, posted.session, news))


def operators_configured(gate: Gate) -> None:
    """The inbox exists where operator keys do."""
    if gate.events is None or not gate.events.operators.configured:
        raise Refused(404, "inbox_disabled", "this gateway has no operator keys")


def session_operator(gate: Gate, session: str | None) -> str | None:
    """The operator signed in to the inbox by `session` (its cookie), if any."""
    if not session:
        return None
    try:
        return gate.tokens.verify_session(session)
    except (InvalidToken, ExpiredToken):
        return None


def _form_key(session: str) -> str:
    """What the inbox's forms carry back: bound to the session, useless without its cookie."""
    return hashlib.sha256(_FORM_LABEL + session.encode()).hexdigest()


async def _form(request: Request) -> dict[str, str]:
    return {name: values[0] for name, values in (await _fields(request)).items() if values}


async def _fields(request: Request) -> dict[str, list[str]]:
    """A form's fields, each with every value it was sent with; nothing past `MAX_FORM_BYTES`."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            return {}
    try:
        return parse_qs(body.decode(errors="replace"), max_num_fields=100)
    except ValueError:  # more fields than that
        return {}


def _client(gate: Gate) -> WaitstateClient:
    deliverer = gate.deliverer
    assert isinstance(deliverer, TemporalDeliverer), "the inbox reads runs through Temporal"
    return deliverer.runs


async def _listing(gate: Gate, operator: str, session: str, news: Html | None = None) -> str:
    try:
        waiting = await _client(gate).waiting_for_people()
    except ClientError as err:
        return document("Operators' inbox", banner("no", text(f"Temporal: {err}")))
    key = _form_key(session)
    requests = join([_request_row(p, key) for p in waiting.approvals]) or Html(
        "<p>No request waits for a decision.</p>"
    )
    questions = join([_question_row(p, key) for p in waiting.questions]) or Html(
        "<p>No question waits for an answer.</p>"
    )
    body = render(
        "$news<p>Signed in as operator <strong>$operator</strong>.</p>"
        "<h2>Approval requests ($n_requests)</h2>$requests"
        "<h2>Questions ($n_questions)</h2>$questions"
        '<form method="post" action="/pages/inbox/signout"><div class="buttons">'
        '<button class="no" type="submit">Sign out</button></div></form>',
        news=news or Html(""),
        operator=operator,
        n_requests=len(waiting.approvals),
        requests=requests,
        n_questions=len(waiting.questions),
        questions=questions,
    )
    return document("Operators' inbox", body)


def _request_row(pending: PendingRequest, form_key: str) -> Html:
    request = pending.request
    return render(
        '<section class="request"><h3>$tool <small>$request_id of $run_id</small></h3>'
        "<p>$reason</p><p>For $approvers; asked $asked; expires $expires.</p>"
        '<form method="post" action="/pages/inbox/decide">'
        '<input type="hidden" name="run_id" value="$run_id">'
        '<input type="hidden" name="request_id" value="$request_id">'
        '<input type="hidden" name="form_key" value="$form_key">'
        '<label>Reason (for a rejection) <input name="reason" maxlength="2000"></label>'
        '<div class="buttons"><button class="yes" name="decision" value="approve">Approve</button>'
        '<button class="no" name="decision" value="reject">Reject</button></div></form></section>',
        tool=request.tool,
        request_id=request.request_id,
        run_id=pending.run_id,
        reason=request.reason,
        approvers=request.policy.approvers,
        asked=when(request.requested_at),
        expires=when(request.expires_at),
        form_key=form_key,
    )


def _question_row(pending: PendingQuestion, form_key: str) -> Html:
    question = pending.question
    return render(
        '<section class="question"><h3>$tool <small>$question_id of $run_id</small></h3>'
        "<p>$message</p><p>Expires $expires.</p>"
        '<form method="post" action="/pages/inbox/answer">'
        '<input type="hidden" name="run_id" value="$run_id">'
        '<input type="hidden" name="question_id" value="$question_id">'
        '<input type="hidden" name="form_key" value="$form_key">$fields'
        '<div class="buttons"><button class="yes" name="action" value="accept">Accept</button>'
        '<button class="no" name="action" value="decline" formnovalidate>Decline</button></div>'
        "</form></section>",
        tool=question.tool,
        question_id=question.question_id,
        run_id=pending.run_id,
        message=question.message,
        expires=when(question.expires_at),
        form_key=form_key,
        fields=fields(question.requested_schema),
    )


def _sign_in() -> Html:
    return Html(
        '<form method="post" action="/pages/inbox/session">'
        '<label>Operator key <input type="password" name="key" autocomplete="off" required>'
        '</label><div class="buttons"><button class="yes" type="submit">Sign in</button></div>'
        "</form>"
    )


def _error(title: str, message: str) -> str:
    return document(title, banner("no", text(message)))


def _page(page: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(page, status_code=status, headers=dict(HEADERS))
