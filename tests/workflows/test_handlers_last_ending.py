"""With handlers after resolutions (waitstate/activation_order.py), a run that ends or continues
as new in the activation where an Update also arrives must not do so before the Update's
handler: the handler would change a run that is gone, and its Update, accepted, would be lost.
`all_handlers_done()` holds the run until the activation's second half has applied it.

Plain temporalio on the real dev server: the worker is down while the run's activity completes
and an Update is sent, so the next worker gets both in one activation; the run then continues
as new, carrying what its handlers received."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from datetime import timedelta

import pytest
from temporalio import workflow
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner, Worker

from tests.workflows.test_split_activation import HANDLERS_LAST, WAIT, parked
from waitstate.activation_order import HandlersLast, all_handlers_done

WAITS: dict[str, Callable[[], bool]] = {
    "all_handlers_done": all_handlers_done,
    "all_handlers_finished": workflow.all_handlers_finished,
}


@workflow.defn(name="EndsWithAnUpdate", sandboxed=False)
class EndsWithAnUpdate:
    handlers_last_markers = frozenset({HANDLERS_LAST})

    def __init__(self) -> None:
        self.got: list[str] = []

    @workflow.run
    async def run(self, activities: str, wait: str, carried: list[str] | None) -> list[str]:
        workflow.patched(HANDLERS_LAST)
        if carried is not None:
            return carried
        await workflow.execute_activity(
            parked,
            task_queue=activities,
            activity_id="a1",
            start_to_close_timeout=timedelta(minutes=5),
        )
        await workflow.wait_condition(WAITS[wait])
        workflow.continue_as_new(args=[activities, wait, self.got])

    @workflow.update
    def poke(self, value: str) -> str:
        self.got.append(value)
        return "ok"


def _worker(client: Client, task_queue: str) -> Worker:
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[EndsWithAnUpdate],
        unsandboxed_workflow_runner=HandlersLast(UnsandboxedWorkflowRunner()),
        max_cached_workflows=0,
    )


@pytest.mark.parametrize(
    ("wait", "carried"), [("all_handlers_done", ["u1"]), ("all_handlers_finished", [])]
)
async def test_a_run_continues_as_new_with_what_the_updates_of_its_last_activation_brought(
    dev_env: WorkflowEnvironment, wait: str, carried: list[str]
) -> None:
    """`all_handlers_done`: the Update is applied before the run continues as new, which carries
    it. The SDK's `all_handlers_finished` alone (documented): the run continued first, and the
    Update, accepted, changed the run that was gone."""
    client = dev_env.client
    task_queue = f"ending-{uuid.uuid4().hex[:8]}"
    activities = f"{task_queue}-activities"
    async with Worker(client, task_queue=activities, activities=[parked]):
        async with _worker(client, task_queue):
            handle = await client.start_workflow(
                EndsWithAnUpdate.run, args=[activities, wait, None], id=task_queue,
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
        poking = asyncio.create_task(handle.execute_update(EndsWithAnUpdate.poke, "u1"))
        await asyncio.sleep(1.0)
        async with _worker(client, task_queue):
            assert await asyncio.wait_for(poking, WAIT) == "ok"
            result = await asyncio.wait_for(client.get_workflow_handle(task_queue).result(), WAIT)
        first = await client.get_workflow_handle(
            task_queue, run_id=handle.result_run_id
        ).fetch_history()
    replay = await Replayer(
        workflows=[EndsWithAnUpdate],
        unsandboxed_workflow_runner=HandlersLast(UnsandboxedWorkflowRunner()),
    ).replay_workflow(first, raise_on_replay_failure=False)

    assert result == carried
    assert replay.replay_failure is None
