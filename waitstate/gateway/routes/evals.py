"""An evaluation's report, for operators: a page, and its JSON (the file `waitstate eval` writes).

    GET /evals/{eval_id}               the page (Authorization: Bearer <operator key>)
    GET /evals/{eval_id}.json          the report as JSON, the verdict computed (`waitstate.evals`)
    GET /pages/inbox/evals/{eval_id}   the page, for a browser signed in to the operators' inbox
                                       (its session cookie, scoped to /pages/inbox)

Both read the report through the client (`eval_report`): an evaluation still running shows the
rows scored so far ("running, N of M"). Everything the report holds from runs (tasks, answers,
tool names, fields, scorers' details) is escaped as any page's text is.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import HTMLResponse, Response

from waitstate.client import ClientError, RunNotFound, WaitstateClient
from waitstate.evals import changes, dollars, report_json, tokens, verdict
from waitstate.gateway.delivery import TemporalDeliverer, refusal
from waitstate.gateway.gate import Gate, GateDep
from waitstate.gateway.pages import html
from waitstate.gateway.refusals import Refused
from waitstate.gateway.routes.inbox import INBOX, InboxSession, session_operator
from waitstate.gateway.routes.threads import OperatorCredentials
from waitstate.gateway.streams import EventDesk
from waitstate.names import EVAL_RUN
from waitstate.schemas.evals import EvalReport, EvalRow

EVAL_PAGE = "/evals/{eval_id}"
INBOX_EVAL_PAGE = f"{INBOX}/evals/{{eval_id}}"
MAX_EVAL_ID_CHARS = 1000  # Temporal's own limit on a workflow id

router = APIRouter(include_in_schema=False)


# Before the page's route: `{eval_id}` would take `x.json` too.
@router.get(f"{EVAL_PAGE}.json")
async def eval_json(eval_id: str, gate: GateDep, credentials: OperatorCredentials) -> Response:
    report = await _report(gate, eval_id, credentials)
    return Response(report_json(report), media_type="application/json", headers=dict(html.HEADERS))


@router.get(EVAL_PAGE, response_class=HTMLResponse)
async def eval_page(eval_id: str, gate: GateDep, credentials: OperatorCredentials) -> Response:
    report = await _report(gate, eval_id, credentials)
    page = html.document(f"Evaluation {eval_id}", _body(report))
    return HTMLResponse(page, headers=dict(html.HEADERS))


@router.get(INBOX_EVAL_PAGE, response_class=HTMLResponse)
async def inbox_eval_page(eval_id: str, gate: GateDep, session: InboxSession = None) -> Response:
    """The page, for an operator signed in to the inbox (a browser sends no Bearer key)."""
    _operators_here(gate)
    if session_operator(gate, session) is None:
        raise Refused(401, "not_signed_in", f"sign in to the operators' inbox first: {INBOX}")
    page = html.document(f"Evaluation {eval_id}", _body(await _read(gate, eval_id)))
    return HTMLResponse(page, headers=dict(html.HEADERS))


async def _report(gate: Gate, eval_id: str, credentials: OperatorCredentials) -> EvalReport:
    """The evaluation's report, once the request's operator key passed.

    Raises:
        Refused: no operator keys here (404), no key or a wrong one (401), no such evaluation
            (404), Temporal could not answer (503).
    """
    events = _operators_here(gate)
    if credentials is None:
        raise Refused(401, "missing_operator_key", "send Authorization: Bearer <operator key>")
    if events.operators.identify(credentials.credentials) is None:
        raise Refused(401, "invalid_operator_key", "not an operator key of this gateway")
    return await _read(gate, eval_id)


def _operators_here(gate: Gate) -> EventDesk:
    """The gateway's operators' desk. Raises Refused (404) if it has no operator keys."""
    if gate.events is None or not gate.events.operators.configured:
        raise Refused(404, "evals_disabled", "this gateway has no operator keys")
    return gate.events


async def _read(gate: Gate, eval_id: str) -> EvalReport:
    """The evaluation's report. Raises Refused: no such evaluation (404), Temporal could not
    answer (503)."""
    unknown = Refused(404, "eval_not_found", "no evaluation has this id")
    if len(eval_id) > MAX_EVAL_ID_CHARS:
        raise unknown
    client = _client(gate)
    try:
        # An agent run's id is no evaluation's: its result is not a report.
        if (await client.describe(eval_id)).workflow_type != EVAL_RUN:
            raise unknown
        return await client.eval_report(eval_id)
    except RunNotFound:
        raise unknown from None
    except ClientError as err:
        raise refusal(err) from err


def _client(gate: Gate) -> WaitstateClient:
    deliverer = gate.deliverer
    if not isinstance(deliverer, TemporalDeliverer):
        raise Refused(404, "evals_disabled", "this gateway reads no runs from Temporal")
    return deliverer.runs


def _body(report: EvalReport) -> html.Html:
    given = report.input
    rate = html.render(
        "$passed of $scored runs passed ($rate), threshold $threshold: $verdict.",
        passed=report.passed,
        scored=len(report.rows),
        rate=f"{report.pass_rate:.0%}",
        threshold=f"{given.threshold:.0%}",
        verdict=verdict(report),
    )
    changed = ", ".join(f"{what} {value}" for what, value in changes(given))
    about = html.details(
        [
            ("Changed", changed or "nothing (a re-run with the recorded settings)"),
            ("Forked at", f"turn {given.at}"),
            ("Tool calls answered", given.policy),
            ("Runs", str(len(given.runs))),
            ("Listed by", given.query or ""),
            ("Scorers", ", ".join(given.scorers) if given.scorers else "all of the app's"),
        ]
    )
    rows = html.join([_summary_row(row) for row in report.rows])
    return html.render(
        "$banner$about<h2>Runs</h2><table><thead><tr><th>Run</th><th>Status</th>"
        "<th>Verdict</th><th>Same tools</th><th>Tokens</th><th>Cost</th></tr></thead>"
        "<tbody>$rows</tbody></table>$runs",
        banner=html.banner("ok" if report.holds else "no", rate),
        about=about,
        rows=rows,
        runs=html.join([_run(row) for row in report.rows]),
    )


def _summary_row(row: EvalRow) -> html.Html:
    return html.render(
        "<tr><td>$run</td><td>$status</td><td>$verdict</td><td>$same</td><td>$tokens</td>"
        "<td>$cost</td></tr>",
        run=row.run_id,
        status=f"{row.original_status or '-'} → {row.new_status or '-'}",
        verdict="pass" if row.passed else "FAIL",
        same="yes" if row.same_tools else "no",
        tokens=f"{tokens(row.original_usage)} → {tokens(row.new_usage)}",
        cost=f"{dollars(row.original_cost)} → {dollars(row.new_cost)}",
    )


def _run(row: EvalRow) -> html.Html:
    fields = html.Html("")
    if row.fields:
        fields = html.render(
            "<h3>Changed fields</h3><table><thead><tr><th>Field</th><th>Original</th>"
            "<th>New</th></tr></thead><tbody>$rows</tbody></table>",
            rows=html.join(
                [
                    html.render(
                        "<tr><td>$field</td><td>$original</td><td>$new</td></tr>",
                        field=change.field,
                        original=html.pretty_json(change.original),
                        new=html.pretty_json(change.new),
                    )
                    for change in row.fields
                ]
            ),
        )
    scores = html.join(
        [
            html.render(
                "<li>$name: $verdict$detail</li>",
                name=score.name,
                verdict="pass" if score.passed else "fail",
                detail=html.text(f" ({score.detail})") if score.detail else html.Html(""),
            )
            for score in row.scores
        ]
    )
    return html.render(
        '<section class="run"><h2>$run: $verdict</h2>$details$error'
        "<table><thead><tr><th>Original ($original_status)</th><th>New ($new_status)</th></tr>"
        "</thead><tbody><tr><td><pre>$original</pre></td><td><pre>$new</pre></td></tr></tbody>"
        "</table>$fields<h3>Tool calls ($same)</h3>$tools<h3>Scores</h3><ul>$scores</ul>"
        "</section>",
        run=row.run_id,
        verdict="pass" if row.passed else "FAIL",
        details=html.details([("Task", row.task), ("Fork", row.fork_id)]),
        error=html.banner("no", html.text(row.error)) if row.error else html.Html(""),
        original_status=row.original_status or "-",
        new_status=row.new_status or "-",
        original=row.original_answer if row.original_answer is not None else "(none)",
        new=row.new_answer if row.new_answer is not None else "(none)",
        fields=fields,
        same="the same" if row.same_tools else "different",
        tools=html.details(
            [
                ("Original", " → ".join(row.original_tools) or "none"),
                ("New", " → ".join(row.new_tools) or "none"),
            ]
        ),
        scores=scores,
    )
