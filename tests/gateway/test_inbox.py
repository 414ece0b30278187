"""The operators' inbox over HTTP, end to end (the rig of test_events.py: the real gateway, the
dev server, a worker, the demo systems): signing in with an operator key gives a session
cookie, never keeps the key; the inbox lists what waits for a person; a decision from it reaches
the run as the operator's, and a form from anywhere else is refused and changes nothing."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta

import httpx

from tests.gateway.test_events import WITHIN, rig
from tests.gateway.test_pages import QUESTION, asking
from tests.helpers import eventually
from tests.one_question_job import OneQuestionJob
from tests.rigs import OPERATOR, REFUND_TASK, REFUND_TOOLS, Stack
from waitstate.client import WaitstateClient
from waitstate.schemas.operations import Completion

__all__ = ["rig"]


@asynccontextmanager
async def _signed_in(rig: Stack) -> AsyncIterator[httpx.AsyncClient]:
    """A browser of its own (its own cookies), signed in to the inbox."""
    async with httpx.AsyncClient(base_url=rig.gateway_url, timeout=WITHIN) as browser:
        response = await browser.post("/pages/inbox/session", data={"key": OPERATOR})
        assert response.status_code == 303, response.text
        yield browser


def _form_key(page: str) -> str:
    found = re.search(r'name="form_key" value="([^"]+)"', page)
    assert found is not None, page
    return found[1]


async def test_an_operator_signs_in_sees_a_waiting_request_and_approves_it(rig: Stack) -> None:
    client = WaitstateClient(rig.client, task_queue=rig.task_queue)
    async with rig.worker():
        handle = await rig.start(REFUND_TASK, REFUND_TOOLS)
        await eventually(lambda: _waiting(client, handle.id), "the run's approval request")
        anonymous = await rig.http.get(f"{rig.gateway_url}/pages/inbox")
        wrong = await rig.http.post(
            f"{rig.gateway_url}/pages/inbox/session", data={"key": "not-a-key-" + "x" * 30}
        )
        async with _signed_in(rig) as browser:
            [cookie] = browser.cookies.jar
            listed = await browser.get("/pages/inbox")
            page = listed.text
            form = {
                "run_id": handle.id,
                "request_id": _request_id(page),
                "decision": "approve",
            }
            keyless = await browser.post("/pages/inbox/decide", data=form)
            cross_site = await browser.post(
                "/pages/inbox/decide",
                data=form | {"form_key": _form_key(page)},
                headers={"Sec-Fetch-Site": "cross-site"},
            )
            still_waiting = await _waiting(client, handle.id)
            decided = await browser.post(
                "/pages/inbox/decide", data=form | {"form_key": _form_key(page)}
            )
            result = await asyncio.wait_for(handle.result(), WITHIN)
            after = await browser.get("/pages/inbox")
        state = await client.query(handle.id)

    assert anonymous.status_code == 200 and 'name="key"' in anonymous.text
    assert anonymous.headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in anonymous.headers["content-security-policy"]
    assert wrong.status_code == 401 and "not an operator key" in wrong.text
    # The browser keeps a session, not the key.
    assert OPERATOR not in (cookie.value or "")
    assert rig.tokens.verify_session(cookie.value or "") == "ops"
    assert cookie.path == "/pages/inbox" and cookie.has_nonstandard_attr("HttpOnly")
    assert listed.status_code == 200 and "issue_refund" in page and handle.id in page
    assert (keyless.status_code, cross_site.status_code) == (403, 403)
    assert still_waiting
    assert decided.status_code == 200 and "approved by operator:ops" in decided.text
    assert result.status == "completed"
    [request] = state.approvals.values()
    assert request.status == "approved"
    assert request.decision is not None and request.decision.reviewer == "operator:ops"
    assert "No request waits for a decision" in after.text


async def test_a_session_that_is_forged_or_expired_is_signed_out(rig: Stack) -> None:
    expired = rig.tokens.mint_session("ops", datetime.now(UTC) - timedelta(seconds=1))
    genuine = rig.tokens.mint_session("ops", datetime.now(UTC) + timedelta(hours=1))
    forged = genuine[:-2] + ("A" if genuine[-2] != "A" else "B") + genuine[-1]
    view = rig.tokens.mint_view("ops", datetime.now(UTC) + timedelta(hours=1))
    answers = []
    for session in (expired, forged, view):
        async with httpx.AsyncClient(base_url=rig.gateway_url, timeout=WITHIN) as browser:
            browser.cookies.set("waitstate_inbox", session, path="/pages/inbox")
            page = await browser.get("/pages/inbox")
            decide = await browser.post(
                "/pages/inbox/decide",
                data={"run_id": "r", "request_id": "q", "decision": "approve", "form_key": "k"},
            )
        answers.append((page.status_code, 'name="key"' in page.text, decide.status_code))

    assert answers == [(401, True, 401)] * 3


async def _waiting(client: WaitstateClient, run_id: str) -> bool:
    state = await client.query(run_id)
    return any(r.open for r in state.approvals.values())


def _request_id(page: str) -> str:
    found = re.search(r'name="request_id" value="([^"]+)"', page)
    assert found is not None, page
    return found[1]


async def test_an_operator_answers_a_question_from_the_inbox_through_its_schemas_form(
    rig: Stack,
) -> None:
    job = OneQuestionJob("job-1", QUESTION, Completion(status="succeeded", result={"ok": True}))
    async with rig.worker(apps=asking(job)):
        handle = await rig.start("ask", ["asking_job"], model="scripted:asking")
        _, question_id, _ = await rig.question_link(handle.id)
        async with httpx.AsyncClient(base_url=rig.gateway_url, timeout=WITHIN) as browser:
            signed_in = await browser.post("/pages/inbox/session", data={"key": OPERATOR})
            page = (await browser.get("/pages/inbox")).text
            form = {
                "run_id": handle.id,
                "question_id": question_id,
                "action": "accept",
                "field:region": "EMEA",
                "field:rows": "7",
            }
            keyless = await browser.post("/pages/inbox/answer", data=form)
            answered = await browser.post(
                "/pages/inbox/answer", data=form | {"form_key": _form_key(page)}
            )
        result = await asyncio.wait_for(handle.result(), WITHIN)

    assert signed_in.status_code == 303
    assert question_id in page and 'name="field:region"' in page
    assert keyless.status_code == 403
    assert answered.status_code == 200 and "answered" in answered.text, answered.text
    assert result.status == "completed"
    [answer] = job.answers
    assert (answer.action, answer.responder) == ("accept", "operator:ops")
    assert answer.content == {"region": "EMEA", "rows": 7, "notify": False}
