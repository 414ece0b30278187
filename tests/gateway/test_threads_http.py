"""Threads over HTTP, end to end: the real gateway app served over HTTP, the real client under it,
the dev server, and a worker serving the threads' app (its `chat-echo` model answers each message
with `re: <it> (<n> seen)`; its `held` model holds a `slow` message until the test lets it go).

An operator's key starts a thread and gets its token; the token posts to that thread and reads
it, and nothing else. Every refusal is the gateway's error shape with its code, and changes
nothing: no message is recorded, no thread is started.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from examples.systems import serving
from tests.helpers import assert_error
from tests.rigs import OPERATOR, Gateway, Stack, serving_stack
from tests.workflows import threads_app
from waitstate.apps import load_apps
from waitstate.auth.operators import OperatorKeys
from waitstate.auth.tokens import ResumeTokens, approval_subject
from waitstate.client import thread_input
from waitstate.gateway.app import create_app
from waitstate.gateway.delivery import TemporalDeliverer
from waitstate.gateway.threads import MAX_WAIT_SECONDS, MAX_WAITS_PER_THREAD, ThreadDesk
from waitstate.schemas.threads import MAX_MESSAGE_CHARS, MAX_QUEUED, ThreadSettings

APP = "tests.workflows.threads_app:app"
CHAT_MODEL = "scripted:chat-echo"
KEYS = {"k1": "thread-test-secret-0123456789abcdef0123"}
# Room for the longest message a thread takes, and not much more.
MAX_BODY = 65_536
REPLY_WITHIN = 20  # seconds a test waits for a reply: far more than one takes


@dataclass
class Threads:
    """The thread routes of the stack's gateway, as an operator and a thread's holder call
    them; `doc` is the gateway's OpenAPI document, as it serves it."""

    stack: Stack
    doc: dict[str, Any]

    async def start(
        self, body: Any, authorization: str | None = f"Bearer {OPERATOR}"
    ) -> httpx.Response:
        headers = {"Authorization": authorization} if authorization else {}
        return await self.stack.http.post("/v1/threads", json=body, headers=headers)

    async def started(self, text: str, **fields: Any) -> tuple[str, str]:
        """A new thread's id and token, started with `text`."""
        response = await self.start({"text": text, **fields})
        assert response.status_code == 201, response.text
        started = response.json()
        return started["thread_id"], started["thread_token"]

    async def post(self, thread_id: str, token: str | None, body: Any) -> httpx.Response:
        return await self.stack.http.post(
            f"/v1/threads/{thread_id}/messages", json=body, headers=_bearer(token)
        )

    async def read(self, thread_id: str, token: str | None) -> httpx.Response:
        return await self.stack.http.get(f"/v1/threads/{thread_id}", headers=_bearer(token))

    async def message(
        self, thread_id: str, token: str | None, message_id: str, wait: float | str = 0
    ) -> httpx.Response:
        return await self.stack.http.get(
            f"/v1/threads/{thread_id}/messages/{message_id}",
            params={"wait": wait},
            headers=_bearer(token),
        )

    async def reply(self, thread_id: str, token: str, message_id: str) -> dict[str, Any]:
        """The message once it has its reply."""
        response = await self.message(thread_id, token, message_id, wait=REPLY_WITHIN)
        assert response.status_code == 200, response.text
        message: dict[str, Any] = response.json()
        assert message["status"] not in ("queued", "working"), message
        return message

    async def received(self, thread_id: str) -> int:
        """How many messages the thread has taken, all time."""
        state = await self.stack.waitstate.query(thread_id)
        assert state.thread is not None
        return state.thread.received

    async def runs(self, workflow_id: str) -> int:
        """How many runs Temporal has under the id."""
        query = f'WorkflowId = "{workflow_id}"'
        return len([r async for r in self.stack.client.list_workflows(query)])

    def token(self, thread_id: str, expires_in: timedelta = timedelta(hours=1)) -> str:
        return self.stack.tokens.mint_thread(thread_id, datetime.now(UTC) + expires_in)

    def assert_documented(self, method: str, path: str, *responses: httpx.Response) -> None:
        """Each of `responses` is an answer the route `method path` documents."""
        documented = self.doc["paths"][path][method]["responses"]
        for response in responses:
            assert str(response.status_code) in documented, (path, response.text)


def _bearer(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token is not None else {}


def _code(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"]


@pytest.fixture
async def rig(dev_env: WorkflowEnvironment, task_queue: str) -> AsyncIterator[Stack]:
    async with (
        serving_stack(
            dev_env.client,
            task_queue,
            KEYS,
            "k1",
            thread_model=CHAT_MODEL,
            max_body_bytes=MAX_BODY,
            within=60,
        ) as stack,
        stack.worker(tools=[], apps=load_apps([APP])),
    ):
        yield stack


@pytest.fixture
async def threads(rig: Stack) -> Threads:
    return Threads(rig, (await rig.http.get("/openapi.json")).json())


async def test_a_conversation_of_three_messages_over_http(rig: Stack, threads: Threads) -> None:
    created = await threads.start({"text": "hello", "sender": "ana"})
    assert created.status_code == 201, created.text
    started = created.json()
    thread_id, token = started["thread_id"], started["thread_token"]
    one = await threads.reply(thread_id, token, "m1")
    posted = []
    replies = [one]
    for text in ("how are you?", "bye"):
        response = await threads.post(thread_id, token, {"text": text, "sender": "ana"})
        posted.append(response)
        replies.append(await threads.reply(thread_id, token, response.json()["message_id"]))
    view = await threads.read(thread_id, token)

    assert re.fullmatch(r"thread-[0-9a-f]{12}", thread_id)
    assert started["message"] == {
        "message_id": "m1",
        "status": "queued",
        "ahead": 0,
        "duplicate": False,
    }
    expires_at = datetime.fromisoformat(started["token_expires_at"])
    assert abs(expires_at - datetime.now(UTC) - timedelta(days=30)) < timedelta(minutes=1)
    assert rig.tokens.verify_thread(token).thread_id == thread_id
    assert [r.status_code for r in posted] == [202, 202]
    assert [r.json()["message_id"] for r in posted] == ["m2", "m3"]
    # Each reply saw the whole conversation so far.
    assert [(r["message_id"], r["status"], r["reply"]) for r in replies] == [
        ("m1", "replied", "re: hello (1 seen)"),
        ("m2", "replied", "re: how are you? (2 seen)"),
        ("m3", "replied", "re: bye (3 seen)"),
    ]
    assert {r["sender"] for r in replies} == {"ana"}
    assert view.status_code == 200, view.text
    shown = view.json()
    assert (shown["thread_id"], shown["status"], shown["error"]) == (thread_id, "waiting", None)
    assert shown["thread"]["received"] == 3
    assert [(m["message_id"], m["reply"]) for m in shown["thread"]["messages"]] == [
        ("m1", "re: hello (1 seen)"),
        ("m2", "re: how are you? (2 seen)"),
        ("m3", "re: bye (3 seen)"),
    ]
    threads.assert_documented("post", "/v1/threads", created)
    threads.assert_documented("post", "/v1/threads/{thread_id}/messages", *posted)


async def test_a_thread_token_opens_its_own_thread_only(rig: Stack, threads: Threads) -> None:
    a, a_token = await threads.started("in thread a")
    b, b_token = await threads.started("in thread b")
    await threads.reply(a, a_token, "m1")
    await threads.reply(b, b_token, "m1")
    flipped = a_token[:-2] + ("A" if a_token[-2] != "A" else "B") + a_token[-1]
    other_key = ResumeTokens({"k1": "another-secret-0123456789abcdef012345"}, "k1")
    # Credentials that are not `a`'s token, each with the refusal it gets.
    refused = [
        ("missing", None, 401, "missing_token"),
        ("b's token", b_token, 401, "wrong_thread"),
        ("forged", flipped, 401, "invalid_token"),
        ("another key's", other_key.mint_thread(a, datetime.now(UTC) + timedelta(hours=1)), 401, "invalid_token"),
        ("expired", threads.token(a, -timedelta(seconds=1)), 410, "token_expired"),
        ("a resume token", rig.tokens.mint(a, "op_1", datetime.now(UTC) + timedelta(hours=1)).token, 401, "invalid_token"),
        ("an approval link's", rig.tokens.mint(a, approval_subject("apr_1"), datetime.now(UTC) + timedelta(hours=1)).token, 401, "invalid_token"),
        ("the operator key", OPERATOR, 401, "invalid_token"),
        ("garbage", "x" * 5000, 401, "invalid_token"),
    ]  # fmt: skip
    answers = []
    for what, token, status, code in refused:
        for response in (
            await threads.post(a, token, {"text": f"from {what}"}),
            await threads.read(a, token),
            await threads.message(a, token, "m1"),
            await threads.message(a, token, "m1", wait=1),
        ):
            answers.append(response)
            assert _code(response) == (status, code), (what, response.request.url)
            assert_error(response, status, code)
            if status == 401:
                assert response.headers["www-authenticate"] == "Bearer"
    # A token in the query string is no token: it goes in the header only.
    in_query = await rig.http.post(
        f"/v1/threads/{a}/messages", params={"token": a_token}, json={"text": "hi"}
    )

    assert _code(in_query) == (401, "missing_token")
    assert _code(await threads.message(a, b_token, "m1")) == (401, "wrong_thread")
    # Nothing reached either thread; each token still opens its own.
    assert (await threads.received(a), await threads.received(b)) == (1, 1)
    assert (await threads.message(a, a_token, "m1")).json()["reply"] == "re: in thread a (1 seen)"
    assert (await threads.message(b, b_token, "m1")).json()["reply"] == "re: in thread b (1 seen)"
    for path in ("/v1/threads/{thread_id}/messages", "/v1/threads/{thread_id}"):
        method = "post" if path.endswith("messages") else "get"
        threads.assert_documented(method, path, *answers)


async def test_a_thread_token_is_no_resume_token(rig: Stack, threads: Threads) -> None:
    thread_id, token = await threads.started("hello")
    complete = await rig.http.post(
        f"/v1/operations/{thread_id}/complete",
        json={"status": "succeeded", "result": {}},
        headers=_bearer(token),
    )
    decide = await rig.http.post(
        "/v1/approvals/apr_1/decision", json={"decision": "approve"}, headers=_bearer(token)
    )
    answer = await rig.http.post(
        "/v1/questions/q_1/answer", json={"action": "decline"}, headers=_bearer(token)
    )

    for response in (complete, decide, answer):
        assert_error(response, 401, "invalid_token")
        assert "not a resume token" in response.json()["error"]["message"]
    assert await threads.received(thread_id) == 1


async def test_starting_a_thread_takes_an_operator_key(threads: Threads) -> None:
    _, token = await threads.started("a thread of the operator's")
    ids = [f"thread-refused-{n}" for n in range(5)]
    answers = [
        await threads.start({"thread_id": ids[0], "text": "hi"}, authorization=None),
        await threads.start(
            {"thread_id": ids[1], "text": "hi"}, authorization="Bearer not-the-key"
        ),
        await threads.start({"thread_id": ids[2], "text": "hi"}, authorization=f"Bearer {token}"),
        await threads.start({"thread_id": ids[3], "text": "hi"}, authorization=f"Basic {OPERATOR}"),
        await threads.start(
            {"thread_id": ids[4], "text": "hi"}, authorization=f"Bearer {OPERATOR[:-1]}"
        ),
    ]

    assert [_code(r) for r in answers] == [
        (401, "missing_operator_key"),
        (401, "invalid_operator_key"),
        (401, "invalid_operator_key"),
        (401, "missing_operator_key"),
        (401, "invalid_operator_key"),
    ]
    for response in answers:
        assert_error(response, 401)
        assert response.headers["www-authenticate"] == "Bearer"
    assert [await threads.runs(thread_id) for thread_id in ids] == [0] * len(ids)
    threads.assert_documented("post", "/v1/threads", *answers)


async def test_a_gateway_without_operator_keys_starts_no_thread(
    dev_env: WorkflowEnvironment, task_queue: str, rig: Stack, threads: Threads
) -> None:
    # The same keys, but no operator key: the thread routes of its threads still work.
    thread_id, token = await threads.started("hello")
    desk = ThreadDesk(rig.waitstate, OperatorKeys({}), default_model=CHAT_MODEL)
    app = create_app(TemporalDeliverer(dev_env.client), rig.tokens, threads=desk)
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as http:
        refused = await http.post(
            "/v1/threads",
            json={"thread_id": "thread-never", "text": "hi"},
            headers=_bearer(OPERATOR),
        )
        posted = await http.post(
            f"/v1/threads/{thread_id}/messages",
            json={"text": "still here?"},
            headers=_bearer(token),
        )

    assert_error(refused, 404, "threads_disabled")
    assert "WAITSTATE_OPERATOR_KEYS" in refused.json()["error"]["message"]
    assert await threads.runs("thread-never") == 0
    assert (posted.status_code, posted.json()["message_id"]) == (202, "m2")


async def test_a_gateway_without_threads_answers_404_on_every_thread_route(gw: Gateway) -> None:
    token = gw.tokens.mint_thread("thread-1", datetime.now(UTC) + timedelta(hours=1))
    answers = [
        await gw.client.post("/v1/threads", json={"text": "hi"}, headers=_bearer(OPERATOR)),
        await gw.client.post("/v1/threads/thread-1/messages", json={"text": "hi"}),
        await gw.client.get("/v1/threads/thread-1", headers=_bearer(token)),
        await gw.client.get("/v1/threads/thread-1/messages/m1", headers=_bearer(token)),
    ]

    for response in answers:
        assert_error(response, 404, "threads_disabled")


async def test_a_closed_thread_refuses_a_message_with_410_and_is_still_read(
    rig: Stack, threads: Threads
) -> None:
    thread_id = f"thread-closing-{uuid.uuid4().hex[:8]}"
    start = thread_input(
        model=CHAT_MODEL, settings=ThreadSettings(close_after=timedelta(seconds=1))
    )
    sent = await rig.waitstate.send_message(thread_id, "hello", start=start)
    await rig.waitstate.reply(thread_id, sent.accepted.message_id)
    await asyncio.wait_for(rig.waitstate.handle(thread_id).result(), 30)
    token = threads.token(thread_id)

    posted = await threads.post(thread_id, token, {"text": "anyone there?"})
    again = await threads.start({"thread_id": thread_id, "text": "a new start?"})
    view = await threads.read(thread_id, token)
    message = await threads.message(thread_id, token, "m1", wait=5)

    assert_error(posted, 410, "thread_closed")
    assert_error(again, 409, "thread_exists")
    assert view.status_code == 200 and view.json()["status"] == "completed"
    assert view.json()["thread"]["received"] == 1
    assert message.json()["reply"] == "re: hello (1 seen)"
    assert await threads.runs(thread_id) == 1  # nothing started under the id again
    threads.assert_documented("post", "/v1/threads/{thread_id}/messages", posted)
    threads.assert_documented("post", "/v1/threads", again)


async def test_malformed_and_oversize_bodies_are_refused_and_change_nothing(
    rig: Stack, threads: Threads
) -> None:
    thread_id, token = await threads.started("hello")
    await threads.reply(thread_id, token, "m1")
    too_long = "x" * (MAX_MESSAGE_CHARS + 1)
    bad_messages: list[tuple[Any, str]] = [
        (b"not json", "invalid_json"),
        (b'{"text": "cut', "invalid_json"),
        ({}, "invalid_message"),
        ([], "invalid_message"),
        ({"text": ""}, "invalid_message"),
        ({"text": " \n\t"}, "invalid_message"),
        ({"text": 42}, "invalid_message"),
        ({"text": too_long}, "invalid_message"),
        ({"text": "hi", "key": "k" * 129}, "invalid_message"),
        ({"text": "hi", "key": ""}, "invalid_message"),
        ({"text": "hi", "sender": "s" * 201}, "invalid_message"),
        ({"text": "hi", "model": "openai:gpt-4.1"}, "invalid_message"),
        (b'{"text": "hi", "key": NaN}', "non_finite_number"),
    ]
    answers = []
    for body, code in bad_messages:
        if isinstance(body, bytes):
            response = await rig.http.post(
                f"/v1/threads/{thread_id}/messages", content=body, headers=_bearer(token)
            )
        else:
            response = await threads.post(thread_id, token, body)
        answers.append(response)
        assert _code(response) == (422, code), (
            body if len(str(body)) < 100 else "long",
            response.text,
        )
    oversize = await rig.http.post(
        f"/v1/threads/{thread_id}/messages",
        content=b'{"text": "' + b"x" * MAX_BODY + b'"}',
        headers=_bearer(token),
    )
    bad_starts = [
        {"text": "hi", "thread_id": "../etc"},
        {"text": "hi", "thread_id": "a/b"},
        {"text": "hi", "thread_id": "t" * 129},
        {"text": "hi", "thread_id": ""},
        {"text": "hi", "agent": "bad\nagent"},
        {"text": "hi", "agent": ""},
        {"text": too_long, "thread_id": "thread-too-long"},
        {"thread_id": "thread-no-text"},
        {"text": "hi", "thread_id": "thread-extra", "model": "openai:gpt-4.1"},
    ]
    starts = [await threads.start(body) for body in bad_starts]
    waits = [
        await threads.message(thread_id, token, "m1", wait=w) for w in ("31", "-1", "nan", "x")
    ]

    assert_error(oversize, 413, "body_too_large")
    assert [_code(r) for r in starts] == [(422, "invalid_thread")] * len(bad_starts)
    assert [_code(r) for r in waits] == [(422, "invalid_request")] * len(waits)
    assert await threads.received(thread_id) == 1
    for name in ("thread-too-long", "thread-no-text", "thread-extra", "t" * 129):
        assert await threads.runs(name) == 0
    threads.assert_documented("post", "/v1/threads/{thread_id}/messages", *answers, oversize)
    threads.assert_documented("post", "/v1/threads", *starts)
    threads.assert_documented("get", "/v1/threads/{thread_id}/messages/{message_id}", *waits)


async def test_the_longest_message_is_taken(threads: Threads) -> None:
    thread_id, token = await threads.started("hello")
    longest = "y" * MAX_MESSAGE_CHARS
    posted = await threads.post(thread_id, token, {"text": longest})

    assert posted.status_code == 202, posted.text
    reply = await threads.reply(thread_id, token, posted.json()["message_id"])
    assert reply["reply"] == f"re: {longest} (2 seen)"


async def test_an_idempotency_key_makes_one_message(threads: Threads) -> None:
    thread_id = f"thread-keyed-{uuid.uuid4().hex[:8]}"
    body = {"thread_id": thread_id, "text": "start", "key": "start-1"}
    first = await threads.start(body)
    retried = await threads.start(body)  # the same start again, e.g. after a lost answer
    other_key = await threads.start({**body, "key": "start-2"})
    no_key = await threads.start({"thread_id": thread_id, "text": "start"})
    token = first.json()["thread_token"]
    await threads.reply(thread_id, token, "m1")
    sent = [
        await threads.post(thread_id, token, {"text": "once", "key": "k-1"}),
        await threads.post(
            thread_id, retried.json()["thread_token"], {"text": "once", "key": "k-1"}
        ),
    ]
    concurrent = await asyncio.gather(
        *(threads.post(thread_id, token, {"text": "twice", "key": "k-2"}) for _ in range(3))
    )
    await threads.reply(thread_id, token, concurrent[0].json()["message_id"])
    view = (await threads.read(thread_id, token)).json()

    assert (first.status_code, retried.status_code) == (201, 201)
    assert first.json()["message"]["duplicate"] is False
    assert retried.json()["message"]["message_id"] == "m1"
    assert retried.json()["message"]["duplicate"] is True
    assert_error(other_key, 409, "thread_exists")
    assert_error(no_key, 409, "thread_exists")
    assert [(r.status_code, r.json()["message_id"]) for r in sent] == [(202, "m2"), (202, "m2")]
    assert [r.json()["duplicate"] for r in sent] == [False, True]
    assert {r.json()["message_id"] for r in concurrent} == {"m3"}
    assert sorted(r.json()["duplicate"] for r in concurrent) == [False, True, True]
    assert view["thread"]["received"] == 3
    assert [m["text"] for m in view["thread"]["messages"]] == ["start", "once", "twice"]


async def test_starts_of_one_new_thread_at_once_start_it_once(threads: Threads) -> None:
    """Each start finds no thread when it looks; the thread itself takes the first to reach it
    and refuses the others, `thread_exists`: one thread, one message, one token."""
    thread_id = f"thread-race-{uuid.uuid4().hex[:8]}"
    starts = await asyncio.gather(
        *(
            threads.start({"thread_id": thread_id, "text": f"start {n}", "key": f"k{n}"})
            for n in range(4)
        )
    )
    [started] = [r for r in starts if r.status_code == 201]
    token = started.json()["thread_token"]
    await threads.reply(thread_id, token, "m1")
    view = (await threads.read(thread_id, token)).json()

    for refused in (r for r in starts if r is not started):
        assert_error(refused, 409, "thread_exists")
    assert started.json()["message"]["message_id"] == "m1"
    assert view["thread"]["received"] == 1
    assert await threads.runs(thread_id) == 1


async def test_an_operator_renews_a_threads_token(rig: Stack, threads: Threads) -> None:
    """A thread outlives its tokens: an operator key gets a fresh one for an open thread; a
    thread token renews nothing; an id no thread has gets none."""
    thread_id, token = await threads.started("hello")
    renewed = await rig.http.post(
        f"/v1/threads/{thread_id}/token", headers={"Authorization": f"Bearer {OPERATOR}"}
    )
    by_token = await rig.http.post(
        f"/v1/threads/{thread_id}/token", headers={"Authorization": f"Bearer {token}"}
    )
    unknown = await rig.http.post(
        "/v1/threads/thread-nobody/token", headers={"Authorization": f"Bearer {OPERATOR}"}
    )
    fresh = renewed.json()["thread_token"]
    posted = await threads.post(thread_id, fresh, {"text": "with the fresh token"})
    still = await threads.post(thread_id, token, {"text": "with the first token"})

    assert renewed.status_code == 201, renewed.text
    assert renewed.json()["thread_id"] == thread_id and fresh != token
    assert datetime.fromisoformat(renewed.json()["token_expires_at"]) > datetime.now(UTC)
    assert (posted.status_code, still.status_code) == (202, 202)
    assert_error(by_token, 401, "invalid_operator_key")
    assert_error(unknown, 404, "unknown_thread")


async def test_a_thread_token_never_starts_a_thread(threads: Threads) -> None:
    # A valid token for an id no run has (never started, or gone past retention).
    token = threads.token("thread-nobody")
    posted = await threads.post("thread-nobody", token, {"text": "hello?"})
    view = await threads.read("thread-nobody", token)
    message = await threads.message("thread-nobody", token, "m1", wait=1)

    for response in (posted, view, message):
        assert_error(response, 404, "unknown_thread")
    assert await threads.runs("thread-nobody") == 0
    thread_id, token = await threads.started("hello")
    assert_error(await threads.message(thread_id, token, "m9"), 404, "unknown_message")


async def test_a_wait_ends_with_the_wait_and_a_failed_thread_ends_it_at_once(
    rig: Stack, threads: Threads
) -> None:
    thread_id = f"thread-held-{uuid.uuid4().hex[:8]}"
    threads_app.RELEASE.clear()
    try:
        sent = await rig.waitstate.send_message(
            thread_id, "slow, please", start=thread_input(model="held:any")
        )
        token = threads.token(thread_id)
        loop = asyncio.get_running_loop()
        began = loop.time()
        waited = await threads.message(thread_id, token, sent.accepted.message_id, wait=1.5)
        took = loop.time() - began
        # More waits at once than a thread allows: one too many is refused.
        many = await asyncio.gather(
            *(
                threads.message(thread_id, token, "m1", wait=2)
                for _ in range(MAX_WAITS_PER_THREAD + 1)
            )
        )
    finally:
        threads_app.RELEASE.set()
    replied = await threads.reply(thread_id, token, "m1")
    # A thread of an agent no worker knows fails at once: a wait for its reply ends with it.
    failing, failing_token = await threads.started("hello", agent="nobody")
    began = loop.time()
    never = await threads.message(failing, failing_token, "m1", wait=MAX_WAIT_SECONDS)
    ended_after = loop.time() - began
    failed = await threads.read(failing, failing_token)

    assert waited.status_code == 200 and waited.json()["status"] in ("queued", "working")
    # The wait lasted its wait, the message unanswered (a lower bound: load only lengthens it).
    assert took >= 1.5
    assert sorted(r.status_code for r in many) == [200] * MAX_WAITS_PER_THREAD + [429]
    assert_error(next(r for r in many if r.status_code == 429), 429, "too_many_waits")
    assert replied["reply"] == "re: slow, please (1 seen)"
    assert never.status_code == 200 and never.json()["status"] == "queued"
    # Ended with the thread, before its wait was up: the whole wait is the margin, not a
    # figure of how fast.
    assert ended_after < MAX_WAIT_SECONDS
    assert failed.json()["status"] == "failed"
    assert "nobody" in failed.json()["error"]
    threads.assert_documented("get", "/v1/threads/{thread_id}/messages/{message_id}", *many)


async def test_a_busy_or_full_thread_refuses_a_message_saying_why(
    rig: Stack, threads: Threads
) -> None:
    rejecting = f"thread-rejecting-{uuid.uuid4().hex[:8]}"
    queueing = f"thread-queueing-{uuid.uuid4().hex[:8]}"
    threads_app.RELEASE.clear()
    try:
        for thread_id, busy in ((rejecting, "reject"), (queueing, "queue")):
            start = thread_input(model="held:any", settings=ThreadSettings(busy=busy))
            await rig.waitstate.send_message(thread_id, "slow, please", start=start)
        rejecting_token = threads.token(rejecting)
        queueing_token = threads.token(queueing)
        busy_answer = await threads.post(rejecting, rejecting_token, {"text": "and now?"})
        queued = [
            await threads.post(queueing, queueing_token, {"text": f"message {n}"})
            for n in range(MAX_QUEUED)
        ]
        full_answer = await threads.post(queueing, queueing_token, {"text": "one too many"})
        received = (await threads.received(rejecting), await threads.received(queueing))
    finally:
        threads_app.RELEASE.set()

    assert_error(busy_answer, 409, "thread_busy")
    assert "reject" in busy_answer.json()["error"]["message"]
    assert {r.status_code for r in queued} == {202}
    assert_error(full_answer, 429, "thread_full")
    assert received == (1, 1 + MAX_QUEUED)
    threads.assert_documented("post", "/v1/threads/{thread_id}/messages", busy_answer, full_answer)
