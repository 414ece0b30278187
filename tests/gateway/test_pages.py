"""The pages a person opens from a notice's link, end to end: the real gateway app served over
HTTP, the dev server, a worker with the production wiring, and the demo systems, whose outbox
gets the notices (the link's token is the one the notice carries for a form).

A GET shows what the run asks and applies nothing; the page's form, sent back with its form
key from the gateway's own origin, applies a decision or an answer once, as the JSON routes do;
every refusal is a page with the right status, never a stack trace. The pages' pieces (the
escaping, the form built from a question's schema and read back) are checked alone below.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from tests.helpers import assert_page
from tests.one_question_job import OneQuestionJob, asking_tool
from tests.rigs import REFUND_TASK, REFUND_TOOLS, Stack, serving_stack
from tests.upstream import jsonschema_says
from waitstate import (
    Completion,
    Message,
    Question,
    ToolCall,
    ToolDefinition,
)
from waitstate.apps import Apps
from waitstate.auth.tokens import ResumeTokens, approval_subject, question_subject
from waitstate.gateway.pages import fields as question_fields
from waitstate.gateway.pages import request as request_view
from waitstate.gateway.pages.guard import cross_site
from waitstate.gateway.pages.html import CONTENT_SECURITY_POLICY, text
from waitstate.schemas import RunResult, RunState
from waitstate.schemas.approvals import ApprovalPolicy, ApprovalRequest
from waitstate.workflows.agent_run import AgentRunWorkflow

KEYS = {"pages": "p" * 40}
WITHIN = 60.0  # far more than a run takes: only turns a hang into a failure
HOSTILE = '<script>alert("x")</script>\u202egnp.exe'
SECURITY_HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}
# The question a job asks in these tests: a form of a choice, a bounded integer, a boolean, an
# email address and a multi-select.
SCHEMA = {
    "type": "object",
    "properties": {
        "region": {"type": "string", "title": "Region", "enum": ["EMEA", "APAC", "AMER"]},
        "rows": {"type": "integer", "title": "Rows", "minimum": 1, "maximum": 1000},
        "notify": {"type": "boolean", "title": "Notify the team"},
        "contact": {"type": "string", "format": "email", "description": "Who to tell"},
        "formats": {
            "type": "array",
            "items": {"type": "string", "enum": ["csv", "parquet"]},
        },
    },
    "required": ["region", "rows"],
}
# The headers a browser sends with a form from one of the gateway's pages (its `Origin` is
# `null`: the pages' referrer policy is `no-referrer`).
SAME_ORIGIN = {"Origin": "null", "Sec-Fetch-Site": "same-origin"}
QUESTION = Question(key="export", message=f"Which region?\n{HOSTILE}", requested_schema=SCHEMA)


def _asking_script(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Calls the asking job, then answers."""
    if not any(m.role == "tool" for m in messages):
        call = ToolCall(id="call_0", name="asking_job", arguments="{}")
        return Message(role="assistant", tool_calls=[call])
    return Message(role="assistant", content="done")


def asking(job: OneQuestionJob) -> Apps:
    """An app of `job`, a job that asks: its tool, and the script that calls it
    (`scripted:asking`)."""
    return Apps(tools=[asking_tool(job, "asking_job")], scripts={"asking": _asking_script})


@pytest.fixture
async def rig(dev_env: WorkflowEnvironment, task_queue: str) -> AsyncIterator[Stack]:
    async with serving_stack(dev_env.client, task_queue, KEYS, "pages", within=WITHIN) as stack:
        yield stack


def _form_key(page: str) -> str:
    found = re.search(r'name="form_key" value="([^"]+)"', page)
    assert found is not None, page
    return found[1]


def _action(page: str) -> str:
    found = re.search(r'<form method="post" action="([^"]+)"', page)
    assert found is not None, page
    return found[1]


def _assert_page(response: httpx.Response, status: int) -> str:
    """The page `response` is, once it is known to be one with `status` and the pages' headers
    (and no stack trace)."""
    return assert_page(response, status, SECURITY_HEADERS)


async def _opened(rig: Stack, handle: WorkflowHandle[Any, Any]) -> tuple[str, str, str, str]:
    """The run's approval link (its URL, request id and token), and the form key its page
    carries once opened (which applies nothing)."""
    url, request_id, token = await rig.approval_link(handle.id)
    return url, request_id, token, _form_key((await rig.http.get(url)).text)


async def _state(handle: WorkflowHandle[Any, Any]) -> RunState:
    state: RunState = await handle.query(AgentRunWorkflow.status)
    return state


# --- the approval page -------------------------------------------------------------------------


async def test_the_approval_page_shows_the_request_and_opening_it_applies_nothing(
    rig: Stack,
) -> None:
    async with rig.worker():
        handle = await rig.start(REFUND_TASK, REFUND_TOOLS)
        url, request_id, _ = await rig.approval_link(handle.id)
        first = await rig.http.get(url)
        second = await rig.http.get(url)
        state = await _state(handle)
        description = await handle.describe()

    page = _assert_page(first, 200)
    assert _assert_page(second, 200) == page  # the same page, and nothing done
    request = state.approvals[request_id]
    assert request.status == "pending" and request.decision is None
    assert description.status is not None and description.status.name == "RUNNING"
    assert "<title>Approval requested</title>" in page
    for shown in ("issue_refund", handle.id, request_id, request.policy.approvers):
        assert shown in page
    assert text(request.reason) in page
    assert "\n  &quot;amount&quot;: 420" in page  # the arguments, as indented JSON
    assert 'name="decision" value="approve"' in page
    assert 'name="decision" value="reject"' in page
    assert 'name="comment"' in page
    # The form is sent to the page's own path, without the token in its URL.
    assert _action(page) == request_id


async def test_a_form_from_another_site_or_without_the_pages_key_is_refused(rig: Stack) -> None:
    async with rig.worker():
        handle = await rig.start(REFUND_TASK, REFUND_TOOLS)
        url, request_id, token, key = await _opened(rig, handle)
        post_url = f"{rig.gateway_url}/pages/approvals/{request_id}"
        approve = {"token": token, "decision": "approve", "reviewer": "mallory"}
        attempts = {
            "no key": (approve, SAME_ORIGIN),
            "a wrong key": (approve | {"form_key": key[:-2] + "AA"}, SAME_ORIGIN),
            "another site": (approve | {"form_key": key}, {"Sec-Fetch-Site": "cross-site"}),
            "another origin": (
                approve | {"form_key": key},
                {"Origin": "https://evil.example", "Sec-Fetch-Site": "same-origin"},
            ),
        }
        answers = {
            what: await rig.http.post(post_url, data=form, headers=headers)
            for what, (form, headers) in attempts.items()
        }
        json_body = await rig.http.post(
            post_url, json=approve | {"form_key": key}, headers=SAME_ORIGIN
        )
        state = await _state(handle)

    for what, response in answers.items():
        page = _assert_page(response, 403)
        assert "Not allowed" in page, what
    assert _assert_page(json_body, 415)
    assert state.approvals[request_id].status == "pending"


async def test_approving_on_the_page_lets_the_run_go_on_and_the_link_is_then_used(
    rig: Stack,
) -> None:
    async with rig.worker():
        handle = await rig.start(REFUND_TASK, REFUND_TOOLS)
        url, request_id, token, key = await _opened(rig, handle)
        form = {
            "token": token,
            "form_key": key,
            "decision": "approve",
            "reviewer": "ana",
            "comment": "fine",
        }
        post_url = f"{rig.gateway_url}/pages/approvals/{request_id}"
        approved = await rig.http.post(post_url, data=form, headers=SAME_ORIGIN)
        result = await asyncio.wait_for(handle.result(), WITHIN)
        again = await rig.http.post(post_url, data=form, headers=SAME_ORIGIN)
        other = await rig.http.post(
            post_url, data=form | {"decision": "reject"}, headers=SAME_ORIGIN
        )
        reopened = await rig.http.get(url)
        state = await _state(handle)

    page = _assert_page(approved, 200)
    assert "<title>Approved</title>" in page and "Approved by <b>ana</b>." in page
    assert result.status == "completed"
    decision = state.approvals[request_id].decision
    assert decision is not None and (decision.decision, decision.reviewer) == ("approve", "ana")
    # The same link again, the same decision or the other: the run applied one, once.
    for response in (again, other):
        used = _assert_page(response, 409)
        assert "<title>This link was already used</title>" in used
        assert "Approved by <b>ana</b> at" in used
        assert 'name="decision"' not in used
    shown = _assert_page(reopened, 200)
    assert "<title>Approval request: approved</title>" in shown
    assert "Approved by <b>ana</b> at" in shown and "Comment: fine" in shown
    assert 'name="decision"' not in shown


async def test_rejecting_on_the_page_with_a_reason_tells_the_run(rig: Stack) -> None:
    async with rig.worker():
        handle = await rig.start(REFUND_TASK, REFUND_TOOLS)
        url, request_id, token, key = await _opened(rig, handle)
        rejected = await rig.http.post(
            f"{rig.gateway_url}/pages/approvals/{request_id}",
            data={
                "token": token,
                "form_key": key,
                "decision": "reject",
                "reviewer": "bo",
                "comment": f"over budget {HOSTILE}",
            },
            headers=SAME_ORIGIN,
        )
        result = await asyncio.wait_for(handle.result(), WITHIN)
        state = await _state(handle)
        reopened = await rig.http.get(url)

    page = _assert_page(rejected, 200)
    assert "<title>Rejected</title>" in page and "Rejected by <b>bo</b>." in page
    request = state.approvals[request_id]
    assert request.status == "rejected"
    assert request.decision is not None and request.decision.reviewer == "bo"
    assert request.decision.comment == f"over budget {HOSTILE}"
    assert result.status == "completed"
    assert any("rejected" in line for line in state.completed), state.completed
    shown = _assert_page(reopened, 200)
    assert "<script>alert" not in shown
    assert "over budget &lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;\\u202egnp.exe" in shown


async def test_a_link_that_is_not_the_requests_form_link_is_refused_with_a_page(
    rig: Stack,
) -> None:
    soon = datetime.now(UTC) + timedelta(hours=1)
    async with rig.worker():
        handle = await rig.start(REFUND_TASK, REFUND_TOOLS)
        url, request_id, token = await rig.approval_link(handle.id)
        notice = await rig.notice(handle.id)
        one_click = notice["links"]["approve"]["authorization"].removeprefix("Bearer ")
        page_url = f"{rig.gateway_url}/pages/approvals/{request_id}"
        other_key = ResumeTokens({"pages": "x" * 40}, "pages")
        mint = rig.tokens.mint
        links = {
            "no token": page_url,
            "forged": f"{page_url}?token={token[:-2]}AA",
            "another key's": (
                f"{page_url}?token="
                f"{other_key.mint(handle.id, approval_subject(request_id), soon).token}"
            ),
            "a one-click link's": f"{page_url}?token={one_click}",
            "a question's": (
                f"{page_url}?token={mint(handle.id, question_subject(request_id), soon).token}"
            ),
            "another request's": f"{rig.gateway_url}/pages/approvals/other?token={token}",
            "expired": (
                f"{page_url}?token="
                f"{mint(handle.id, approval_subject(request_id), datetime.now(UTC)).token}"
            ),
            "another nonce's": (
                f"{page_url}?token="
                f"{mint(handle.id, approval_subject(request_id), soon, nonce='n' * 22).token}"
            ),
            "an unknown run's": (
                f"{page_url}?token={mint('run-none', approval_subject(request_id), soon).token}"
            ),
        }
        answers = {what: await rig.http.get(link) for what, link in links.items()}
        posted = await rig.http.post(
            page_url,
            data={"token": token[:-2] + "AA", "decision": "approve"},
            headers=SAME_ORIGIN,
        )
        on_question_page = await rig.http.get(
            f"{rig.gateway_url}/pages/questions/{request_id}?token={token}"
        )
        state = await _state(handle)

    statuses = {what: response.status_code for what, response in answers.items()}
    assert statuses == {
        "no token": 401,
        "forged": 401,
        "another key's": 401,
        "a one-click link's": 401,
        "a question's": 401,
        "another request's": 401,
        "expired": 410,
        "another nonce's": 401,
        "an unknown run's": 404,
    }
    for what, response in answers.items():
        page = _assert_page(response, statuses[what])
        assert 'name="decision"' not in page, what
    assert "<title>This link has expired</title>" in answers["expired"].text
    assert "<title>This link is not valid</title>" in answers["forged"].text
    _assert_page(posted, 401)
    _assert_page(on_question_page, 401)
    assert state.approvals[request_id].status == "pending"


# --- the question page -------------------------------------------------------------------------


async def _ask(rig: Stack) -> tuple[WorkflowHandle[Any, RunResult], str, str, str]:
    """Start a run whose job asks `QUESTION`: the run, the question page's URL, the question's
    id and the link's token."""
    handle = await rig.start("ask", ["asking_job"], model="scripted:asking")
    return handle, *await rig.question_link(handle.id)


def _answered_job() -> OneQuestionJob:
    return OneQuestionJob("job-1", QUESTION, Completion(status="succeeded", result={"ok": True}))


async def test_the_question_page_builds_its_form_from_the_schema_and_takes_typed_content(
    rig: Stack,
) -> None:
    job = _answered_job()
    async with rig.worker(apps=asking(job)):
        handle, url, question_id, token = await _ask(rig)
        page = _assert_page(await rig.http.get(url), 200)
        answered = await rig.http.post(
            f"{rig.gateway_url}/pages/questions/{question_id}",
            data={
                "token": token,
                "form_key": _form_key(page),
                "action": "accept",
                "responder": "ana",
                "field:region": "APAC",
                "field:rows": "12",
                "field:notify": "true",
                "field:contact": "ops@example.com",
                "field:formats": ["csv", "parquet"],
                "field:unknown": "ignored",
            },
            headers=SAME_ORIGIN,
        )
        result = await asyncio.wait_for(handle.result(), WITHIN)
        reopened = await rig.http.get(url)

    assert "<title>A question for you</title>" in page
    assert "Which region?\n&lt;script&gt;" in page and "\\u202egnp.exe" in page
    assert '<select id="field-0" name="field:region" required>' in page
    assert '<option value="APAC">APAC</option>' in page
    assert 'type="number" required step="1" min="1" max="1000"' in page
    assert 'type="checkbox" id="field-2" name="field:notify" value="true">' in page
    assert 'name="field:contact" type="email"' in page
    assert 'name="field:formats" value="parquet">' in page
    assert page.count('<span class="required" title="required">*</span>') == 2
    assert 'value="decline" class="no" formnovalidate' in page
    done = _assert_page(answered, 200)
    assert "<title>Answered</title>" in done and "Answered by <b>ana</b>." in done
    assert result.status == "completed"
    [answer] = job.answers
    assert answer.action == "accept" and answer.responder == "ana"
    assert answer.content == {
        "region": "APAC",
        "rows": 12,
        "notify": True,
        "contact": "ops@example.com",
        "formats": ["csv", "parquet"],
    }
    again = _assert_page(reopened, 200)
    assert "Answered by <b>ana</b> at" in again and 'name="action"' not in again


async def test_content_the_run_refuses_shows_the_form_again_with_its_reason(rig: Stack) -> None:
    job = _answered_job()
    async with rig.worker(apps=asking(job)):
        handle, url, question_id, token = await _ask(rig)
        page = (await rig.http.get(url)).text
        form = {"token": token, "form_key": _form_key(page), "action": "accept"}
        post_url = f"{rig.gateway_url}/pages/questions/{question_id}"
        too_many = await rig.http.post(
            post_url,
            data=form | {"responder": "ana", "field:region": "EMEA", "field:rows": "5000"},
            headers=SAME_ORIGIN,
        )
        missing = await rig.http.post(
            post_url, data=form | {"field:rows": "abc"}, headers=SAME_ORIGIN
        )
        state = await _state(handle)
        fixed = await rig.http.post(
            post_url,
            data=form | {"responder": "ana", "field:region": "EMEA", "field:rows": "500"},
            headers=SAME_ORIGIN,
        )
        await asyncio.wait_for(handle.result(), WITHIN)

    # What the run said, on the page: the field's path (ours) and jsonschema's reason.
    over = jsonschema_says(SCHEMA, {"region": "EMEA", "rows": 5000}, "maximum")
    required = jsonschema_says(SCHEMA, {"rows": "abc"}, "required")
    not_integer = jsonschema_says(SCHEMA, {"rows": "abc"}, "type")
    refused = _assert_page(too_many, 422)
    assert text(f"The answer was not taken: invalid answer: rows: {over}") in refused
    # The form again, holding what was sent, to correct.
    assert '<option value="EMEA" selected>EMEA</option>' in refused
    assert 'name="field:rows" type="number" required step="1" min="1" max="1000" value="5000"' in (
        refused
    )
    assert 'name="responder"' in refused and 'value="ana"' in refused
    assert _form_key(refused) == form["form_key"]
    second = _assert_page(missing, 422)
    assert text(f"invalid answer: (content): {required}; rows: {not_integer}") in second
    assert state.questions[question_id].status == "open"
    assert "Answered by <b>ana</b>." in _assert_page(fixed, 200)
    assert [answer.content for answer in job.answers] == [
        {"region": "EMEA", "rows": 500, "notify": False}
    ]


async def test_declining_on_the_question_page_tells_the_job(rig: Stack) -> None:
    job = _answered_job()
    async with rig.worker(apps=asking(job)):
        handle, url, question_id, token = await _ask(rig)
        page = (await rig.http.get(url)).text
        declined = await rig.http.post(
            f"{rig.gateway_url}/pages/questions/{question_id}",
            # A decline sends no content: the form's fields are not read.
            data={"token": token, "form_key": _form_key(page), "action": "decline",
                  "responder": "bo", "field:rows": "not a number"},
            headers=SAME_ORIGIN,
        )  # fmt: skip
        await asyncio.wait_for(handle.result(), WITHIN)
        state = await _state(handle)
        approval_token_here = await rig.http.get(
            f"{rig.gateway_url}/pages/approvals/{question_id}?token={token}"
        )

    page = _assert_page(declined, 200)
    assert "<title>Declined</title>" in page and "Declined by <b>bo</b>." in page
    [answer] = job.answers
    assert (answer.action, answer.content, answer.responder) == ("decline", None, "bo")
    assert state.questions[question_id].status == "declined"
    _assert_page(approval_token_here, 401)


# --- the pieces, alone -------------------------------------------------------------------------


def test_what_came_from_outside_is_escaped_everywhere_on_the_approval_page() -> None:
    now = datetime.now(UTC)
    request = ApprovalRequest(
        request_id="req-1",
        tool=HOSTILE,
        tool_call_id="call_0",
        arguments={"note": HOSTILE, "big": "x" * 30_000},
        reason=HOSTILE,
        requested_at=now,
        expires_at=now + timedelta(hours=1),
        policy=ApprovalPolicy(approvers=HOSTILE),
    )

    page = request_view.page(
        title="Approval requested",
        workflow_id=HOSTILE,
        request_id="req-1",
        request=request,
        run_status="running",
    )

    assert "<script>alert" not in page
    assert page.count("<script>") == 1  # the page's own
    assert "\u202e" not in page and "\\u202egnp.exe" in page
    assert "... (" in page and len(page) < 40_000  # the arguments are cut short


def test_an_unchecked_box_is_false_an_empty_one_left_out_and_numbers_are_numbers() -> None:
    form = {
        "field:region": [""],
        "field:rows": ["1e3"],
        "field:notify": ["on"],
        "field:contact": ["  "],
    }

    content = question_fields.content_from(SCHEMA, form)

    assert content == {"rows": 1000.0, "notify": False, "contact": "  "}
    assert question_fields.content_from(SCHEMA, {"field:rows": ["NaN"]})["rows"] == "NaN"
    assert question_fields.content_from(SCHEMA, {"field:rows": ["-7"]})["rows"] == -7


@pytest.mark.parametrize(
    ("headers", "refused"),
    [
        ({}, False),
        ({"sec-fetch-site": "same-origin", "origin": "null", "host": "gw:1"}, False),
        ({"origin": "http://gw:1", "host": "gw:1"}, False),
        (
            {
                "origin": "https://gw.example",
                "host": "10.0.0.1:8787",
                "x-forwarded-host": "gw.example",
            },
            False,
        ),  # fmt: skip
        ({"sec-fetch-site": "same-site"}, True),
        ({"sec-fetch-site": "none"}, True),
        ({"origin": "http://evil:1", "host": "gw:1"}, True),
        ({"origin": "http://[::1", "host": "gw:1"}, True),
        ({"origin": "garbage"}, True),
    ],
)
def test_a_form_is_from_another_site_when_the_browser_says_so(
    headers: dict[str, str], refused: bool
) -> None:
    assert (cross_site(headers) is not None) is refused
