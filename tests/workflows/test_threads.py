"""Threads (issue 25): an agent run that takes a person's messages, one turn each, continuing
as new between turns; on the real dev server, through the run's `send_message` update."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType, PendingActivityState
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.service import RetryConfig, RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment

from tests.helpers import eventually, make_worker, process_env, replays, start_run
from tests.rigs import WorkerProcess
from tests.workflows import threads_app
from waitstate.apps import load_apps
from waitstate.cli.replay import replayer as agent_replayer
from waitstate.client import (
    MessageRefused,
    NotAnswered,
    ThreadClosed,
    WaitstateClient,
    thread_input,
)
from waitstate.names import THREAD_ID
from waitstate.schemas import RunInput, RunState
from waitstate.schemas.threads import (
    KEEP_MESSAGES,
    MessageAccepted,
    SendMessage,
    ThreadMessage,
    ThreadSettings,
)
from waitstate.workflows.agent_run import AgentRunWorkflow
from waitstate.workflows.search_attributes import AGENT_STATUS, WAITING_FOR
from waitstate.workflows.thread import MESSAGES_PER_RUN

APP = "tests.workflows.threads_app:app"
CHAT = RunInput(task="a conversation", model="scripted:chat-echo", thread=ThreadSettings())


async def send(
    handle: WorkflowHandle[Any, Any], text: str, key: str | None = None
) -> MessageAccepted:
    return await handle.execute_update(
        AgentRunWorkflow.send_message, SendMessage(text=text, key=key)
    )


async def replied(handle: WorkflowHandle[Any, Any], message_id: str) -> ThreadMessage:
    """The message, once it has its reply."""

    async def done() -> ThreadMessage | None:
        state: RunState = await handle.query(AgentRunWorkflow.status)
        assert state.thread is not None
        found = next((m for m in state.thread.messages if m.message_id == message_id), None)
        return (
            found
            if found is not None and found.status != "queued" and found.status != "working"
            else None
        )

    return await eventually(done, f"message {message_id}'s reply")


async def test_a_thread_answers_each_message_in_its_turn(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    async with make_worker(dev_env.client, task_queue, apps=load_apps([APP])):
        handle = await start_run(dev_env.client, task_queue, CHAT)
        first = await send(handle, "hello")
        assert (first.message_id, first.status, first.duplicate) == ("m1", "queued", False)
        one = await replied(handle, "m1")
        second = await send(handle, "how are you?")
        two = await replied(handle, second.message_id)
        three = await replied(handle, (await send(handle, "bye")).message_id)
        state: RunState = await handle.query(AgentRunWorkflow.status)
        description = await handle.describe()

    assert (one.status, one.reply) == ("replied", "re: hello (1 seen)")
    # The model had the whole conversation: its transcript went on across the runs.
    assert two.reply == "re: how are you? (2 seen)"
    assert three.reply == "re: bye (3 seen)"
    assert [m.model_calls for m in (one, two, three)] == [1, 1, 1]
    assert three.usage.model_calls == 1 and three.turns_before == 2
    assert state.thread is not None and state.thread.received == 3
    assert state.status == "waiting" and state.turns == 3
    assert state.continued_as_new == 0  # a run answers MESSAGES_PER_RUN before it continues
    assert description.status is not None and description.status.name == "RUNNING"
    await replays(handle, "thread")


async def test_messages_sent_while_the_agent_works_are_queued_and_taken_in_order(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    texts = [f"message {i}" for i in range(1, 5)]
    async with make_worker(dev_env.client, task_queue, apps=load_apps([APP])):
        handle = await start_run(dev_env.client, task_queue, CHAT)
        sent = await asyncio.gather(*(send(handle, text) for text in texts))
        await replied(handle, "m4")
        state: RunState = await handle.query(AgentRunWorkflow.status)

    text_of = {s.message_id: text for s, text in zip(sent, texts, strict=True)}
    assert sorted(text_of) == ["m1", "m2", "m3", "m4"]
    assert state.thread is not None
    replies = {m.message_id: m.reply for m in state.thread.messages}
    # Taken in the order they were accepted, each in a turn of its own, the model seeing every
    # earlier one.
    for n in range(1, 5):
        assert replies[f"m{n}"] == f"re: {text_of[f'm{n}']} ({n} seen)"


async def test_a_retried_send_with_its_key_is_one_message(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    async with make_worker(dev_env.client, task_queue, apps=load_apps([APP])):
        handle = await start_run(dev_env.client, task_queue, CHAT)
        first = await send(handle, "once", key="k-1")
        await replied(handle, first.message_id)
        again = await send(handle, "once", key="k-1")  # sent again: a new update, its key
        other = await send(handle, "twice", key="k-2")
        await replied(handle, other.message_id)
        state: RunState = await handle.query(AgentRunWorkflow.status)

    assert (again.message_id, again.duplicate, again.status) == ("m1", True, "replied")
    assert other.message_id == "m2"
    assert state.thread is not None and state.thread.received == 2


async def test_a_reject_thread_refuses_a_message_while_it_works_and_a_task_run_takes_none(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    rejecting = CHAT.model_copy(update={"thread": ThreadSettings(busy="reject")})
    async with make_worker(dev_env.client, task_queue, apps=load_apps([APP])):
        handle = await start_run(dev_env.client, task_queue, rejecting)
        results = await asyncio.gather(
            *(send(handle, f"message {i}") for i in range(3)), return_exceptions=True
        )
        task = await start_run(
            dev_env.client, task_queue, RunInput(task="hi", model="scripted:chat-echo")
        )
        with pytest.raises(WorkflowUpdateFailedError) as not_a_thread:
            await send(task, "hello")
        await task.result()

    accepted = [r for r in results if isinstance(r, MessageAccepted)]
    refused = [r for r in results if isinstance(r, WorkflowUpdateFailedError)]
    assert accepted and refused, results
    assert all("busy" in str(r.cause) for r in refused)
    assert "not a thread" in str(not_a_thread.value.cause)


async def test_an_idle_thread_closes_after_close_after(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    closing = CHAT.model_copy(update={"thread": ThreadSettings(close_after=timedelta(seconds=2))})
    async with make_worker(dev_env.client, task_queue, apps=load_apps([APP])):
        handle = await start_run(dev_env.client, task_queue, closing)
        sent = await send(handle, "hello")
        await replied(handle, sent.message_id)
        result = await asyncio.wait_for(handle.result(), 30)
        with pytest.raises(RPCError) as refused:
            await send(handle, "anyone?")

    assert (result.status, result.final_output) == ("completed", "re: hello (1 seen)")
    # Temporal's answer to an Update for a run that has ended (what the client makes of it:
    # test_a_closed_thread_refuses_a_message_and_starts_nothing).
    assert refused.value.status == RPCStatusCode.NOT_FOUND


async def test_the_client_starts_a_thread_with_its_first_message_and_awaits_each_reply(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    client = WaitstateClient(dev_env.client, task_queue=task_queue)
    start = thread_input(model="scripted:chat-echo")
    async with make_worker(dev_env.client, task_queue, apps=load_apps([APP])):
        replies = []
        for text in ("hello", "what can you do?", "thanks"):
            sent = await client.send_message("thread-client", text, start=start)
            replies.append(await client.reply("thread-client", sent.accepted.message_id))
        # A retried send (same key) is the same message.
        once = await client.send_message("thread-client", "again", key="k", start=start)
        twice = await client.send_message("thread-client", "again", key="k", start=start)
        await client.reply("thread-client", once.accepted.message_id)
        state = await client.query("thread-client")

    assert [r.reply for r in replies] == [
        "re: hello (1 seen)",
        "re: what can you do? (2 seen)",
        "re: thanks (3 seen)",
    ]
    assert [r.message_id for r in replies] == ["m1", "m2", "m3"]
    assert once.accepted.message_id == twice.accepted.message_id == "m4"
    assert state.thread is not None and state.thread.received == 4


async def test_awaiting_a_reply_goes_on_through_queries_no_worker_answers(
    dev_env: WorkflowEnvironment, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A status query no worker answers in time (the worker is away, or one is starting) is no
    answer yet: `reply` looks again until its own deadline, and has the reply once a worker
    is back."""
    client = WaitstateClient(dev_env.client, task_queue=task_queue)
    start = thread_input(model="scripted:chat-echo")
    async with make_worker(dev_env.client, task_queue, apps=load_apps([APP])):
        first = await client.send_message("thread-away", "hello", start=start)
        await client.reply("thread-away", first.accepted.message_id)
    unanswered: list[NotAnswered] = []
    query = WaitstateClient.query

    async def counted(self: WaitstateClient, run_id: str) -> RunState:
        try:
            return await query(self, run_id)
        except NotAnswered as err:
            unanswered.append(err)
            raise

    monkeypatch.setattr(WaitstateClient, "query", counted)
    awaiting = asyncio.create_task(
        client.reply("thread-away", first.accepted.message_id, within=timedelta(seconds=90))
    )

    async def asked_in_vain() -> bool:
        return bool(unanswered)

    await eventually(asked_in_vain, "a query no worker answered", 60)
    async with make_worker(dev_env.client, task_queue, apps=load_apps([APP])):
        message = await awaiting

    assert message.reply == "re: hello (1 seen)"


async def test_a_burst_of_messages_past_the_cap_on_updates_in_flight_is_taken_whole(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    # Before any worker, a burst larger than the run's cap on Updates in flight (10): Temporal
    # refuses the excess (RESOURCE_EXHAUSTED) until the worker takes the first ones; the client
    # sends those again, and every message is taken once. The SDK's own retries are off, as
    # they run out under load: the client's retries alone carry the burst.
    bare = await Client.connect(
        dev_env.client.service_client.config.target_host,
        namespace=dev_env.client.namespace,
        data_converter=dev_env.client.data_converter,
        retry_config=RetryConfig(max_retries=1, max_elapsed_time_millis=1),
    )
    client = WaitstateClient(bare, task_queue=task_queue)
    start = thread_input(model="scripted:chat-echo")
    burst = 2 * MESSAGES_PER_RUN  # across a continue-as-new
    async with make_worker(dev_env.client, task_queue, apps=load_apps([APP])):
        await client.send_message("thread-burst", "message 0", start=start, key="k0")
        sent = await asyncio.gather(
            *(
                client.send_message("thread-burst", f"message {n}", start=start, key=f"k{n}")
                for n in range(1, burst)
            )
        )
        state = await client.query("thread-burst")

    assert len({s.accepted.message_id for s in sent}) == burst - 1
    assert state.thread is not None and state.thread.received == burst


async def test_a_threads_turns_write_no_search_attribute_of_their_own(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    # A message answered in a turn that waits for nothing else leaves the
    # thread's search attributes as they are (`waiting` for a `message`): no upsert, no
    # visibility write, per message. `status` still says what it does.
    client = WaitstateClient(dev_env.client, task_queue=task_queue)
    start = thread_input(model="scripted:chat-echo")
    handle = dev_env.client.get_workflow_handle("thread-quiet")

    async def upserts() -> int:
        kinds = [event.event_type async for event in handle.fetch_history_events()]
        return kinds.count(EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES)

    counted = []
    async with make_worker(dev_env.client, task_queue, apps=load_apps([APP])):
        for n in range(5):
            sent = await client.send_message("thread-quiet", f"hello {n}", start=start)
            await client.reply("thread-quiet", sent.accepted.message_id)
            counted.append(await upserts())
        described = await handle.describe()
        await replays(handle, "thread_quiet_turns")

    assert counted == [counted[0]] * 5, counted
    attributes = described.typed_search_attributes
    assert (attributes.get(AGENT_STATUS), attributes.get(WAITING_FOR)) == ("waiting", "message")


async def test_a_closed_thread_refuses_a_message_and_starts_nothing(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    client = WaitstateClient(dev_env.client, task_queue=task_queue)
    start = thread_input(
        model="scripted:chat-echo", settings=ThreadSettings(close_after=timedelta(seconds=1))
    )
    async with make_worker(dev_env.client, task_queue, apps=load_apps([APP])):
        sent = await client.send_message("thread-closing", "hello", start=start)
        await client.reply("thread-closing", sent.accepted.message_id)
        await asyncio.wait_for(client.handle("thread-closing").result(), 30)
        with pytest.raises(ThreadClosed, match="thread thread-closing is closed"):
            await client.send_message("thread-closing", "still there?", start=start)
        runs = [r async for r in dev_env.client.list_workflows('WorkflowId = "thread-closing"')]

    assert len(runs) == 1  # the message started no second run under the id


async def test_the_client_says_why_a_thread_refuses_a_message(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    client = WaitstateClient(dev_env.client, task_queue=task_queue)
    # A task run, started before any worker: the message reaches it with its first task, while
    # it is surely open.
    task = await start_run(
        dev_env.client, task_queue, RunInput(task="hi", model="scripted:chat-echo")
    )
    sending = asyncio.create_task(client.send_message(task.id, "hello"))
    async with make_worker(dev_env.client, task_queue, apps=load_apps([APP])):
        with pytest.raises(MessageRefused) as refused:
            await sending
        result = await task.result()

    assert refused.value.code == "not_a_thread"
    assert "not a thread" in str(refused.value)
    assert result.final_output == "re: hi (1 seen)"  # the task run went on, unchanged


async def test_a_long_thread_continues_as_new_between_turns_and_the_model_keeps_the_conversation(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    client = WaitstateClient(dev_env.client, task_queue=task_queue)
    start = thread_input(model="scripted:chat-echo")
    count = 2 * MESSAGES_PER_RUN + 5
    async with make_worker(dev_env.client, task_queue, apps=load_apps([APP])):
        for n in range(1, count + 1):
            key = "first" if n == 1 else None
            sent = await client.send_message("thread-long", f"message {n}", key=key, start=start)
            last = await client.reply("thread-long", sent.accepted.message_id)
        # The first message's send retried two runs later (a new update): the same message.
        retried = await client.send_message("thread-long", "message 1", key="first")
        state = await client.query("thread-long")
        runs = [r async for r in dev_env.client.list_workflows('WorkflowId = "thread-long"')]
        histories = [
            await dev_env.client.get_workflow_handle("thread-long", run_id=r.run_id).fetch_history()
            for r in runs
        ]

    assert last.reply == f"re: message {count} ({count} seen)"
    assert state.continued_as_new == 2 and len(runs) == 3
    # Every run of the thread, continued ones too, is found by the thread's search attribute.
    assert [r.typed_search_attributes.get(THREAD_ID) for r in runs] == ["thread-long"] * 3
    assert (retried.accepted.message_id, retried.accepted.duplicate) == ("m1", True)
    assert state.thread is not None and state.thread.received == count
    # What a run carries is bounded: its last messages, not the whole conversation.
    assert len(state.thread.messages) <= KEEP_MESSAGES
    replayer = agent_replayer([AgentRunWorkflow])
    for history in histories:
        replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert replayed.replay_failure is None, replayed.replay_failure


async def test_an_interrupt_thread_abandons_a_model_call_for_a_new_message(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    client = WaitstateClient(dev_env.client, task_queue=task_queue)
    start = thread_input(model="held:any", settings=ThreadSettings(busy="interrupt"))
    threads_app.RELEASE.clear()
    async with make_worker(dev_env.client, task_queue, apps=load_apps([APP])):
        first = await client.send_message("thread-interrupt", "a slow question", start=start)
        handle = client.handle("thread-interrupt")

        async def calling() -> bool:
            pending = (await handle.describe()).raw_description.pending_activities
            return any(a.activity_type.name == "call_model" for a in pending)

        await eventually(calling, "the first message's model call")
        second = await client.send_message("thread-interrupt", "never mind, just this")
        replied = await client.reply("thread-interrupt", second.accepted.message_id)
        interrupted = await client.message("thread-interrupt", first.accepted.message_id)
        threads_app.RELEASE.set()  # the abandoned call may end now (its answer goes nowhere)
        state = await client.query("thread-interrupt")
        history = await handle.fetch_history()

    # The model was called again with both messages, and answered the second.
    assert replied.reply == "re: never mind, just this (2 seen)"
    assert interrupted is not None and interrupted.status == "interrupted"
    assert interrupted.error == "interrupted by m2: its reply answers both"
    assert state.turns == 1 and state.status == "waiting"
    cancelled = [
        e
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED
    ]
    assert len(cancelled) == 1  # the first call's activity, asked to stop
    replayed = await agent_replayer([AgentRunWorkflow]).replay_workflow(
        history, raise_on_replay_failure=False
    )
    assert replayed.replay_failure is None, replayed.replay_failure


@pytest.mark.subprocess
async def test_a_worker_killed_while_a_reply_is_made_answers_the_message_once(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    client = WaitstateClient(dev_env.client, task_queue=task_queue)
    release = tmp_path / "release"
    env = process_env(
        dev_env.client,
        task_queue,
        WAITSTATE_APPS=APP,
        THREADS_RELEASE_FILE=str(release),
        WAITSTATE_BLOB_DIR=str(tmp_path / "blobs"),
    )
    worker = WorkerProcess(env, tmp_path / "worker.log")
    # A short model timeout: the killed worker's call is tried again within seconds.
    start = thread_input(model="held:any").model_copy(
        update={"model_timeout": timedelta(seconds=3)}
    )
    await worker.start()
    try:
        first = await client.send_message("thread-killed", "hello", start=start)
        await client.reply("thread-killed", first.accepted.message_id)
        sent = await client.send_message("thread-killed", "a slow one", key="k-slow")
        handle = client.handle("thread-killed")

        async def calling() -> bool:
            pending = (await handle.describe()).raw_description.pending_activities
            return any(
                a.activity_type.name == "call_model"
                and a.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
                for a in pending
            )

        await eventually(calling, "the slow message's model call, started")
        await worker.kill()  # while the reply is being made
        release.touch()
        # The person's client retries its send meanwhile (it waits for a worker): the same
        # message.
        retrying = asyncio.create_task(
            client.send_message("thread-killed", "a slow one", key="k-slow")
        )
        await worker.start()
        again = await retrying
        replied = await client.reply("thread-killed", sent.accepted.message_id)
        state = await client.query("thread-killed")
        history = await handle.fetch_history()
    finally:
        await worker.stop()

    assert again.accepted.message_id == sent.accepted.message_id == "m2"
    assert replied.status == "replied" and replied.reply == "re: a slow one (2 seen)"
    assert state.thread is not None and state.thread.received == 2
    replies = [s for s in state.steps if s.kind == "event" and s.name == "reply"]
    assert [s.detail for s in replies] == ["m1 replied", "m2 replied"]  # answered once
    replayed = await agent_replayer([AgentRunWorkflow]).replay_workflow(
        history, raise_on_replay_failure=False
    )
    assert replayed.replay_failure is None, replayed.replay_failure


async def test_a_thread_of_an_agent_takes_messages_as_the_agent_declares_unless_told_otherwise(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    """`Agent(thread=...)` sets the busy policy and idle time of its threads; a thread started
    with settings of its own keeps those."""
    client = WaitstateClient(dev_env.client, task_queue=task_queue)
    own = ThreadSettings(busy="interrupt", close_after=timedelta(days=2))
    async with make_worker(dev_env.client, task_queue, apps=load_apps([APP])):
        sent = await client.send_message(
            "thread-helpdesk", "hello", start=thread_input(agent="helpdesk")
        )
        first = await client.reply("thread-helpdesk", sent.accepted.message_id)
        told = await client.send_message(
            "thread-helpdesk-own", "hello", start=thread_input(agent="helpdesk", settings=own)
        )
        await client.reply("thread-helpdesk-own", told.accepted.message_id)
        declared = await client.query("thread-helpdesk")
        kept = await client.query("thread-helpdesk-own")

    assert first.reply == "re: hello (1 seen)"  # the agent's model
    assert declared.thread is not None and kept.thread is not None
    assert declared.thread.settings == threads_app.HELPDESK.thread
    assert kept.thread.settings == own
