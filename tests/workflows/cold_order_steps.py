"""The steps of the cold-worker ordering tests (test_cold_order.py): a worker process, serving
one of cold_order_app's apps, that dies while its run waits on a timer; the timer's firing
while no worker is up; whether it and what raced it reached the run in one workflow task; and
the replay of the history the worker that came back wrote."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import (
    PollWorkflowTaskQueueRequest,
    ResetStickyTaskQueueRequest,
)
from temporalio.client import Client, WorkflowHandle, WorkflowHistory
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Replayer

from examples.systems import DemoSystems
from examples.systems import create_app as systems_app
from tests.helpers import eventually
from tests.rigs import WorkerProcess, worker_process_beside
from waitstate.activation_order import workflow_runner
from waitstate.client import NotAnswered, WaitstateClient
from waitstate.converter import DATA_CONVERTER
from waitstate.schemas.run import RunState
from waitstate.workflows.agent_run import AgentRunWorkflow

KEYS = {"cold": "d" * 40}
# What raced the timer, in the history: a predicate over its events.
Racer = Callable[[HistoryEvent], bool]
# A query of a run that ended is answered by a worker that replays the whole run first: the one
# just started, cold, on a loaded machine. The time it may take, and the time to ask again in
# when the server gave up on an answer first ("context canceled" once, in a full suite's run).
ENDED_QUERY_TIMEOUT = timedelta(seconds=60)
ENDED_QUERY_WITHIN = 180.0
_GAVE_UP = (RPCStatusCode.CANCELLED, RPCStatusCode.DEADLINE_EXCEEDED)
T = TypeVar("T")


class Cold(NamedTuple):
    """A worker process a test kills and starts again, and the demo systems it calls: their
    URL and their state (each job as the system received it, its callback token included)."""

    worker: WorkerProcess
    systems_url: str
    systems: DemoSystems


@asynccontextmanager
async def cold_worker_serving(
    client: Client, task_queue: str, tmp_path: Path, app: str
) -> AsyncIterator[Cold]:
    """A worker process, started, serving the test's queue with `app` (a `module:attr` of
    tests/workflows/cold_order_app.py), and the demo systems and the gateway in this process."""
    systems = systems_app(export_seconds=0.5)
    async with worker_process_beside(
        client, task_queue, tmp_path / "worker.log", systems, KEYS, WAITSTATE_APPS=app
    ) as (worker, url):
        yield Cold(worker, url, systems.state.systems)


async def events(handle: WorkflowHandle[Any, Any]) -> list[HistoryEvent]:
    return [event async for event in handle.fetch_history_events()]


async def until_the_timer_fired(
    handle: WorkflowHandle[Any, Any], *, taken: bool, what: str
) -> None:
    """Until the run's timer (`what`: its first, the only one due soon) has fired into a
    workflow task for the dead worker, and, if `taken`, the frozen worker took that task."""

    async def fired() -> bool:
        history = await events(handle)
        fired = any(e.event_type == EventType.EVENT_TYPE_TIMER_FIRED for e in history)
        last = history[-1].event_type
        return fired and (not taken or last == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED)

    await eventually(fired, what)


async def die_as_the_timer_fires(
    worker: WorkerProcess, handle: WorkflowHandle[Any, Any], *, taken: bool, what: str
) -> None:
    """The worker dies before the timer (`what`) fires: SIGKILLed before its task reaches it,
    or (`taken`) frozen until it has taken that task, then SIGKILLed holding it (the task then
    waits out Temporal's 10 s timeout). Either way the task goes, cold, to the worker started
    next."""
    if taken:
        worker.freeze()
        await until_the_timer_fired(handle, taken=True, what=what)
        await worker.kill()
    else:
        await worker.kill()
        await until_the_timer_fired(handle, taken=False, what=what)


async def query_parked_on_the_dead_worker(
    client: Client, handle: WorkflowHandle[Any, Any]
) -> asyncio.Task[Any]:
    """A status query sent while the run waits and its worker is dead: the server sends it as
    a task of its own to that worker's sticky queue, where it waits for the sticky timeout
    (the worker's default, 10 s) before it moves to the normal queue. The run's stickiness is
    then reset, so the run's next workflow task goes to the normal queue at once. Returns the
    query's task (its answer, or its failure)."""
    query = asyncio.create_task(
        # Long enough for what comes before its answer (the window's timer, a stolen task's
        # timeout, a worker process started) on a loaded machine: at 60 s a full suite's run
        # once cancelled it first.
        handle.query(AgentRunWorkflow.status, rpc_timeout=timedelta(seconds=180))
    )
    await asyncio.sleep(1.0)  # no workflow task pending: the query goes to the sticky queue
    await client.workflow_service.reset_sticky_task_queue(
        ResetStickyTaskQueueRequest(
            namespace=client.namespace, execution=WorkflowExecution(workflow_id=handle.id)
        )
    )
    return query


async def steal_the_next_task(client: Client, task_queue: str) -> bool:
    """Take the run's next workflow task from the normal queue, as a worker that dies holding
    it would, and never answer it: it waits out its timeout (10 s) and is retried. False if the
    poll got the query instead (the server did not park it on the sticky queue), which is then
    never answered."""
    stolen = await asyncio.wait_for(
        client.workflow_service.poll_workflow_task_queue(
            PollWorkflowTaskQueueRequest(
                namespace=client.namespace, task_queue=TaskQueue(name=task_queue), identity="thief"
            )
        ),
        60,
    )
    return not stolen.HasField("query")


def update_accepted(name: str) -> Racer:
    """The acceptance of an Update of the run's handler `name`."""

    def accepted(event: HistoryEvent) -> bool:
        attributes = event.workflow_execution_update_accepted_event_attributes
        return (
            event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
            and attributes.accepted_request.input.name == name
        )

    return accepted


def cancel_requested(event: HistoryEvent) -> bool:
    """The request to cancel the run (`starter.py cancel`)."""
    return event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED


def in_one_task(history: Sequence[HistoryEvent], racer: Racer) -> bool:
    """Whether the run's first timer fired in the workflow task that took the racer (no task
    completed between them): the order these tests are about.

    A timer's firing and a cancel request are events before the task that takes them; an
    Update is an event only once accepted, right after the completion of the task that took
    it."""
    fired = next(
        i for i, e in enumerate(history) if e.event_type == EventType.EVENT_TYPE_TIMER_FIRED
    )
    raced = next(i for i, e in enumerate(history) if racer(e))
    completed = [
        e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED for e in history[fired:raced]
    ]
    if history[raced].event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
        # The task's completion is the event just before the acceptance, and the only one since.
        return fired < raced and completed[-1] and sum(completed) == 1
    return fired < raced and not any(completed)


async def replay_failure(history: WorkflowHistory) -> Exception | None:
    """Why the run's history does not replay on today's AgentRunWorkflow (None: it does)."""
    replay = await Replayer(
        workflow_runner=workflow_runner(),
        workflows=[AgentRunWorkflow],
        data_converter=DATA_CONVERTER,
    ).replay_workflow(history, raise_on_replay_failure=False)
    return replay.replay_failure


async def ended_status(handle: WorkflowHandle[Any, Any]) -> RunState:
    """The status query's answer for the run `handle`, which ended: asked again when the server
    gave up waiting for a worker's answer (an ended run's state no longer changes)."""
    return await _asked_again(
        lambda: handle.query(AgentRunWorkflow.status, rpc_timeout=ENDED_QUERY_TIMEOUT),
        f"run {handle.id}'s status",
    )


async def ended_thread_status(client: WaitstateClient, thread_id: str) -> RunState:
    """`ended_status`, asked through the client (`WaitstateClient.query`), of a thread's run."""
    return await _asked_again(
        lambda: client.query(thread_id, rpc_timeout=ENDED_QUERY_TIMEOUT),
        f"thread {thread_id}'s status",
    )


async def _asked_again(ask: Callable[[], Awaitable[T]], what: str) -> T:
    async def answered() -> T | None:
        try:
            return await ask()
        except (RPCError, NotAnswered) as err:
            rpc = err if isinstance(err, RPCError) else err.__cause__
            if isinstance(rpc, RPCError) and rpc.status in _GAVE_UP:
                return None
            raise

    return await eventually(answered, what, within=ENDED_QUERY_WITHIN)
