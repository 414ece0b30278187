"""The pages a person opens from a notice's link, and the forms they send from them: the page of
a request to a person (`pages.request`), an approval request's to approve or reject it, a
question's to answer it.

    GET  /pages/approvals/{request_id}?token=<the request's token>
    POST /pages/approvals/{request_id}            the page's form
    GET  /pages/questions/{question_id}?token=<the question's token>
    POST /pages/questions/{question_id}           the page's form

A GET shows what the run asks, as the run's `status` query says, and applies nothing: mail
scanners open links. A form's POST is admitted as the JSON routes' requests are (its size, its
token, its fields), and as a form (where the browser says it came from, and the page's form
key, `pages.guard`), then delivered through the JSON routes' own functions (`apply_decision`,
`apply_answer`): one path from a token to the run. Every answer is a page with the headers of
`pages.html.HEADERS`, refusals included (logged and counted as every refusal is).

A form sent back after its link has expired goes the same way, as an expired token's request
to a JSON route does: it applies nothing, and is answered with what became of the same reply
sent while the link was valid (or "Not confirmed yet" while it has no outcome); only if none was
sent is it refused, expired. A page is shown (GET) for a link that has not expired only.

The token is the one the request's notice carries for a form (`approval_subject(request_id)`,
which allows either decision) or the question's; another is refused, a one-click link's too.
The pages are not the API: they are left out of the OpenAPI document.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from urllib.parse import parse_qsl, quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from pydantic import ValidationError
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError

from waitstate.auth.tokens import (
    ResumeClaims,
    approval_subject,
    nonce_hash,
    question_subject,
)
from waitstate.client import NotAnswered, RunNotFound, WaitstateClient, closed_status
from waitstate.gateway.delivery import TemporalDeliverer
from waitstate.gateway.gate import Admitted, Gate, GateDep, expiry_first
from waitstate.gateway.pages import request as request_view
from waitstate.gateway.pages.fields import content_from
from waitstate.gateway.pages.guard import cross_site, form_key, form_key_matches
from waitstate.gateway.pages.html import HEADERS, FormTarget, Html, banner, ended, error, text
from waitstate.gateway.refusals import Failed, Refused, describe, refuse
from waitstate.gateway.routes.requests import (
    ANSWERS,
    DECISIONS,
    apply_answer,
    apply_decision,
    decision_allowed,
)
from waitstate.schemas import RunState
from waitstate.schemas.approvals import DecideOutcome, DecisionBody
from waitstate.schemas.questions import AnswerBody, AnswerOutcome, QuestionRequest

APPROVAL_PAGE = "/pages/approvals/{request_id}"
QUESTION_PAGE = "/pages/questions/{question_id}"
FORM_TYPE = "application/x-www-form-urlencoded"
# A page's form has a few fields, a question's one per property of its schema (100 at most),
# and an array's one per choice checked.
MAX_FORM_FIELDS = 1_000

_TITLES = {
    400: "The form could not be read",
    401: "This link is not valid",
    403: "Not allowed",
    404: "Not found",
    409: "Not applied",
    410: "This link has expired",
    413: "The form is too large",
    415: "The form could not be read",
    422: "The form could not be read",
    500: "Something went wrong",
    503: "Try again in a moment",
    # Not a refusal: the run did not answer in time, and may yet apply what was sent.
    504: "Not confirmed yet",
}
_LINK_HINT = (
    "Open this page from the link in the notice you were sent, whole: each link works for its "
    "own request or question only, until that expires."
)

router = APIRouter(include_in_schema=False)


@dataclass(frozen=True)
class _Run:
    """A run as a page reads it: its status, and its state (None: it has ended, and no worker
    answered its query)."""

    status: str
    state: RunState | None


@dataclass(frozen=True)
class _Form:
    """A page's form as sent: each field's values, in order."""

    fields: dict[str, list[str]]

    def one(self, name: str) -> str:
        """The field's first value, or "" if it was not sent."""
        values = self.fields.get(name)
        return values[0] if values else ""


# What a page's request is: an approval request or a question.
Asking = request_view.Request


@dataclass(frozen=True)
class _Asked:
    """A kind of request to a person, as its page's routes find it in a run: its page's kind,
    the subject of its links' tokens, where the run's state keeps it, and what it is called
    (`approval request`: its refusals' code starts with the first word, its token is a
    link's for the last)."""

    kind: request_view.Kind
    subject: Callable[[str], str]
    table: Callable[[RunState], Mapping[str, Asking]]
    called: str

    @property
    def token_kind(self) -> str:
        return self.called.rpartition(" ")[2]

    def found(self, run: _Run, request_id: str, claims: ResumeClaims) -> Asking | None:
        """The run's request (None: the run has ended and cannot say).

        Raises:
            Refused: 404 the run has no such request, 401 the token is not its link's, 403 a
                question the model is to answer.
        """
        if run.state is None:
            return None
        found = self.table(run.state).get(request_id)
        if found is None:
            code = f"{self.called.partition(' ')[0]}_unknown"
            raise Refused(404, code, f"the run has no such {self.called}")
        if found.nonce_hash is not None and found.nonce_hash != nonce_hash(claims.nonce):
            raise Refused(401, "nonce_mismatch", f"this link is not the {self.token_kind}'s")
        if isinstance(found, QuestionRequest) and found.policy.answered_by != "person":
            raise Refused(403, "question_not_yours", "this question is the agent's to answer")
        return found

    def quietly(self, run: _Run | None, request_id: str) -> Asking | None:
        """The run's request, if the run could say."""
        return self.table(run.state).get(request_id) if run is not None and run.state else None


_APPROVALS = _Asked(
    request_view.APPROVAL, approval_subject, lambda state: state.approvals, "approval request"
)
_QUESTIONS = _Asked(
    request_view.QUESTION, question_subject, lambda state: state.questions, "question"
)


@router.get(APPROVAL_PAGE, response_class=HTMLResponse)
async def approval_page(
    request_id: str, request: Request, gate: GateDep, token: str = ""
) -> HTMLResponse:
    """The approval request, and the form to decide on it while it is open."""
    return await _show(_APPROVALS, request_id, request, gate, token)


@router.get(QUESTION_PAGE, response_class=HTMLResponse)
async def question_page(
    question_id: str, request: Request, gate: GateDep, token: str = ""
) -> HTMLResponse:
    """The question, and the form to answer it, built from its schema, while it is open."""
    return await _show(_QUESTIONS, question_id, request, gate, token)


async def _show(
    asked: _Asked, request_id: str, request: Request, gate: GateDep, token: str
) -> HTMLResponse:
    try:
        # Shown for a link that has not expired only.
        claims, expired = _link_claims(gate, token, asked.subject(request_id), asked.token_kind)
        if expired is not None:
            raise expired
        run = await _read(gate, claims.workflow_id)
        found = asked.found(run, request_id, claims)
    except Refused as refused:
        return _refused(request, refused)
    kind = asked.kind
    return _page(
        request_view.page(
            title=request_view.title_of(found, run.status)
            if found is not None
            else f"{kind.named}: closed",
            workflow_id=claims.workflow_id,
            request_id=request_id,
            request=found,
            kind=kind,
            run_status=run.status,
            news=ended(run.status, f"this {kind.noun}") if found is None else None,
            form=_form_target(gate, request_id, token, claims),
        )
    )


@router.post(APPROVAL_PAGE, response_class=HTMLResponse)
async def decide_on_page(request_id: str, request: Request, gate: GateDep) -> HTMLResponse:
    """The approval page's form: the decision, applied as the JSON route applies it."""
    try:
        form = await _read_form(gate, request)
        claims, expired = _form_claims(gate, request, form, approval_subject(request_id), "request")
        with expiry_first(expired):
            body = _decision(form)
            decision_allowed(request_id, claims, body.decision)
    except Refused as refused:
        return _refused(request, refused)
    applying = apply_decision(gate, request_id, Admitted(claims, body))
    return await _sent(gate, request, claims, _APPROVALS, request_id, applying, body.reviewer)


@router.post(QUESTION_PAGE, response_class=HTMLResponse)
async def answer_on_page(question_id: str, request: Request, gate: GateDep) -> HTMLResponse:
    """The question page's form: the answer, its fields typed as the question's schema says,
    delivered as the JSON route delivers it; refused content is shown again to correct."""
    try:
        form = await _read_form(gate, request)
        claims, expired = _form_claims(
            gate, request, form, question_subject(question_id), "question"
        )
        action = form.one("action")
        with expiry_first(expired):
            if action not in ("accept", "decline"):
                raise Refused(422, ANSWERS.invalid_code, "choose Accept or Decline")
        # Read for an expired link's form too: its answer is known by its content (see
        # `WaitstateClient.recall`), typed as the question's schema says.
        run = await _read(gate, claims.workflow_id)
        with expiry_first(expired):
            question = _QUESTIONS.found(run, question_id, claims)
        if not isinstance(question, QuestionRequest):
            # Ended, and no worker answers for it: the form's content cannot be typed, so the
            # earlier answer of an expired link's form is not looked for; the end is the news.
            raise Refused(409, "run_ended", f"the run has ended ({run.status})")
        content = (
            content_from(question.requested_schema, form.fields) if action == "accept" else None
        )
        responder = form.one("responder").strip() or "unknown"
        with expiry_first(expired):
            try:
                body = AnswerBody(action=action, content=content, responder=responder)
            except ValidationError as err:
                raise Refused(422, ANSWERS.invalid_code, describe(err.errors())) from None
    except Refused as refused:
        return _refused(request, refused)
    target = _form_target(gate, question_id, form.one("token"), claims)

    def corrected(refused: Refused) -> str | None:
        if refused.status != 422:
            return None
        # Content that does not fit the schema: the form again, as it was sent, to correct.
        return request_view.page(
            title=request_view.title_of(question, run.status),
            workflow_id=claims.workflow_id,
            request_id=question_id,
            request=question,
            run_status=run.status,
            news=request_view.refused(refused.message),
            form=target,
            values=content or {},
            responder=form.one("responder"),
        )

    applying = apply_answer(gate, question_id, Admitted(claims, body))
    return await _sent(
        gate, request, claims, _QUESTIONS, question_id, applying, body.responder, corrected
    )


async def _sent(
    gate: Gate,
    request: Request,
    claims: ResumeClaims,
    asked: _Asked,
    request_id: str,
    applying: Awaitable[DecideOutcome | AnswerOutcome],
    who: str,
    corrected: Callable[[Refused], str | None] = lambda refused: None,
) -> HTMLResponse:
    """The page of a reply sent to the run (`applying`, by `who`): applied, or not applied
    (409: closed already, through this link before or another, or this reply sent again after
    the link expired; expired, cancelled, or the run ended), with the request as the run has it
    now; or refused, with the form again if `corrected` gives it."""
    refusal: Refused | None = None
    news: Html | None
    try:
        outcome = await applying
    except Refused as refused:
        if (page := corrected(refused)) is not None or refused.status != 409:
            return _refused(request, refused, page)
        refusal = refused
    except Failed:
        return _failed()
    run = await _read_quietly(gate, claims.workflow_id)
    found = asked.quietly(run, request_id)
    run_status = run.status if run is not None else "unknown"
    if refusal is None:
        title, news = request_view.done_title(outcome.status), request_view.applied(outcome, who)
    else:
        title = _not_applied_title(found, asked.kind)
        settled = (
            found is not None
            and run is not None
            and not request_view.open_to_person(found, run.status)
        )
        news = None if settled else banner("no", text(refusal.message))
    page = request_view.page(
        title=title,
        workflow_id=claims.workflow_id,
        request_id=request_id,
        request=found,
        kind=asked.kind,
        run_status=run_status,
        news=news,
    )
    return _page(page) if refusal is None else _refused(request, refusal, page)


# --- what both pages do ------------------------------------------------------------------------


def _link_claims(
    gate: Gate, token: str, subject: str, kind: str
) -> tuple[ResumeClaims, Refused | None]:
    """The claims of a page's token, which must be for `subject`, and the refusal of its
    expiry if it has expired, as the JSON routes' (`Gate.verify`).

    Raises:
        Refused: 401 missing, malformed, forged, or for another `kind` of thing or another
            one; 410 expired, where the gateway cannot recall (or it is for another one).
    """
    if not token:
        raise Refused(401, "missing_token", "the link's token is missing")
    claims, expired = gate.verify(token)
    with expiry_first(expired):
        if claims.operation_id != subject:
            raise Refused(401, f"wrong_{kind}", f"this link was issued for another {kind}")
    return claims, expired


async def _read_form(gate: Gate, request: Request) -> _Form:
    """The form a page sent, read up to the gate's limit.

    Raises:
        Refused: 415 not a form, 413 too large, 400 not UTF-8 or not a form's encoding.
    """
    kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if kind != FORM_TYPE:
        raise Refused(415, "unsupported_media_type", f"send the page's form ({FORM_TYPE})")
    body = await gate.read_body(request)
    try:
        pairs = parse_qsl(
            body.decode("utf-8"),
            keep_blank_values=True,
            strict_parsing=False,
            errors="strict",
            max_num_fields=MAX_FORM_FIELDS,
        )
    except ValueError:  # UnicodeDecodeError among them, or too many fields
        raise Refused(400, "invalid_form", "the form is not one of this gateway's pages'") from None
    fields: dict[str, list[str]] = {}
    for name, value in pairs:
        fields.setdefault(name, []).append(value)
    return _Form(fields)


def _form_claims(
    gate: Gate, request: Request, form: _Form, subject: str, kind: str
) -> tuple[ResumeClaims, Refused | None]:
    """The claims of the token a page's form sent back, once the form is known to come from
    the page: from this gateway's origin, with the page's form key; and the refusal of the
    token's expiry if it has expired (see `_link_claims`): the form's request is then delivered
    as the JSON routes deliver an expired token's, to learn what became of its earlier delivery.

    Raises:
        Refused: 401 or 410 the token (see `_link_claims`), 403 a form from another site or
            without the page's form key (410 if the token has expired).
    """
    claims, expired = _link_claims(gate, form.one("token"), subject, kind)
    with expiry_first(expired):
        if (why := cross_site(request.headers)) is not None:
            raise Refused(403, "cross_site_form", why)
        if not form_key_matches(gate.tokens, claims, form.one("form_key")):
            raise Refused(
                403,
                "invalid_form_key",
                "the form was not sent from this link's page; open it again",
            )
    return claims, expired


def _form_target(gate: Gate, reply_to: str, token: str, claims: ResumeClaims) -> FormTarget:
    # Relative to the page (`/pages/approvals/<id>`): the page's own path, without its query.
    return FormTarget(quote(reply_to, safe=""), token, form_key(gate.tokens, claims))


def _decision(form: _Form) -> DecisionBody:
    """The decision the approval page's form sent.

    Raises:
        Refused: 422 no decision, or fields the decision does not take.
    """
    decision = form.one("decision")
    if decision not in ("approve", "reject"):
        raise Refused(422, DECISIONS.invalid_code, "choose Approve or Reject")
    reviewer = form.one("reviewer").strip() or "unknown"
    try:
        return DecisionBody(decision=decision, reviewer=reviewer, comment=form.one("comment"))
    except ValidationError as err:
        raise Refused(422, DECISIONS.invalid_code, describe(err.errors())) from None


def _reader(gate: Gate) -> WaitstateClient:
    """What reads runs for the pages: the Temporal client the gateway delivers with.

    Raises:
        Refused: 503, this gateway delivers otherwise (a stand-in), so it cannot read runs.
    """
    deliverer = gate.deliverer
    if not isinstance(deliverer, TemporalDeliverer):
        raise Refused(503, "pages_unavailable", "this gateway does not read runs")
    # The gateway holds no other client: the pages read the runs the deliverer writes to.
    return deliverer.runs


async def _read(gate: Gate, workflow_id: str) -> _Run:
    """The run's state, from its `status` query; for a run that has ended and whose worker does
    not answer, its status only.

    Raises:
        Refused: 404 no such run, 503 Temporal or the run's worker did not answer.
    """
    reader = _reader(gate)
    try:
        state = await reader.query(workflow_id)
    except RunNotFound:
        raise Refused(404, "unknown_run", "no such run") from None
    except NotAnswered:
        pass
    else:
        return _Run(state.status, state)
    try:
        described = await reader.handle(workflow_id).describe()
    except RPCError:
        raise Refused(503, "temporal_unavailable", "Temporal could not be reached") from None
    if described.status in (None, WorkflowExecutionStatus.RUNNING):
        raise Refused(503, "run_unavailable", "the run did not answer; try again in a moment")
    return _Run(closed_status(described.status), None)


async def _read_quietly(gate: Gate, workflow_id: str) -> _Run | None:
    """The run as `_read` reads it, or None if it cannot (a page that says what happened
    says it without)."""
    try:
        return await _read(gate, workflow_id)
    except Refused:
        return None


def _not_applied_title(found: Asking | None, kind: request_view.Kind) -> str:
    if found is not None and found.status in request_view.CLOSED:
        return "This link was already used"
    if found is not None and found.status == "expired":
        return f"This {kind.noun} has expired"
    return "Not applied"


def _page(page: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(page, status_code=status, headers=dict(HEADERS))


def _refused(request: Request, refused: Refused, page: str | None = None) -> HTMLResponse:
    """A refusal as a page (`page`, or one that says why), logged and counted as every refusal
    of the gateway is."""
    refuse(request, refused.status, refused.code, refused.message)  # its JSON answer unused
    if page is None:
        title = _TITLES.get(refused.status, "Refused")
        hint = _LINK_HINT if refused.status in (401, 410) else ""
        page = error(title, refused.message, hint)
    return _page(page, refused.status)


def _failed() -> HTMLResponse:
    # A bug, logged where it was met (`Gate.deliver`): no refusal to count.
    return _page(error(_TITLES[500], "the gateway failed; try again later"), 500)
