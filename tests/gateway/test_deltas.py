"""A model's text as it is written, end to end: the real gateway app served over HTTP with its
event desk, the dev server, a worker with the production wiring (the gateway's URL and the
token keys in its settings), and an `openai:` model answered by the local wire server, which
streams.

A reader of the run's stream gets the answer's text in `model.delta` events without ids, before
the call's `model.ended`; nothing of it goes into the run's history; and only the worker's
publish token for that very run gets a delta to the readers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from tests.rigs import OPERATOR, EventReader, Stack, bearer, serving_stack
from waitstate.auth.tokens import ResumeTokens
from waitstate.testing.wire_server import WireServer, delayed, openai_text
from waitstate.workflows.agent_run import AgentRunWorkflow

KEYS = {"deltas": "d" * 40}
OPERATOR_AUTH = bearer(OPERATOR)
TASK = "Reconcile the ledger."
WITHIN = 60.0  # far more than a run takes: only turns a hang into a failure
ANSWER = "Quarterly ledger reconciled; seventeen invoices matched, two await a signature."
# The wire server answers that late: the test's reader is on the run's stream by then.
ANSWER_DELAY = 1.5


@pytest.fixture
async def rig(dev_env: WorkflowEnvironment, task_queue: str) -> AsyncIterator[Stack]:
    async with serving_stack(
        dev_env.client, task_queue, KEYS, "deltas", events=True, within=WITHIN
    ) as stack:
        yield stack


def _worker(rig: Stack, wire: WireServer) -> AbstractAsyncContextManager[Worker]:
    """The stack's worker, its `openai:` models answered by `wire`, their text streamed to the
    gateway."""
    return rig.worker(
        tools=[], openai_base_url=wire.openai_base_url, openai_api_key="test", model_deltas=True
    )


async def _start(rig: Stack, model: str) -> str:
    """Start a run on the `openai:` `model`: its id."""
    return (await rig.start(TASK, [], model=f"openai:{model}")).id


async def _post_delta(
    rig: Stack, run_id: str, token: str | None, body: Any = None, **options: Any
) -> httpx.Response:
    headers = bearer(token) if token is not None else {}
    if "content" not in options:
        options["json"] = body or {"turn": 1, "call": "probe", "text": "probe"}
    return await rig.http.post(f"/v1/runs/{run_id}/deltas", headers=headers, **options)


def _in_an_hour() -> datetime:
    return datetime.now(UTC) + timedelta(hours=1)


async def test_a_reader_gets_the_answer_as_it_is_written_and_history_keeps_none_of_it(
    rig: Stack, wire: WireServer
) -> None:
    wire.enqueue_for("gpt-stream", delayed(ANSWER_DELAY, openai_text(ANSWER)))
    async with _worker(rig, wire):
        run_id = await _start(rig, "gpt-stream")
        async with rig.events(f"/v1/runs/{run_id}/events", headers=OPERATOR_AUTH) as response:
            assert response.status_code == 200, await response.aread()
            reader = EventReader(response, WITHIN)
            # On the stream: the run's feed hands this reader what is published from now on.
            events = await reader.take(lambda e: e.kind == "run.started")
            events += await reader.take()
        handle = rig.client.get_workflow_handle_for(AgentRunWorkflow.run, run_id)
        result = await asyncio.wait_for(handle.result(), WITHIN)

    assert result.status == "completed" and result.final_output == ANSWER
    kinds = [e.kind for e in events]
    deltas = [e for e in events if e.kind == "model.delta"]
    assert deltas and "".join(d.data["text"] for d in deltas) == ANSWER
    # Each came before its call ended, and none has an id: a resumed reader never gets one.
    assert max(kinds.index("model.delta"), *(events.index(d) for d in deltas)) < kinds.index(
        "model.ended"
    )
    assert all(d.id == "" for d in deltas)
    assert all(e.id != "" for e in events if e.kind != "model.delta")
    [call] = {d.data["call"] for d in deltas}  # one call, its first attempt
    assert call.endswith(".1")
    # The turn, where the run's input names it (runs on today's workflow leave it to the
    # activity's summary, which the activity does not see).
    assert {d.data["turn"] for d in deltas} <= {None, 1}
    # The streamed request asked for the usage, which the run counted as unstreamed.
    [asked] = [r.body for r in wire.requests if r.body.get("model") == "gpt-stream"]
    assert asked["stream"] is True and asked["stream_options"] == {"include_usage": True}
    assert result.usage.input_tokens == 10 and result.usage.output_tokens == 5

    # History holds the answer where it always did, and no piece of it besides.
    history = await handle.fetch_history()
    recorded = "\n".join(str(event) for event in history.events)
    assert ANSWER in recorded and "model.delta" not in recorded
    for delta in deltas:
        assert recorded.count(delta.data["text"]) == recorded.count(ANSWER)


async def test_only_the_publish_token_of_the_run_gets_a_delta_to_its_readers(
    rig: Stack, wire: WireServer
) -> None:
    wire.enqueue_for("gpt-slow", delayed(ANSWER_DELAY, openai_text("done")))
    now = datetime.now(UTC)
    async with _worker(rig, wire):
        run_id = await _start(rig, "gpt-slow")
        own = rig.tokens.mint_publish(run_id, _in_an_hour())
        refused = {
            "missing": (None, 401, "missing_token"),
            "forged": ("x.y", 401, "invalid_token"),
            "view token": (rig.tokens.mint_view(run_id, _in_an_hour()), 401, "invalid_token"),
            "thread token": (rig.tokens.mint_thread(run_id, _in_an_hour()), 401, "invalid_token"),
            "another run's": (
                rig.tokens.mint_publish("run-other", _in_an_hour()),
                401,
                "wrong_run",
            ),
            "expired": (rig.tokens.mint_publish(run_id, now - timedelta(seconds=1)), 410, None),
            "other keys'": (
                ResumeTokens({"deltas": "z" * 40}, "deltas").mint_publish(run_id, _in_an_hour()),
                401,
                "invalid_token",
            ),
        }
        async with rig.events(f"/v1/runs/{run_id}/events", headers=OPERATOR_AUTH) as response:
            reader = EventReader(response, WITHIN)
            await reader.take(lambda e: e.kind == "run.started")
            answers = {
                why: await _post_delta(
                    rig, run_id, token, {"turn": 1, "call": "probe", "text": f"forged {why}"}
                )
                for why, (token, _, _) in refused.items()
            }
            too_long = await _post_delta(
                rig, run_id, own, {"turn": 1, "call": "probe", "text": "x" * 8_001}
            )
            too_big = await _post_delta(rig, run_id, own, content=b"{" + b" " * 17_000 + b"}")
            # An oversize body is 413 whoever sends it, as at every route (the fuzzer's rule).
            too_big_foreign = await _post_delta(
                rig, run_id, refused["another run's"][0], content=b"{" + b" " * 17_000 + b"}"
            )
            unknown_field = await _post_delta(
                rig, run_id, own, {"turn": 1, "call": "probe", "text": "hi", "id": "run.9"}
            )
            taken = await _post_delta(rig, run_id, own, {"turn": 1, "call": "probe", "text": "ok"})
            events = await reader.take()

    for why, (_, status, code) in refused.items():
        assert answers[why].status_code == status, (why, answers[why].text)
        if code is not None:
            assert answers[why].json()["error"]["code"] == code, why
    assert (too_long.status_code, too_long.json()["error"]["code"]) == (422, "invalid_delta")
    assert (too_big.status_code, too_big.json()["error"]["code"]) == (413, "body_too_large")
    assert too_big_foreign.status_code == 413
    assert unknown_field.status_code == 422
    assert taken.status_code == 202
    probes = [
        e.data["text"] for e in events if e.kind == "model.delta" and e.data["call"] == "probe"
    ]
    assert probes == ["ok"]  # the refused ones reached no reader


async def test_a_delta_for_a_run_nobody_reads_is_taken_and_dropped(rig: Stack) -> None:
    token = rig.tokens.mint_publish("run-unread", _in_an_hour())

    answer = await _post_delta(rig, "run-unread", token)

    assert answer.status_code == 202
