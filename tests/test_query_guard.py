"""The worker's query guard (waitstate/query_guard.py): which runs it evicts, and when.

Its effect on a real run is tested where the hazard is reproduced:
tests/workflows/test_split_activation.py (plain temporalio) and test_cold_order.py (a waitstate
worker, the question desk). These cases pin the rule without a server."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.worker import UnsandboxedWorkflowRunner

from waitstate.query_guard import DIRECT_QUERY, GuardedRunner, _GuardedInstance, guard

RUN = "run-1"


class Instance:
    """A workflow instance that answers each query, and completes each other activation with
    `commands` commands."""

    def __init__(self) -> None:
        self.commands = 1

    def activate(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
        completion = WorkflowActivationCompletion(run_id=act.run_id)
        completion.successful.SetInParent()
        for job in act.jobs:
            if job.HasField("query_workflow"):
                completion.successful.commands.add().respond_to_query.query_id = (
                    job.query_workflow.query_id
                )
        for _ in range(0 if completion.successful.commands else self.commands):
            completion.successful.commands.add().start_timer.seq = 1
        return completion


def task(*, replaying: bool = False) -> WorkflowActivation:
    act = WorkflowActivation(run_id=RUN, is_replaying=replaying, history_length=7)
    act.jobs.add().fire_timer.seq = 1
    return act


def query(query_id: str = DIRECT_QUERY) -> WorkflowActivation:
    act = WorkflowActivation(run_id=RUN, is_replaying=True, history_length=7)
    act.jobs.add().query_workflow.query_id = query_id
    return act


def guarded() -> tuple[Instance, _GuardedInstance, set[str]]:  # the fake, guarded, its notes
    inner, to_evict = Instance(), set[str]()
    return inner, _GuardedInstance(inner, to_evict), to_evict  # type: ignore[arg-type]


def test_a_query_sent_as_a_task_of_its_own_evicts_the_run_whatever_came_before() -> None:
    for before in ([], [task()], [task(replaying=True)]):
        _, instance, to_evict = guarded()
        for act in before:
            instance.activate(act)
        completion = instance.activate(query())
        # Answered as ever: the query's response is the completion's only command.
        [response] = completion.successful.commands
        assert response.respond_to_query.query_id == DIRECT_QUERY
        assert to_evict == {RUN}


def test_a_query_that_rides_on_a_workflow_task_and_the_tasks_evict_nothing() -> None:
    _, instance, to_evict = guarded()
    instance.activate(task())
    instance.activate(query("a-query-on-a-workflow-task"))  # the server's own id
    instance.activate(task(replaying=True))
    assert to_evict == set()


class Bridge:
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def complete_workflow_activation(self, completion: WorkflowActivationCompletion) -> None:
        self.calls.append(f"complete {completion.run_id}")

    def request_workflow_eviction(self, run_id: str) -> None:
        self.calls.append(f"evict {run_id}")


class FakeWorker:
    def __init__(self) -> None:
        self._bridge_worker = Bridge()


async def test_the_worker_evicts_a_noted_run_once_the_queries_answer_reached_the_sdk() -> None:
    runner = GuardedRunner(UnsandboxedWorkflowRunner())
    worker: Any = guard(FakeWorker(), runner)  # type: ignore[arg-type]
    bridge = worker._bridge_worker
    await bridge.complete_workflow_activation(WorkflowActivationCompletion(run_id="other"))
    runner.to_evict.add(RUN)
    await bridge.complete_workflow_activation(WorkflowActivationCompletion(run_id=RUN))
    await bridge.complete_workflow_activation(WorkflowActivationCompletion(run_id=RUN))
    assert bridge.calls == [
        "complete other",
        f"complete {RUN}",
        f"evict {RUN}",  # after the answer: an eviction asked before it would drop the answer
        f"complete {RUN}",
    ]
    assert runner.to_evict == set()


def test_a_temporalio_without_the_bridge_worker_fails_loudly() -> None:
    with pytest.raises(RuntimeError, match="_bridge_worker"):
        guard(object(), GuardedRunner(UnsandboxedWorkflowRunner()))  # type: ignore[arg-type]
