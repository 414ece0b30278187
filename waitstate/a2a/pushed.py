"""A run's state, as the task its A2A push tells (the `post_push` activity's body): A2A's
`StreamResponse` JSON, made by the same mapping the server reads a run with (`shapes`)."""

from __future__ import annotations

from typing import Any

from a2a.types import Artifact, StreamResponse, TaskState
from google.protobuf.json_format import MessageToDict

from waitstate.a2a import shapes
from waitstate.schemas.pushes import TaskSnapshot
from waitstate.schemas.run import RunState

STATES = {
    "working": TaskState.TASK_STATE_WORKING,
    "input-required": TaskState.TASK_STATE_INPUT_REQUIRED,
    "completed": TaskState.TASK_STATE_COMPLETED,
    "failed": TaskState.TASK_STATE_FAILED,
    "canceled": TaskState.TASK_STATE_CANCELED,
}


def task_body(run_id: str, snapshot: TaskSnapshot, structured: bool) -> tuple[str, dict[str, Any]]:
    """The task id of the run `run_id`, and the push's body: the task at `snapshot` as A2A's
    `StreamResponse` JSON (`{"task": {...}}`); `structured`: the agent answers in its output
    type (its answer goes as a data part too)."""
    task_id = shapes.task_of_run(run_id) if run_id.startswith(shapes.RUN_PREFIX) else run_id
    context_id = shapes.context_of(task_id) or task_id
    state = STATES[snapshot.state]
    text, data = "", None
    artifacts: list[Artifact] = []
    if snapshot.asked is not None:
        text, data = shapes.asking(snapshot.asked)
    elif snapshot.state == "completed":
        artifacts = [shapes.answer_artifact(snapshot.answer or "", structured)]
    elif snapshot.state == "working":
        text = "running"
    else:
        outcome = RunState.model_validate({"status": snapshot.status, "error": snapshot.error})
        text = shapes.ended(outcome)[1]
    said = None
    if text:
        said = shapes.agent_message(task_id, context_id, f"{state}:{text}", text, data)
    task = shapes.task(
        task_id, context_id, shapes.status(state, snapshot.at, said), artifacts=artifacts
    )
    return task_id, MessageToDict(StreamResponse(task=task))
