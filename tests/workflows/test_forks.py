"""Forks on the dev server: a recorded run gone on from turn N with the same or another model, its
tools answered from the recording (never called again), by stubs, or for real once a person
approves; across continue-as-new and across a sub-agent tree."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.helpers import eventually, replays
from tests.workflows import fork_app
from waitstate.client import RunNotFound, StartFailed, WaitstateClient, thread_input
from waitstate.names import FORK_OF
from waitstate.schemas import RunInput, RunResult, RunState
from waitstate.schemas.approvals import DecideInput
from waitstate.schemas.run import CALL_MODEL, ModelCallInput

WITHIN = 60.0


async def _ran(client: WaitstateClient, run_input: RunInput) -> tuple[str, RunResult]:
    started = await client.start(run_input)
    return started.run_id, await _result(client, started.run_id)


async def _result(client: WaitstateClient, run_id: str) -> RunResult:
    handle = client._client.get_workflow_handle(run_id, result_type=RunResult)
    return await asyncio.wait_for(handle.result(), WITHIN)


async def _forked(client: WaitstateClient, run_id: str, **how: Any) -> tuple[str, RunResult]:
    fork_id, _ = await client.fork(run_id, **how)
    return fork_id, await _result(client, fork_id)


async def _model_calls(client: WaitstateClient, run_id: str) -> list[ModelCallInput]:
    """What each model call of the run (its last in a chain) was sent, in order."""
    history = await client.handle(run_id).fetch_history()
    scheduled = [
        e.activity_task_scheduled_event_attributes
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == CALL_MODEL
    ]
    converter = client._client.data_converter
    return [(await converter.decode(s.input.payloads, [ModelCallInput]))[0] for s in scheduled]


async def test_a_fork_under_recorded_goes_on_from_turn_n_and_never_calls_a_tool_again(
    shop: WaitstateClient,
) -> None:
    origin, recorded = await _ran(shop, RunInput(task="serve customer=ada", agent="shop"))
    assert recorded.status == "completed" and "r-ada-10" in (recorded.final_output or "")
    calls_before = list(fork_app.CALLED)

    for at in (0, 1, 2):
        fork_id, result = await _forked(shop, origin, at=at)
        # The same model, sent the same conversation: the same answer, from the recording.
        assert result.final_output == recorded.final_output
        assert calls_before == fork_app.CALLED  # no tool ran for real
        state: RunState = (await shop.status(fork_id)).state
        assert state.fork is not None
        assert (state.fork.origin, state.fork.at, state.fork.policy) == (
            origin,
            at,
            "recorded",
        )
        assert state.fork.recorded == 2 - at and state.fork.unavailable == []
        described = await shop.handle(fork_id).describe()
        assert described.typed_search_attributes.get(FORK_OF) == origin
        summary = await described.static_summary()
        assert summary == f"fork of {origin} at turn {at}: serve customer=ada"
        # Its first model call was sent what the recorded run's turn at + 1 was.
        recorded_calls = await _model_calls(shop, origin)
        fork_calls = await _model_calls(shop, fork_id)
        assert fork_calls[0].transcript_ref == recorded_calls[at].transcript_ref
        assert fork_calls[0].new_messages == recorded_calls[at].new_messages
    await replays(shop.handle(fork_id), "fork_recorded")


async def test_a_changed_model_is_refused_calls_the_recording_lacks_and_its_answer_differs(
    shop: WaitstateClient,
) -> None:
    origin, recorded = await _ran(shop, RunInput(task="serve customer=bo", agent="shop"))
    calls_before = list(fork_app.CALLED)
    fork_id, result = await _forked(shop, origin, at=0, model="scripted:shop-more")
    assert calls_before == fork_app.CALLED
    assert result.status == "completed" and result.final_output != recorded.final_output
    assert "unavailable" in (result.final_output or "")
    state = (await shop.status(fork_id)).state
    assert state.fork is not None
    assert state.fork.recorded == 1  # the lookup
    assert state.fork.unavailable == ['charge {"customer": "bo", "amount": 20}']


async def test_under_stub_the_tools_stub_answers_what_the_recording_lacks(
    shop: WaitstateClient,
) -> None:
    origin, _ = await _ran(shop, RunInput(task="serve customer=cy", agent="shop"))
    calls_before = list(fork_app.CALLED)
    fork_id, result = await _forked(shop, origin, model="scripted:shop-more", policy="stub")
    assert calls_before == fork_app.CALLED
    assert result.final_output is not None and result.final_output.endswith("cy: 20")
    state = (await shop.status(fork_id)).state
    assert state.fork is not None and (state.fork.recorded, state.fork.stubbed) == (1, 1)


async def test_under_live_a_call_the_recording_lacks_runs_for_real_once_approved(
    shop: WaitstateClient,
) -> None:
    origin, _ = await _ran(shop, RunInput(task="serve customer=di", agent="shop"))
    calls_before = list(fork_app.CALLED)
    fork_id, _ = await shop.fork(origin, model="scripted:shop-more", policy="live")
    requests = await eventually(lambda: shop.open_requests(fork_id), "the fork asks")
    assert calls_before == fork_app.CALLED  # nothing ran before the approval
    [request] = requests
    assert "for real" in request.reason
    await shop.decide(fork_id, DecideInput(request_id=request.request_id, decision="approve"))
    result = await _result(shop, fork_id)
    assert result.final_output is not None and result.final_output.endswith("r-di-20")
    assert [*calls_before, ("charge", "di 20")] == fork_app.CALLED
    await replays(shop.handle(fork_id), "fork_live_approved")


async def test_a_fork_reads_the_recording_across_continue_as_new(shop: WaitstateClient) -> None:
    origin, recorded = await _ran(
        shop,
        RunInput(task="serve customer=ed", agent="shop", continue_as_new_after_events=10),
    )
    assert (await shop.status(origin)).state.continued_as_new >= 1
    calls_before = list(fork_app.CALLED)
    _, recording = await shop.recording(origin, at=2)
    assert recording.turns == 3 and [c.name for c in recording.calls] == ["lookup", "charge"]
    for at in (0, 2):
        _, result = await _forked(shop, origin, at=at)
        assert result.final_output == recorded.final_output
    assert calls_before == fork_app.CALLED


async def test_a_fork_of_a_tree_reruns_each_child_as_a_fork_of_the_recorded_child(
    shop: WaitstateClient,
) -> None:
    origin, recorded = await _ran(shop, RunInput(task="serve customer=fu", agent="shop-lead"))
    assert recorded.status == "completed"
    calls_before = list(fork_app.CALLED)
    fork_id, result = await _forked(shop, origin)
    assert calls_before == fork_app.CALLED
    assert result.final_output == recorded.final_output
    for part in (1, 2):
        child = await shop.status(f"{fork_id}/shop-{part}")
        assert child.state.fork is not None
        assert child.state.fork.origin == f"{origin}/shop-{part}"
        assert child.state.fork.recorded == 2
    await replays(shop.handle(fork_id), "fork_of_a_tree")


async def test_a_fork_of_a_thread_answers_its_first_n_messages_again_and_takes_more(
    shop: WaitstateClient,
) -> None:
    start = thread_input(agent="desk")
    replies = []
    for text, key in (("customer=hu please", "a"), ("customer=hu please", "a"), ("hi", None)):
        sent = await shop.send_message("thread-fork", text, start=start, key=key)
        replies.append((await shop.reply("thread-fork", sent.accepted.message_id)).reply)
    assert replies == ["balance " + replies[0].removeprefix("balance "), replies[0], "re: hi"]
    calls_before = list(fork_app.CALLED)

    with pytest.raises(StartFailed, match="took 2 messages: a fork of it answers its first 0"):
        await shop.fork("thread-fork", at=3)
    fork_id, _ = await shop.fork("thread-fork", at=2, model="scripted:chatter-v2")
    first = await shop.reply(fork_id, "m1")
    second = await shop.reply(fork_id, "m2")
    assert first.reply == f"v2 {replies[0]}" and second.reply == "v2 re: hi"
    sent = await shop.send_message(fork_id, "customer=new")
    third = await shop.reply(fork_id, sent.accepted.message_id)
    assert third.reply is not None and third.reply.startswith("v2 balance unavailable")
    assert calls_before == fork_app.CALLED
    state = (await shop.status(fork_id)).state
    assert state.fork is not None and state.fork.recorded == 1
    assert state.thread is not None and state.thread.received == 3
    await replays(shop.handle(fork_id), "fork_of_a_thread")


async def test_a_fork_that_cannot_be_made_is_refused_and_starts_nothing(
    shop: WaitstateClient,
) -> None:
    origin, _ = await _ran(shop, RunInput(task="serve customer=gi", agent="shop"))
    with pytest.raises(StartFailed, match="took 3 model turns: a fork goes on from turn 0 to 2"):
        await shop.fork(origin, at=3)
    with pytest.raises(RunNotFound):
        await shop.fork("run-nobody")
    forks = [r async for r in shop._client.list_workflows(f"ForkOf = '{origin}'")]
    assert forks == []
