"""What a command scheduled and cancelled within one activation costs a replay (issue 24,
item 6): it is never sent, so the history has no event of it, but the SDK numbered it. A run
that took such a branch on one side (a worker that saw a timer before an Update) and not on the
other (a replay that applies the Update first) then disagrees with its history on every later
command whose identity is its number.

- An activity's id is its number unless the workflow gives one, and Core checks the id of every
  scheduled activity: an explicit, deterministic id makes the spent number harmless.
- A timer's id is always its number (the Python SDK takes no id for a timer), and Core checks it
  when a timer fires: explicit activity ids do not help; only not starting the timer does.

Plain temporalio, no waitstate: a history written by code without the spare command, replayed by
code that issues it and cancels it in the same activation."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from temporalio import activity, workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, Worker
from temporalio.workflow import NondeterminismError

TIMEOUT = timedelta(seconds=5)
TIMER_FIRED = EventType.EVENT_TYPE_TIMER_FIRED


@activity.defn
async def noop() -> str:
    return "ok"


async def _run(*, spare: str | None, explicit_ids: bool) -> str:
    """A spare `activity` or `timer` (or none), issued and cancelled in the first activation;
    then an activity, and a timer that fires."""
    if spare == "activity":
        handle = workflow.start_activity(
            noop, start_to_close_timeout=TIMEOUT, activity_id="spare" if explicit_ids else None
        )
        handle.cancel()
    if spare == "timer":
        sleeping = asyncio.ensure_future(workflow.sleep(60))
        await asyncio.sleep(0)  # the timer is started, then cancelled: neither is sent
        sleeping.cancel()
    result: str = await workflow.execute_activity(
        noop, start_to_close_timeout=TIMEOUT, activity_id="real" if explicit_ids else None
    )
    await workflow.sleep(1)
    return result


@workflow.defn(name="SeqShift", sandboxed=False)
class Plain:
    @workflow.run
    async def run(self, explicit_ids: bool) -> str:
        return await _run(spare=None, explicit_ids=explicit_ids)


@workflow.defn(name="SeqShift", sandboxed=False)
class SpareActivity:
    @workflow.run
    async def run(self, explicit_ids: bool) -> str:
        return await _run(spare="activity", explicit_ids=explicit_ids)


@workflow.defn(name="SeqShift", sandboxed=False)
class SpareTimer:
    @workflow.run
    async def run(self, explicit_ids: bool) -> str:
        return await _run(spare="timer", explicit_ids=explicit_ids)


@pytest.mark.parametrize(
    ("replayed_by", "explicit_ids", "disagrees_on"),
    [
        (SpareActivity, False, "activity"),
        (SpareActivity, True, None),
        (SpareTimer, False, "timer"),
        (SpareTimer, True, "timer"),
    ],
    ids=["activity", "activity-explicit-ids", "timer", "timer-explicit-ids"],
)
async def test_a_command_scheduled_and_cancelled_in_one_activation(
    time_skipping_env: WorkflowEnvironment,
    task_queue: str,
    replayed_by: type,
    explicit_ids: bool,
    disagrees_on: str | None,
) -> None:
    client = time_skipping_env.client
    async with Worker(client, task_queue=task_queue, workflows=[Plain], activities=[noop]):
        handle = await client.start_workflow(
            Plain.run, explicit_ids, id=f"seq-shift-{task_queue}", task_queue=task_queue
        )
        assert await handle.result() == "ok"
    history = await handle.fetch_history()
    fired = next(i for i, e in enumerate(history.events) if e.event_type == TIMER_FIRED)
    until_fired = WorkflowHistory(history.workflow_id, history.events[:fired])

    replayer = Replayer(workflows=[replayed_by])
    replay = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    # Where it disagrees (Core's words for it are its own): the activity is checked when it is
    # scheduled, before the timer fires; the timer's id only once it fires.
    replay_until_fired = await replayer.replay_workflow(until_fired, raise_on_replay_failure=False)

    if disagrees_on is None:
        assert replay.replay_failure is None, replay.replay_failure
    else:
        assert isinstance(replay.replay_failure, NondeterminismError), replay.replay_failure
        failed_before_the_timer_fired = replay_until_fired.replay_failure is not None
        assert failed_before_the_timer_fired == (disagrees_on == "activity")
