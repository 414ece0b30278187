"""A thread of 1,000 messages on the real dev server (issue 25): every message answered in order
with the whole conversation seen, the thread continuing as new every `MESSAGES_PER_RUN`
messages, each run's history about the same size (the history stays linear per message), and
every run's history replaying. Messages are sent in batches that stay under `MAX_QUEUED`, the
sends of a batch at once (the thread numbers them as it takes them)."""

from __future__ import annotations

import asyncio
import statistics
import time

from temporalio.testing import WorkflowEnvironment

from tests.helpers import make_worker
from waitstate.apps import load_apps
from waitstate.cli.replay import replayer as agent_replayer
from waitstate.client import WaitstateClient, thread_input
from waitstate.schemas.threads import MAX_QUEUED
from waitstate.workflows.agent_run import AgentRunWorkflow
from waitstate.workflows.thread import MESSAGES_PER_RUN

APP = "tests.workflows.threads_app:app"
MESSAGES = 1000
BATCH = 40


async def test_a_thread_of_a_thousand_messages_continues_as_new_and_replays(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    assert BATCH < MAX_QUEUED
    client = WaitstateClient(dev_env.client, task_queue=task_queue)
    start = thread_input(model="scripted:chat-echo")
    thread_id = f"thread-thousand-{task_queue[-8:]}"
    began = time.monotonic()
    last_replies = []
    async with make_worker(dev_env.client, task_queue, apps=load_apps([APP])):
        for first in range(1, MESSAGES + 1, BATCH):
            numbers = range(first, min(first + BATCH, MESSAGES + 1))
            if first == 1:  # the first send starts the thread: alone
                await client.send_message(thread_id, "message 1", key="k1", start=start)
                numbers = range(2, numbers[-1] + 1)
            await asyncio.gather(
                *(
                    client.send_message(thread_id, f"message {n}", key=f"k{n}", start=start)
                    for n in numbers
                )
            )
            last = await client.reply(thread_id, f"m{numbers[-1]}")
            last_replies.append((numbers[-1], last.text, last.reply))
        state = await client.query(thread_id)
        runs = [r async for r in dev_env.client.list_workflows(f'WorkflowId = "{thread_id}"')]
        histories = [
            await dev_env.client.get_workflow_handle(thread_id, run_id=r.run_id).fetch_history()
            for r in runs
        ]
    took = time.monotonic() - began

    # Each batch's last message was answered with the whole conversation seen.
    for n, text, reply in last_replies:
        assert reply == f"re: {text} ({n} seen)"
    assert state.thread is not None and state.thread.received == MESSAGES
    # A run answers MESSAGES_PER_RUN messages, then the thread goes on in a new one.
    assert state.continued_as_new >= MESSAGES // MESSAGES_PER_RUN - 1
    assert len(runs) == state.continued_as_new + 1
    # Linear: a run's history does not grow with the messages before it. (Its size depends on
    # how the messages came in batches, which a loaded machine changes: so the later runs are
    # compared with the earlier ones, not each run with the median.)
    sizes = [len(h.events) for h in histories[1:-1]]  # the whole runs (not the first, the last)
    half = len(sizes) // 2
    assert max(sizes[half:]) <= 1.5 * max(sizes[:half]), sizes
    replayer = agent_replayer([AgentRunWorkflow])
    for history in histories:
        replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert replayed.replay_failure is None, replayed.replay_failure
    print(
        f"{MESSAGES} messages in {took:.1f}s over {len(runs)} runs; events per run: median "
        f"{statistics.median(sizes)}, max {max(sizes)}"
    )
