"""Forks: a recorded run read back from its history (across its continue-as-new chain), and a new
run started from its turn N with another model, prompt or agent, its tool calls answered from
the recording (docs/forks.md)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict, Unpack

from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHistory
from temporalio.service import RPCError, RPCStatusCode

from waitstate.client._errors import RunNotFound, StartFailed, TemporalFailed
from waitstate.client._runs import RunCalls
from waitstate.names import SEND_MESSAGE_UPDATE
from waitstate.schemas import Message, ModelCallInput, ModelResponse, RunInput, RunResult
from waitstate.schemas.forks import (
    ANSWERED,
    RECORDING_MAX_BYTES,
    ForkOf,
    ForkPolicy,
    ForkRequest,
    RecordedCall,
    Recording,
)
from waitstate.schemas.run import (
    AWAIT_MODEL_RESPONSE,
    CALL_MODEL,
    CHECKPOINT_PROMPT,
    AwaitModelResponse,
)
from waitstate.schemas.threads import SendMessage
from waitstate.schemas.tree import SUB_AGENT_PREFIX, SubAgentTask

# A fork's input leaves out what belongs to the run it forks alone: its place in a chain or a
# tree, its revision, and the fields its agent was found to set (found again for the fork).
# A fork pushes nothing to the A2A client of the run it forks (`push`): the task is the run's.
NOT_FORKED = frozenset({"carry", "revision", "tree", "fork", "agent_overrides", "push"})


class ForkSettings(TypedDict, total=False):
    """How a fork goes on (`WaitstateClient.fork`): from turn `at` (a thread's: its first `at`
    messages), with `model`, `instructions` (its system prompt) or `agent` where given, its
    tool calls answered per `policy`."""

    at: int
    model: str | None
    instructions: str | None
    agent: str | None
    policy: ForkPolicy


@dataclass
class Turn:
    """One model call of a recorded run: what it was sent, and what it answered."""

    request: ModelCallInput
    response: ModelResponse


@dataclass
class Recorded:
    """A run's chain of histories, read: its input, its turns, its children, how it ended."""

    input: RunInput
    turns: list[Turn] = field(default_factory=list)
    # The sub-agents it started, in order: (workflow id, agent, task).
    children: list[tuple[str, str, str]] = field(default_factory=list)
    # A thread's messages, in the order it took them (a retried send's once).
    messages: list[SendMessage] = field(default_factory=list)
    result: RunResult | None = None

    def tool_calls(self, after: int = 0) -> list[str]:
        """The names of the tool calls its model made after turn `after`, in order."""
        return [
            call.name for turn in self.turns[after:] for call in turn.response.message.tool_calls
        ]


def new_fork_id() -> str:
    """A fresh fork's id."""
    return f"fork-{uuid.uuid4().hex[:12]}"


class ForkCalls(RunCalls):
    """What `WaitstateClient` does to fork a run: read its recording, start the fork."""

    async def recording(self, run_id: str, at: int = 0) -> tuple[RunInput, Recording]:
        """What run `run_id` was started with, and its recording for a fork at turn `at`.

        Raises:
            RunNotFound: no such run.
            StartFailed: it cannot be forked there (a turn it never took, a thread, a
                recording too big to travel in a run's input).
            TemporalFailed: its history could not be read.
        """
        recorded = await self._read(run_id)
        if recorded.input.thread is not None:
            sent = len(recorded.messages)
            if not 0 <= at <= sent:
                raise StartFailed(
                    run_id,
                    f"thread {run_id} took {sent} message{'s' if sent != 1 else ''}: a fork of "
                    f"it answers its first 0 to {sent} again",
                )
        elif not 0 <= at < len(recorded.turns):
            took = len(recorded.turns)
            raise StartFailed(
                run_id,
                f"run {run_id} took {took} model turn{'s' if took != 1 else ''}: a fork goes on "
                f"from turn 0 to {took - 1}"
                if took
                else f"run {run_id} has no model turn yet",
            )
        recording = self._recording(run_id, recorded, at)
        size = len(recording.model_dump_json())
        if size > RECORDING_MAX_BYTES:
            raise StartFailed(
                run_id, f"its recording is {size:,} bytes, over {RECORDING_MAX_BYTES:,}"
            )
        return recorded.input, recording

    async def fork(
        self, run_id: str, *, fork_id: str | None = None, **how: Unpack[ForkSettings]
    ) -> tuple[str, RunInput]:
        """Start a fork of run `run_id` from its turn `at` (`how`: see `ForkSettings`): a new
        run whose model is sent what the recorded run's model was before its turn `at` + 1,
        then goes on with the fork's settings, its tool calls answered per its policy
        (docs/forks.md). Idempotent by `fork_id` (a fresh one if None).

        Returns:
            The fork's id, and its input.

        Raises:
            RunNotFound, StartFailed, TemporalFailed: as `recording` and `start` say.
        """
        fork_input = await self.fork_input(ForkRequest(run_id=run_id, **how))
        started = await self.start(fork_input, run_id=fork_id or new_fork_id())
        return started.run_id, fork_input

    async def fork_input(self, request: ForkRequest, *, with_recording: bool = True) -> RunInput:
        """The input of the fork `request` asks for, not started: what the recorded run was
        started with, less what was its own alone, with the fork's settings; without its
        recording unless `with_recording` (the fork then reads it at its opening: a run that
        starts many forks keeps its own history small).

        Raises:
            RunNotFound, StartFailed, TemporalFailed: as `recording` says; StartFailed too for
                settings no run could be started with.
        """
        origin, recording = await self.recording(request.run_id, request.at)
        data: dict[str, Any] = origin.model_dump(exclude_unset=True, exclude=set(NOT_FORKED))
        given = {
            "model": request.model,
            "system_prompt": request.instructions,
            "agent": request.agent,
        }
        data |= {name: value for name, value in given.items() if value is not None}
        link = ForkOf(
            origin=request.run_id,
            at=request.at,
            policy=request.policy,
            model=request.model,
            recording=recording if with_recording else None,
        )
        try:
            return RunInput(**data, fork=link)
        except ValueError as err:
            raise StartFailed(request.run_id, f"the fork's input is not valid: {err}") from None

    async def read_run(self, run_id: str) -> Recorded:
        """Run `run_id` as its histories hold it: its input, each model call (what it was sent
        and answered), the sub-agents it started, its result once it has one.

        Raises:
            RunNotFound: no such run.
            TemporalFailed: its history could not be read.
        """
        return await self._read(run_id)

    def _recording(self, run_id: str, recorded: Recorded, at: int) -> Recording:
        """`recorded`'s recording for a fork at turn `at`."""
        turns = recorded.turns
        children = list(recorded.children)
        calls: list[RecordedCall] = []
        for number, turn in enumerate(turns, start=1):
            answers = _answers(turns[number].request) if number < len(turns) else {}
            for call in turn.response.message.tool_calls:
                answer = answers.get(call.id)
                if answer is None:
                    continue  # read by the model only in a rebuilt context, or never
                child = None
                if call.name.startswith(SUB_AGENT_PREFIX):
                    child = _child(call.name, call.arguments, children)
                read = answer.model_dump(include=set(ANSWERED))
                named = call.model_dump(include={"name", "arguments"})
                calls.append(RecordedCall(turn=number, child=child, **named, **read))
        result = recorded.result
        # A thread's fork starts idle and takes the recorded messages again; a task's is sent
        # what the recorded turn at + 1 was.
        thread = recorded.input.thread is not None
        prefix = None if thread else turns[at].request
        return Recording(
            origin=run_id,
            turns=len(turns),
            at=at,
            transcript_ref=prefix.transcript_ref if prefix is not None else None,
            messages=prefix.new_messages if prefix is not None else [],
            thread_messages=[m.text for m in recorded.messages[:at]] if thread else [],
            calls=calls,
            answer=result.final_output if result is not None else None,
            status=result.status if result is not None else "running",
        )

    async def _read(self, run_id: str) -> Recorded:
        """Run `run_id`'s chain of histories, oldest first, read."""
        chain: list[WorkflowHistory] = []
        previous: str | None = None
        try:
            while True:
                handle = self._client.get_workflow_handle(run_id, run_id=previous)
                history = await handle.fetch_history()
                chain.append(history)
                started = history.events[0].workflow_execution_started_event_attributes
                previous = started.continued_execution_run_id or None
                if previous is None:
                    break
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                raise RunNotFound(run_id) from err
            raise TemporalFailed(f"reading the history of {run_id}", err.message) from err
        chain.reverse()
        first = chain[0].events[0].workflow_execution_started_event_attributes
        [input] = await self._decode(first.input.payloads, RunInput)
        recorded = Recorded(input=input)
        for history in chain:
            await self._read_history(history.events, recorded)
        return recorded

    async def _read_history(self, events: Sequence[HistoryEvent], recorded: Recorded) -> None:
        models: dict[int, str] = {}  # scheduled event id -> activity type, of model calls
        inputs: dict[int, Any] = {}
        keys = {m.key for m in recorded.messages}
        for event in events:
            if event.HasField("activity_task_scheduled_event_attributes"):
                scheduled = event.activity_task_scheduled_event_attributes
                if scheduled.activity_type.name in (CALL_MODEL, AWAIT_MODEL_RESPONSE):
                    models[event.event_id] = scheduled.activity_type.name
                    inputs[event.event_id] = scheduled.input.payloads
            elif event.HasField("activity_task_completed_event_attributes"):
                completed = event.activity_task_completed_event_attributes
                kind = models.get(completed.scheduled_event_id)
                if kind is None:
                    continue
                [response] = await self._decode(completed.result.payloads, ModelResponse)
                if response.background_id is not None:
                    continue  # the reply comes from the wait for it
                payloads = inputs[completed.scheduled_event_id]
                if kind == CALL_MODEL:
                    [request] = await self._decode(payloads, ModelCallInput)
                else:
                    [request] = [(await self._decode(payloads, AwaitModelResponse))[0].call]
                if request.system_prompt == CHECKPOINT_PROMPT:
                    continue  # a checkpoint's call, not a turn
                recorded.turns.append(Turn(request, response))
            elif event.HasField("start_child_workflow_execution_initiated_event_attributes"):
                child = event.start_child_workflow_execution_initiated_event_attributes
                [child_input] = await self._decode(child.input.payloads, RunInput)
                recorded.children.append(
                    (child.workflow_id, child_input.agent or "", child_input.task)
                )
            elif event.HasField("workflow_execution_update_accepted_event_attributes"):
                request = event.workflow_execution_update_accepted_event_attributes
                if request.accepted_request.input.name == SEND_MESSAGE_UPDATE:
                    args = request.accepted_request.input.args.payloads
                    [send] = await self._decode(args, SendMessage)
                    if send.key is None or send.key not in keys:
                        recorded.messages.append(send)
                    keys.add(send.key)
            elif event.HasField("workflow_execution_completed_event_attributes"):
                done = event.workflow_execution_completed_event_attributes
                [recorded.result] = await self._decode(done.result.payloads, RunResult)

    async def _decode(self, payloads: Any, kind: type) -> list[Any]:
        return await self._client.data_converter.decode(payloads, [kind])


def _answers(request: ModelCallInput) -> dict[str, Message]:
    """The tool results a model call was sent, by the id of the call each answers."""
    return {m.tool_call_id: m for m in request.new_messages if m.role == "tool" and m.tool_call_id}


def _child(tool: str, arguments: str, children: list[tuple[str, str, str]]) -> str | None:
    """The id of the sub-agent a call started: the first child not yet taken whose agent and
    task are the call's."""
    try:
        task = SubAgentTask.model_validate_json(arguments).task
    except ValueError:
        return None
    agent = tool.removeprefix(SUB_AGENT_PREFIX)
    for index, (child_id, child_agent, child_task) in enumerate(children):
        if (child_agent, child_task) == (agent, task):
            del children[index]
            return child_id
    return None
