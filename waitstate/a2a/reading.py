"""A run read as the A2A task it is (`tasks/get`, each look of a stream, a send's answer): its
state, what it asks of its caller, its answer as an artifact, and the task's history.

A running run is read from Temporal's description while it asks nothing of a person, so no
worker replays it for a client that polls; it is asked (its `status` query) only while it waits
for a person, to show what it asks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from a2a.helpers.proto_helpers import new_text_part
from a2a.types import Message, Role, Task, TaskState
from temporalio.client import WorkflowExecutionStatus

from waitstate.a2a import shapes
from waitstate.agents import Agent
from waitstate.client import NotAnswered, RunNotFound, WaitstateClient
from waitstate.names import AGENT_NAME, AGENT_STATUS, WAITING_FOR
from waitstate.schemas.approvals import ApprovalRequest
from waitstate.schemas.pushes import open_requests
from waitstate.schemas.questions import QuestionRequest
from waitstate.schemas.run import RunState

# What a run waits for (its `WaitingFor`) when it may ask a person: only then is it queried.
PERSON_WAITS = frozenset({"approval", "input", "agents"})


@dataclass(frozen=True)
class Read:
    """A run as its task, and the request it waits on (for the reply the next message makes)."""

    task: Task
    asked: ApprovalRequest | QuestionRequest | None = None

    @property
    def state(self) -> TaskState:
        return self.task.status.state


class TaskReader:
    """Reads the runs of `agents` as tasks."""

    def __init__(self, agents: Mapping[str, Agent]) -> None:
        self._agents = agents

    async def read(
        self, client: WaitstateClient, run_id: str, task_id: str, *, history: int | None = None
    ) -> Read:
        """The task `task_id`, of the run `run_id`, with at most `history` messages of its
        history (None: all it has, up to `shapes.MAX_HISTORY`).

        Raises:
            ClientError: the run is unknown (RunNotFound), or Temporal could not be read.
        """
        context_id = shapes.context_of(task_id) or task_id
        description = await client.describe(run_id)
        agent = self._agents.get(description.typed_search_attributes.get(AGENT_NAME) or "")
        now = description.close_time or datetime.now(UTC)
        messages = await self._history(client, run_id, task_id, context_id, history)

        def made(state: TaskState, text: str = "", data: object = None, **more: object) -> Task:
            said = None
            if text:
                said = shapes.agent_message(task_id, context_id, f"{state}:{text}", text, data)
            shown = [*messages, *([said] if said is not None and history != 0 else [])]
            limit = shapes.MAX_HISTORY if history is None else min(history, shapes.MAX_HISTORY)
            return shapes.task(
                task_id,
                context_id,
                shapes.status(state, now, said),
                history=shown[-limit:] if limit else [],
                **more,  # type: ignore[arg-type]
            )

        if shapes.in_conversation(task_id):
            return await self._message(client, run_id, task_id, made, agent)
        if description.status == WorkflowExecutionStatus.RUNNING:
            attributes = description.typed_search_attributes
            waiting_for = attributes.get(WAITING_FOR) or "none"
            working = shapes.working_text(attributes.get(AGENT_STATUS) or "running", waiting_for)
            if waiting_for not in PERSON_WAITS:
                return Read(made(TaskState.TASK_STATE_WORKING, working))
            try:
                state: RunState = await client.query(run_id)
            except NotAnswered:
                return Read(made(TaskState.TASK_STATE_WORKING, "waiting for a worker"))
            return await self._asking(client, run_id, state, working, made)
        outcome = await client.outcome(run_id)
        if description.status == WorkflowExecutionStatus.CANCELED:
            return Read(made(TaskState.TASK_STATE_CANCELED, "the task was cancelled"))
        state_now, why = shapes.ended(outcome)
        if state_now != TaskState.TASK_STATE_COMPLETED:
            return Read(made(state_now, why))
        artifact = shapes.answer_artifact(outcome.final_output or "", _structured(agent))
        return Read(made(state_now, artifacts=[artifact]))

    async def _message(
        self,
        client: WaitstateClient,
        run_id: str,
        task_id: str,
        made: Callable[..., Task],
        agent: Agent | None,
    ) -> Read:
        """A message in a context's conversation, read from its thread: working while queued
        or worked on (input-required while the thread asks the caller something), completed
        with its reply, failed if the thread ended it without one."""
        try:
            state: RunState = await client.query(run_id)
        except NotAnswered:
            return Read(made(TaskState.TASK_STATE_WORKING, "waiting for a worker"))
        key = shapes.message_key(task_id)
        messages = state.thread.messages if state.thread is not None else []
        message = next((m for m in messages if m.key == key), None)
        if message is None:  # not this thread's, or older than what it keeps
            raise RunNotFound(run_id)
        if message.status in ("queued", "working"):
            return await self._asking(client, run_id, state, f"message {message.status}", made)
        if message.status != "replied":
            error = f": {message.error}" if message.error else ""
            return Read(
                made(TaskState.TASK_STATE_FAILED, f"the message ended {message.status}{error}")
            )
        artifact = shapes.answer_artifact(message.reply or "", _structured(agent))
        return Read(made(TaskState.TASK_STATE_COMPLETED, artifacts=[artifact]))

    async def _asking(
        self,
        client: WaitstateClient,
        run_id: str,
        state: RunState,
        working: str,
        made: Callable[..., Task],
    ) -> Read:
        """input-required with the oldest request the run asks its caller (a tree's root asks
        what the nodes below it ask), or working."""
        state = await client.with_requests_below(run_id, state)
        asks = open_requests(state)
        if not asks:
            return Read(made(TaskState.TASK_STATE_WORKING, working))
        text, data = shapes.asking(asks[0])
        return Read(made(TaskState.TASK_STATE_INPUT_REQUIRED, text, data), asks[0])

    async def _history(
        self,
        client: WaitstateClient,
        run_id: str,
        task_id: str,
        context_id: str,
        history: int | None,
    ) -> list[Message]:
        """The task's first message, the client's (its run's task), unless no history is
        asked for."""
        if history == 0:
            return []
        if shapes.in_conversation(task_id):
            return []  # the message is the thread's; its text may carry what it was told first
        started = await client.started_input(run_id)
        if started is None:
            return []
        return [
            Message(
                message_id=f"{task_id}:task",
                context_id=context_id,
                task_id=task_id,
                role=Role.ROLE_USER,
                parts=[new_text_part(started.task)],
            )
        ]


def _structured(agent: Agent | None) -> bool:
    """Whether the agent answers in its output type (its answer is parsed, as a data part)."""
    return agent is not None and agent.output_type is not None
