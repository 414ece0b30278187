"""Documents an SDK behaviour (temporalio 1.35.0, sdk-core, Server 1.32): a worker that rebuilds
a run from history (a new worker after a crash, or one with no workflow cache) can apply an
Update before an activity's completion that an earlier workflow task delivered, so the history
it writes does not replay. No waitstate code is involved.

The cause is sdk-core's "WFT heartbeat" rule (`find_end_index_of_next_wft_seq` in
`history_update.rs`): while it cuts the history into workflow tasks, a task whose
WorkflowTaskCompleted is followed at once by the next WorkflowTaskScheduled, in a sequence that
holds no command event, is taken for a heartbeat and merged with the next task. Only command
events count (ActivityTaskScheduled, TimerStarted, UpdateAccepted, ...): an ActivityTaskCompleted
does not. So the sequence must start after a task that issued no command either: here a signal
whose handler issues none (`poke`). Without it the sequence holds the first task's
ActivityTaskScheduled and nothing is merged (asserted below).

The history, around the two tasks (poke first):

    WorkflowExecutionSignaled            poke
    WorkflowTaskScheduled/Started/Completed   no command
    ActivityTaskStarted, ActivityTaskCompleted
    WorkflowTaskScheduled/Started        the activity's task
    WorkflowTaskCompleted                no command
    WorkflowTaskScheduled/Started        the Update's (speculative) task, written with it
    WorkflowTaskCompleted
    WorkflowExecutionUpdateAccepted ...

A worker rebuilding the run at the Update's task gets the activity's resolution and the Update
in ONE activation; the Python SDK runs the Update's job first, so its handler does not see
"activity" and issues no command. A Replayer sees the UpdateAccepted event and cuts the sequence
at the last task started before the Update's sequencing event: the activity's resolution, then
the Update, whose handler now issues `upsert_memo` -> "Nondeterminism error".
"""

from __future__ import annotations

import asyncio
import signal
import sys
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from temporalio import workflow
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType, PendingActivityState
from temporalio.api.workflowservice.v1 import ResetStickyTaskQueueRequest
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, Worker
from temporalio.workflow import NondeterminismError

# The parked activity, the checkout's root and the waits are the split-activation reproduction's.
from tests.helpers import first_unreplayable
from tests.workflows.test_split_activation import HANDLERS_LAST, ROOT, WAIT, opted_in, parked


@workflow.defn(name="HeartbeatMerge", sandboxed=False)
class HeartbeatMerge:
    def __init__(self) -> None:
        self.decided = False
        self.log: list[str] = []

    @workflow.run
    async def run(self, activities: str) -> list[str]:
        await workflow.execute_activity(
            parked,
            task_queue=activities,
            activity_id="a1",
            start_to_close_timeout=timedelta(minutes=5),
        )
        self.log.append("activity")  # no command
        await workflow.wait_condition(lambda: self.decided)
        return self.log

    @workflow.signal
    def poke(self) -> None:
        self.log.append("poke")  # no command

    @workflow.update
    async def decide(self) -> str:
        if "activity" in self.log:
            workflow.upsert_memo({"saw": "activity"})
        self.log.append("update")
        self.decided = True
        return "ok"


@workflow.defn(name="HeartbeatMerge", sandboxed=False)
class HeartbeatMergeHandlersLast(HeartbeatMerge):
    """The same run, opted in to waitstate's fix (waitstate/activation_order.py)."""

    handlers_last_markers = frozenset({HANDLERS_LAST})

    @workflow.run
    async def run(self, activities: str) -> list[str]:
        workflow.patched(HANDLERS_LAST)
        return await super().run(activities)


def _opted(handlers_last: bool) -> dict[str, Any]:
    """The worker's (or replayer's) workflow and runner, opted in to the fix or not."""
    return opted_in(handlers_last, HeartbeatMerge, HeartbeatMergeHandlersLast)


async def first_worker(target: str, namespace: str, task_queue: str, handlers_last: str) -> None:
    """The first worker (cache on), run in a process of its own: the test SIGKILLs it."""
    client = await Client.connect(target, namespace=namespace)
    last = handlers_last == "1"
    async with Worker(
        client,
        task_queue=task_queue,
        **_opted(last),
        identity="W1",
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=1),
    ):
        print("ready", flush=True)
        await asyncio.Event().wait()


@dataclass
class Outcome:
    result: list[str]
    events: list[tuple[int, str]]  # from the poke's (or the first) task on
    replay_failure: Exception | None
    replay_fails_at: tuple[int, str] | None  # see `tests.helpers.first_unreplayable`


async def _quiet(handle: WorkflowHandle[Any, Any], completed: int) -> None:
    """Wait until `completed` workflow tasks have completed and none is pending."""
    async with asyncio.timeout(WAIT):
        while True:
            desc = (await handle.describe()).raw_description
            history = await handle.fetch_history()
            done = sum(
                e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED for e in history.events
            )
            if done >= completed and not desc.HasField("pending_workflow_task"):
                return
            await asyncio.sleep(0.05)


async def _started(handle: WorkflowHandle[Any, Any]) -> None:
    async with asyncio.timeout(WAIT):
        while not any(  # noqa: ASYNC110 (polling the server)
            a.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
            for a in (await handle.describe()).raw_description.pending_activities
        ):
            await asyncio.sleep(0.05)


async def heartbeat_merge(
    env: WorkflowEnvironment, poke: bool, mode: str, handlers_last: bool = False
) -> Outcome:
    """mode "kill": W1 (own process, cache on) runs the tasks up to the activity's, is
    SIGKILLed, a fresh W2 takes the Update's task. mode "nocache": one worker with
    max_cached_workflows=0 runs everything (each task rebuilds the run)."""
    client = await Client.connect(
        env.client.service_client.config.target_host, namespace=env.client.namespace
    )
    task_queue = f"heartbeat-{uuid.uuid4()}"
    activities = f"{task_queue}-activities"
    w1: asyncio.subprocess.Process | None = None
    nocache: Worker | None = None
    if mode == "kill":
        w1 = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            "import asyncio, sys\n"
            "from tests.workflows.test_heartbeat_merge import first_worker\n"
            "asyncio.run(first_worker(*sys.argv[1:]))",
            client.service_client.config.target_host,
            client.namespace,
            task_queue,
            "1" if handlers_last else "0",
            cwd=ROOT,
            stdout=asyncio.subprocess.PIPE,
        )
        assert w1.stdout is not None
        assert (await asyncio.wait_for(w1.stdout.readline(), WAIT)).strip() == b"ready"
    else:
        nocache = Worker(
            client,
            task_queue=task_queue,
            **_opted(handlers_last),
            identity="W0",
            max_cached_workflows=0,
        )
    try:
        async with Worker(client, task_queue=activities, activities=[parked]):
            if nocache is not None:
                run_nocache = asyncio.create_task(nocache.run())
            handle = await client.start_workflow(
                HeartbeatMerge.run, activities, id=task_queue, task_queue=task_queue
            )
            await _started(handle)
            await _quiet(handle, 1)
            tasks = 1
            if poke:
                await handle.signal(HeartbeatMerge.poke)
                tasks += 1
                await _quiet(handle, tasks)
            await client.get_async_activity_handle(
                workflow_id=handle.id, run_id=handle.result_run_id, activity_id="a1"
            ).complete("done")
            tasks += 1
            await _quiet(handle, tasks)
            if w1 is not None:
                w1.send_signal(signal.SIGKILL)
                await w1.wait()
                await client.workflow_service.reset_sticky_task_queue(
                    ResetStickyTaskQueueRequest(
                        namespace=client.namespace,
                        execution=WorkflowExecution(workflow_id=handle.id),
                    )
                )
                async with Worker(
                    client,
                    task_queue=task_queue,
                    **_opted(handlers_last),
                    identity="W2",
                ):
                    assert (
                        await asyncio.wait_for(handle.execute_update(HeartbeatMerge.decide), WAIT)
                        == "ok"
                    )
                    result = await asyncio.wait_for(handle.result(), WAIT)
            else:
                assert nocache is not None
                assert (
                    await asyncio.wait_for(handle.execute_update(HeartbeatMerge.decide), WAIT)
                    == "ok"
                )
                result = await asyncio.wait_for(handle.result(), WAIT)
                await nocache.shutdown()
                await run_nocache
    finally:
        if w1 is not None and w1.returncode is None:
            w1.kill()
            await w1.wait()
    history = await handle.fetch_history()
    events = [
        (e.event_id, EventType.Name(e.event_type).removeprefix("EVENT_TYPE_"))
        for e in history.events
        if e.event_id >= 5
    ]
    replayer = Replayer(**_opted(handlers_last))
    replay = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    fails_at = await first_unreplayable(replayer, history)
    return Outcome(result, events, replay.replay_failure, fails_at)


# What follows the activity's completion: its task, which completed with no command, then the
# Update's, scheduled at once.
QUIET_TASK_THEN_UPDATES = [
    "WORKFLOW_TASK_SCHEDULED",
    "WORKFLOW_TASK_STARTED",
    "WORKFLOW_TASK_COMPLETED",
    "WORKFLOW_TASK_SCHEDULED",
    "WORKFLOW_TASK_STARTED",
    "WORKFLOW_TASK_COMPLETED",
]


@pytest.mark.subprocess
@pytest.mark.parametrize("mode", ["kill", "nocache"])
async def test_a_rebuilt_run_applies_the_update_first_and_the_history_does_not_replay(
    dev_env: WorkflowEnvironment, mode: str
) -> None:
    outcome = await heartbeat_merge(dev_env, poke=True, mode=mode)
    names = [name for _, name in outcome.events]
    # The activity's task completed with no command, the Update's task was scheduled at once.
    i = names.index("ACTIVITY_TASK_COMPLETED")
    assert names[i + 1 : i + 7] == QUIET_TASK_THEN_UPDATES
    assert names[i + 7] == "WORKFLOW_EXECUTION_UPDATE_ACCEPTED"
    # The rebuilt run ran the Update first: its handler saw no "activity", upserted nothing.
    assert outcome.result == ["poke", "update", "activity"]
    assert "WORKFLOW_PROPERTIES_MODIFIED" not in names
    assert isinstance(outcome.replay_failure, NondeterminismError), outcome.replay_failure
    # The replayed handler's `upsert_memo` meets the Update's completion in the history.
    completed = next(e for e in outcome.events if e[1] == "WORKFLOW_EXECUTION_UPDATE_COMPLETED")
    assert outcome.replay_fails_at == completed


@pytest.mark.subprocess
@pytest.mark.parametrize("mode", ["kill", "nocache"])
async def test_without_the_quiet_task_before_nothing_is_merged(
    dev_env: WorkflowEnvironment, mode: str
) -> None:
    """The activity's task follows the task that scheduled the activity (a command): the
    sequence is not a heartbeat, the rebuilt run applies the activity first, and replays."""
    outcome = await heartbeat_merge(dev_env, poke=False, mode=mode)
    assert outcome.result == ["activity", "update"]
    assert "WORKFLOW_PROPERTIES_MODIFIED" in [name for _, name in outcome.events]
    assert outcome.replay_failure is None


@pytest.mark.subprocess
@pytest.mark.parametrize("mode", ["kill", "nocache"])
async def test_with_handlers_last_the_rebuilt_run_applies_the_activity_first_and_replays(
    dev_env: WorkflowEnvironment, mode: str
) -> None:
    """The fix (waitstate/activation_order.py): the merged activation is applied as the two it
    was, the activity's resolution first, so the handler sees "activity" as it did when the
    tasks came apart, and the history replays."""
    outcome = await heartbeat_merge(dev_env, poke=True, mode=mode, handlers_last=True)
    names = [name for _, name in outcome.events]
    i = names.index("ACTIVITY_TASK_COMPLETED")
    assert names[i + 1 : i + 7] == QUIET_TASK_THEN_UPDATES
    assert outcome.result == ["poke", "activity", "update"]
    assert "WORKFLOW_PROPERTIES_MODIFIED" in names
    assert outcome.replay_failure is None
