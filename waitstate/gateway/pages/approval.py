"""The approval page: what a run asks to do and why, with a form to approve or reject it while it
is open, or what became of it."""

from __future__ import annotations

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
from waitstate.schemas.approvals import ApprovalRequest, ApprovalStatus
from waitstate.schemas.run import TERMINAL_STATUSES

_REQUEST = """$details
<h2>Reason</h2>
<div class="text message">$reason</div>
<h2>Arguments</h2>
<pre>$arguments</pre>"""

_FORM = """<form method="post" action="$action" accept-charset="utf-8">
$hidden
<div class="field"><label for="reviewer">Your name</label>
<input id="reviewer" name="reviewer" maxlength="200" required autocomplete="name"></div>
<div class="field"><label for="comment">Comment (the reason, if you reject)</label>
<textarea id="comment" name="comment" maxlength="5000" rows="3"></textarea></div>
<div class="buttons">
<button type="submit" name="decision" value="approve" class="yes">Approve</button>
<button type="submit" name="decision" value="reject" class="no">Reject</button>
</div>
</form>"""

_DECIDED = {"approved": "Approved", "rejected": "Rejected"}


def decidable(request: ApprovalRequest, run_status: str) -> bool:
    """Whether a person may still decide: the request is open, and its run goes on."""
    return request.open and run_status not in TERMINAL_STATUSES


def title_of(request: ApprovalRequest, run_status: str) -> str:
    """What a page that shows the request as it is now calls it."""
    if decidable(request, run_status):
        return "Approval requested"
    return f"Approval request: {'closed' if request.open else request.status}"


def page(
    *,
    title: str,
    workflow_id: str,
    request_id: str,
    request: ApprovalRequest | None,
    run_status: str,
    news: Html | None = None,
    form: FormTarget | None = None,
) -> str:
    """A page about the approval request `request_id` of the run `workflow_id`.

    Args:
        title: Its title and heading.
        workflow_id: The run.
        request_id: The request.
        request: The request as the run has it now (None: the run could not say).
        run_status: The run's status (`RunState.status`).
        news: What happened, on top (a decision just applied, or not); without it, the page
            says what became of a request that is no longer open.
        form: Where the form to decide is sent; shown only while a person may decide.
    """
    parts: list[Html] = []
    open_form = form if request is not None and decidable(request, run_status) else None
    if news is not None:
        parts.append(news)
    elif request is not None and open_form is None:
        parts.append(state(request, run_status))
    if request is None:
        parts.append(details([("Run", workflow_id), ("Request", request_id)]))
    else:
        parts.append(_request(workflow_id, request))
    if open_form is not None:
        parts.append(render(_FORM, action=open_form.action, hidden=open_form.hidden()))
    return document(title, join(parts))


def state(request: ApprovalRequest, run_status: str) -> Html:
    """What became of the request: decided (by whom, when, with what comment), expired, or left
    open by a run that has ended."""
    decision = request.decision
    if request.status in _DECIDED and decision is not None:
        done = _DECIDED[request.status]
        if decision.by_policy:
            said = render(
                "Nobody decided in time: $done by the request's policy at $at.",
                done=done.lower(),
                at=when(decision.decided_at),
            )
        else:
            said = render(
                "$done by <b>$who</b> at $at.",
                done=done,
                who=decision.reviewer,
                at=when(decision.decided_at),
            )
        comment = render("Comment: $c", c=decision.comment) if decision.comment else Html("")
        return banner("ok" if request.status == "approved" else "no", said, comment)
    if request.status == "expired":
        return banner(
            "no",
            render(
                "This request expired at $at: nobody decided in time, and nothing was applied.",
                at=when(request.expires_at),
            ),
        )
    return banner(
        "no",
        render(
            "The run has ended ($status): this request can no longer be decided.",
            status=run_status,
        ),
    )


def applied(status: ApprovalStatus, reviewer: str) -> Html:
    """The news of a decision the run just applied."""
    if status == "approved":
        return banner(
            "ok",
            render("Approved by <b>$who</b>.", who=reviewer),
            Html("The run goes on with what it asked to do. You can close this page."),
        )
    return banner(
        "no",
        render("Rejected by <b>$who</b>.", who=reviewer),
        Html("The run is told it may not do this. You can close this page."),
    )


def _request(workflow_id: str, request: ApprovalRequest) -> Html:
    policy = request.policy
    sent_to = ", ".join(request.sent_to) or policy.approvers
    if request.escalated:
        sent_to = f"{sent_to} (escalated to {policy.escalate_to})"
    rows: list[tuple[str, Html | str]] = [
        ("Tool", render("<code>$tool</code>", tool=request.tool)),
        ("Run", render("<code>$run</code>", run=workflow_id)),
        ("Request", render("<code>$id</code>", id=request.request_id)),
        ("For", text(sent_to, 500)),
        ("Requested", when(request.requested_at)),
        ("Expires", when(request.expires_at)),
        ("Status", request.status),
    ]
    return render(
        _REQUEST,
        details=details(rows),
        reason=request.reason,
        arguments=pretty_json(request.arguments),
    )
