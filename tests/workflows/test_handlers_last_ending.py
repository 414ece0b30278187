"""With handlers after resolutions (waitstate/activation_order.py), a run that ends or continues
as new in the first half of a split activation is not given the second: an Update that came
with the resolution that ended the run is never taken by it (it would be accepted by a run that
is gone, its effect lost); the server hands it to the next run.

Plain temporalio on the real dev server: the worker is down while the run's activity completes
and an Update is sent, so the next worker gets both in one activation; the run continues as new
as the activity's result says, and the next run takes the Update."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner, Worker

from tests.helpers import until_the_update_is_admitted
from tests.workflows.test_split_activation import HANDLERS_LAST, WAIT, parked
from waitstate.activation_order import HandlersLast


@workflow.defn(name="EndsWithAnUpdate", sandboxed=False)
class EndsWithAnUpdate:
    handlers_last_markers = frozenset({HANDLERS_LAST})

    def __init__(self) -> None:
        self.got: list[str] = []

    @workflow.run
    async def run(self, activities: str, continued: bool) -> list[str]:
        workflow.patched(HANDLERS_LAST)
        if continued:
            await workflow.wait_condition(lambda: bool(self.got))
            return self.got
        await workflow.execute_activity(
            parked,
            task_queue=activities,
            activity_id="a1",
            start_to_close_timeout=timedelta(minutes=5),
        )
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(args=[activities, True])

    @workflow.update
    def poke(self, value: str) -> str:
        self.got.append(value)
        return workflow.info().run_id


def _worker(client: Client, task_queue: str) -> Worker:
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[EndsWithAnUpdate],
        unsandboxed_workflow_runner=HandlersLast(UnsandboxedWorkflowRunner()),
        max_cached_workflows=0,
    )


async def test_an_update_that_comes_as_the_run_continues_as_new_goes_to_the_next_run(
    dev_env: WorkflowEnvironment,
) -> None:
    client = dev_env.client
    task_queue = f"ending-{uuid.uuid4().hex[:8]}"
    activities = f"{task_queue}-activities"
    async with Worker(client, task_queue=activities, activities=[parked]):
        async with _worker(client, task_queue):
            handle = await client.start_workflow(
                EndsWithAnUpdate.run, args=[activities, False], id=task_queue,
                task_queue=task_queue,
            )  # fmt: skip

            async def waits_for_the_activity() -> None:
                while not (await handle.describe()).raw_description.pending_activities:  # noqa: ASYNC110 (polling the server)
                    await asyncio.sleep(0.05)

            await asyncio.wait_for(waits_for_the_activity(), WAIT)
        # No worker: the activity completes and the Update comes; one workflow task takes both.
        await client.get_async_activity_handle(
            workflow_id=task_queue, run_id=handle.result_run_id, activity_id="a1"
        ).complete("done")
        poking = asyncio.create_task(
            handle.execute_update(EndsWithAnUpdate.poke, "u1", id="poke-u1")
        )
        await until_the_update_is_admitted(client, handle, "poke-u1")
        # The server holds the Update while the task the completion scheduled waits for a
        # worker: that task brings both.
        waiting = [e.event_type async for e in handle.fetch_history_events()]
        async with _worker(client, task_queue):
            taken_by = await asyncio.wait_for(poking, WAIT)
            latest = client.get_workflow_handle(task_queue)
            result = await asyncio.wait_for(latest.result(), WAIT)
        first = await client.get_workflow_handle(
            task_queue, run_id=handle.result_run_id
        ).fetch_history()
    replay = await Replayer(
        workflows=[EndsWithAnUpdate],
        unsandboxed_workflow_runner=HandlersLast(UnsandboxedWorkflowRunner()),
    ).replay_workflow(first, raise_on_replay_failure=False)

    # The race this is about: one workflow task took the completion and the Update.
    assert waiting[-2:] == [
        EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED,
        EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED,
    ]
    completed = next(
        i
        for i, e in enumerate(first.events)
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
    )
    assert [e.event_type for e in first.events[completed + 1 :]] == [
        EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED,
        EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED,
        EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
    ]
    # The next run took the Update, and has its effect; the first run never took it.
    assert result == ["u1"]
    assert taken_by != handle.result_run_id
    assert not any(
        e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
        for e in first.events
    )
    assert replay.replay_failure is None
