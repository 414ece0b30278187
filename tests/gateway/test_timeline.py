"""A run's timeline page over HTTP: the page a view link opens, with the rig of the event
streams (`test_events`: the real gateway over HTTP with its event desk, the dev server, a
worker, the demo systems).

The page is built for its run, under the pages' headers with a policy that lets its own script
read the run's stream and nothing else; every link that is not the run's view link is refused
with a page. That the page follows a run live is checked in a browser
(`tests/browser/test_timeline_browser.py`).
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
import uuid
from datetime import UTC, datetime, timedelta
from urllib.parse import quote, urljoin

from temporalio.client import WorkflowHistory

from tests.gateway.test_events import WITHIN, rig
from tests.helpers import HISTORIES, assert_page
from tests.rigs import OPERATOR, REFUND_TASK, REFUND_TOOLS, EventReader, Gateway, Stack
from waitstate.auth.tokens import ResumeTokens
from waitstate.client._events import told
from waitstate.gateway.pages.html import CONTENT_SECURITY_POLICY, HEADERS, STYLE
from waitstate.gateway.routes.timeline import END_KINDS, EVENT_KINDS, SCRIPT, TIMELINE_HEADERS
from waitstate.schemas import RunInput
from waitstate.workflows.agent_run import AgentRunWorkflow

__all__ = ["rig"]

# An id a run may have (Temporal takes any text but a slash is no path segment): markup and a
# character that would reorder what follows it.
HOSTILE_ID = "run-<img src=x onerror=alert(1)>\"'&\u202e-"


def _digest(source: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(source.encode()).digest()).decode()


def _attribute(page: str, name: str) -> str:
    found = re.search(rf'<dl id="events"[^>]* {name}="([^"]*)"', page)
    assert found is not None, page
    return html.unescape(found[1])


async def test_a_view_links_page_is_the_runs_timeline_under_the_pages_headers(rig: Stack) -> None:
    async with rig.worker():
        handle = await rig.start(REFUND_TASK, REFUND_TOOLS)
        link = await rig.view_link(handle.id)
        opened = await rig.http.get(link["url"])
        async with rig.events(link["events_url"]) as response:
            events = await EventReader(response, WITHIN).take(
                lambda e: e.kind == "approval.notice.ended"
            )
    await handle.terminate("the test has what it needs")

    page = assert_page(opened, 200, TIMELINE_HEADERS)
    assert link["url"] == f"{rig.gateway_url}/pages/runs/{handle.id}?token={link['token']}"
    assert "<title>Run timeline</title>" in page
    assert f"<dd>{handle.id}</dd>" in page
    # The pages' headers, and a policy that adds the page's script and its event stream only.
    policy = opened.headers["content-security-policy"]
    assert opened.headers["referrer-policy"] == "no-referrer"
    assert opened.headers["x-frame-options"] == "DENY"
    assert opened.headers["cache-control"] == "no-store"
    assert "connect-src 'self'" in policy and "connect-src" not in CONTENT_SECURITY_POLICY
    assert policy.replace(f" '{_digest(SCRIPT)}'", "").replace(" connect-src 'self';", "") == (
        CONTENT_SECURITY_POLICY
    )
    # Each inline script and style of the page is one the policy names.
    scripts = re.findall(r"<script>(.*?)</script>", page, re.DOTALL)
    styles = re.findall(r"<style>(.*?)</style>", page, re.DOTALL)
    assert len(scripts) == 2 and styles == [STYLE]
    for source in scripts:
        assert f"'{_digest(source)}'" in policy
    assert "innerHTML" not in SCRIPT and "insertAdjacentHTML" not in SCRIPT
    # The stream it reads: the run's, from the page's own origin, with the link's token.
    stream = urljoin(link["url"], _attribute(page, "data-events"))
    assert stream == link["events_url"]
    # It listens for every kind the run's stream sent (an `EventSource` hands a named event
    # only to its listeners), and knows the run's ends.
    kinds = set(_attribute(page, "data-kinds").split())
    assert {e.kind for e in events} <= kinds
    assert set(_attribute(page, "data-ends").split()) == {
        "run.completed",
        "run.failed",
        "run.timed_out",
        "run.canceled",
        "run.terminated",
    }


def test_the_page_listens_for_every_kind_a_recorded_run_tells() -> None:
    told_kinds: set[str] = set()
    for path in sorted(HISTORIES.glob("*.json")):
        history = WorkflowHistory.from_json(path.stem, path.read_text())
        events, _ = told(path.stem, history.events)
        told_kinds |= {e.kind for e in events}

    assert told_kinds - set(EVENT_KINDS) == set()
    # The recorded runs tell much of what a run does: calls, waits, decisions, reports, ends.
    assert {"model.started", "tool.ended", "status", "run.completed"} <= told_kinds
    assert set(END_KINDS) <= set(EVENT_KINDS) and len(EVENT_KINDS) == len(set(EVENT_KINDS))


async def test_a_run_id_from_outside_is_shown_as_text_and_linked_encoded(rig: Stack) -> None:
    # No worker: the run is started and stays so; the page reads its history, not its state.
    handle = await rig.client.start_workflow(
        AgentRunWorkflow.run,
        RunInput(task="t", tools=[]),
        id=f"{HOSTILE_ID}{uuid.uuid4()}",
        task_queue=rig.task_queue,
    )
    try:
        link = await rig.view_link(handle.id)
        opened = await rig.http.get(link["url"])
    finally:
        await handle.terminate("the test has what it needs")

    page = assert_page(opened, 200, TIMELINE_HEADERS)
    assert "<img" not in page and "\u202e" not in page
    assert html.escape(handle.id.replace("\u202e", "\\u202e"), quote=True) in page
    assert _attribute(page, "data-events").startswith(
        f"../../v1/runs/{quote(handle.id, safe='')}/events?token="
    )
    assert link["url"].startswith(f"{rig.gateway_url}/pages/runs/{quote(handle.id, safe='')}?")


async def test_a_link_that_is_not_the_runs_view_link_is_refused_with_a_page(rig: Stack) -> None:
    soon = datetime.now(UTC) + timedelta(hours=1)
    async with rig.worker():
        a = await rig.start(REFUND_TASK, REFUND_TOOLS)
        b = await rig.start(REFUND_TASK, REFUND_TOOLS)
        a_link, b_link = await rig.view_link(a.id), await rig.view_link(b.id)
        page = f"{rig.gateway_url}/pages/runs/{a.id}"
        token = a_link["token"]
        other_key = ResumeTokens({"events": "x" * 40}, "events")
        links = {
            "no token": page,
            "an empty token": f"{page}?token=",
            "b's token": f"{page}?token={b_link['token']}",
            "forged": f"{page}?token={token[:-2]}AA",
            "another key's": f"{page}?token={other_key.mint_view(a.id, soon)}",
            "a thread token": f"{page}?token={rig.tokens.mint_thread(a.id, soon)}",
            "an operator key": f"{page}?token={OPERATOR}",
            "too long": f"{page}?token={'a' * 5000}",
            "expired": f"{page}?token={rig.tokens.mint_view(a.id, datetime.now(UTC))}",
            "an unknown run's": (
                f"{rig.gateway_url}/pages/runs/run-none?token="
                f"{rig.tokens.mint_view('run-none', soon)}"
            ),
        }
        answers = {what: await rig.http.get(url) for what, url in links.items()}
    for run in (a, b):
        await run.terminate("the test has what it needs")

    statuses = {what: response.status_code for what, response in answers.items()}
    assert statuses == {
        "no token": 401,
        "an empty token": 401,
        "b's token": 401,
        "forged": 401,
        "another key's": 401,
        "a thread token": 401,
        "an operator key": 401,
        "too long": 401,
        "expired": 410,
        "an unknown run's": 404,
    }
    for what, response in answers.items():
        shown = assert_page(response, statuses[what], dict(HEADERS))
        assert 'id="events"' not in shown and token not in shown, what
        assert "<script>" in shown  # the pages' own, which the pages' policy names
    assert "<title>This link has expired</title>" in answers["expired"].text
    assert "<title>This link is not valid</title>" in answers["forged"].text
    assert "issued for another run" in answers["b's token"].text
    assert "view link" in answers["forged"].text
    metrics = (await rig.http.get(f"{rig.gateway_url}/metrics")).text
    assert 'waitstate_gateway_refusals_total{code="wrong_run",status="401"} 1.0' in metrics


async def test_a_gateway_that_streams_no_events_has_no_timelines(gw: Gateway) -> None:
    soon = datetime.now(UTC) + timedelta(hours=1)
    response = await gw.client.get(f"/pages/runs/run-a?token={gw.tokens.mint_view('run-a', soon)}")

    assert_page(response, 404, dict(HEADERS))
    assert "this gateway streams no events" in response.text
