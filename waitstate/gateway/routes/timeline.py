"""A run's timeline: the page its view link opens, which follows the run's events live.

    GET  /pages/runs/{run_id}?token=<the run's view token>

The page is built on the server with the run's id and the link's expiry, and its script reads
the run's event stream (`GET /v1/runs/{run_id}/events`, with the link's token: a browser's
`EventSource` sends no header) and adds each event as it comes: its time, kind, summary and
the small fields of its detail (a report's status and progress, a decision...), the run's
status as its `status` events tell it, and its end. What an event carries came partly from
outside: the script puts it in with `textContent` only, and shows the characters that would
reorder or hide it as escapes, as `pages.html.text` does.

The token is checked here as the stream checks it (a view token for this run, unexpired); an
operator key is no view token (it would travel in the page's URL). Every answer has the pages'
headers, with a content security policy that allows the page's own script and the event
stream (`connect-src 'self'`), and nothing else; refusals are pages, logged and counted as
every refusal is. The page is not the API: it is left out of the OpenAPI document.
"""

from __future__ import annotations

from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from temporalio.service import RPCError

from waitstate.auth.tokens import MAX_TOKEN_CHARS, ViewClaims
from waitstate.client import END_KINDS, EVENT_KINDS, RunNotFound
from waitstate.gateway.gate import GateDep
from waitstate.gateway.pages.html import (
    HEADERS,
    Html,
    details,
    document,
    error,
    live_policy,
    render,
    when,
)
from waitstate.gateway.refusals import Refused, refuse, verified
from waitstate.gateway.routes.events import MAX_RUN_ID_CHARS
from waitstate.gateway.streams import EventDesk

TIMELINE_PAGE = "/pages/runs/{run_id}"

# Reads the stream the list's `data-events` names, and shows each event; the run's status and
# end on the banner. Everything from the stream goes in as text.
SCRIPT = r"""
"use strict";
(() => {
  const list = document.getElementById("events");
  const banner = document.getElementById("status");
  const line = document.getElementById("status-text");
  const ends = new Set(list.dataset.ends.split(" "));
  // Controls and the characters that reorder or hide text, shown as escapes (`html.text`).
  const hidden = /[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]/g;
  const status = {};
  const seen = new Set();
  let ended = false;

  const shown = (value, limit = 200) => {
    let told = String(value);
    if (told.length > limit) { told = told.slice(0, limit) + "..."; }
    return told.replace(hidden, (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));
  };
  const element = (tag, content, className) => {
    const made = document.createElement(tag);
    made.textContent = content;
    if (className) { made.className = className; }
    return made;
  };
  const say = (message, kind) => {
    line.textContent = message;
    banner.className = kind ? "banner " + kind : "banner";
  };
  const facts = (detail) => {
    const parts = [];
    for (const [name, value] of Object.entries(detail || {})) {
      if (value === null || value === "" || typeof value === "object") { continue; }
      parts.push(shown(name, 40) + ": " + shown(value));
    }
    return parts.join(" \u00b7 ");
  };
  const current = () => {
    if (!status.AgentStatus) { return "Following the run live."; }
    let told = "Status: " + shown(status.AgentStatus);
    if (status.WaitingFor && status.WaitingFor !== "none") {
      told += ", waiting for " + shown(status.WaitingFor);
    }
    if (status.PendingOperations) {
      told += ", pending operations: " + shown(status.PendingOperations);
    }
    return told + ".";
  };
  const add = (event) => {
    const at = /^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2})/.exec(String(event.at));
    const time = element("time", at ? at[1] + " " + at[2] : shown(event.at));
    time.dateTime = String(event.at);
    const row = document.createElement("dd");
    row.dataset.kind = String(event.kind);
    row.append(element("strong", shown(event.kind)));
    if (event.summary) { row.append(" ", element("span", shown(event.summary))); }
    const more = facts(event.detail);
    if (more) { row.append(element("div", more, "hint")); }
    const when = document.createElement("dt");
    when.append(time);
    list.append(when, row);
  };
  const take = (message) => {
    if (ended || seen.has(message.lastEventId)) { return; }
    seen.add(message.lastEventId);
    let event;
    try { event = JSON.parse(message.data); } catch { return; }
    add(event);
    if (event.kind === "status") {
      for (const [name, value] of Object.entries(event.detail || {})) {
        if (value === null) { delete status[name]; } else { status[name] = value; }
      }
      say(current());
    }
    if (ends.has(event.kind)) {
      ended = true;
      source.close();
      const how = event.kind.slice("run.".length).replace("_", " ");
      say("The run has ended: " + how + ".", event.kind === "run.completed" ? "ok" : "no");
    }
  };

  // A call tried again has no id (never kept): it is shown as it comes, not deduplicated.
  const retried = (message) => {
    if (ended) { return; }
    let retry;
    try { retry = JSON.parse(message.data); } catch { return; }
    const of = retry.maximum_attempts ? " of " + retry.maximum_attempts : "";
    add({
      kind: "retry",
      at: retry.at,
      summary: retry.call + " tried again: attempt " + retry.attempt + of,
      detail: {failed_with: retry.error_type},
    });
  };

  const source = new EventSource(list.dataset.events);
  for (const kind of list.dataset.kinds.split(" ")) { source.addEventListener(kind, take); }
  source.addEventListener("retry", retried);
  source.addEventListener("open", () => { if (!ended) { say(current()); } });
  source.addEventListener("error", () => {
    if (ended) { return; }
    if (source.readyState === EventSource.CLOSED) {
      say("The run's events stopped coming: reload the page to follow it again (a link " +
          "that has expired needs a new one, from an operator).", "no");
    } else {
      say("The connection was lost: reconnecting...", "no");
    }
  });
})();
"""

TIMELINE_HEADERS = {**HEADERS, "Content-Security-Policy": live_policy(SCRIPT)}

_BODY = """$details
<div id="status" class="banner" role="status" aria-live="polite">
<p id="status-text">Connecting to the run's events...</p>
</div>
<noscript><p>This page follows the run with a script: allow it, or read the run's events
as server-sent events from the view link's <code>events_url</code>.</p></noscript>
<h2>Events</h2>
<p class="hint">Times are UTC. New events appear as they happen.</p>
<dl id="events" data-events="$events" data-kinds="$kinds" data-ends="$ends"></dl>
<script>$script</script>"""

_TITLES = {
    401: "This link is not valid",
    404: "Not found",
    410: "This link has expired",
    503: "Try again in a moment",
}
_LINK_HINT = (
    "Open this page from the run's view link, whole: each link shows its own run only, until "
    "it expires; an operator hands out another."
)

router = APIRouter(include_in_schema=False)


@router.get(TIMELINE_PAGE, response_class=HTMLResponse)
async def timeline_page(
    run_id: str, request: Request, gate: GateDep, token: str = ""
) -> HTMLResponse:
    """The run's timeline, which its script fills in from the run's event stream."""
    try:
        desk = _desk(gate.events)
        claims = _claims(desk, run_id, token)
        await _exists(desk, run_id)
    except Refused as refused:
        refuse(request, refused.status, refused.code, refused.message)  # its JSON unused
        hint = _LINK_HINT if refused.status in (401, 410) else ""
        title = _TITLES.get(refused.status, "Refused")
        # A refusal's page runs no script of its own: the pages' headers, as they are.
        return HTMLResponse(
            error(title, refused.message, hint), status_code=refused.status, headers=dict(HEADERS)
        )
    # Relative to the page (`/pages/runs/<id>`): the stream of a gateway served under a path
    # prefix too, from the page's own origin.
    events = f"../../v1/runs/{quote(run_id, safe='')}/events?token={quote(token, safe='')}"
    body = render(
        _BODY,
        details=details([("Run", run_id), ("Link valid until", when(claims.expires_at))]),
        events=events,
        kinds=" ".join(EVENT_KINDS),
        ends=" ".join(END_KINDS),
        script=Html(SCRIPT),
    )
    return HTMLResponse(document("Run timeline", body), headers=dict(TIMELINE_HEADERS))


def _desk(desk: EventDesk | None) -> EventDesk:
    if desk is None:
        raise Refused(404, "events_disabled", "this gateway streams no events")
    return desk


def _claims(desk: EventDesk, run_id: str, token: str) -> ViewClaims:
    """The claims of the page's token, which must be a view token for `run_id`.

    Raises:
        Refused: 401 missing, malformed, forged, of another kind or for another run; 410
            expired.
    """
    if not token:
        raise Refused(401, "missing_token", "the link's token is missing")
    if len(run_id) > MAX_RUN_ID_CHARS or len(token) > MAX_TOKEN_CHARS:
        raise Refused(401, "invalid_token", "not a view token")
    claims = verified(desk.tokens.verify_view, token)
    if claims.run_id != run_id:
        raise Refused(401, "wrong_run", "this link was issued for another run")
    return claims


async def _exists(desk: EventDesk, run_id: str) -> None:
    """Raises Refused: 404 no run has this id (its retention passed), 503 Temporal could not
    be reached."""
    try:
        await desk.events.where(run_id, None)
    except RunNotFound:
        raise Refused(404, "run_not_found", "no such run: it may have been deleted") from None
    except RPCError:
        raise Refused(503, "temporal_unavailable", "Temporal could not be reached") from None
