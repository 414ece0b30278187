"""A cold worker's ordering of a timer and an Update (issue 24, item 6): the worker dies while
the run waits for a person, the wait's window passes (its timer fires into a workflow task for
the dead worker) and the person's Update comes before a worker is back. The new worker rebuilds
the run and gets the timer and the Update in one workflow task; whatever order it applies them
in, the history it writes must replay (a replay applies the Update first).

The approval desk's case is test_worker_crash's
`test_a_decision_waiting_for_a_worker_when_the_window_passed_replays`; here, the question
desk's: the demo's purge, whose job asks a person to confirm, under each declared outcome, with
a worker that died before the timer's task reached it (SIGKILL) and one that took that task and
died holding it (SIGSTOP, then SIGKILL: the task waits out Temporal's 10 s timeout)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from examples.systems import create_app as systems_app
from tests.helpers import accept, eventually, first_question, quiet_history_length, start_run
from tests.rigs import WorkerProcess, worker_process_beside
from tests.tiers import SUBPROCESS, needs
from waitstate.converter import DATA_CONVERTER
from waitstate.schemas import RunInput
from workflows.agent_run import AgentRunWorkflow

KEYS = {"cold": "d" * 40}
RESULT_TIMEOUT = 90


@pytest.fixture(params=["escalate", "decline", "cancel"])
@needs(SUBPROCESS)
async def cold_worker(
    request: pytest.FixtureRequest, dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> AsyncIterator[WorkerProcess]:
    """A worker process, started, serving the test's queue with the purge under one declared
    outcome (tests/workflows/cold_order_app.py), and the demo systems and the gateway in this
    process (the purge asks, and completes, through the gateway)."""
    app = f"tests.workflows.cold_order_app:{request.param}"
    log = tmp_path / "worker.log"
    systems = systems_app(export_seconds=0.5)
    async with worker_process_beside(
        dev_env.client, task_queue, log, systems, KEYS, WAITSTATE_APPS=app
    ) as (worker, _):
        yield worker


async def _events(handle: WorkflowHandle[Any, Any]) -> list[HistoryEvent]:
    return [event async for event in handle.fetch_history_events()]


async def _until_the_window_passed(handle: WorkflowHandle[Any, Any], *, taken: bool) -> None:
    """Until the question's window has passed: its timer fired into a workflow task for the
    dead worker (the run's other timers are minutes away), and, if `taken`, the frozen worker
    took that task."""

    async def passed() -> bool:
        events = await _events(handle)
        fired = any(e.event_type == EventType.EVENT_TYPE_TIMER_FIRED for e in events)
        last = events[-1].event_type
        return fired and (not taken or last == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED)

    await eventually(passed, "the question's window to pass")


def _in_one_task(events: Sequence[HistoryEvent]) -> bool:
    """Whether the window's timer fired in the workflow task that accepted the answer (no task
    completed between them): the order this test is about."""
    fired = next(
        i for i, e in enumerate(events) if e.event_type == EventType.EVENT_TYPE_TIMER_FIRED
    )
    accepted = next(
        i
        for i, e in enumerate(events)
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
        and e.workflow_execution_update_accepted_event_attributes.accepted_request.input.name
        == "answer"
    )
    completed = [
        e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED for e in events[fired:accepted]
    ]
    # The task's completion is the event just before the acceptance, and the only one since.
    return fired < accepted and completed[-1] and sum(completed) == 1


@pytest.mark.parametrize("taken", [False, True], ids=["killed", "took-the-task"])
async def test_an_answer_waiting_for_a_worker_when_the_window_passed_replays(
    dev_env: WorkflowEnvironment, task_queue: str, cold_worker: WorkerProcess, taken: bool
) -> None:
    """The question's window passes and a person answers while no worker is up; a new worker
    rebuilds the run with both in one task, the answer is applied and the history replays."""
    handle = await start_run(
        dev_env.client,
        task_queue,
        RunInput(task="purge the staging events", model="scripted:purge", tools=["purge_dataset"]),
        workflow_id=f"cold-question-{task_queue}",
    )
    question = await first_question(handle, "the purge's question")
    await quiet_history_length(handle)
    if taken:
        cold_worker.freeze()
        await _until_the_window_passed(handle, taken=True)
        await cold_worker.kill()
    else:
        await cold_worker.kill()
        await _until_the_window_passed(handle, taken=False)
    # The person answers while that task waits for a worker (it times out, then goes to the
    # worker started below, cold).
    answering = asyncio.create_task(accept(handle, question, {"confirm": True}))
    await cold_worker.start()
    outcome = await asyncio.wait_for(answering, RESULT_TIMEOUT)
    result = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)
    state = await handle.query(AgentRunWorkflow.status)
    history = await handle.fetch_history()
    replay = await Replayer(
        workflows=[AgentRunWorkflow], data_converter=DATA_CONVERTER
    ).replay_workflow(history, raise_on_replay_failure=False)

    assert _in_one_task(history.events), "the timer and the answer came in different tasks"
    # The rebuilding worker applied the answer before the window's timer: the question was
    # neither escalated nor expired, and the job was told yes.
    assert (outcome.status, outcome.delivered) == ("answered", True)
    answered = state.questions[question.question_id]
    assert answered.status == "answered" and not answered.escalated
    assert result.status == "completed" and '"confirmed_by":"ana"' in (result.final_output or "")
    assert replay.replay_failure is None, replay.replay_failure
