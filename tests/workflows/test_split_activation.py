"""Documents an SDK behaviour (temporalio 1.35.0, sdk-core, Server 1.32): a run can write a
history that its own code cannot replay, with no waitstate code involved (issue 24, item 6).

The trigger is a query answered as a *query task* (dispatched directly, not on a workflow
task) by a worker that does not hold the run. The server sends a query directly when the run
has no workflow task pending; the task waits on the run's sticky queue and, if that worker does
not answer within its sticky schedule-to-start timeout, moves to the normal queue. The history
in a query task is read when a worker polls it, so it can hold events that no workflow task has
delivered yet (here: an activity's completion, and the workflow task it scheduled, in flight
on another worker). sdk-core applies those events, live, to answer the query: the workflow
code runs the activity's branch and its commands stay pending in the cached run. When the
workflow task is then retried (it timed out) with an Update, the same worker applies only the
Update in a new activation and sends both activations' commands: the branch's command first,
then the Update's acceptance. A replay applies the completion and the Update in one activation,
and the Python SDK runs the Update's job first, so it expects UpdateAccepted where the history
has the branch's command: "Nondeterminism error: Update machine does not handle this event".

The chaos run (`nondeterministic-chaos-a-rotation-1-escalation-link-0`) fits: a status query
reached the signing worker's sticky queue in the 155 ms between WFT 31's completion and the
escalation notice's completion (35), the worker was SIGKILLed with WFT 37 in flight, the query
moved to the normal queue 10 s later (the default sticky timeout) where the restarted worker
answered it from history 1..37; WFT 39 (attempt 2, with the Update) reached that worker 4 ms
after the timeout and was completed in 13 ms: upsert (42), then UpdateAccepted (43).

The reproduction, plain temporalio: a worker in a process of its own runs the first workflow
task and is SIGKILLed (its sticky queue keeps the query until the timeout); the test resets the
run's stickiness, completes the activity, and takes the resulting workflow task with a raw poll
that never answers (so the retried task carries the Update); a fresh worker answers the query,
then gets the retried task. What stays safe, asserted below: a worker with no workflow cache
(the run is evicted after the query, the retried task replays from the start), and an
activity branch that issues no command in that activation. An Update handler that issues no
command is not enough: its acceptance is itself ordered after the branch's command. Nor is an
Update needed: a signal whose handler starts a timer, sent while the stolen task is in flight,
gives "Timer machine does not handle this event" on replay the same way.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio import activity, workflow
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType, PendingActivityState
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import (
    PollWorkflowTaskQueueRequest,
    ResetStickyTaskQueueRequest,
)
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner, Worker, WorkflowRunner
from temporalio.workflow import NondeterminismError

from tests.helpers import first_unreplayable
from waitstate.activation_order import HandlersLast

# The patch marker the opted-in workflow records (the agent run opts in every run instead).
HANDLERS_LAST = "handlers-last"

# No waitstate code, nor the test rigs (the first worker's process imports this module).
ROOT = Path(__file__).resolve().parents[2]

# The killed worker's sticky queue keeps the query this long before it moves to the normal
# queue; the stolen workflow task times out later (after the query is answered).
STICKY_TIMEOUT = timedelta(seconds=3)
TASK_TIMEOUT = timedelta(seconds=6)
# Time for the query to reach the sticky queue before stickiness is reset.
QUERY_PARKS = 1.0
WAIT = 30.0
ATTEMPTS = 3


@activity.defn
async def parked() -> str:
    """Completed later, by the test (an async completion)."""
    activity.raise_complete_async()


@workflow.defn(name="SplitActivation", sandboxed=False)
class SplitActivation:
    def __init__(self) -> None:
        self.decided = False
        self.log: list[str] = []

    @workflow.run
    async def run(self, activities: str, quiet_branch: bool) -> list[str]:
        await workflow.execute_activity(
            parked,
            task_queue=activities,
            activity_id="a1",
            start_to_close_timeout=timedelta(minutes=5),
        )
        self.log.append("activity")
        if not quiet_branch:
            workflow.upsert_memo({"after": "activity"})  # a command, in the branch
        await workflow.wait_condition(lambda: self.decided)
        return self.log

    @workflow.query
    def state(self) -> list[str]:
        return self.log

    @workflow.update
    async def decide(self) -> str:
        self.log.append("update")
        workflow.upsert_memo({"update": "yes"})
        self.decided = True
        return "ok"


@workflow.defn(name="SplitActivation", sandboxed=False)
class SplitActivationHandlersLast(SplitActivation):
    """The same run, opted in to waitstate's fix (waitstate/activation_order.py)."""

    handlers_last_markers = frozenset({HANDLERS_LAST})

    @workflow.run
    async def run(self, activities: str, quiet_branch: bool) -> list[str]:
        workflow.patched(HANDLERS_LAST)
        return await super().run(activities, quiet_branch)


def opted_in(handlers_last: bool, plain: type, fixed: type) -> dict[str, Any]:
    """A worker's (or replayer's) workflow and runner: `fixed` on the fix's runner if
    `handlers_last`, else `plain` on the plain one."""
    runner: WorkflowRunner = UnsandboxedWorkflowRunner()
    if handlers_last:
        runner = HandlersLast(runner)
    return {"workflows": [fixed if handlers_last else plain], "unsandboxed_workflow_runner": runner}


def opted(handlers_last: bool) -> dict[str, Any]:
    """The worker's (or replayer's) workflow and runner, opted in to the fix or not."""
    return opted_in(handlers_last, SplitActivation, SplitActivationHandlersLast)


async def sticky_worker(target: str, namespace: str, task_queue: str, handlers_last: str) -> None:
    """The first worker, run in a process of its own (the test SIGKILLs it)."""
    client = await Client.connect(target, namespace=namespace)
    async with Worker(
        client,
        task_queue=task_queue,
        **opted(handlers_last == "1"),
        identity="W1",
        sticky_queue_schedule_to_start_timeout=STICKY_TIMEOUT,
    ):
        print("ready", flush=True)
        await asyncio.Event().wait()


@dataclass
class Outcome:
    query_answer: list[str]
    result: list[str]  # the order the run saw the activity and the Update in
    after_w2_task: list[str]  # the events written by the task the second worker completed
    w2_task: int  # the id of that task's WorkflowTaskCompleted
    replay_failure: Exception | None
    replay_fails_at: tuple[int, str] | None  # see `tests.helpers.first_unreplayable`


async def _attempt(
    client: Client, quiet_branch: bool, w2_cache: int, handlers_last: bool
) -> Outcome | None:
    """One run of the choreography; None if the raw poll took the query instead of the task
    (the query did not wait on the sticky queue), and the run is of no use."""
    task_queue = f"split-{uuid.uuid4()}"
    activities = f"{task_queue}-activities"
    w1 = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "import asyncio, sys\n"
        "from tests.workflows.test_split_activation import sticky_worker\n"
        "asyncio.run(sticky_worker(*sys.argv[1:]))",
        client.service_client.config.target_host,
        client.namespace,
        task_queue,
        "1" if handlers_last else "0",
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert w1.stdout is not None
        line = await asyncio.wait_for(w1.stdout.readline(), WAIT)
        assert line.strip() == b"ready"
        async with Worker(client, task_queue=activities, activities=[parked]):
            handle = await client.start_workflow(
                SplitActivation.run,
                args=[activities, quiet_branch],
                id=task_queue,
                task_queue=task_queue,
                task_timeout=TASK_TIMEOUT,
            )

            async def started() -> bool:
                pending = (await handle.describe()).raw_description.pending_activities
                return any(
                    a.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED for a in pending
                )

            async with asyncio.timeout(WAIT):
                while not await started():  # noqa: ASYNC110 (polling the server)
                    await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)  # W1 back on its sticky queue
            w1.send_signal(signal.SIGKILL)
            await w1.wait()
            return await _after_kill(client, handle, w2_cache, handlers_last)
    finally:
        if w1.returncode is None:
            w1.kill()
            await w1.wait()


async def _after_kill(
    client: Client, handle: WorkflowHandle[Any, Any], w2_cache: int, handlers_last: bool
) -> Outcome | None:
    query = asyncio.create_task(
        handle.query(SplitActivation.state, rpc_timeout=timedelta(seconds=WAIT))
    )
    await asyncio.sleep(QUERY_PARKS)  # no workflow task pending: sent to W1's sticky queue
    await client.workflow_service.reset_sticky_task_queue(
        ResetStickyTaskQueueRequest(
            namespace=client.namespace, execution=WorkflowExecution(workflow_id=handle.id)
        )
    )
    await client.get_async_activity_handle(
        workflow_id=handle.id, run_id=handle.result_run_id, activity_id="a1"
    ).complete("done")
    # Take the workflow task the completion scheduled, and never answer it: it times out.
    stolen = await asyncio.wait_for(
        client.workflow_service.poll_workflow_task_queue(
            PollWorkflowTaskQueueRequest(
                namespace=client.namespace,
                task_queue=TaskQueue(name=handle.id),
                identity="thief",
            )
        ),
        WAIT,
    )
    if stolen.HasField("query"):
        query.cancel()
        await handle.terminate()
        return None
    update = asyncio.create_task(handle.execute_update(SplitActivation.decide))
    async with Worker(
        client,
        task_queue=handle.id,
        identity="W2",
        **opted(handlers_last),
        max_cached_workflows=w2_cache,
    ):
        answer = await asyncio.wait_for(query, WAIT)
        assert await asyncio.wait_for(update, WAIT) == "ok"
        result = await asyncio.wait_for(handle.result(), WAIT)
    history = await handle.fetch_history()
    completed = [
        e.event_id
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    ]
    w2_task = completed[1]  # W1's first task, then W2's retried one
    written = [
        EventType.Name(e.event_type).removeprefix("EVENT_TYPE_")
        for e in history.events
        if e.event_id > w2_task
    ]
    replayer = Replayer(**opted(handlers_last))
    replay = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    fails_at = await first_unreplayable(replayer, history)
    return Outcome(answer, result, written, w2_task, replay.replay_failure, fails_at)


async def split_activation(
    env: WorkflowEnvironment, quiet_branch: bool, w2_cache: int, handlers_last: bool = False
) -> Outcome:
    client = await Client.connect(
        env.client.service_client.config.target_host, namespace=env.client.namespace
    )
    for _ in range(ATTEMPTS):
        outcome = await _attempt(client, quiet_branch, w2_cache, handlers_last)
        if outcome is not None:
            return outcome
    raise AssertionError(f"the query never waited on the sticky queue in {ATTEMPTS} attempts")


@pytest.mark.subprocess
async def test_a_query_task_splits_the_activation_and_the_history_does_not_replay(
    dev_env: WorkflowEnvironment,
) -> None:
    """SDK behaviour, documented: today's temporalio writes a history it cannot replay."""
    outcome = await split_activation(dev_env, quiet_branch=False, w2_cache=1000)
    # The query saw the activity's branch run, before any workflow task delivered it.
    assert outcome.query_answer == ["activity"]
    assert outcome.result == ["activity", "update"]  # a replay applies the Update first
    # Live: the branch's command (from the query's activation), then the Update's acceptance.
    assert outcome.after_w2_task[:3] == [
        "WORKFLOW_PROPERTIES_MODIFIED",
        "WORKFLOW_EXECUTION_UPDATE_ACCEPTED",
        "WORKFLOW_PROPERTIES_MODIFIED",
    ]
    assert isinstance(outcome.replay_failure, NondeterminismError), outcome.replay_failure
    # A replay expects the Update's acceptance where the history has the branch's command: the
    # history replays up to the second worker's task, and not past the first two events it
    # wrote (Core finds the disagreement once the branch's command is followed by another).
    assert outcome.replay_fails_at is not None
    assert outcome.w2_task < outcome.replay_fails_at[0] <= outcome.w2_task + 2


@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("quiet_branch", "w2_cache", "order"),
    [(False, 0, ["update", "activity"]), (True, 1000, ["activity", "update"])],
    ids=["worker-without-cache", "branch-without-command"],
)
async def test_what_keeps_the_history_replayable(
    dev_env: WorkflowEnvironment, quiet_branch: bool, w2_cache: int, order: list[str]
) -> None:
    """The same choreography replays if the answering worker keeps no cache (the run is evicted
    after the query) or if the activity's branch issues no command in that activation.

    Neither keeps what the code saw the same: without a cache the run applies the Update
    first, after a query answered that the activity's branch had run; with a quiet branch the
    live run applied the activity first and a replay applies the Update first (the history
    replays only because the commands come out the same, in the same order).
    """
    outcome = await split_activation(dev_env, quiet_branch=quiet_branch, w2_cache=w2_cache)
    assert outcome.query_answer == ["activity"]
    assert outcome.result == order
    assert outcome.after_w2_task[0] == "WORKFLOW_EXECUTION_UPDATE_ACCEPTED"
    assert outcome.replay_failure is None


@pytest.mark.subprocess
@pytest.mark.parametrize("w2_cache", [1000, 0], ids=["cached", "worker-without-cache"])
async def test_with_handlers_last_the_activity_comes_first_and_the_history_replays(
    dev_env: WorkflowEnvironment, w2_cache: int
) -> None:
    """The fix (waitstate/activation_order.py): where a replay (or a worker with no cache) gets
    the activity's completion and the Update in one activation, it applies the completion
    first, as the live run did when the query's activation came apart from the Update's."""
    outcome = await split_activation(
        dev_env, quiet_branch=False, w2_cache=w2_cache, handlers_last=True
    )
    assert outcome.query_answer == ["activity"]
    assert outcome.result == ["activity", "update"]
    assert outcome.after_w2_task[:3] == [
        "WORKFLOW_PROPERTIES_MODIFIED",
        "WORKFLOW_EXECUTION_UPDATE_ACCEPTED",
        "WORKFLOW_PROPERTIES_MODIFIED",
    ]
    assert outcome.replay_failure is None
