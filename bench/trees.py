"""Figure 11: an agent tree's fan-out, against raw Temporal child workflows doing the same.

Ours: a run of `bench-lead` (bench/tree_app.py, scripted, offline) whose first turn calls its
sub-agent's tool `agent_bench-leaf` N times; the N children run at once as child workflows
(AgentRunWorkflow, each answering in one model call), and the lead answers in a second call.
The floor (bench/floor_tree.py): a parent workflow that runs one activity, starts N child
workflows at once with the SDK's plain API (one activity each), waits for all of them, and runs
one more activity. Both move the same strings (bench/tree_text.py).

Per side and repetition, on a fresh worker (after a warm-up tree of two children): the time from
the root's start to its result, the worker's and the server's CPU over that window, the root's
history bytes per child and, for information, the history of every node per child.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

from bench.figures import Row, Sizes
from bench.floor_tree import FLOOR_TREE, TreeInput
from bench.stack import RESULT_TIMEOUT, Side, Stack, history_bytes, new_id
from bench.tree_app import LEAD
from waitstate.schemas import RunInput

APP = "bench.tree_app:app"
RATIO = 1.15  # the targets: time and worker CPU within 1.15× the floor's
PER_CHILD_BYTES = 2_048  # the target: the parent's history per child
WARM_UP_CHILDREN = 2


async def figure11(stack: Stack, sizes: Sizes, reps: int, log: Callable[[str], None]) -> list[Row]:
    """A lead's turn fanning out to `sizes.tree_children` sub-agents, on both sides."""
    n = sizes.tree_children
    label = f"11 ({n} children)"
    wall = Row(
        label, f"{n}-child fan-out: start → the root's result", "s", target=f"≤ {RATIO}× floor",
        check=lambda _, ratio: ratio is not None and ratio <= RATIO,
    )  # fmt: skip
    cpu = Row(
        label, "worker CPU per fan-out", "ms", target=f"≤ {RATIO}× floor",
        check=lambda _, ratio: ratio is not None and ratio <= RATIO,
    )  # fmt: skip
    server_cpu = Row(label, "server CPU per fan-out", "ms")
    per_child = Row(
        label, "parent history per child", "bytes", target=f"≤ {PER_CHILD_BYTES:,}",
        check=lambda ours, _: ours <= PER_CHILD_BYTES,
    )  # fmt: skip
    every_node = Row(label, "history of every node (parent and children) per child", "bytes")
    for rep in range(reps):
        for side in sizes.sides:
            queue, worker = await stack.lease(
                side, f"f11-{side}-{rep}", apps=APP if side == "ours" else ""
            )
            try:
                await _tree(stack, side, queue, WARM_UP_CHILDREN)
                worker_before, server_before = worker.cpu_seconds(), stack.server.cpu_seconds()
                began = time.perf_counter()
                root = await _tree(stack, side, queue, n)
                elapsed = time.perf_counter() - began
                worker_used = worker.cpu_seconds() - worker_before
                server_used = stack.server.cpu_seconds() - server_before
            finally:
                await stack.release(worker)
            (events,) = await stack.history(root)
            children = _children(events)
            if len(children) != n:
                raise RuntimeError(f"{root}: {len(children)} children started, not {n}")
            nodes = await asyncio.gather(*(stack.history(child) for child in children))
            samples = {
                wall: elapsed,
                cpu: worker_used * 1000,
                server_cpu: server_used * 1000,
                per_child: history_bytes([events]) / n,
                every_node: history_bytes([events, *(runs[0] for runs in nodes)]) / n,
            }
            for row, value in samples.items():
                (row.ours if side == "ours" else row.floor).append(value)
            log(
                f"  fig 11 rep {rep + 1} {side}: {elapsed:.2f} s, worker CPU "
                f"{samples[cpu]:.0f} ms, parent history {samples[per_child]:.0f} B/child "
                f"({len(events)} events), every node {samples[every_node]:.0f} B/child"
            )
    return [wall, cpu, server_cpu, per_child, every_node]


async def _tree(stack: Stack, side: Side, queue: str, n: int) -> str:
    """Run one tree of `n` children to its root's answer: the root's workflow id.

    Raises:
        RuntimeError: the root ended otherwise, or without its children's answers.
    """
    root = new_id(f"f11-{side}")
    task = f"Survey the field, fan={n}"
    if side == "ours":
        await stack.runs.start(RunInput(task=task, agent=LEAD), run_id=root, task_queue=queue)
        outcome = await asyncio.wait_for(stack.runs.outcome(root), RESULT_TIMEOUT)
        if outcome.status != "completed":
            raise RuntimeError(f"tree {root} ended {outcome.status}: {outcome.error}")
        answer = outcome.final_output or ""
    else:
        handle = await stack.client.start_workflow(
            FLOOR_TREE, TreeInput(task), id=root, task_queue=queue, result_type=str
        )
        answer = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)
    if not answer.startswith(f"combined {n}:"):
        raise RuntimeError(f"tree {root} answered {answer[:200]!r}")
    return root


def _children(events: list[HistoryEvent]) -> list[str]:
    """The workflow ids of the children a run's history started."""
    started = EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED
    return [
        event.child_workflow_execution_started_event_attributes.workflow_execution.workflow_id
        for event in events
        if event.event_type == started
    ]
