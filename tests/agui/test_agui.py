"""Agents over AG-UI, end to end: the gateway app over real HTTP with its thread and event desks,
the dev server, a worker serving the refunds agent (its refund over the threshold waits for a
person), and the demo systems.

A run streams its AG-UI events and ends with the interrupt its approval is; a run that resumes
it applies the decision once and ends with the answer; a resume of an interrupt another run
resumed already is told so and applies nothing; a reader that lost its connection comes back
after the last event it had and gets the rest, none twice; and bad input is refused before
anything reaches the thread.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.agui.conftest import WITHIN
from tests.rigs import OPERATOR, REFUND_TASK, Stack, bearer, sse_fields
from tests.workflows.threads_app import RELEASE
from waitstate.schemas import RunInput

URL = "/agui/agents/refunder"


@dataclass(frozen=True)
class Told:
    """One AG-UI event as a reader gets it, with the SSE id it came with ("" if none)."""

    id: str
    data: dict[str, Any]

    @property
    def type(self) -> str:
        return str(self.data["type"])


def run_input(thread: str, run: str, **fields: Any) -> dict[str, Any]:
    messages = fields.pop("messages", [{"id": "m1", "role": "user", "content": REFUND_TASK}])
    return {"threadId": thread, "runId": run, "messages": messages, **fields}


def approve(thread: str, interrupt: str, run: str | None = None) -> dict[str, Any]:
    resume = [{"interruptId": interrupt, "status": "resolved", "payload": {"decision": "approve"}}]
    return run_input(thread, run or f"run-{uuid.uuid4().hex[:8]}", resume=resume)


async def read_events(
    lines: AsyncIterator[str], until: Callable[[Told], bool] | None = None
) -> list[Told]:
    """The AG-UI events of a streaming response's `lines`, to its end or the first `until` is
    true of (read again for the events after it)."""
    told: list[Told] = []
    async for fields in sse_fields(lines):
        told.append(Told(fields.get("id", ""), json.loads(fields["data"])))
        if until is not None and until(told[-1]):
            return told
    return told


async def run(rig: Stack, body: dict[str, Any], **headers: str) -> list[Told]:
    """POST `body`, and the run's AG-UI events to its end."""
    sent = {**bearer(OPERATOR), **headers}
    async with (
        asyncio.timeout(WITHIN),
        rig.http.stream("POST", URL, json=body, headers=sent) as response,
    ):
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        return await read_events(response.aiter_lines())


def types(events: list[Told]) -> list[str]:
    return [e.type for e in events]


def finished(events: list[Told]) -> dict[str, Any]:
    assert events[-1].type == "RUN_FINISHED", types(events)
    return events[-1].data


async def decisions(rig: Stack, thread: str) -> list[str]:
    """The decisions the thread's approval requests recorded."""
    state = await rig.waitstate.query(thread)
    return [r.decision.decision for r in state.approvals.values() if r.decision is not None]


async def test_a_run_pauses_on_its_approval_and_a_resume_finishes_it(rig: Stack) -> None:
    thread = f"agui-{uuid.uuid4().hex[:8]}"
    first = await run(rig, run_input(thread, "run-1"))
    kinds = types(first)
    assert kinds[0] == "RUN_STARTED" and first[0].data["threadId"] == thread
    assert first[0].data["runId"] == "run-1"
    assert {"STEP_STARTED", "STEP_FINISHED", "TOOL_CALL_START", "TOOL_CALL_ARGS"} <= set(kinds)
    assert {"TOOL_CALL_END", "TOOL_CALL_RESULT", "STATE_SNAPSHOT"} <= set(kinds)
    calls = {
        e.data["toolCallId"]: e.data["toolCallName"] for e in first if e.type == "TOOL_CALL_START"
    }
    assert sorted(calls.values()) == ["check_claim", "issue_refund"]
    args = {
        e.data["toolCallId"]: json.loads(e.data["delta"])
        for e in first
        if e.type == "TOOL_CALL_ARGS"
    }
    refund_call = next(i for i, name in calls.items() if name == "issue_refund")
    assert args[refund_call] == {"claim_id": "C-118", "amount": 420}
    # The claim's check has its result; the refund waits for a person: no result.
    results = {e.data["toolCallId"] for e in first if e.type == "TOOL_CALL_RESULT"}
    assert refund_call not in results and len(results) == 1
    outcome = finished(first)["outcome"]
    assert outcome["type"] == "interrupt"
    [interrupt] = outcome["interrupts"]
    assert interrupt["id"].startswith("approval:") and interrupt["reason"] == "approval"
    assert interrupt["toolCallId"] == refund_call
    snapshot = next(e for e in first if e.type == "STATE_SNAPSHOT").data["snapshot"]
    assert snapshot["approvals"] == [interrupt["id"].removeprefix("approval:")]

    second = await run(rig, approve(thread, interrupt["id"], "run-2"))
    assert second[0].data["runId"] == "run-2"
    done = finished(second)
    assert done["outcome"] == {"type": "success"}
    assert "R-" in done["result"] or "refund" in done["result"].lower()
    texts = [e.data["delta"] for e in second if e.type == "TEXT_MESSAGE_CONTENT"]
    assert texts and texts[-1] == done["result"]
    assert [e.data["toolCallId"] for e in second if e.type == "TOOL_CALL_RESULT"] == [refund_call]
    assert await decisions(rig, thread) == ["approve"]
    # The resume's run, followed again by its id alone, is told the same; nothing is sent.
    again = await run(rig, run_input(thread, "run-2", messages=[]))
    assert [e.id for e in again if e.id] == [e.id for e in second if e.id]
    assert finished(again)["result"] == done["result"]
    assert await decisions(rig, thread) == ["approve"]
    keys = (await rig.stats())["refund_keys"]
    assert [k["requests"] for k in keys.values()] == [1]  # the refund tool ran once

    # The thread's next message is its next run, which ends with that message's answer.
    asked = [
        {"id": "m1", "role": "user", "content": REFUND_TASK},
        {"id": "a1", "role": "assistant", "content": done["result"]},
        {"id": "m2", "role": "user", "content": "What is 17 * 23?"},
    ]
    third = await run(rig, run_input(thread, "run-3", messages=asked))
    # Its one model turn, and nothing of the earlier runs (the refund is not told again).
    assert types(third).count("STEP_STARTED") == 1
    assert not [e for e in third if e.type == "TOOL_CALL_RESULT"]
    state = await rig.waitstate.query(thread)
    assert state.thread is not None and state.thread.received == 2
    second_message = state.thread.messages[-1]
    assert second_message.status == "replied" and second_message.turns_before > 0
    assert finished(third)["result"] == second_message.reply


async def test_a_reader_that_lost_its_connection_gets_what_it_missed_once(rig: Stack) -> None:
    thread = f"agui-{uuid.uuid4().hex[:8]}"
    body = run_input(thread, "run-1")
    headers = bearer(OPERATOR)
    # The first connection is dropped once it had the model's first turn (its tool call).
    async with (
        asyncio.timeout(WITHIN),
        rig.http.stream("POST", URL, json=body, headers=headers) as response,
    ):
        assert response.status_code == 200
        before = await read_events(
            response.aiter_lines(), lambda e: e.type == "STEP_FINISHED" and e.id != ""
        )
    last = [e.id for e in before if e.id][-1]
    # The same input again, after the last event it had: the message is not sent twice.
    after = await run(rig, body, **{"Last-Event-ID": last})
    # And once more from the start, to compare: the whole run as one reader gets it.
    whole = await run(rig, body)

    assert after[0].type == "RUN_STARTED" and finished(after)["outcome"]["type"] == "interrupt"
    ids_before = [e.id for e in before if e.id]
    ids_after = [e.id for e in after if e.id]
    assert not set(ids_before) & set(ids_after)  # none twice
    assert ids_before + ids_after == [e.id for e in whole if e.id]  # none missed
    # What the calls and the text were, split across the two connections, is the whole.
    shown = ("TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT")
    assert [e.data for e in before + after if e.type in shown] == [
        e.data for e in whole if e.type in shown
    ]
    state = await rig.waitstate.query(thread)
    assert state.thread is not None and state.thread.received == 1  # one message, sent once
    # A client that knows only the thread and the run (no messages) follows it again too.
    followed = await run(rig, run_input(thread, "run-1", messages=[]))
    assert [e.id for e in followed if e.id] == [e.id for e in whole if e.id]
    # A reader that had the run's end is told there is nothing more to come.
    end = [e.id for e in whole if e.id][-1]
    again = await rig.http.post(URL, json=body, headers={**headers, "Last-Event-ID": end})
    assert again.status_code == 204


async def test_a_task_run_is_followed_and_resumed(rig: Stack) -> None:
    started = await rig.waitstate.start(RunInput(task=REFUND_TASK, agent="refunder"))
    run_id = started.run_id
    paused = await run(rig, run_input(run_id, "run-1", messages=[]))
    assert paused[0].type == "RUN_STARTED" and paused[0].data["threadId"] == run_id
    [interrupt] = finished(paused)["outcome"]["interrupts"]
    # A task run takes no message.
    response = await rig.http.post(URL, json=run_input(run_id, "run-2"), headers=bearer(OPERATOR))
    assert response.status_code == 409 and response.json()["error"]["code"] == "not_a_thread"
    done = finished(await run(rig, approve(run_id, interrupt["id"])))
    assert done["outcome"] == {"type": "success"} and "C-118" in done["result"]
    assert await decisions(rig, run_id) == ["approve"]


async def test_the_models_text_comes_as_it_is_written(rig: Stack) -> None:
    RELEASE.clear()
    thread = f"agui-{uuid.uuid4().hex[:8]}"
    body = run_input(thread, "run-1", messages=[{"id": "m1", "role": "user", "content": "slow hi"}])
    token = rig.tokens.mint_publish(thread, datetime.now(UTC) + timedelta(hours=1))
    async with (
        asyncio.timeout(WITHIN),
        rig.http.stream(
            "POST", "/agui/agents/holder", json=body, headers=bearer(OPERATOR)
        ) as response,
    ):
        assert response.status_code == 200
        lines = response.aiter_lines()
        began = await read_events(lines, lambda e: e.type == "STEP_STARTED")
        # The model's call is in flight: its worker hands the gateway its text as it writes it.
        for piece in ("re: slow", " hi"):
            delta = {"call": "call-1.1", "text": piece}
            posted = await rig.http.post(
                f"/v1/runs/{thread}/deltas", json=delta, headers=bearer(token)
            )
            assert posted.status_code == 202
        written = await read_events(lines, lambda e: e.data.get("delta") == " hi")
        RELEASE.set()
        rest = await read_events(lines)
    assert types(began) == ["RUN_STARTED", "STEP_STARTED"]
    assert types(written) == ["TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_CONTENT"]
    assert all(e.id == "" for e in written)  # of the moment: never resumed after
    message = written[0].data["messageId"]
    # The call's end ends the message: its text is not told again.
    assert types(rest)[:2] == ["TEXT_MESSAGE_END", "STEP_FINISHED"]
    assert rest[0].data["messageId"] == message
    assert "TEXT_MESSAGE_START" not in types(rest)
    assert finished(rest)["result"] == "re: slow hi (1 seen)"


async def test_the_apps_context_reaches_the_model_with_the_message(rig: Stack) -> None:
    thread = f"agui-{uuid.uuid4().hex[:8]}"
    context = [{"description": "the page open", "value": "claims/C-118"}]
    message = {"id": "m1", "role": "user", "content": "which claim is this?"}
    body = run_input(thread, "run-1", messages=[message], context=context)
    async with (
        asyncio.timeout(WITHIN),
        rig.http.stream(
            "POST", "/agui/agents/holder", json=body, headers=bearer(OPERATOR)
        ) as response,
    ):
        assert response.status_code == 200
        told = await read_events(response.aiter_lines())
    # The model (it answers with what it was sent) read the message, then the context.
    assert finished(told)["result"] == (
        "re: which claim is this?\n\nContext from the app:\n- the page open: claims/C-118 (1 seen)"
    )


async def test_a_question_is_an_interrupt_its_answer_resumes(rig: Stack) -> None:
    thread = f"agui-{uuid.uuid4().hex[:8]}"
    url = "/agui/agents/asker"
    body = run_input(thread, "run-1", messages=[{"id": "m1", "role": "user", "content": "go"}])
    async with rig.http.stream("POST", url, json=body, headers=bearer(OPERATOR)) as response:
        paused = await read_events(response.aiter_lines())
    [interrupt] = finished(paused)["outcome"]["interrupts"]
    assert interrupt["id"].startswith("question:") and interrupt["reason"] == "input"
    assert interrupt["responseSchema"]["required"] == ["region"]
    assert "Which region?" in interrupt["message"]

    def answer(payload: Any, run: str) -> dict[str, Any]:
        entry = {"interruptId": interrupt["id"], "status": "resolved", "payload": payload}
        return run_input(thread, run, resume=[entry])

    # An answer that does not fit the question is refused by the run, and changes nothing.
    wrong = await rig.http.post(
        url, json=answer({"region": "MARS"}, "run-2"), headers=bearer(OPERATOR)
    )
    assert wrong.status_code == 422 and wrong.json()["error"]["code"] == "invalid_answer"
    [still] = (await rig.waitstate.query(thread)).questions.values()
    assert still.open and still.answer is None
    async with rig.http.stream(
        "POST", url, json=answer({"region": "EMEA"}, "run-3"), headers=bearer(OPERATOR)
    ) as response:
        assert response.status_code == 200
        done = await read_events(response.aiter_lines())
    assert finished(done)["result"] == "done: the job has its region"
    # The same answer again by another run: applied once already.
    again = await rig.http.post(
        url, json=answer({"region": "EMEA"}, "run-4"), headers=bearer(OPERATOR)
    )
    assert again.status_code == 409 and again.json()["error"]["code"] == "duplicate_answer"
    state = await rig.waitstate.query(thread)
    [question] = state.questions.values()
    assert question.status == "answered"
