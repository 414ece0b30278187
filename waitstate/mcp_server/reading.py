"""A run read as the task it is (`tasks/get`, each task notification, a call sent again with
its key): its status, what it asks of its caller, its result, and when it was created and last
changed.

A task run is read from Temporal's description while it asks nothing of a person, so no worker
replays it for a caller that polls; a thread's message is read from its thread.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from fastmcp_tasks.models import GetTaskResult
from mcp_types import INTERNAL_ERROR
from temporalio.client import WorkflowExecutionDescription, WorkflowExecutionStatus

from waitstate.agents import Agent
from waitstate.client import NotAnswered, RunNotFound, WaitstateClient
from waitstate.mcp_server import shapes
from waitstate.names import AGENT_NAME, AGENT_STATUS, WAITING_FOR
from waitstate.schemas.run import RunState

# How long reading a run's last event may take (a task's `lastUpdatedAt`) before it is left out.
LAST_EVENT_TIMEOUT = timedelta(seconds=5)
# What a run waits for (its `WaitingFor`) when it waits for a person: only then is it asked
# what it waits for (its `status` query), to show the caller.
PERSON_WAITS = frozenset({"approval", "input"})
_CLOSED_AS_FAILED = {
    WorkflowExecutionStatus.FAILED,
    WorkflowExecutionStatus.TERMINATED,
    WorkflowExecutionStatus.TIMED_OUT,
}


class TaskReader:
    """Reads the runs of `agents` as tasks.

    Args:
        agents: The agents served, by name (an agent with an output type answers parsed).
        approvals: The caller decides the run's approvals, so they are among what the task
            asks of it.
        ttl_ms: What each task's `ttlMs` says.
        poll_ms: What each task's `pollIntervalMs` suggests.
    """

    def __init__(
        self, agents: Mapping[str, Agent], *, approvals: bool, ttl_ms: int, poll_ms: int
    ) -> None:
        self._agents = agents
        self._approvals = approvals
        self._ttl_ms = ttl_ms
        self._poll_ms = poll_ms

    async def read(self, client: WaitstateClient, run_id: str, task_id: str) -> GetTaskResult:
        """The task `task_id`, of the run `run_id`.

        Raises:
            ClientError: the run is unknown, or Temporal could not be read.
        """
        description = await client.describe(run_id)
        structured = self._structured(description.typed_search_attributes.get(AGENT_NAME))
        if (thread := shapes.thread_of(task_id)) is not None:
            return await self._message(client, run_id, task_id, thread[2], structured)
        return await self._run(client, run_id, task_id, description, structured)

    def _structured(self, agent: str | None) -> bool:
        """Whether the agent answers in its output type (its answer is parsed)."""
        found = self._agents.get(agent or "")
        return found is not None and found.output_type is not None

    def _task(
        self, task_id: str, created: datetime, updated: datetime
    ) -> Callable[..., GetTaskResult]:
        """Builds the task `task_id` in a status, created and last changed at those times."""

        def task(status: shapes.TaskStatus, **payload: Any) -> GetTaskResult:
            return GetTaskResult(
                task_id=task_id,
                status=status,
                created_at=created.isoformat(),
                last_updated_at=updated.isoformat(),
                ttl_ms=self._ttl_ms,
                poll_interval_ms=self._poll_ms,
                **payload,
            )

        return task

    async def _run(
        self,
        client: WaitstateClient,
        run_id: str,
        task_id: str,
        description: WorkflowExecutionDescription,
        structured: bool,
    ) -> GetTaskResult:
        """A task run's task: read from Temporal's description while it asks nothing of a
        person, and asked otherwise. It was created when the run's chain began, and last
        changed at the last event of its history (its close, once it has ended)."""
        created = chain_start(description)
        updated = (
            description.close_time
            or await client.last_changed(description, rpc_timeout=LAST_EVENT_TIMEOUT)
            or created
        )
        task = self._task(task_id, created, updated)
        if description.status == WorkflowExecutionStatus.RUNNING:
            attributes = description.typed_search_attributes
            waiting_for = attributes.get(WAITING_FOR) or "none"
            if waiting_for not in (*PERSON_WAITS, TREE_WAIT):
                status = attributes.get(AGENT_STATUS) or "running"
                return task("working", status_message=shapes.wait_message(status, waiting_for))
            try:
                state = await client.query(run_id)
                # A tree's root asks what the nodes below it ask (decided here, they go there).
                state = await client.with_requests_below(run_id, state)
            except NotAnswered:
                return task("working", status_message="waiting for a worker")
            return self._asking(state, shapes.working_message(state), task)
        outcome = await client.outcome(run_id)
        if description.status == WorkflowExecutionStatus.CANCELED:
            return task("cancelled", status_message="the run was cancelled")
        if description.status in _CLOSED_AS_FAILED:
            error = outcome.error or "the run failed"
            return task(
                "failed", status_message=error, error={"code": INTERNAL_ERROR, "message": error}
            )
        return task("completed", result=shapes.result_of(run_id, outcome, structured))

    async def _message(
        self, client: WaitstateClient, run_id: str, task_id: str, message_id: str, structured: bool
    ) -> GetTaskResult:
        """A thread message's task: the thread is asked how its message stands (its reply is
        the task's result), and what it waits for. It was created when the message was sent,
        and last changed at the latest of its own times and of the thread's open requests'."""
        try:
            state = await client.query(run_id)
        except NotAnswered:
            description = await client.describe(run_id)
            when = description.close_time or chain_start(description)
            task = self._task(task_id, when, when)
            return task("working", status_message="waiting for a worker")
        messages = state.thread.messages if state.thread is not None else []
        message = next((m for m in messages if m.message_id == message_id), None)
        if message is None:  # older than what the thread keeps
            raise RunNotFound(run_id)
        created, updated = shapes.message_times(message, state, self._approvals)
        task = self._task(task_id, created, updated)
        if (result := shapes.message_result(run_id, message, structured)) is not None:
            return task("completed", result=result)
        # A message answered by a tree asks what the nodes below the thread ask.
        state = await client.with_requests_below(run_id, state)
        return self._asking(state, f"message {message.status}", task)

    def _asking(
        self, state: RunState, message: str, task: Callable[..., GetTaskResult]
    ) -> GetTaskResult:
        """`input_required` with what the run asks of the caller, or `working`."""
        requests = shapes.input_requests_of(state, self._approvals)
        if requests:
            return task("input_required", status_message=message, input_requests=requests)
        return task("working", status_message=message)


# What a tree's root waits for while its sub-agents work (and maybe ask a person).
TREE_WAIT = "agents"


def chain_start(description: WorkflowExecutionDescription) -> datetime:
    """When the run's chain of continue-as-new runs began (the task's creation): the
    description's own start is its latest run's."""
    extended = description.raw_description.workflow_extended_info
    if extended.HasField("original_start_time"):
        return extended.original_start_time.ToDatetime(tzinfo=UTC)
    return description.start_time or datetime.now(UTC)
