"""Figure 12: cancelling a tree mid-way: a lead whose N children all wait for a person's
approval is cancelled, and every node must close, holding no job and calling no model after.

Per repetition, on a fresh worker: `sizes.cancel_trials` trees, each cancelled once all of its
children wait. Read from the histories: the time from the root's cancel request (its
`WorkflowExecutionCancelRequested` event) to the last node's close (the latest close event of
the root and its children), its 99th percentile over the repetition's trials; and the model
calls of any node scheduled or started after the cancel request. Ours alone: a raw Temporal
floor has no agent to cancel.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import datetime

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowFailureError

from bench.figures import Row, Sizes, percentile
from bench.stack import RESULT_TIMEOUT, Stack, new_id
from bench.tree_app import WAITING_LEAD
from waitstate.schemas import RunInput
from waitstate.schemas.run import CALL_MODEL

APP = "bench.tree_app:app"
SETTLED_SECONDS = 2.0  # the target: every node closed within 2 s of the cancel, p99
CLOSES = {
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
}


async def figure12(stack: Stack, sizes: Sizes, reps: int, log: Callable[[str], None]) -> list[Row]:
    """Trees of `sizes.cancel_children` waiting children, cancelled."""
    n = sizes.cancel_children
    label = f"12 ({n} children)"
    settled = Row(
        label, f"cancel → every node closed, p99 of {sizes.cancel_trials} trees", "s",
        target=f"≤ {SETTLED_SECONDS:g} s", check=lambda ours, _: ours <= SETTLED_SECONDS,
    )  # fmt: skip
    late = Row(
        label, "model calls scheduled or started after the cancel", "calls", target="0",
        check=lambda ours, _: ours == 0,
    )  # fmt: skip
    for rep in range(reps):
        queue, worker = await stack.lease("ours", f"f12-{rep}", apps=APP)
        took: list[float] = []
        calls = 0
        try:
            for _ in range(sizes.cancel_trials):
                seconds, after = await _cancelled_tree(stack, queue, n)
                took.append(seconds)
                calls += after
        finally:
            await stack.release(worker)
        settled.ours.append(percentile(took, 0.99))
        late.ours.append(calls)
        log(
            f"  fig 12 rep {rep + 1}: cancel → closed p99 {settled.ours[-1]:.2f} s (max "
            f"{max(took):.2f}, median {percentile(took, 0.5):.2f}), {calls} late model calls"
        )
    return [settled, late]


async def _cancelled_tree(stack: Stack, queue: str, n: int) -> tuple[float, int]:
    """One tree of `n` waiting children, cancelled once they all wait: the seconds from the
    cancel request to the last node's close, and the model calls after the request."""
    root = new_id("f12")
    await stack.runs.start(RunInput(task=f"Wait, fan={n}", agent=WAITING_LEAD), run_id=root,
                           task_queue=queue)  # fmt: skip
    query = f"RootWorkflowId = '{root}' AND WaitingFor = 'approval'"
    async with asyncio.timeout(RESULT_TIMEOUT):
        while True:  # a poll of the list view, not a wait for an event of ours
            if await stack.count(query) >= n:
                break
            await asyncio.sleep(0.1)
    handle = stack.client.get_workflow_handle(root)
    await handle.cancel()
    with contextlib.suppress(WorkflowFailureError):
        await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)
    (events,) = await stack.history(root)
    requested = next(
        _at(e) for e in events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED
    )  # fmt: skip
    children = [
        e.start_child_workflow_execution_initiated_event_attributes.workflow_id
        for e in events
        if e.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED
    ]
    if len(children) != n:
        raise RuntimeError(f"{root}: {len(children)} children, not {n}")
    histories = [events, *[(await _closed(stack, child))[0] for child in children]]
    closed = max(_at(e) for history in histories for e in history if e.event_type in CLOSES)
    return (closed - requested).total_seconds(), sum(_late(h, requested) for h in histories)


async def _closed(stack: Stack, run_id: str) -> list[list[HistoryEvent]]:
    """The history of a node, once it has closed."""
    async with asyncio.timeout(RESULT_TIMEOUT):
        while True:
            runs = await stack.history(run_id)
            if runs and runs[-1] and runs[-1][-1].event_type in CLOSES:
                return runs
            await asyncio.sleep(0.1)


def _late(events: list[HistoryEvent], moment: datetime) -> int:
    """The model calls in `events` scheduled or started after `moment`."""
    models = set()
    late = 0
    for event in events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            if event.activity_task_scheduled_event_attributes.activity_type.name == CALL_MODEL:
                models.add(event.event_id)
                late += _at(event) > moment
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            started = event.activity_task_started_event_attributes.scheduled_event_id
            late += started in models and _at(event) > moment
    return late


def _at(event: HistoryEvent) -> datetime:
    return event.event_time.ToDatetime()
