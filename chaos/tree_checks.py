"""The tree rows' invariants (chaos.trees), read from what a tree left: every node's history and
its listing under the root (`RootWorkflowId`), the lead's answer, the demo systems' job records.

Pure functions of a `Tree` (what chaos.trees read after the tree's root ended), so they are
checked without a server (tests/chaos_checks/test_trees.py).

Per tree:
- every child workflow id was started once: one StartChildWorkflowExecutionInitiated and at most
  one ChildWorkflowExecutionStarted per id in its parent's history, and one first run per id in
  the listing (a second execution of an id that is not a continue-as-new is a second start);
- every node the listing has is one its parent's history started (nothing else runs in the tree);
- each child's end was delivered once: one close event per child in its parent's history (for a
  tree that completes: ChildWorkflowExecutionCompleted), and the lead's model saw each result
  once (its answer lists one line per result it was given, `chaos.tree_app.lead_script`);
- no external job was started twice (one job per idempotency key of the tree's nodes), and none
  is running once the tree has ended;
- for a cancelled tree: every node closed, and no model call started after the node's own
  cancel was requested (ActivityTaskStarted of `call_model` against the node's
  WorkflowExecutionCancelRequested); those started after the root's are counted (a node may
  start one between the root's cancel and its own, which comes a level per workflow task).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from temporalio.api.enums.v1 import EventType

from chaos.history import activity_starts
from chaos.tree_app import listed
from waitstate.schemas.run import CALL_MODEL

INITIATED = EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED
START_FAILED = EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_FAILED
CHILD_STARTED = EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED
CANCEL_REQUESTED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED
STARTED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED
# A child's end as its parent's history records it, and the attribute that names the child.
CHILD_ENDS = {
    EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED: (
        "completed",
        "child_workflow_execution_completed_event_attributes",
    ),
    EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_FAILED: (
        "failed",
        "child_workflow_execution_failed_event_attributes",
    ),
    EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_CANCELED: (
        "canceled",
        "child_workflow_execution_canceled_event_attributes",
    ),
    EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_TIMED_OUT: (
        "timed_out",
        "child_workflow_execution_timed_out_event_attributes",
    ),
    EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_TERMINATED: (
        "terminated",
        "child_workflow_execution_terminated_event_attributes",
    ),
}
# What a job's record says of a job still going.
OPEN_JOBS = frozenset({"running", "input_required"})


@dataclass
class Execution:
    """One execution of a node, as the listing and its history have it."""

    run_id: str
    status: str  # Temporal's: RUNNING, COMPLETED, CANCELED...
    history: list[Any] = field(default_factory=list)


@dataclass
class Tree:
    """What a tree left: its executions by workflow id (the root's included), the lead's answer
    and status, and the seconds its nodes took to close once its root had."""

    root: str
    status: str
    answer: str = ""
    fan: int = 0
    nodes: dict[str, list[Execution]] = field(default_factory=dict)
    closing: float | None = None  # None: some node was still open when the suite gave up
    unread: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ChildEvents:
    """What one parent's history says of its children, per child workflow id."""

    initiated: Counter[str]
    started: Counter[str]
    start_failed: Counter[str]
    ends: dict[str, list[str]]


def child_events(history: list[Any]) -> ChildEvents:
    """Per child workflow id: its starts initiated, started, refused, and its ends, in order."""
    initiated: Counter[str] = Counter()
    started: Counter[str] = Counter()
    failed: Counter[str] = Counter()
    ends: dict[str, list[str]] = {}
    for event in history:
        if event.event_type == INITIATED:
            initiated[
                event.start_child_workflow_execution_initiated_event_attributes.workflow_id
            ] += 1
        elif event.event_type == START_FAILED:
            failed[event.start_child_workflow_execution_failed_event_attributes.workflow_id] += 1
        elif event.event_type == CHILD_STARTED:
            attributes = event.child_workflow_execution_started_event_attributes
            started[attributes.workflow_execution.workflow_id] += 1
        elif event.event_type in CHILD_ENDS:
            name, attribute = CHILD_ENDS[event.event_type]
            child = getattr(event, attribute).workflow_execution.workflow_id
            ends.setdefault(child, []).append(name)
    return ChildEvents(initiated, started, failed, ends)


def _first_runs(executions: list[Execution]) -> int:
    """How many of an id's executions are first runs (not continued from another)."""
    firsts = 0
    for execution in executions:
        start = execution.history[0] if execution.history else None
        if start is None or start.event_type != STARTED:
            firsts += 1  # unread: counted as a first run, so a duplicate is not missed
        elif not start.workflow_execution_started_event_attributes.continued_execution_run_id:
            firsts += 1
    return firsts


def started_once(tree: Tree) -> list[str]:
    """Each child started once by its parent, run once, and known to its parent; every node of
    the listing started by a parent of the tree."""
    found = []
    initiated_by: dict[str, str] = {}
    for node, executions in tree.nodes.items():
        for execution in executions:
            seen = child_events(execution.history)
            for child, n in seen.initiated.items():
                if n != 1 or child in initiated_by:
                    found.append(f"{tree.root}: {child} initiated {n} times by {node}")
                initiated_by[child] = node
                if seen.started[child] > 1:
                    found.append(f"{tree.root}: {child} started {seen.started[child]} times")
            found += [
                f"{tree.root}: {child} refused at its start ({n}x): its id was taken"
                for child, n in seen.start_failed.items()
            ]
    for node, executions in tree.nodes.items():
        if node == tree.root:
            continue
        if node not in initiated_by:
            found.append(f"{tree.root}: {node} runs in the tree, no parent started it")
        if (firsts := _first_runs(executions)) != 1:
            found.append(f"{tree.root}: {node} has {firsts} first runs")
    missing = sorted(set(initiated_by) - set(tree.nodes))
    found += [f"{tree.root}: {child} started, but not listed under the root" for child in missing]
    return found


def child_ends(tree: Tree) -> list[tuple[str, str, list[str]]]:
    """Every started child's ends as its parent's history records them: (parent, child, ends)."""
    found = []
    for node, executions in sorted(tree.nodes.items()):
        for execution in executions:
            seen = child_events(execution.history)
            found += [(node, child, seen.ends.get(child, [])) for child in seen.started]
    return found


def delivered_once(tree: Tree, *, completes: bool) -> list[str]:
    """At most one end per started child in its parent's history; for a tree that completes,
    exactly one, ChildWorkflowExecutionCompleted, and the lead's answer lists each of its
    children's results once, `fan` in all."""
    found = []
    for parent, child, ends in child_ends(tree):
        if len(ends) > 1 or (completes and len(ends) != 1):
            found.append(f"{tree.root}: {parent} got {len(ends)} ends of {child}: {ends}")
        elif completes and ends != ["completed"]:
            found.append(f"{tree.root}: {child} ended {ends[0]} in {parent}'s history")
    if completes:
        found += _lead_saw_once(tree)
    return found


def waited_for_children(tree: Tree) -> list[str]:
    """A cancelled parent closes once its children have (workflows/tree.py: it "asks Temporal
    to cancel them and waits until they have"): its history records every started child's
    end."""
    return [
        f"{tree.root}: {parent} closed before its child {child.removeprefix(parent + '/')} "
        "had ended (no end of it in its history)"
        for parent, child, ends in child_ends(tree)
        if not ends
    ]


def _lead_saw_once(tree: Tree) -> list[str]:
    """The lead's answer (one line per result its model was given) lists each of the root's
    children once, `fan` in all, each completed."""
    found = []
    root = tree.nodes.get(tree.root, [])
    children = [c for e in root for c in child_events(e.history).initiated]
    count, said = listed(tree.answer)
    nodes = Counter(name for name, _ in said)
    wanted = {child.removeprefix(f"{tree.root}/") for child in children}
    if count != tree.fan or len(said) != tree.fan:
        found.append(
            f"{tree.root}: the lead's model saw {count} results ({len(said)} listed), "
            f"for {tree.fan} sub-agents"
        )
    found += [
        f"{tree.root}: the lead's model saw {name}'s result {n} times"
        for name, n in nodes.items()
        if n > 1
    ]
    found += [
        f"{tree.root}: the lead's model never saw {name}'s result"
        for name in sorted(wanted - set(nodes))
    ]
    found += [
        f"{tree.root}: the lead's model was told {name} {status}"
        for name, status in said
        if status != "completed"
    ]
    return found


def jobs_once(
    tree: Tree,
    keys: dict[str, dict[str, Any]],
    jobs: dict[str, Any],
    cancelled: set[str] | None = None,
) -> list[str]:
    """The tree's jobs (the demo systems' records under its nodes' idempotency keys, each
    `<node>/<call>`): one per key, none still running; those `cancelled` (running when the
    tree was cancelled) each sent a cancel and ended cancelled (one that ended otherwise ran
    on past the cancel)."""
    found = []
    for key, record in sorted(keys.items()):
        if not key.startswith(f"{tree.root}/"):
            continue
        if record["jobs_created"] != 1:
            found.append(f"{tree.root}: key {key} created {record['jobs_created']} jobs")
        status = jobs.get(record.get("job_id") or "", {}).get("status")
        if status in OPEN_JOBS:
            found.append(
                f"{tree.root}: job {record['job_id']} under {key} still {status} "
                f"(cancels sent {record['cancels']})"
            )
        elif record.get("job_id") in (cancelled or set()) and (
            status != "cancelled" or record["cancels"] < 1
        ):
            found.append(
                f"{tree.root}: job {record['job_id']} under {key} ended {status}, "
                f"{record['cancels']} cancels sent"
            )
    return found


def tree_keys(tree: Tree, keys: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The job records of the tree's nodes (the root's own calls have none: it calls agents)."""
    return {k: v for k, v in keys.items() if k.startswith(f"{tree.root}/")}


def closed(tree: Tree) -> list[str]:
    """Every execution of the tree closed."""
    return [
        f"{tree.root}: {node} still {execution.status}"
        for node, executions in sorted(tree.nodes.items())
        for execution in executions
        if execution.status == "RUNNING"
    ]


def _cancel_requested(executions: list[Execution]) -> datetime | None:
    """When the node's cancel was first requested (its own history), if it was."""
    times = [
        e.event_time.ToDatetime(tzinfo=UTC)
        for execution in executions
        for e in execution.history
        if e.event_type == CANCEL_REQUESTED
    ]
    return min(times) if times else None


def model_calls_after_cancel(tree: Tree) -> tuple[int, list[str]]:
    """The model calls any node started after the root's cancel was requested (a count: the
    cancel goes down the tree a level per workflow task, so a node may start one before its
    own cancel comes), and a line for each one a node started after its own cancel request."""
    at = _cancel_requested(tree.nodes.get(tree.root, []))
    if at is None:
        return 0, [f"{tree.root}: no cancel request in the root's history"]
    count = 0
    late = []
    for node, executions in sorted(tree.nodes.items()):
        own = _cancel_requested(executions)
        for execution in executions:
            for when, attempt in _model_starts(execution.history):
                count += when > at
                if own is not None and when > own:
                    late.append(
                        f"{tree.root}: {node} started a model call (attempt {attempt}) "
                        f"{(when - own).total_seconds():.2f} s after its cancel request"
                    )
    return count, late


def _model_starts(history: list[Any]) -> list[tuple[datetime, int]]:
    """When each model call's (last) attempt started, and which attempt it was."""
    return [
        (event.event_time.ToDatetime(tzinfo=UTC), attempt)
        for event, attempt in activity_starts(history, CALL_MODEL)
    ]


def budget_kept(tree: Tree, budget: int, counted: int | None) -> tuple[tuple[int, int], list[str]]:
    """A tree under a root budget of `budget` tokens spends past it by at most one model call
    in flight per node (each node reserves from the root before each call): what it spent past
    the budget and that bound, from every node's model calls in its histories; and the root's
    count (`counted`, its state's `budget.spent_tokens`) must be what the nodes spent, each
    call counted once, whatever the kills retried."""
    spent, bound = 0, budget
    for executions in tree.nodes.values():
        calls = [c for e in executions for c in _model_tokens(e.history)]
        spent += sum(calls)
        bound += max(calls, default=0)
    found = []
    if spent > bound:
        found.append(f"{tree.root}: the tree spent {spent:,} tokens, past its bound {bound:,}")
    if counted is not None and counted != spent:
        found.append(f"{tree.root}: the root counted {counted:,} tokens; its nodes spent {spent:,}")
    return (spent - budget, bound - budget), found


def _model_tokens(history: list[Any]) -> list[int]:
    """The tokens of each model call a history records (its results' usage)."""
    tokens = []
    for event in history:
        if event.event_type != EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            continue
        payloads = event.activity_task_completed_event_attributes.result.payloads
        if not payloads or payloads[0].data[:1] != b"{":
            continue
        usage = json.loads(payloads[0].data).get("usage")
        if isinstance(usage, dict) and {"input_tokens", "output_tokens"} & set(usage):
            tokens.append(int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0)))
    return tokens
