"""A worker SIGKILLed in the middle of a thread's model call: the call heartbeats, so the server
notices the loss within its heartbeat timeout, not the call's start-to-close (the thread's
`model_timeout`, two minutes), and the message, and the one queued behind it, are answered
within 30 s of a worker's return. A worker process of its own (`worker.py`), the dev server, and
the model over the OpenAI wire protocol (the wire server, which holds the call unanswered until
its retry arrives)."""

from __future__ import annotations

import contextlib
import functools
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType, PendingActivityState
from temporalio.testing import WorkflowEnvironment

from tests.helpers import eventually, process_env
from tests.rigs import WorkerProcess
from waitstate.client import NotAnswered, WaitstateClient, thread_input
from waitstate.client._threads import DONE
from waitstate.schemas.run import CALL_MODEL
from waitstate.schemas.threads import ThreadMessage
from waitstate.testing.wire_server import WireServer, held
from waitstate.workflows.policies import MODEL_HEARTBEAT, MODEL_RETRY

APP = "tests.workflows.threads_app:app"  # an app with no callback tools: no gateway needed
THREAD = "thread-beat"
MODEL = "held-beat"
# What the product promises: a message is answered within this of a worker's return, however
# long the call's start-to-close timeout.
PROMISED = timedelta(seconds=30)
# Long enough for the call's start-to-close (two minutes) to pass on code that does not
# heartbeat: its reply then comes, too late, and the test fails on the promise, not a timeout.
REPLY_WITHIN = timedelta(minutes=4)


@pytest.mark.subprocess
async def test_a_thread_message_is_answered_within_30_s_of_a_workers_return_after_a_kill(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, wire: WireServer
) -> None:
    client = WaitstateClient(dev_env.client, task_queue=task_queue)
    env = process_env(
        dev_env.client,
        task_queue,
        OPENAI_BASE_URL=wire.openai_base_url,
        OPENAI_API_KEY="test-key",
        WAITSTATE_APPS=APP,
        WAITSTATE_BLOB_DIR=str(tmp_path / "blobs"),
    )
    worker = WorkerProcess(env, tmp_path / "worker.log")
    # The first call is answered only once another call naming the model arrives: its retry.
    wire.enqueue_for(MODEL, held(REPLY_WITHIN.total_seconds()))
    await worker.start()
    try:
        first = await client.send_message(
            THREAD, "hello", start=thread_input(model=f"openai:{MODEL}")
        )
        queued = await client.send_message(THREAD, "and then?")
        handle = client.handle(THREAD)

        async def calling() -> str | None:
            described = await handle.describe()
            started = any(
                a.activity_type.name == CALL_MODEL
                and a.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
                for a in described.raw_description.pending_activities
            )
            return described.run_id if started else None

        run_id = await eventually(calling, "the first message's model call, started")
        await eventually(lambda: _asked(wire), "the held call, at the model")  # mid-call
        await worker.kill()
        await worker.start()
        back = datetime.now(UTC)  # the worker polls again

        async def replied(message_id: str) -> ThreadMessage | None:
            # Looked at by query: the first after the kill may go to the dead worker (its
            # sticky queue) and be answered by nobody; the next is the new worker's.
            with contextlib.suppress(NotAnswered):
                message = await client.message(THREAD, message_id)
                return message if message is not None and message.status in DONE else None
            return None

        replies = [
            await eventually(
                functools.partial(replied, sent.accepted.message_id),
                f"the reply to {sent.accepted.message_id}",
                within=REPLY_WITHIN.total_seconds(),
            )
            for sent in (first, queued)
        ]
        history = await dev_env.client.get_workflow_handle(THREAD, run_id=run_id).fetch_history()
    finally:
        await worker.stop()

    scheduled = {
        e.event_id: e.activity_task_scheduled_event_attributes
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == CALL_MODEL
    }
    attempts = [
        (e.activity_task_started_event_attributes.scheduled_event_id, e)
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        and e.activity_task_started_event_attributes.scheduled_event_id in scheduled
    ]
    [(killed, retried)] = [
        (scheduled_id, e)
        for scheduled_id, e in attempts
        if e.activity_task_started_event_attributes.attempt > 1
    ]
    heartbeat = scheduled[killed].heartbeat_timeout.ToTimedelta()
    retry_started = retried.event_time.ToDatetime(tzinfo=UTC)

    # The kill was noticed by the heartbeat timeout the call was scheduled with, which the
    # first retry's second leaves well within the promise.
    assert heartbeat == MODEL_HEARTBEAT
    assert MODEL_HEARTBEAT + MODEL_RETRY.initial_interval < PROMISED
    assert retried.activity_task_started_event_attributes.attempt == 2
    # Each message answered once, both within the promise of the worker's return.
    assert [(r.status, r.reply, r.model_calls) for r in replies] == [("replied", "ok", 1)] * 2
    answered = [r.replied_at for r in replies]
    assert all(at is not None and at - back < PROMISED for at in answered), (back, answered)
    assert retry_started - back < PROMISED
    assert await _asked(wire) == 3  # the call held, its retry, and the queued message's call


async def _asked(wire: WireServer) -> int:
    """How many calls the model has been sent."""
    return sum(1 for r in wire.requests if isinstance(r.body, dict) and r.body["model"] == MODEL)
