"""Reading what a run recorded: every run of its continue-as-new chain, and what their events
say (accepted Updates, signals, the starts of long tools, what each continuation carried).

A run that continued as new is several Temporal executions under one workflow id; its state
query answers from the last one only, and each execution has a history of its own. Whatever an
invariant counts in histories (accepted completions, decisions) it counts over the whole chain,
or a completion applied twice across a continue-as-new would go unseen.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer

from waitstate.activation_order import workflow_runner
from waitstate.converter import DATA_CONVERTER
from waitstate.schemas.run import CALL_TOOL, CANCEL_OPERATION
from waitstate.workflows.agent_run import AgentRunWorkflow

CONTINUED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
UPDATE_ACCEPTED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
SIGNALED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
ACTIVITY_SCHEDULED = EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
ACTIVITY_COMPLETED = EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
ACTIVITY_STARTED = EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
# A runaway chain is a finding, not a reason to read forever.
MAX_CHAIN = 200


async def fetch_chain(client: Client, workflow_id: str, first_run_id: str) -> list[list[Any]]:
    """The history of every execution of the run, first to last, following continue-as-new.

    Raises:
        RPCError: a history could not be fetched (the caller reports it: an invariant that
            could not be checked has not held).
        RuntimeError: the chain is longer than MAX_CHAIN.
    """
    chain: list[list[Any]] = []
    run_id: str | None = first_run_id
    while run_id:
        if len(chain) >= MAX_CHAIN:
            raise RuntimeError(f"{workflow_id}: more than {MAX_CHAIN} continue-as-new runs")
        handle = client.get_workflow_handle(workflow_id, run_id=run_id)
        events = [event async for event in handle.fetch_history_events()]
        chain.append(events)
        last = events[-1] if events else None
        run_id = None
        if last is not None and last.event_type == CONTINUED:
            run_id = last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
    return chain


def _decoded(payloads: Any) -> list[Any]:
    return [json.loads(p.data) for p in payloads]


@dataclass(frozen=True)
class AcceptedUpdate:
    """An Update the run accepted: its id, name and argument, and where in the history."""

    update_id: str
    name: str
    argument: dict[str, Any]
    event_id: int


def accepted_updates(events: list[Any], name: str | None = None) -> list[AcceptedUpdate]:
    """Every Update accepted in one history (or several concatenated), optionally by name."""
    found = []
    for event in events:
        if event.event_type != UPDATE_ACCEPTED:
            continue
        request = event.workflow_execution_update_accepted_event_attributes.accepted_request
        if name is not None and request.input.name != name:
            continue
        args = _decoded(request.input.args.payloads)
        found.append(
            AcceptedUpdate(
                update_id=request.meta.update_id,
                name=request.input.name,
                argument=args[0] if args and isinstance(args[0], dict) else {},
                event_id=event.event_id,
            )
        )
    return found


def update_inputs(events: list[Any], name: str) -> list[dict[str, Any]]:
    """The arguments of every accepted Update named `name`, decoded."""
    return [update.argument for update in accepted_updates(events, name)]


def signal_inputs(events: list[Any], name: str) -> list[dict[str, Any]]:
    """The arguments of every signal named `name`, decoded."""
    found: list[dict[str, Any]] = []
    for event in events:
        if event.event_type != SIGNALED:
            continue
        attributes = event.workflow_execution_signaled_event_attributes
        if attributes.signal_name == name:
            found.extend(_decoded(attributes.input.payloads))
    return found


@dataclass(frozen=True)
class ToolStart:
    """A `call_tool` activity of one history: the operation id it was given, the nonce the run
    chose for it (None before runs chose nonces), and when the run heard back."""

    operation_id: str
    nonce: str | None
    scheduled_event_id: int
    completed_event_id: int | None


def _scheduled_input(event: Any, name: str) -> dict[str, Any] | None:
    """The input (a JSON object) of the activity of type `name` a scheduled event scheduled;
    None for another activity, or an input of another form."""
    attributes = event.activity_task_scheduled_event_attributes
    if attributes.activity_type.name != name:
        return None
    args = _decoded(attributes.input.payloads)
    return args[0] if args and isinstance(args[0], dict) else None


def tool_starts(events: list[Any]) -> dict[str, ToolStart]:
    """Every `call_tool` activity of one history, by the operation id it was given."""
    scheduled: dict[int, dict[str, Any]] = {}
    completed: dict[int, int] = {}
    for event in events:
        if event.event_type == ACTIVITY_SCHEDULED:
            if (call := _scheduled_input(event, CALL_TOOL)) is not None:
                # Runs from the checkpoint policy on give the operation's id as the activity's,
                # not in its input.
                activity_id = event.activity_task_scheduled_event_attributes.activity_id
                scheduled[event.event_id] = {"operation_id": activity_id, **call}
        elif event.event_type == ACTIVITY_COMPLETED:
            attributes = event.activity_task_completed_event_attributes
            completed[attributes.scheduled_event_id] = event.event_id
    return {
        str(args.get("operation_id")): ToolStart(
            operation_id=str(args.get("operation_id")),
            nonce=args.get("nonce"),
            scheduled_event_id=event_id,
            completed_event_id=completed.get(event_id),
        )
        for event_id, args in scheduled.items()
    }


def completed_activities(events: list[Any], name: str) -> int:
    """How many activities of type `name` completed (their result recorded) in one history."""
    scheduled: set[int] = set()
    completed = 0
    for event in events:
        if event.event_type == ACTIVITY_SCHEDULED:
            if event.activity_task_scheduled_event_attributes.activity_type.name == name:
                scheduled.add(event.event_id)
        elif event.event_type == ACTIVITY_COMPLETED:
            completed += (
                event.activity_task_completed_event_attributes.scheduled_event_id in scheduled
            )
    return completed


def activity_attempts(events: list[Any], name: str) -> list[int]:
    """The attempts each activity of type `name` took (one or several histories), in order:
    an attempt past the first was retried, e.g. after its worker was killed."""
    return [attempt for _, attempt in activity_starts(events, name)]


def activity_starts(events: list[Any], name: str) -> list[tuple[Any, int]]:
    """Each activity of type `name` as it (last) started: its ActivityTaskStarted event, and
    which attempt it was."""
    scheduled: set[int] = set()
    starts = []
    for event in events:
        if event.event_type == ACTIVITY_SCHEDULED:
            if event.activity_task_scheduled_event_attributes.activity_type.name == name:
                scheduled.add(event.event_id)
        elif event.event_type == ACTIVITY_STARTED:
            attributes = event.activity_task_started_event_attributes
            if attributes.scheduled_event_id in scheduled:
                starts.append((event, max(1, attributes.attempt)))
    return starts


def cancel_attempts(chain: list[list[Any]]) -> dict[str, int]:
    """Per operation, how many attempts of `cancel_operation` activities the run made, over
    every run of the chain (an attempt cut short by a worker's death is retried, so the job
    may be told more than once; never more often than this)."""
    attempts: dict[str, int] = {}
    for events in chain:
        scheduled: dict[int, str] = {}
        for event in events:
            if event.event_type == ACTIVITY_SCHEDULED:
                if (cancel := _scheduled_input(event, CANCEL_OPERATION)) is not None:
                    scheduled[event.event_id] = str(cancel.get("operation_id"))
            elif event.event_type == ACTIVITY_STARTED:
                attributes = event.activity_task_started_event_attributes
                op = scheduled.get(attributes.scheduled_event_id)
                if op is not None:
                    attempts[op] = attempts.get(op, 0) + max(1, attributes.attempt)
        # A scheduled cancel that never started (its run continued or ended first) told no one.
    return attempts


def operation_nonce(chain: list[list[Any]], operation_id: str) -> str | None:
    """The nonce the run chose for an operation (recorded in its start's input), if it did."""
    for events in chain:
        start = tool_starts(events).get(operation_id)
        if start is not None:
            return start.nonce
    return None


def carried(chain: list[list[Any]]) -> list[dict[str, Any]]:
    """What each continue-as-new handed on (the `carry` of the next run's input), in order."""
    found = []
    for events in chain:
        last = events[-1] if events else None
        if last is None or last.event_type != CONTINUED:
            continue
        args = _decoded(last.workflow_execution_continued_as_new_event_attributes.input.payloads)
        carry = args[0].get("carry") if args and isinstance(args[0], dict) else None
        found.append(carry if isinstance(carry, dict) else {})
    return found


async def replay_failures(workflow_id: str, chain: list[list[Any]], keep: Path | None) -> list[str]:
    """Replay every run of the chain on today's workflow code: what does not replay (a
    nondeterminism a worker would hit when it rebuilds the run from history), each such
    history kept under `keep`, to be read again."""
    replayer = Replayer(
        workflow_runner=workflow_runner(),
        workflows=[AgentRunWorkflow],
        data_converter=DATA_CONVERTER,
    )
    found = []
    for index, events in enumerate(chain):
        history = WorkflowHistory(workflow_id, events)
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        if result.replay_failure is None:
            continue
        where = ""
        if keep is not None:
            path = keep / f"nondeterministic-{workflow_id}-{index}.json"
            path.write_text(history.to_json())
            where = f" (history kept in {path})"
        found.append(
            f"run {index + 1} of the chain does not replay: {result.replay_failure}{where}"
        )
    return found
