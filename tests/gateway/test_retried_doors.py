"""Every door into a run is idempotent and truthful (issue 39), end to end: the real gateway over
HTTP with a `TemporalDeliverer` and a thread desk, the client under it, the dev server, the demo
systems, and a worker the tests stop and start again.

For each door (a thread's start and its next message, a decision by link, by the client and by
the approval page's form, an answer by link, by the client and by the question page's form, a
webhook's completion): the same request twice, and a request whose answer is lost: to the
gateway's timeout while no worker runs (504 `outcome_unknown`, never a 503 "retry later", with
the key that makes the retry safe), to the client's timeout (`OutcomeUnknown`), or to a client
that hangs up before reading. Each reaches one run, one message, one decision, one answer, one
completion, and the retry is told what became of the first: the same message, "already
applied", or the first one's outcome, never a refusal, and never "token expired" for something
applied while its token was valid.

While no worker runs, requests go through a gateway that waits `PATIENCE` for the run, not 20 s:
no worker ever answers them, so their outcome is unknown however long it waits. With a worker,
the gateway waits its usual 20 s. A retry past its token carries a token of the same claims
(run, subject, nonce) whose expiry has passed: what the gateway sees of the first token once it
has expired, without a test waiting for the clock (a page's form sent back late carries it with
the form key its page gave it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from examples.demo.purges import PurgeService, purge_tool
from tests.helpers import accepted_updates, eventually, first_question, until_the_update_is_admitted
from tests.rigs import (
    EXPORT_TASK,
    EXPORT_TOOLS,
    OPERATOR,
    REFUND_TASK,
    REFUND_TOOLS,
    Stack,
    serving_stack,
)
from waitstate.apps import load_apps
from waitstate.auth.tokens import ResumeTokens
from waitstate.client import ClientError, OutcomeUnknown, thread_input
from waitstate.client._updates import answer_update_id, decision_update_id
from waitstate.gateway.delivery import update_id
from waitstate.gateway.pages.guard import form_key
from waitstate.schemas import RunResult, RunState
from waitstate.schemas.approvals import DecideInput, DecisionBody
from waitstate.schemas.operations import Completion
from waitstate.schemas.questions import AnswerBody, AnswerInput
from waitstate.workflows.agent_run import AgentRunWorkflow

APPS = ["tests.workflows.threads_app:app", "tests.workflows.questions_app:app"]
CHAT_MODEL = "scripted:chat-echo"
KEYS = {"doors": "d" * 40}
# How long the gateway that serves the requests sent while no worker runs waits for a run.
PATIENCE = timedelta(seconds=2)
RESULT_WITHIN = 60.0  # far more than a run takes: only turns a hang into a failure
APPROVE = {"decision": "approve", "reviewer": "ana", "comment": "fine by me"}
CONFIRM = {"action": "accept", "content": {"confirm": True}, "responder": "ana"}
SUCCEEDED = {
    "status": "succeeded",
    "result": {"file": "exports/transactions-2025-Q3.csv", "rows": 7},
}
UPDATE_COMPLETED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED
# The headers a browser sends with a form from one of the gateway's pages.
SAME_ORIGIN = {"Origin": "null", "Sec-Fetch-Site": "same-origin"}
# CONFIRM as the question page's form sends it (the purge's question has one checkbox).
CONFIRM_FORM = {"action": "accept", "field:confirm": "true", "responder": "ana"}


OPERATOR_AUTH = f"Bearer {OPERATOR}"


@pytest.fixture
async def rig(dev_env: WorkflowEnvironment, task_queue: str) -> AsyncIterator[Stack]:
    """The stack with the thread desk, and its gateway also served waiting `PATIENCE` for a run
    (`rig.impatient`), for requests sent while no worker runs."""
    async with serving_stack(
        dev_env.client,
        task_queue,
        KEYS,
        "doors",
        thread_model=CHAT_MODEL,
        impatient=PATIENCE,
        within=RESULT_WITHIN,
    ) as stack:
        yield stack


def _worker(rig: Stack) -> AbstractAsyncContextManager[Worker]:
    """The production worker wiring: the demo's tools, the purge's (its job asks a person to
    confirm), and the threads' and the questions' apps."""
    tools = [*rig.tools(), purge_tool(PurgeService(rig.http, rig.systems_url))]
    return rig.worker(tools=tools, apps=load_apps(APPS))


async def _export_run(
    rig: Stack, tools: Sequence[str] = EXPORT_TOOLS, **fields: Any
) -> WorkflowHandle[Any, RunResult]:
    """An export run whose jobs never end: the test sends its export's webhook itself."""
    await rig.faults(never_complete=True)
    return await rig.start(EXPORT_TASK, tools, **fields)


async def _notice(rig: Stack, handle: WorkflowHandle[Any, Any]) -> dict[str, Any]:
    """The run's approval notice, once its link is confirmed by the run."""
    [notice] = await rig.notices(handle, 1)
    return notice


async def _refund_run(rig: Stack) -> WorkflowHandle[Any, RunResult]:
    """A refund run: its refund waits for a person's decision."""
    return await rig.start(REFUND_TASK, REFUND_TOOLS)


async def _purge_run(rig: Stack) -> WorkflowHandle[Any, RunResult]:
    """A purge run: its job asks a person to confirm (one question, one checkbox)."""
    return await rig.start("purge the staging events", ["purge_dataset"], model="scripted:purge")


async def _callback(rig: Stack, handle: WorkflowHandle[Any, Any]) -> tuple[str, str]:
    """The URL and `Authorization` of the run's one export job's webhook."""
    [job] = await rig.jobs(handle, 1)
    assert job.callback_url is not None and job.callback_token is not None
    return job.callback_url, f"Bearer {job.callback_token}"


async def _assert_refunded_once(
    rig: Stack, handle: WorkflowHandle[Any, Any], result: RunResult
) -> None:
    """The refund run completed, having applied one decision and refunded once."""
    assert result.status == "completed"
    assert len(rig.systems.refunds) == 1
    assert await accepted_updates(handle) == ["decide"]


async def _assert_answered_once(
    rig: Stack, handle: WorkflowHandle[Any, Any], result: RunResult
) -> None:
    """The purge run completed, its question asked once and answered once."""
    purges = dict((await rig.stats())["purges"])
    assert result.status == "completed"
    assert (purges["questions_asked"], purges["answers_applied"]) == (1, 1)
    assert (await accepted_updates(handle)).count("answer") == 1


# --- threads ---------------------------------------------------------------------------------------


async def _start_thread(rig: Stack, body: dict[str, Any], gateway: str = "") -> httpx.Response:
    return await rig.post(f"{gateway or rig.gateway_url}/v1/threads", body, OPERATOR_AUTH)


async def _post_message(
    rig: Stack, thread_id: str, token: str, body: dict[str, Any], gateway: str = ""
) -> httpx.Response:
    url = f"{gateway or rig.gateway_url}/v1/threads/{thread_id}/messages"
    return await rig.post(url, body, f"Bearer {token}")


async def _received(rig: Stack, thread_id: str) -> int:
    """How many messages the thread has taken, all time."""
    state = await rig.waitstate.query(thread_id)
    assert state.thread is not None
    return state.thread.received


async def _has_received(rig: Stack, thread_id: str, count: int) -> bool:
    """Whether the thread has taken `count` messages (False while it cannot say: not started
    yet, or its first task not done)."""
    with contextlib.suppress(ClientError):
        return await _received(rig, thread_id) == count
    return False


async def _replied(rig: Stack, thread_id: str, message_id: str) -> str:
    """The reply to the message, once it has one."""
    message = await rig.waitstate.reply(thread_id, message_id, within=timedelta(seconds=30))
    assert message.status == "replied", message
    assert message.reply is not None
    return message.reply


async def _runs(rig: Stack, workflow_id: str) -> int:
    """How many runs Temporal has under the id."""
    return len([r async for r in rig.client.list_workflows(f'WorkflowId = "{workflow_id}"')])


async def _state(handle: WorkflowHandle[Any, Any]) -> RunState:
    state: RunState = await handle.query(AgentRunWorkflow.status)
    return state


async def _result(handle: WorkflowHandle[Any, RunResult]) -> RunResult:
    return await asyncio.wait_for(handle.result(), RESULT_WITHIN)


def _unknown(response: httpx.Response) -> dict[str, str]:
    """The fields of a 504 `outcome_unknown` answer (in the gateway's error shape)."""
    assert response.status_code == 504, response.text
    error: dict[str, str] = response.json()["error"]
    assert error["code"] == "outcome_unknown", error
    assert error["message"]
    return error


def _code(response: httpx.Response) -> tuple[int, str | None]:
    if response.status_code < 300:
        return response.status_code, None
    return response.status_code, response.json()["error"]["code"]


def _expired(tokens: ResumeTokens, authorization: str) -> str:
    """The `Authorization` of a token with the same claims as `authorization`'s (the same run,
    subject and nonce: as genuine) that has expired: what a request retried after its token's
    expiry carries."""
    claims = tokens.verify(authorization.removeprefix("Bearer "))
    past = datetime.now(UTC) - timedelta(seconds=1)
    expired = tokens.mint(claims.workflow_id, claims.operation_id, past, nonce=claims.nonce)
    return f"Bearer {expired.token}"


async def _hang_up_once(
    url: str,
    body: Any,
    headers: dict[str, str],
    reached: Callable[[], Awaitable[bool]],
    *,
    form: bool = False,
) -> None:
    """POST `body` to `url` (as JSON, or as a page's `form`) and hang up without reading the
    answer, once `reached` says the request reached the run: a client whose answer is lost."""
    target = httpx.URL(url)
    assert target.port is not None
    if form:
        payload, kind = urlencode(body).encode(), "application/x-www-form-urlencoded"
    else:
        payload, kind = json.dumps(body).encode(), "application/json"
    head = [
        f"POST {target.raw_path.decode()} HTTP/1.1",
        f"Host: {target.host}:{target.port}",
        f"Content-Type: {kind}",
        f"Content-Length: {len(payload)}",
        *(f"{name}: {value}" for name, value in headers.items()),
    ]
    _, writer = await asyncio.open_connection(target.host, target.port)
    try:
        writer.write("\r\n".join(head).encode() + b"\r\n\r\n" + payload)
        await writer.drain()
        await eventually(reached, f"the request to {target.path} to reach the run")
    finally:
        writer.close()
        await writer.wait_closed()


def _page_form(tokens: ResumeTokens, authorization: str, fields: dict[str, str]) -> dict[str, str]:
    """The form a link's page sends back, filled in with `fields`: the link's token (that of
    `authorization`) and the form key its page carries."""
    token = authorization.removeprefix("Bearer ")
    return {"token": token, "form_key": form_key(tokens, tokens.signed_claims(token)), **fields}


async def _send_form(
    rig: Stack, url: str, authorization: str, fields: dict[str, str], *, expired: bool = False
) -> httpx.Response:
    """The link's page's form, filled in with `fields`, posted as a browser posts it; with
    `expired`, carrying an expired copy of the link's token (see `_expired`)."""
    if expired:
        authorization = _expired(rig.tokens, authorization)
    form = _page_form(rig.tokens, authorization, fields)
    return await rig.http.post(url, data=form, headers=SAME_ORIGIN)


async def _approval_page(rig: Stack, handle: WorkflowHandle[Any, Any]) -> tuple[str, str, str]:
    """The run's approval: its request id, its link's `Authorization`, and its page's URL."""
    notice = await _notice(rig, handle)
    request_id, authorization = notice["request_id"], notice["decision"]["authorization"]
    return request_id, authorization, f"{rig.gateway_url}/pages/approvals/{request_id}"


async def _question_page(rig: Stack, handle: WorkflowHandle[Any, Any]) -> tuple[str, str, str]:
    """The run's question: its id, its link's `Authorization`, and its page's URL."""
    notice = await rig.notice(handle.id, "question")
    question_id, authorization = notice["question_id"], notice["answer"]["authorization"]
    return question_id, authorization, f"{rig.gateway_url}/pages/questions/{question_id}"


async def _hang_up_on_form(
    rig: Stack,
    handle: WorkflowHandle[Any, Any],
    url: str,
    authorization: str,
    fields: dict[str, str],
    update: str,
) -> None:
    """Send the link's page's form, filled in with `fields`, and hang up without reading the
    answer once the run has completed its Update (`update`)."""
    form = _page_form(rig.tokens, authorization, fields)
    await _hang_up_once(url, form, SAME_ORIGIN, lambda: _completed(handle, update), form=True)


async def _completed(handle: WorkflowHandle[Any, Any], update: str) -> bool:
    """Whether the run has completed the Update whose id is `update` (its outcome is kept)."""
    return any(
        [
            e.workflow_execution_update_completed_event_attributes.meta.update_id == update
            async for e in handle.fetch_history_events()
            if e.event_type == UPDATE_COMPLETED
        ]
    )


# --- a thread's start ----------------------------------------------------------------------------


async def test_a_start_whose_answer_is_lost_while_no_worker_runs_starts_one_thread(
    rig: Stack,
) -> None:
    # No thread id, no key: the gateway picks both, and names them when it cannot tell.
    lost = await _start_thread(rig, {"text": "hello"}, gateway=rig.impatient_url)
    unknown = _unknown(lost)
    thread_id, key = unknown["thread_id"], unknown["key"]
    retry = {"text": "hello", "thread_id": thread_id, "key": key}
    # Still no worker: the thread cannot say whether this is its start's retry; nothing is sent.
    too_soon = await _start_thread(rig, retry, gateway=rig.impatient_url)
    async with _worker(rig):
        await eventually(lambda: _has_received(rig, thread_id, 1), "the start's message taken")
        retried = await _start_thread(rig, retry)
        reply = await _replied(rig, thread_id, "m1")
        state = await rig.waitstate.query(thread_id)

    assert (too_soon.status_code, too_soon.json()["error"]["code"]) == (503, "thread_unavailable")
    assert retried.status_code == 201, retried.text
    assert retried.json()["thread_id"] == thread_id
    assert retried.json()["message"]["message_id"] == "m1"
    assert retried.json()["message"]["duplicate"] is True
    assert reply == "re: hello (1 seen)"
    assert state.thread is not None and state.thread.received == 1
    assert [m.key for m in state.thread.messages] == [key]
    assert await _runs(rig, thread_id) == 1


async def test_a_start_sent_twice_or_whose_client_hung_up_starts_one_thread(rig: Stack) -> None:
    thread_id = f"thread-doors-{uuid.uuid4().hex[:8]}"
    body = {"text": "hello", "thread_id": thread_id, "key": "start-1"}
    other = f"thread-doors-{uuid.uuid4().hex[:8]}"
    hung_up = {"text": "hello", "thread_id": other, "key": "start-2"}
    async with _worker(rig):
        twice = await asyncio.gather(_start_thread(rig, body), _start_thread(rig, body))

        await _hang_up_once(
            f"{rig.gateway_url}/v1/threads",
            hung_up,
            {"Authorization": OPERATOR_AUTH},
            lambda: _has_received(rig, other, 1),
        )
        retried = await _start_thread(rig, hung_up)
        received = (await _received(rig, thread_id), await _received(rig, other))

    assert sorted(_code(r) for r in twice) == [(201, None)] * 2
    assert {r.json()["message"]["message_id"] for r in twice} == {"m1"}
    assert sorted(r.json()["message"]["duplicate"] for r in twice) == [False, True]
    assert _code(retried) == (201, None)
    assert retried.json()["message"] == {
        "message_id": "m1",
        "status": retried.json()["message"]["status"],
        "ahead": 0,
        "duplicate": True,
    }
    assert received == (1, 1)
    assert (await _runs(rig, thread_id), await _runs(rig, other)) == (1, 1)


# --- a thread's next message ---------------------------------------------------------------------


async def test_a_message_whose_answer_is_lost_while_no_worker_runs_is_taken_once(
    rig: Stack,
) -> None:
    """Finding 2: the post's Update was admitted by Temporal, held for a worker and taken once
    one came back; the gateway had answered 503 `thread_unavailable`, "retry later", and the
    retry was a second message."""
    async with _worker(rig):
        started = await _start_thread(rig, {"text": "hello"})
        thread_id, token = started.json()["thread_id"], started.json()["thread_token"]
        await _replied(rig, thread_id, "m1")
    lost = await _post_message(rig, thread_id, token, {"text": "still there?"}, rig.impatient_url)
    key = _unknown(lost)["key"]
    async with _worker(rig):
        retried = await _post_message(rig, thread_id, token, {"text": "still there?", "key": key})
        reply = await _replied(rig, thread_id, retried.json()["message_id"])
        state = await rig.waitstate.query(thread_id)

    assert set(_unknown(lost)) == {"code", "message", "key"}
    assert _code(retried) == (202, None)
    assert retried.json()["message_id"] == "m2"
    assert reply == "re: still there? (2 seen)"
    assert state.thread is not None and state.thread.received == 2
    assert [m.key for m in state.thread.messages][1:] == [key]


async def test_a_message_sent_twice_or_whose_client_hung_up_is_taken_once(rig: Stack) -> None:
    async with _worker(rig):
        started = await _start_thread(rig, {"text": "hello"})
        thread_id, token = started.json()["thread_id"], started.json()["thread_token"]
        twice = await asyncio.gather(
            *(_post_message(rig, thread_id, token, {"text": "once", "key": "k-1"}) for _ in "ab")
        )

        url = f"{rig.gateway_url}/v1/threads/{thread_id}/messages"
        hung_up = {"text": "and once more", "key": "k-2"}
        await _hang_up_once(
            url,
            hung_up,
            {"Authorization": f"Bearer {token}"},
            lambda: _has_received(rig, thread_id, 3),
        )
        retried = await _post_message(rig, thread_id, token, hung_up)
        await _replied(rig, thread_id, "m3")
        state = await rig.waitstate.query(thread_id)

    assert [_code(r) for r in twice] == [(202, None)] * 2
    assert {r.json()["message_id"] for r in twice} == {"m2"}
    assert sorted(r.json()["duplicate"] for r in twice) == [False, True]
    assert (_code(retried), retried.json()["message_id"]) == ((202, None), "m3")
    assert retried.json()["duplicate"] is True
    assert state.thread is not None and state.thread.received == 3
    assert [m.key for m in state.thread.messages][1:] == ["k-1", "k-2"]


async def test_a_message_the_client_sends_is_keyed_and_its_lost_answer_names_the_key(
    rig: Stack,
) -> None:
    """`WaitstateClient.send_message`: a send with no key is given one; one whose answer the
    client gave up on (`OutcomeUnknown`) is the same message when sent again with its key."""
    thread_id = f"thread-client-{uuid.uuid4().hex[:8]}"
    async with _worker(rig):
        start = thread_input(model=CHAT_MODEL)
        first = await rig.waitstate.send_message(thread_id, "hello", start=start)
        await _replied(rig, thread_id, "m1")
    with pytest.raises(OutcomeUnknown) as lost:
        await rig.waitstate.send_message(thread_id, "still there?", answer_within=PATIENCE)
    async with _worker(rig):
        again = await rig.waitstate.send_message(thread_id, "still there?", key=lost.value.key)
        await _replied(rig, thread_id, "m2")
        received = await _received(rig, thread_id)

    assert first.key is not None and first.accepted.message_id == "m1"
    assert lost.value.key != first.key and lost.value.key in str(lost.value)
    assert (again.key, again.accepted.message_id) == (lost.value.key, "m2")
    assert received == 2


# --- a decision ------------------------------------------------------------------------------------


async def test_a_decision_whose_answer_is_lost_while_no_worker_runs_is_applied_once(
    rig: Stack,
) -> None:
    async with _worker(rig):
        handle = await _refund_run(rig)
        link = (await _notice(rig, handle))["decision"]
    lost = await rig.post(rig.impatient(link["url"]), APPROVE, link["authorization"])
    async with _worker(rig):
        retried = await rig.post(link["url"], APPROVE, link["authorization"])
        result = await _result(handle)

    assert set(_unknown(lost)) == {"code", "message"}  # the decision itself is the key
    # When Temporal had taken the first request's Update in before the gateway gave up, it was
    # applied once the worker was back and the retry shares it; when it had not (a loaded
    # server), the retry is the one applied. Either way, one decision.
    if _code(retried) != (200, None):
        assert _code(retried) == (409, "duplicate_decision")
        assert "already applied" in retried.json()["error"]["message"]
    await _assert_refunded_once(rig, handle, result)


async def test_a_decision_sent_twice_hung_up_on_or_retried_past_its_token_is_applied_once(
    rig: Stack,
) -> None:
    async with _worker(rig):
        handle = await _refund_run(rig)
        notice = await _notice(rig, handle)
        link = notice["decision"]

        async def decided() -> bool:
            return (await _state(handle)).approvals[notice["request_id"]].status == "approved"

        await _hang_up_once(link["url"], APPROVE, {"Authorization": link["authorization"]}, decided)
        twice = await asyncio.gather(
            *(rig.post(link["url"], APPROVE, link["authorization"]) for _ in "ab")
        )
        # The link's token has expired since (the same claims, an expiry in the past).
        late = await rig.post(link["url"], APPROVE, _expired(rig.tokens, link["authorization"]))
        other = await rig.post(
            link["url"],
            {**APPROVE, "comment": "another"},
            _expired(rig.tokens, link["authorization"]),
        )
        result = await _result(handle)

    assert [_code(r) for r in twice] == [(409, "duplicate_decision")] * 2
    # Finding 9's kind: the same decision, applied while the token was valid, is told so.
    assert _code(late) == (409, "duplicate_decision")
    # Another decision through an expired link was never sent: expired it is.
    assert _code(other) == (410, "token_expired")
    await _assert_refunded_once(rig, handle, result)


async def test_a_decision_the_client_sends_again_gets_the_first_ones_outcome(rig: Stack) -> None:
    """`WaitstateClient.decide`: the decision is its own key, so the same decision sent twice,
    or again after the client gave up on its answer, or after a caller hung up, is one Update."""
    async with _worker(rig):
        handles = [await _refund_run(rig) for _ in range(3)]
        twice, lost, hung_up = handles
        requests = {h.id: (await _notice(rig, h))["request_id"] for h in handles}

        def decision(handle: WorkflowHandle[Any, Any]) -> DecideInput:
            return DecideInput(request_id=requests[handle.id], decision="approve", reviewer="ana")

        outcomes = [await rig.waitstate.decide(twice.id, decision(twice)) for _ in "ab"]
        # A caller that hangs up once the Update reached the run.
        update = decision_update_id(
            requests[hung_up.id], DecisionBody(decision="approve", reviewer="ana")
        )
        deciding = asyncio.create_task(rig.waitstate.decide(hung_up.id, decision(hung_up)))
        await until_the_update_is_admitted(rig.client, hung_up, f"client/{update}")
        deciding.cancel()
        await asyncio.gather(deciding, return_exceptions=True)  # its answer, never read
        again = await rig.waitstate.decide(hung_up.id, decision(hung_up))
    with pytest.raises(OutcomeUnknown) as unknown:
        await rig.waitstate.decide(lost.id, decision(lost), answer_within=PATIENCE)
    async with _worker(rig):
        retried = await rig.waitstate.decide(lost.id, decision(lost), update_id=unknown.value.key)
        results = [await _result(h) for h in handles]

    assert [(o.accepted, o.status) for o in outcomes] == [(True, "approved")] * 2
    assert (again.accepted, again.status) == (True, "approved")
    assert unknown.value.key.startswith("client/decide/")
    assert (retried.accepted, retried.status) == (True, "approved")
    # One claim's refund for all three (its key is the claim's): each run applied one decision.
    assert [r.status for r in results] == ["completed"] * 3
    for handle in handles:
        assert await accepted_updates(handle) == ["decide"], handle.id


# --- an answer to a question -----------------------------------------------------------------------


async def test_an_answer_whose_answer_is_lost_or_retried_past_its_token_is_applied_once(
    rig: Stack,
) -> None:
    async with _worker(rig):
        handle = await _purge_run(rig)
        link = (await rig.notice(handle.id, "question"))["answer"]
    lost = await rig.post(rig.impatient(link["url"]), CONFIRM, link["authorization"])
    async with _worker(rig):
        retried = await rig.post(link["url"], CONFIRM, link["authorization"])
        late = await rig.post(link["url"], CONFIRM, _expired(rig.tokens, link["authorization"]))
        result = await _result(handle)

    assert set(_unknown(lost)) == {"code", "message"}
    assert _code(retried) == (200, None) and retried.json()["delivered"] is True
    assert (late.status_code, late.json()) == (200, retried.json())
    await _assert_answered_once(rig, handle, result)


async def test_an_answer_sent_twice_hung_up_on_or_retried_past_its_token_is_applied_once(
    rig: Stack,
) -> None:
    async with _worker(rig):
        handle = await _purge_run(rig)
        notice = await rig.notice(handle.id, "question")
        link, question_id = notice["answer"], notice["question_id"]

        async def answered() -> bool:
            return (await _state(handle)).questions[question_id].status == "answered"

        await _hang_up_once(
            link["url"], CONFIRM, {"Authorization": link["authorization"]}, answered
        )
        twice = await asyncio.gather(
            *(rig.post(link["url"], CONFIRM, link["authorization"]) for _ in "ab")
        )
        late = await rig.post(link["url"], CONFIRM, _expired(rig.tokens, link["authorization"]))
        result = await _result(handle)

    assert [_code(r) for r in twice] == [(200, None)] * 2
    assert twice[0].json() == twice[1].json() and twice[0].json()["delivered"] is True
    # Its token has expired since: the answer applied while it was valid is told so.
    assert (late.status_code, late.json()) == (200, twice[0].json())
    await _assert_answered_once(rig, handle, result)


async def test_an_answer_the_client_sends_again_gets_the_first_ones_outcome(rig: Stack) -> None:
    async with _worker(rig):
        handle = await _purge_run(rig)
        question = await first_question(handle, "the purge's question")
    answer = AnswerInput(
        question_id=question.question_id, action="accept", content={"confirm": True}
    )
    with pytest.raises(OutcomeUnknown) as unknown:
        await rig.waitstate.answer(handle.id, answer, answer_within=PATIENCE)
    async with _worker(rig):
        retried = await rig.waitstate.answer(handle.id, answer)
        again = await rig.waitstate.answer(handle.id, answer)
        result = await _result(handle)

    body = AnswerBody(action="accept", content={"confirm": True})
    assert unknown.value.key == f"client/{answer_update_id(question.question_id, body)}"
    assert (retried.accepted, retried.delivered) == (True, True)
    assert again == retried
    await _assert_answered_once(rig, handle, result)


# --- a page's form -------------------------------------------------------------------------------


async def test_a_decision_on_the_page_whose_answer_is_lost_is_shown_as_it_stands_once_expired(
    rig: Stack,
) -> None:
    async with _worker(rig):
        handle = await _refund_run(rig)
        request_id, authorization, url = await _approval_page(rig, handle)
        update = decision_update_id(request_id, DecisionBody.model_validate(APPROVE))
        await _hang_up_on_form(rig, handle, url, authorization, APPROVE, update)
        # The link has expired since: its page's form, sent again as it was.
        late = await _send_form(rig, url, authorization, APPROVE, expired=True)
        result = await _result(handle)
        state = await _state(handle)

    # The decision that stands, as the link's second use shows it: approved by ana.
    assert late.status_code == 409, late.text
    assert "<title>This link was already used</title>" in late.text
    assert "Approved by <b>ana</b> at" in late.text and 'name="decision"' not in late.text
    decision = state.approvals[request_id].decision
    assert decision is not None and (decision.decision, decision.reviewer) == ("approve", "ana")
    await _assert_refunded_once(rig, handle, result)


async def test_a_decision_on_the_page_is_not_confirmed_yet_through_an_expired_link_until_applied(
    rig: Stack,
) -> None:
    """The page's form reached Temporal while no worker runs, and its answer was lost: the
    form sent again once the link has expired says so ("Not confirmed yet", never expired),
    and then shows the decision once the run has applied it."""
    async with _worker(rig):
        handle = await _refund_run(rig)
        request_id, authorization, url = await _approval_page(rig, handle)
    update = decision_update_id(request_id, DecisionBody.model_validate(APPROVE))
    late_form = _page_form(rig.tokens, _expired(rig.tokens, authorization), APPROVE)

    async def admitted() -> bool:
        await until_the_update_is_admitted(rig.client, handle, update)
        return True

    await _hang_up_once(
        url, _page_form(rig.tokens, authorization, APPROVE), SAME_ORIGIN, admitted, form=True
    )
    unconfirmed = await rig.http.post(url, data=late_form, headers=SAME_ORIGIN)
    async with _worker(rig):
        await eventually(lambda: _completed(handle, update), "the decision applied")
        late = await rig.http.post(url, data=late_form, headers=SAME_ORIGIN)
        result = await _result(handle)

    assert unconfirmed.status_code == 504, unconfirmed.text
    assert "<title>Not confirmed yet</title>" in unconfirmed.text
    assert late.status_code == 409, late.text
    assert "Approved by <b>ana</b> at" in late.text
    await _assert_refunded_once(rig, handle, result)


async def test_an_answer_on_the_page_whose_answer_is_lost_is_shown_taken_once_expired(
    rig: Stack,
) -> None:
    async with _worker(rig):
        handle = await _purge_run(rig)
        question_id, authorization, url = await _question_page(rig, handle)
        # The page's answer is the link's JSON answer: one Update, known by its content.
        update = answer_update_id(question_id, AnswerBody.model_validate(CONFIRM))
        await _hang_up_on_form(rig, handle, url, authorization, CONFIRM_FORM, update)
        late = await _send_form(rig, url, authorization, CONFIRM_FORM, expired=True)
        result = await _result(handle)

    # The page the first form would have shown: the answer taken.
    assert late.status_code == 200, late.text
    assert "<title>Answered</title>" in late.text and "Answered by <b>ana</b>." in late.text
    await _assert_answered_once(rig, handle, result)


@dataclass(frozen=True)
class _Page:
    """A link's page whose form is the door: a decision's or an answer's."""

    start: Callable[[Stack], Awaitable[WorkflowHandle[Any, RunResult]]]
    page: Callable[[Stack, WorkflowHandle[Any, Any]], Awaitable[tuple[str, str, str]]]
    fields: dict[str, str]
    # The request's (or question's) status and outcome while nothing is applied, and then.
    pending: Callable[[RunState, str], tuple[str, Any]]
    untouched: tuple[str, None]
    taken: str  # the title of the page once the form is taken
    applied_once: Callable[[Stack, WorkflowHandle[Any, Any], RunResult], Awaitable[None]]


PAGES = {
    "decision": _Page(
        _refund_run,
        _approval_page,
        APPROVE,
        lambda state, i: (state.approvals[i].status, state.approvals[i].decision),
        ("pending", None),
        "<title>Approved</title>",
        _assert_refunded_once,
    ),
    "answer": _Page(
        _purge_run,
        _question_page,
        CONFIRM_FORM,
        lambda state, i: (state.questions[i].status, state.questions[i].answer),
        ("open", None),
        "<title>Answered</title>",
        _assert_answered_once,
    ),
}


@pytest.mark.parametrize("door", PAGES.values(), ids=PAGES.keys())
async def test_a_form_on_the_page_first_sent_once_its_link_expired_is_refused_as_expired(
    rig: Stack, door: _Page
) -> None:
    async with _worker(rig):
        handle = await door.start(rig)
        item_id, authorization, url = await door.page(rig, handle)
        late = await _send_form(rig, url, authorization, door.fields, expired=True)
        untouched = door.pending(await _state(handle), item_id)
        # Nothing of the late form's stands in the way of the link while it is valid.
        taken = await _send_form(rig, url, authorization, door.fields)
        result = await _result(handle)

    assert late.status_code == 410, late.text
    assert "<title>This link has expired</title>" in late.text
    assert untouched == door.untouched
    assert taken.status_code == 200, taken.text
    assert door.taken in taken.text
    await door.applied_once(rig, handle, result)


# --- a webhook's completion ------------------------------------------------------------------------


async def test_a_completion_whose_answer_is_lost_then_retried_past_its_token_is_applied_once(
    rig: Stack,
) -> None:
    """Finding 9: the first delivery got no answer in time (no worker) but was applied once a
    worker came back; its retry, sent after the token had expired, got 410 `token_expired`."""
    async with _worker(rig):
        handle = await _export_run(rig)
        url, authorization = await _callback(rig, handle)
    lost = await rig.post(rig.impatient(url), SUCCEEDED, authorization)
    async with _worker(rig):
        retried = await rig.post(url, SUCCEEDED, authorization)
        late = await rig.post(url, SUCCEEDED, _expired(rig.tokens, authorization))
        other = await rig.post(
            url,
            {"status": "running", "progress": "50%"},
            _expired(rig.tokens, authorization),
        )
        result = await _result(handle)
        state = await _state(handle)

    assert "key" in _unknown(lost)
    assert _code(retried) == (409, "duplicate_completion")
    assert _code(late) == (409, "duplicate_completion")
    assert "already applied" in late.json()["error"]["message"]
    assert _code(other) == (410, "token_expired")
    assert result.status == "completed"
    [operation] = state.operations.values()
    assert (operation.status, operation.result) == ("succeeded", SUCCEEDED["result"])
    assert await accepted_updates(handle) == ["complete_operation"]


async def test_a_completion_retried_past_its_token_once_its_run_continued_as_new_is_told_so(
    rig: Stack,
) -> None:
    """The run that applied a completion has continued as new since: the Update is looked for
    in the runs of its chain."""
    async with _worker(rig):
        handle = await _export_run(
            rig,
            ["start_export"],
            model="scripted:two-exports",
            continue_as_new_after_events=10,
        )
        first, second = await rig.jobs(handle, 2)
        assert first.callback_url and first.callback_token
        assert second.callback_url and second.callback_token
        authorization = f"Bearer {first.callback_token}"
        applied = await rig.post(first.callback_url, SUCCEEDED, authorization)

        async def continued() -> bool:
            return (await _state(handle)).continued_as_new >= 1

        await eventually(continued, "the run to continue as new while it waits")
        late = await rig.post(first.callback_url, SUCCEEDED, _expired(rig.tokens, authorization))
        valid = await rig.post(first.callback_url, SUCCEEDED, authorization)
        done = await rig.post(second.callback_url, SUCCEEDED, f"Bearer {second.callback_token}")
        result = await _result(handle)

    assert _code(applied) == (200, None)
    assert _code(late) == (409, "duplicate_completion")
    # With its token still valid, it goes to the next run: refused as a completion of an
    # operation that has ended, or (when Temporal still knows the Update's id from the run it
    # continued from) answered as the copy it is. Either way a 409 that applies nothing.
    assert _code(valid) in {(409, "operation_resolved"), (409, "duplicate_completion")}
    assert _code(done) == (200, None)
    assert result.status == "completed"


async def test_a_progress_report_whose_answer_is_lost_is_applied_once_with_its_key(
    rig: Stack,
) -> None:
    """A progress report with no id of its sender's is given one when its outcome is unknown:
    sent again with it (`Idempotency-Key`), it is that report, not a second one."""
    async with _worker(rig):
        handle = await _export_run(rig)
        url, authorization = await _callback(rig, handle)
    report = {"status": "running", "progress": "50%"}
    lost = await rig.post(rig.impatient(url), report, authorization)
    key = _unknown(lost)["key"]
    async with _worker(rig):
        retried = await rig.post(url, report, authorization, **{"Idempotency-Key": key})
        late = await rig.post(
            url,
            report,
            _expired(rig.tokens, authorization),
            **{"Idempotency-Key": key},
        )
        done = await rig.post(url, SUCCEEDED, authorization)
        result = await _result(handle)
        [operation_id] = (await _state(handle)).operations

    completion = Completion.model_validate(report)
    assert key in lost.json()["error"]["message"]
    assert update_id(operation_id, completion, "any", key) == update_id(
        operation_id, completion, key
    )
    assert _code(retried) == (409, "duplicate_completion")
    assert _code(late) == (409, "duplicate_completion")
    assert _code(done) == (200, None)
    assert result.status == "completed"
    assert await accepted_updates(handle) == ["complete_operation"] * 2


async def test_a_completion_sent_twice_hung_up_on_or_retried_past_its_token_is_applied_once(
    rig: Stack,
) -> None:
    async with _worker(rig):
        handle = await _export_run(rig)
        url, authorization = await _callback(rig, handle)

        async def applied() -> bool:
            operations = (await _state(handle)).operations.values()
            return all(op.status == "succeeded" for op in operations)

        await _hang_up_once(url, SUCCEEDED, {"Authorization": authorization}, applied)
        twice = await asyncio.gather(*(rig.post(url, SUCCEEDED, authorization) for _ in "ab"))
        late = await rig.post(url, SUCCEEDED, _expired(rig.tokens, authorization))
        # An expired token is refused as such whatever else is wrong with the request.
        malformed = await rig.post(url, {"status": "nonsense"}, _expired(rig.tokens, authorization))
        past = datetime.now(UTC) - timedelta(seconds=1)
        elsewhere = rig.tokens.mint(handle.id, "op_other", past).token
        misdirected = await rig.post(url, SUCCEEDED, f"Bearer {elsewhere}")
        result = await _result(handle)

    assert [_code(r) for r in twice] == [(409, "duplicate_completion")] * 2
    # Finding 9: its token has expired since; what was applied while it was valid is told so.
    assert _code(late) == (409, "duplicate_completion")
    assert _code(malformed) == (410, "token_expired")
    assert _code(misdirected) == (410, "token_expired")
    assert result.status == "completed"
    assert await accepted_updates(handle) == ["complete_operation"]
