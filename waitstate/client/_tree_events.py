"""A sub-agent's events on its parent's stream (`_events`): its run started, and how it ended,
told by its node's name and run id (never its task, which its parent's model wrote)."""

from __future__ import annotations

from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

# A child workflow's event -> its phase, and the name of its attributes.
CHILD_EVENTS = {
    EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED: (
        "started",
        "start_child_workflow_execution_initiated",
    ),
    EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED: (
        "completed",
        "child_workflow_execution_completed",
    ),
    EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_FAILED: (
        "failed",
        "child_workflow_execution_failed",
    ),
    EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_CANCELED: (
        "canceled",
        "child_workflow_execution_canceled",
    ),
    EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_TIMED_OUT: (
        "timed_out",
        "child_workflow_execution_timed_out",
    ),
    EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_TERMINATED: (
        "terminated",
        "child_workflow_execution_terminated",
    ),
}
CHILD_KINDS = tuple(f"subagent.{phase}" for phase, _ in CHILD_EVENTS.values())


def child_event(event: HistoryEvent, limit: int) -> tuple[str, str, dict[str, Any]]:
    """The stream event a child workflow's event is (`event.event_type` in CHILD_EVENTS): its
    kind, no summary, and its node and run id (each cut to `limit` characters)."""
    phase, name = CHILD_EVENTS[event.event_type]
    attributes = getattr(event, f"{name}_event_attributes")
    if phase == "started":
        run_id = attributes.workflow_id
    else:
        run_id = attributes.workflow_execution.workflow_id
    node = run_id.rsplit("/", 1)[-1]
    return f"subagent.{phase}", "", {"node": node[:limit], "run_id": run_id[:limit]}
