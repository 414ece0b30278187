"""The runner's opt-in (waitstate/activation_order.py), without a server: since the 1.0 baseline
every agent run gets handlers after resolutions, from its second activation on, with no patch
marker; a workflow that opts in by marker (the plain-temporalio reproductions in
tests/workflows/) still does."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.worker import WorkflowInstance, WorkflowInstanceDetails, WorkflowRunner

from waitstate.activation_order import HandlersLast
from waitstate.workflows.agent_run import AgentRunWorkflow


class _Recording:
    """A workflow instance that records the jobs of each activation it is given."""

    def __init__(self) -> None:
        self.given: list[list[str]] = []

    def activate(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
        self.given.append([str(job.WhichOneof("variant")) for job in act.jobs])
        completion = WorkflowActivationCompletion(run_id=act.run_id)
        completion.successful.SetInParent()
        return completion


class _Runner:
    def __init__(self, instance: _Recording) -> None:
        self.instance = instance

    def create_instance(self, det: Any) -> Any:
        return self.instance


def _instance(cls: type) -> tuple[WorkflowInstance, _Recording]:
    recording = _Recording()
    runner = HandlersLast(cast(WorkflowRunner, _Runner(recording)))
    det = cast(WorkflowInstanceDetails, SimpleNamespace(defn=SimpleNamespace(cls=cls)))
    return runner.create_instance(det), recording


def _activation(*jobs: str) -> WorkflowActivation:
    act = WorkflowActivation(run_id="r")
    for job in jobs:
        getattr(act.jobs.add(), job).SetInParent()
    return act


def test_every_agent_run_gets_handlers_last_from_its_second_activation() -> None:
    assert AgentRunWorkflow.handlers_last is True
    assert not hasattr(AgentRunWorkflow, "handlers_last_markers")
    instance, recording = _instance(AgentRunWorkflow)

    instance.activate(_activation("initialize_workflow", "do_update"))
    instance.activate(_activation("do_update", "fire_timer"))

    assert recording.given == [
        ["initialize_workflow", "do_update"],  # the first activation is left whole
        ["fire_timer"],  # then the resolutions first,
        ["do_update"],  # and the handlers after them
    ]


def test_a_workflow_that_does_not_opt_in_keeps_the_sdks_order() -> None:
    class Plain:
        pass

    instance, recording = _instance(Plain)

    assert instance is recording
