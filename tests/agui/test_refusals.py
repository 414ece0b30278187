"""What the AG-UI endpoint refuses, over real HTTP, before anything reaches a thread: each
refusal is the gateway's error shape with its code, and the thread is as it was (never started,
or its history not one event longer)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.agui.test_agui import URL, approve, run, run_input
from tests.rigs import OPERATOR, Stack, bearer, running_gateway
from waitstate.client import RunNotFound

MESSAGE = [{"id": "m1", "role": "user", "content": "hello"}]


def _thread() -> str:
    return f"agui-{uuid.uuid4().hex[:8]}"


async def _refused(rig: Stack, body: Any, status: int, code: str, **headers: str) -> None:
    sent = {**bearer(OPERATOR), **headers}
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = await rig.http.post(URL, content=content, headers=sent)
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code


async def _never_started(rig: Stack, thread: str) -> None:
    with pytest.raises(RunNotFound):
        await rig.waitstate.describe(thread)


BAD_INPUTS: list[tuple[str, Any]] = [
    ("not json", b"{not json"),
    ("no runId", {"threadId": "t1", "messages": MESSAGE}),
    ("a thread id with a slash", run_input("a/b", "r1", messages=MESSAGE)),
    ("a run id too long", run_input("t1", "r" * 129, messages=MESSAGE)),
    ("an empty message", run_input("t1", "r1", messages=[
        {"id": "m1", "role": "user", "content": "  "}])),
    ("a message too long", run_input("t1", "r1", messages=[
        {"id": "m1", "role": "user", "content": "x" * 32_001}])),
    ("too many messages", run_input("t1", "r1", messages=MESSAGE * 501)),
    ("an unknown interrupt", run_input("t1", "r1", resume=[
        {"interruptId": "other:1", "status": "resolved", "payload": {}}])),
    ("a decision that is none", run_input("t1", "r1", resume=[
        {"interruptId": "approval:a1", "status": "resolved", "payload": {"decision": "maybe"}}])),
    ("a payload too large", run_input("t1", "r1", resume=[
        {"interruptId": "approval:a1", "status": "resolved",
         "payload": {"decision": "approve", "comment": "x" * 20_000}}])),
    ("too many resume entries", run_input("t1", "r1", resume=[
        {"interruptId": f"approval:a{i}", "status": "cancelled"} for i in range(17)])),
    ("one interrupt twice", run_input("t1", "r1", resume=[
        {"interruptId": "approval:a1", "status": "cancelled"}] * 2)),
]  # fmt: skip


@pytest.mark.parametrize(("what", "body"), BAD_INPUTS, ids=[what for what, _ in BAD_INPUTS])
async def test_bad_input_is_refused_and_starts_nothing(rig: Stack, what: str, body: Any) -> None:
    thread = _thread()
    if isinstance(body, dict) and body.get("threadId") == "t1":
        body["threadId"] = thread
    await _refused(rig, body, 422, "invalid_input")
    await _never_started(rig, thread)


async def test_credentials_are_checked_before_anything_is_sent(rig: Stack) -> None:
    thread = _thread()
    body = run_input(thread, "r1", messages=MESSAGE)
    response = await rig.http.post(URL, json=body)
    assert response.status_code == 401 and response.json()["error"]["code"] == "missing_token"
    await _refused(rig, body, 401, "invalid_token", Authorization="Bearer not-a-token")
    # A thread's token talks in its thread only.
    other = rig.tokens.mint_thread("another", datetime.now(UTC) + timedelta(hours=1))
    await _refused(rig, body, 401, "wrong_thread", Authorization=f"Bearer {other}")
    await _never_started(rig, thread)
    # Its own thread's token is taken: it talks, and sees what the run waits on.
    mine = rig.tokens.mint_thread(thread, datetime.now(UTC) + timedelta(hours=1))
    told = await run(rig, body, Authorization=f"Bearer {mine}")
    assert told[-1].type == "RUN_FINISHED"
    length = (await rig.waitstate.describe(thread)).history_length
    # It does not decide: the person talking is not who approves.
    resume = approve(thread, "approval:any")
    await _refused(rig, resume, 403, "decision_not_allowed", Authorization=f"Bearer {mine}")
    assert (await rig.waitstate.describe(thread)).history_length == length


async def test_a_thread_is_one_agents_and_a_resume_needs_its_thread(rig: Stack) -> None:
    thread = _thread()
    await run(rig, run_input(thread, "r1", messages=MESSAGE))
    length = (await rig.waitstate.describe(thread)).history_length
    body = run_input(
        thread, "r2", messages=[*MESSAGE, {"id": "m2", "role": "user", "content": "x"}]
    )
    response = await rig.http.post("/agui/agents/other", json=body, headers=bearer(OPERATOR))
    assert response.status_code == 409 and response.json()["error"]["code"] == "wrong_agent"
    assert (await rig.waitstate.describe(thread)).history_length == length
    # An input with no new message and no resume follows a run of the thread: none has this id.
    for messages in ([], [*MESSAGE, {"id": "a1", "role": "assistant", "content": "hi"}]):
        await _refused(rig, run_input(thread, "r3", messages=messages), 404, "unknown_run")
    assert (await rig.waitstate.describe(thread)).history_length == length
    # A resume of a thread that never ran, or no message to one.
    unknown = _thread()
    await _refused(rig, approve(unknown, "approval:a1"), 404, "unknown_thread")
    await _refused(rig, run_input(unknown, "r1", messages=[]), 404, "unknown_thread")
    await _never_started(rig, unknown)


async def test_a_body_over_the_limit_is_refused_unread(rig: Stack) -> None:
    body = run_input(_thread(), "r1", messages=[
        {"id": "m1", "role": "user", "content": "x" * 2_000_000}])  # fmt: skip
    await _refused(rig, body, 413, "body_too_large")


async def test_a_gateway_without_desks_serves_no_agui() -> None:
    async with running_gateway() as gateway:
        response = await gateway.client.post(
            URL, json=run_input("t1", "r1", messages=MESSAGE), headers=bearer(OPERATOR)
        )
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "agui_disabled"
