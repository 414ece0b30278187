"""The page of a request to a person, an approval request or an operation's question: what it
asks, with the form to close it while it is open, or what became of it.

One page for both, as they are one model (`PersonRequest`): an approval is a question whose
answer is fixed, so its form is two buttons and a comment, where a question's is built from the
schema its answer must fit (`fields`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from waitstate.gateway.pages.fields import fields
from waitstate.gateway.pages.html import (
    FormTarget,
    Html,
    banner,
    details,
    document,
    join,
    pretty_json,
    render,
    text,
    when,
)
from waitstate.schemas.approvals import ApprovalRequest, DecideOutcome
from waitstate.schemas.questions import AnswerOutcome, QuestionRequest
from waitstate.schemas.run import TERMINAL_STATUSES

Request = ApprovalRequest | QuestionRequest

_APPROVAL = """$details
<h2>Reason</h2>
<div class="text message">$reason</div>
<h2>Arguments</h2>
<pre>$arguments</pre>"""

_QUESTION = """$details
<h2>Question</h2>
<div class="text message">$message</div>"""

# An approval's answer is fixed: the form is the same for every request.
_DECISION_FORM = """<form method="post" action="$action" accept-charset="utf-8">
$hidden$error
<div class="field"><label for="reviewer">Your name</label>
<input id="reviewer" name="reviewer" maxlength="200" required autocomplete="name"></div>
<div class="field"><label for="comment">Comment (the reason, if you reject)</label>
<textarea id="comment" name="comment" maxlength="5000" rows="3"></textarea></div>
<div class="buttons">
<button type="submit" name="decision" value="approve" class="yes">Approve</button>
<button type="submit" name="decision" value="reject" class="no">Reject</button>
</div>
</form>"""

_ANSWER_FORM = """<form method="post" action="$action" accept-charset="utf-8">
$hidden
$error
$fields
<div class="field"><label for="responder">Your name</label>
<input id="responder" name="responder" maxlength="200" required autocomplete="name"
 value="$responder"></div>
<div class="buttons">
<button type="submit" name="action" value="accept" class="yes">Accept</button>
<button type="submit" name="action" value="decline" class="no" formnovalidate>Decline</button>
</div>
</form>"""


@dataclass(frozen=True)
class Kind:
    """How a page speaks of a kind of request.

    Attributes:
        asking: The title of the page of one that is open.
        named: What the title of one no longer open starts with.
        noun: What one is called in a sentence (`this request`).
        closing: What a person does to close one (`decided`).
    """

    asking: str
    named: str
    noun: str
    closing: str


APPROVAL = Kind("Approval requested", "Approval request", "request", "decided")
QUESTION = Kind("A question for you", "Question", "question", "answered")
# What a request closed by a person (or its policy) is called by its status, the tone of the
# news of it, and what that news says comes next.
_DONE = {
    "approved": ("Approved", "ok", "The run goes on with what it asked to do."),
    "rejected": ("Rejected", "no", "The run is told it may not do this."),
    "answered": ("Answered", "ok", "The job has your answer."),
    "declined": ("Declined", "no", "The job is told no answer is coming."),
}

# The statuses of a request a person (or its policy) closed.
CLOSED = frozenset(_DONE)


def done_title(status: str) -> str:
    """What a page calls a request closed with `status`."""
    return _DONE[status][0]


@dataclass(frozen=True)
class _Closed:
    """How a request was closed: by whom (or its policy), when, and what the page adds."""

    by_policy: bool
    who: str
    at: datetime | None
    note: Html


def kind_of(request: Request) -> Kind:
    """The request's kind."""
    return APPROVAL if isinstance(request, ApprovalRequest) else QUESTION


def open_to_person(request: Request, run_status: str) -> bool:
    """Whether a person may still close it: it is open, and its run goes on."""
    return request.open and run_status not in TERMINAL_STATUSES


def title_of(request: Request, run_status: str) -> str:
    """What a page that shows the request as it is now calls it."""
    kind = kind_of(request)
    if open_to_person(request, run_status):
        return kind.asking
    return f"{kind.named}: {'closed' if request.open else request.status}"


def page(
    *,
    title: str,
    workflow_id: str,
    request_id: str,
    request: Request | None,
    run_status: str,
    kind: Kind | None = None,
    news: Html | None = None,
    form: FormTarget | None = None,
    values: Mapping[str, Any] | None = None,
    responder: str = "",
) -> str:
    """A page about the request `request_id` (an approval request or a question) of the run
    `workflow_id`.

    Args:
        title: Its title and heading.
        workflow_id: The run.
        request_id: The request.
        request: The request as the run has it now (None: the run could not say).
        run_status: The run's status (`RunState.status`).
        kind: Its kind; needed only without `request`.
        news: What happened, on top; without it, the page says what became of a request that
            is no longer open. Shown in the form if the form is shown (an answer the run
            refused: the person corrects it).
        form: Where the form to close it is sent; shown only while a person may.
        values: What a question form's fields hold (an answer the run refused); the schema's
            defaults otherwise.
        responder: What a question form's name field holds.
    """
    kind = kind_of(request) if request is not None else kind or APPROVAL
    parts: list[Html] = []
    open_form = form if request is not None and open_to_person(request, run_status) else None
    if open_form is None:
        if news is not None:
            parts.append(news)
        elif request is not None:
            parts.append(state(request, run_status))
    if request is None:
        parts.append(details([("Run", workflow_id), (kind.noun.capitalize(), request_id)]))
    else:
        parts.append(_asked(workflow_id, request))
    if open_form is not None and request is not None:
        parts.append(_form(request, open_form, news, values, responder))
    return document(title, join(parts))


def state(request: Request, run_status: str) -> Html:
    """What became of the request: closed by a person or its policy (by whom, when, and what
    came of it), expired, cancelled, refused, or left open by a run that has ended."""
    kind = kind_of(request)
    closed = _closed(request)
    if closed is not None:
        done = done_title(request.status)
        if closed.by_policy:
            said = render(
                f"Nobody {kind.closing} in time: $done by the {kind.noun}'s policy at $at.",
                done=done.lower(),
                at=when(closed.at),
            )
        else:
            said = render(
                "$done by <b>$who</b> at $at.", done=done, who=closed.who, at=when(closed.at)
            )
        return banner(_DONE[request.status][1], said, closed.note)
    if request.status == "expired":
        too_late = ", and nothing was applied" if kind is APPROVAL else ""
        return banner(
            "no",
            render(
                f"This {kind.noun} expired at $at: nobody {kind.closing} in time{too_late}.",
                at=when(request.expires_at),
            ),
        )
    if request.status == "cancelled":
        return banner("no", Html("This question was cancelled: it is no longer asked."))
    if isinstance(request, QuestionRequest) and request.status == "refused":
        return banner(
            "no",
            render(
                "The run could not ask this question: $why",
                why=request.refusal or "its schema takes no answer",
            ),
        )
    return banner(
        "no",
        render(
            f"The run has ended ($status): this {kind.noun} can no longer be {kind.closing}.",
            status=run_status,
        ),
    )


def applied(outcome: DecideOutcome | AnswerOutcome, who: str) -> Html:
    """The news of a decision or an answer the run just applied (for an answer, once the job
    has it, or refused it)."""
    said = render("$done by <b>$who</b>.", done=done_title(outcome.status), who=who)
    if (
        isinstance(outcome, AnswerOutcome)
        and outcome.status != "declined"
        and not outcome.delivered
    ):
        return banner(
            "no",
            said,
            render("The run took your answer, but the job did not: $why", why=outcome.reason),
        )
    _, tone, next_ = _DONE[outcome.status]
    return banner(tone, said, Html(f"{next_} You can close this page."))


def refused(message: str) -> Html:
    """The news of an answer the run refused, shown above the form to correct it."""
    return banner("no", render("The answer was not taken: $why", why=message))


def _closed(request: Request) -> _Closed | None:
    if isinstance(request, ApprovalRequest):
        decision = request.decision
        if request.status not in _DONE or decision is None:
            return None
        comment = render("Comment: $c", c=decision.comment) if decision.comment else Html("")
        return _Closed(decision.by_policy, decision.reviewer, decision.decided_at, comment)
    answer = request.answer
    if request.status not in _DONE or answer is None:
        return None
    return _Closed(answer.by_policy, answer.responder, answer.answered_at, _delivery(request))


def _delivery(question: QuestionRequest) -> Html:
    if question.answer is None or question.answer.action != "accept":
        return Html("")
    if question.delivery == "sent":
        return Html("The job has the answer.")
    if question.delivery == "failed":
        return render("The job did not take it: $why", why=question.delivery_error or "")
    return Html("The answer is on its way to the job.")


def _asked(workflow_id: str, request: Request) -> Html:
    """What the request asks, and of whom, and its details."""
    sent_to = ", ".join(request.sent_to) or request.addressed_to
    if request.escalated:
        sent_to = f"{sent_to} (escalated to {request.policy.escalate_to})"
    rows: list[tuple[str, Html | str]] = [
        ("Tool", render("<code>$tool</code>", tool=request.tool)),
        ("Run", render("<code>$run</code>", run=workflow_id)),
    ]
    if isinstance(request, ApprovalRequest):
        rows += [("Request", render("<code>$id</code>", id=request.request_id))]
    else:
        rows += [("Operation", render("<code>$op</code>", op=request.operation_id))]
    rows += [
        ("For", text(sent_to, 500)),
        ("Requested" if isinstance(request, ApprovalRequest) else "Asked", when(request.opened_at)),
        ("Expires", when(request.expires_at)),
        ("Status", request.status),
    ]
    if isinstance(request, QuestionRequest):
        return render(_QUESTION, details=details(rows), message=request.message)
    return render(
        _APPROVAL,
        details=details(rows),
        reason=request.reason,
        arguments=pretty_json(request.arguments),
    )


def _form(
    request: Request,
    target: FormTarget,
    news: Html | None,
    values: Mapping[str, Any] | None,
    responder: str,
) -> Html:
    """The form to close the request: an approval's fixed one, or a question's fields."""
    error = news if news is not None else Html("")
    if isinstance(request, ApprovalRequest):
        return render(_DECISION_FORM, action=target.action, hidden=target.hidden(), error=error)
    return render(
        _ANSWER_FORM,
        action=target.action,
        hidden=target.hidden(),
        error=error,
        fields=fields(request.requested_schema, values),
        responder=responder,
    )
