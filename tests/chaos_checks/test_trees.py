"""The tree rows' checks (`chaos.tree_checks`) shown failing: a tree as its histories and listing
would leave it passes them; each violation planted in a copy is flagged: a child started twice or
run twice, a node no parent started, a result delivered twice or never seen by the lead's model,
a job made twice or left running, a parent closed before its child, a model call started after
the root's cancel.

In the quick tier, as test_invariants.py is: no server, no process."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

from chaos.tree_app import COMBINED
from chaos.tree_checks import (
    CANCEL_REQUESTED,
    Execution,
    Tree,
    budget_kept,
    closed,
    delivered_once,
    jobs_once,
    model_calls_after_cancel,
    started_once,
    waited_for_children,
)
from waitstate.schemas.run import CALL_MODEL

ROOT = "chaos-a-tree-kill-00"
A, B = f"{ROOT}/chaos-tree-quick-1", f"{ROOT}/chaos-tree-export-2"
AT = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def _event(kind: EventType.ValueType, at: datetime = AT, **attributes: object) -> HistoryEvent:
    event = HistoryEvent(event_type=kind)
    event.event_time.FromDatetime(at)
    for name, value in attributes.items():
        getattr(event, name).MergeFrom(value)
    return event


def _initiated(child: str) -> HistoryEvent:
    event = HistoryEvent(event_type=EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED)
    event.start_child_workflow_execution_initiated_event_attributes.workflow_id = child
    return event


def _child(kind: EventType.ValueType, attribute: str, child: str) -> HistoryEvent:
    event = HistoryEvent(event_type=kind)
    getattr(event, attribute).workflow_execution.workflow_id = child
    return event


def _started(child: str) -> HistoryEvent:
    return _child(
        EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED,
        "child_workflow_execution_started_event_attributes",
        child,
    )


def _completed(child: str) -> HistoryEvent:
    return _child(
        EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED,
        "child_workflow_execution_completed_event_attributes",
        child,
    )


def _first(continued: str = "") -> HistoryEvent:
    event = HistoryEvent(event_type=EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED)
    event.workflow_execution_started_event_attributes.continued_execution_run_id = continued
    return event


def _model_call(event_id: int, at: datetime) -> list[HistoryEvent]:
    scheduled = HistoryEvent(
        event_id=event_id, event_type=EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    )
    scheduled.activity_task_scheduled_event_attributes.activity_type.name = CALL_MODEL
    started = HistoryEvent(event_type=EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED)
    started.event_time.FromDatetime(at)
    started.activity_task_started_event_attributes.scheduled_event_id = event_id
    started.activity_task_started_event_attributes.attempt = 1
    return [scheduled, started]


def _tree() -> Tree:
    """A lead whose two children were started once and completed once, each result seen once."""
    root = [
        _first(),
        _initiated(A),
        _initiated(B),
        _started(A),
        _started(B),
        _completed(A),
        _completed(B),
    ]
    answer = f"[banner] {COMBINED} 2\nchaos-tree-quick-1: completed\nchaos-tree-export-2: completed"
    return Tree(
        ROOT,
        "completed",
        answer=answer,
        fan=2,
        nodes={
            ROOT: [Execution("r0", "COMPLETED", root)],
            A: [Execution("a0", "COMPLETED", [_first()])],
            B: [Execution("b0", "COMPLETED", [_first()])],
        },
        closing=0.5,
    )


def test_a_tree_that_kept_every_promise_passes() -> None:
    tree = _tree()
    keys = {f"{B}/call_0_0": {"jobs_created": 1, "job_id": "exp-1", "cancels": 0}}

    assert started_once(tree) == []
    assert delivered_once(tree, completes=True) == []
    assert jobs_once(tree, keys, {"exp-1": {"status": "succeeded"}}) == []
    assert closed(tree) == []
    assert waited_for_children(tree) == []


def test_a_child_started_twice_or_run_twice_or_by_no_parent_is_flagged() -> None:
    twice = _tree()
    twice.nodes[ROOT][0].history.insert(2, _initiated(A))
    rerun = _tree()
    rerun.nodes[A].append(Execution("a1", "COMPLETED", [_first()]))
    continued = _tree()
    continued.nodes[A].append(Execution("a1", "COMPLETED", [_first(continued="a0")]))
    stray = _tree()
    stray.nodes[f"{ROOT}/chaos-tree-quick-9"] = [Execution("s0", "COMPLETED", [_first()])]

    assert started_once(twice) == [f"{ROOT}: {A} initiated 2 times by {ROOT}"]
    assert started_once(rerun) == [f"{ROOT}: {A} has 2 first runs"]
    assert started_once(continued) == []  # a continue-as-new is not a second start
    assert started_once(stray) == [
        f"{ROOT}: {ROOT}/chaos-tree-quick-9 runs in the tree, no parent started it"
    ]


def test_a_result_delivered_twice_or_never_seen_by_the_lead_is_flagged() -> None:
    twice = _tree()
    twice.nodes[ROOT][0].history.append(_completed(A))
    seen_twice = _tree()
    seen_twice.answer = seen_twice.answer.replace("export-2", "quick-1")

    assert delivered_once(twice, completes=True) == [
        f"{ROOT}: {ROOT} got 2 ends of {A}: ['completed', 'completed']"
    ]
    assert delivered_once(seen_twice, completes=True) == [
        f"{ROOT}: the lead's model saw chaos-tree-quick-1's result 2 times",
        f"{ROOT}: the lead's model never saw chaos-tree-export-2's result",
    ]


def _keys(*made: tuple[int, int]) -> dict[str, dict[str, int | str]]:
    """The systems' record of B's keys `call_0_<i>`: (jobs created, cancels) for job exp-<i+1>."""
    return {
        f"{B}/call_0_{i}": {"jobs_created": jobs, "job_id": f"exp-{i + 1}", "cancels": cancels}
        for i, (jobs, cancels) in enumerate(made)
    }


def test_a_job_made_twice_or_left_running_is_flagged() -> None:
    keys = {
        **_keys((2, 0), (1, 1)),
        "another-run/call_0": {"jobs_created": 3, "job_id": "exp-3", "cancels": 0},
    }
    jobs = {"exp-1": {"status": "succeeded"}, "exp-2": {"status": "running"}}

    assert jobs_once(_tree(), keys, jobs) == [
        f"{ROOT}: key {B}/call_0_0 created 2 jobs",
        f"{ROOT}: job exp-2 under {B}/call_0_1 still running (cancels sent 1)",
    ]


def test_a_cancelled_trees_job_that_ran_on_past_the_cancel_is_flagged() -> None:
    keys = _keys((1, 1), (1, 0))
    jobs = {"exp-1": {"status": "cancelled"}, "exp-2": {"status": "succeeded"}}

    assert jobs_once(_tree(), keys, jobs) == []
    assert jobs_once(_tree(), keys, jobs, {"exp-1", "exp-2"}) == [
        f"{ROOT}: job exp-2 under {B}/call_0_1 ended succeeded, 0 cancels sent"
    ]


def test_a_cancelled_tree_left_open_or_calling_its_model_after_the_cancel_is_flagged() -> None:
    tree = _tree()
    tree.status = "cancelled"
    root = tree.nodes[ROOT][0].history
    del root[-1]  # B's end never reached the lead: the lead closed before B had
    root.insert(5, _event(CANCEL_REQUESTED, AT))
    tree.nodes[B][0].history += _model_call(5, AT - timedelta(seconds=1))
    tree.nodes[B][0].history += _model_call(9, AT + timedelta(seconds=2))
    tree.nodes[B][0].status = "RUNNING"

    # Before B's own cancel request came: counted, not a violation (the cancel goes down a level
    # per workflow task).
    assert model_calls_after_cancel(tree) == (1, [])
    tree.nodes[B][0].history.insert(1, _event(CANCEL_REQUESTED, AT + timedelta(seconds=1)))
    count, late = model_calls_after_cancel(tree)

    assert count == 1
    assert late == [f"{ROOT}: {B} started a model call (attempt 1) 1.00 s after its cancel request"]
    assert waited_for_children(tree) == [
        f"{ROOT}: {ROOT} closed before its child chaos-tree-export-2 had ended (no end of it in "
        "its history)"
    ]
    assert closed(tree) == [f"{ROOT}: {B} still RUNNING"]
    assert delivered_once(tree, completes=False) == []  # at most one end each


def _model_result(input_tokens: int, output_tokens: int) -> HistoryEvent:
    event = HistoryEvent(event_type=EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED)
    usage = {"input_tokens": input_tokens, "output_tokens": output_tokens}
    payload = event.activity_task_completed_event_attributes.result.payloads.add()
    payload.data = json.dumps({"message": {"role": "assistant"}, "usage": usage}).encode()
    return event


def test_a_tree_past_its_budgets_bound_or_counted_twice_is_flagged() -> None:
    tree = _tree()
    tree.nodes[A][0].history += [_model_result(90, 10), _model_result(140, 10)]  # 250
    tree.nodes[B][0].history += [_model_result(290, 10)]  # 300
    # 550 spent of a 400 budget: 150 past, within one call per node (150 + 300 = 450 past).
    assert budget_kept(tree, 400, 550) == ((150, 450), [])
    # Past its bound: every node's largest call is less than what it went over by.
    assert budget_kept(tree, 90, None)[1] == [
        f"{ROOT}: the tree spent 550 tokens, past its bound 540"
    ]
    # The root counted a retried reservation twice (or missed one).
    assert budget_kept(tree, 400, 700)[1] == [
        f"{ROOT}: the root counted 700 tokens; its nodes spent 550"
    ]
