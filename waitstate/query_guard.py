"""Keeps a query from making a run write a history no worker can replay.

The hazard (temporalio 1.35, sdk-core; `tests/workflows/test_split_activation.py` reproduces
it with no waitstate code): a query the server sends as a task of its own, when the run has no
workflow task pending, is read from history when a worker polls it. If a worker took the run's
workflow task and died, the query's history can hold events that no workflow task has
delivered (a timer's firing, an activity's completion). sdk-core applies them, live, to answer
the query, and keeps the run cached with the commands they caused, unsent. The retried
workflow task then brings an Update (a decision, an answer, a completion); the same worker
applies only the Update and sends the earlier commands first, where a replay applies both in
one activation and runs the Update first: the history no longer replays, the run is stuck for
good.

A second way a query task leaves a worker holding what it should not: a worker that is not
the run's own (its sticky worker died, the query moved to the normal queue) builds the run from
history to answer it and keeps it cached; the run goes on elsewhere; when a later workflow task
reaches this worker, it holds a run older than its history. A chaos run's history fits this
(a worker that rebuilt the run applied an Update before an activity's completion that another
worker's completed task had delivered: "Activity machine does not handle this event");
`tests/workflows/test_stale_cache.py` reproduces it.

A worker cannot tell such queries from a query on a run it holds idle (both come as a
query-only activation after a live one, at the same history length), so the guard evicts the
run after every query sent as a task of its own, once the query is answered: the run's next
workflow task rebuilds it from the whole history, as a replay does. A query that rides on a
workflow task is never one of these, and evicts nothing. A run nobody queries between its tasks
never pays for it; a run queried after each of its tasks (`watch`) replays its history once per
task, and a run held idle is rebuilt at its next task. The guard needs the SDK's bridge worker
(`Worker._bridge_worker`, private): `guard` fails loudly if it is gone.
"""

from __future__ import annotations

from typing import Any

from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.worker import Worker, WorkflowInstance, WorkflowInstanceDetails, WorkflowRunner
from temporalio.workflow import Info, _Definition

# The id sdk-core gives the query the server sends as a task of its own (core's
# LEGACY_QUERY_ID); a query that rides on a workflow task carries the server's own id.
DIRECT_QUERY = "legacy_query"


class GuardedRunner(WorkflowRunner):
    """A `WorkflowRunner` (the sandbox, for the fleet) whose instances note each run that
    answers a query sent as a task of its own; `guard` has the worker evict them."""

    def __init__(self, runner: WorkflowRunner) -> None:
        self._runner = runner
        # Run ids whose query is being answered and which are evicted once it is. Written by
        # the activation threads and read on the event loop: a set's add and discard are
        # atomic under the GIL.
        self.to_evict: set[str] = set()

    def prepare_workflow(self, defn: _Definition) -> None:
        self._runner.prepare_workflow(defn)

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return _GuardedInstance(self._runner.create_instance(det), self.to_evict)

    def set_worker_level_failure_exception_types(self, types: Any) -> None:
        self._runner.set_worker_level_failure_exception_types(types)


def guard(worker: Worker, runner: GuardedRunner) -> Worker:
    """Have `worker` (built with `runner`) evict the runs its instances note, each right after
    the query's answer reached sdk-core (an eviction asked before that would drop the answer).

    Raises:
        RuntimeError: the SDK no longer has the bridge worker this relies on.
    """
    bridge = getattr(worker, "_bridge_worker", None)
    if bridge is None or not hasattr(bridge, "request_workflow_eviction"):
        raise RuntimeError(
            "waitstate's query guard needs temporalio's Worker._bridge_worker "
            "(request_workflow_eviction); this temporalio has none: see waitstate/query_guard.py"
        )
    complete = bridge.complete_workflow_activation

    async def complete_then_evict(completion: WorkflowActivationCompletion) -> None:
        await complete(completion)
        if completion.run_id in runner.to_evict:
            runner.to_evict.discard(completion.run_id)
            bridge.request_workflow_eviction(completion.run_id)

    bridge.complete_workflow_activation = complete_then_evict
    return worker


class _GuardedInstance(WorkflowInstance):
    def __init__(self, instance: WorkflowInstance, to_evict: set[str]) -> None:
        self._instance = instance
        self._to_evict = to_evict

    def activate(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
        completion = self._instance.activate(act)
        if any(
            job.HasField("query_workflow") and job.query_workflow.query_id == DIRECT_QUERY
            for job in act.jobs
        ):
            self._to_evict.add(act.run_id)
        return completion

    # The rest is the wrapped instance's.

    def get_info(self) -> Info:
        return self._instance.get_info()

    def get_thread_id(self) -> int | None:  # asked when an activation deadlocks
        return self._instance.get_thread_id()

    def get_serialization_context(self, command_info: Any) -> Any:
        return self._instance.get_serialization_context(command_info)

    def get_external_store_context(self, command_info: Any) -> Any:
        return self._instance.get_external_store_context(command_info)
