"""Handlers after resolutions: a run's Updates see what its workflow task resolved, whichever
way the worker cut its history into activations.

The hazard (temporalio 1.35, sdk-core; docs/upstream/split-activation.md, reproduced with no
waitstate code in tests/workflows/test_heartbeat_merge.py and test_split_activation.py): the
activations a worker builds do not always match the workflow tasks a replay sees.

- A worker that rebuilds a run (after a crash, or with no cache) merges a task that issued no
  command into the next one (sdk-core's "WFT heartbeat" rule), so an activity's completion and
  a later Update arrive in one activation.
- A query sent as a task of its own applies events no workflow task has delivered yet (a
  timer's firing), live, in an activation of their own; the Update comes in the next one. A
  replay gets both in one.

Where both arrive in one activation, the Python SDK runs the Update's job first;
where they came apart, the resolution ran first. The handler then sees a different run, issues
different commands, and the history does not replay: a run stuck for good.

`HandlersLast` closes it for the runs that opt in: an activation holding both Update jobs and
others is applied as two, the others first, then the Updates, with the two completions sent as
one. That is the order the split activations had, so a merged activation now does what the
split ones did, live and in replay alike. An activation with one kind only is left whole.

One thing the split must not change: a run that ends or continues as new in the first half
would then have Updates accepted, and their effect lost, by a run that is gone. So when the
first half ends the run, the second is not applied: the Updates were never taken, and the
server hands them to the next run (or tells their senders the run has ended), as it does with
an Update that comes after the task that ended the run. Signals stay in the first half, in
the SDK's order (a signal is an event of the history: not to be dropped).

A workflow opts in one of two ways, each giving a run handlers last from its second activation
on (its first, which starts it, is left whole):

- every run: its class sets `handlers_last = True` (the agent run, since the 1.0 baseline);
- by patch marker, for a workflow whose recorded runs predate the fix: its class names, in
  `handlers_last_markers`, the markers whose runs get handlers last, and a run that records
  one of them in its first activation has them. The marker is in the history, so a replay
  knows how the run was written, and runs recorded before it keep the SDK's order.

Every worker and replayer of such runs must use this runner: `workflow_runner()` builds the
one the worker, `replay-check`, the chaos suite and the tests share.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from temporalio.bridge.proto.workflow_activation import WorkflowActivation, WorkflowActivationJob
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.worker import WorkflowInstance, WorkflowInstanceDetails, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions
from temporalio.workflow import Info, _Definition

# The class attribute that gives every run handlers last.
ALWAYS_ATTRIBUTE = "handlers_last"
# The class attribute naming the patch markers of the runs that get handlers last.
MARKERS_ATTRIBUTE = "handlers_last_markers"


def workflow_runner() -> WorkflowRunner:
    """The runner the worker and every replayer of agent runs use: the sandbox, loading the
    package's modules (`waitstate.workflows` among them) once per process rather than once per run, with
    handlers after resolutions for the runs that opt in."""
    return HandlersLast(
        SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules("waitstate")
        )
    )


class HandlersLast(WorkflowRunner):
    """A `WorkflowRunner` whose instances apply an opted-in run's Update jobs after the rest of
    their activation, as the module says."""

    def __init__(self, runner: WorkflowRunner) -> None:
        self._runner = runner

    def prepare_workflow(self, defn: _Definition) -> None:
        self._runner.prepare_workflow(defn)

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        instance = self._runner.create_instance(det)
        always = getattr(det.defn.cls, ALWAYS_ATTRIBUTE, False) is True
        markers = frozenset(getattr(det.defn.cls, MARKERS_ATTRIBUTE, ()))
        return _Instance(instance, markers, always) if always or markers else instance

    def set_worker_level_failure_exception_types(self, types: Any) -> None:
        self._runner.set_worker_level_failure_exception_types(types)


def is_handler(job: WorkflowActivationJob) -> bool:
    return job.HasField("do_update")


# The commands that end a run (or continue it as new).
_ENDS = frozenset(
    {
        "complete_workflow_execution",
        "fail_workflow_execution",
        "cancel_workflow_execution",
        "continue_as_new_workflow_execution",
    }
)


def ends(completion: WorkflowActivationCompletion) -> bool:
    """Whether the completion ends the run."""
    return any(command.WhichOneof("variant") in _ENDS for command in completion.successful.commands)


def split(act: WorkflowActivation) -> tuple[WorkflowActivation, WorkflowActivation] | None:
    """`act` as two activations, its other jobs then its handler jobs; None when it holds only
    one kind (patches and the random seed, which only set state, do not count as others)."""
    handlers = [job for job in act.jobs if is_handler(job)]
    others = [job for job in act.jobs if not is_handler(job)]
    if not handlers or not any(
        not (job.HasField("notify_has_patch") or job.HasField("update_random_seed"))
        for job in others
    ):
        return None
    first, second = WorkflowActivation(), WorkflowActivation()
    first.CopyFrom(act)
    second.CopyFrom(act)
    del first.jobs[:]
    first.jobs.extend(others)
    del second.jobs[:]
    second.jobs.extend(handlers)
    return first, second


def joined(
    first: WorkflowActivationCompletion, second: WorkflowActivationCompletion
) -> WorkflowActivationCompletion:
    """One completion for the two halves of an activation: the first's commands, then the
    second's; a failed half fails the whole."""
    if first.HasField("failed"):
        return first
    if second.HasField("failed"):
        return second
    first.successful.commands.extend(second.successful.commands)
    for flag in second.successful.used_internal_flags:
        if flag not in first.successful.used_internal_flags:
            first.successful.used_internal_flags.append(flag)
    if second.successful.versioning_behavior:
        first.successful.versioning_behavior = second.successful.versioning_behavior
    return first


class _Instance(WorkflowInstance):
    def __init__(self, instance: WorkflowInstance, markers: frozenset[str], always: bool) -> None:
        self._instance = instance
        self._markers = markers
        self._always = always
        # Set after the first activation (`always`), or once the run records (or, replaying,
        # re-records) one of the markers.
        self._handlers_last = False
        # The SDK asks for a command's contexts once per payload in each of its three encoding
        # (and three decoding) passes, and a sandboxed instance answers each ask by compiling
        # and running code in the sandbox: 2 ms of a two-call run's CPU. Between activations
        # no workflow code runs, so no command's context can change: the answers are kept from
        # the end of one activation to the start of the next (the completion's encoding and
        # the next activation's decoding).
        self._contexts: dict[tuple[str, Any], Any] = {}

    def activate(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
        self._contexts.clear()
        try:
            return self._activate(act)
        finally:
            self._contexts.clear()

    def _activate(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
        halves = split(act) if self._handlers_last else None
        if halves is None:
            completion = self._instance.activate(act)
        else:
            completion = self._instance.activate(halves[0])
            if not completion.HasField("failed") and not ends(completion):
                completion = joined(completion, self._instance.activate(halves[1]))
        if not self._handlers_last:
            self._handlers_last = self._always or any(
                command.HasField("set_patch_marker")
                and command.set_patch_marker.patch_id in self._markers
                for command in completion.successful.commands
            )
        return completion

    # The rest is the wrapped instance's.

    def get_info(self) -> Info:
        return self._instance.get_info()

    def get_thread_id(self) -> int | None:  # asked when an activation deadlocks
        return self._instance.get_thread_id()

    def get_serialization_context(self, command_info: Any) -> Any:
        return self._kept("serialization", command_info, self._instance.get_serialization_context)

    def get_external_store_context(self, command_info: Any) -> Any:
        return self._kept("store", command_info, self._instance.get_external_store_context)

    def _kept(self, kind: str, command_info: Any, ask: Callable[[Any], Any]) -> Any:
        key = (kind, None if command_info is None else _command_key(command_info))
        if key not in self._contexts:
            self._contexts[key] = ask(command_info)
        return self._contexts[key]


def _command_key(command_info: Any) -> tuple[int, int]:
    """A command by its type and sequence number (unique in a run for each type)."""
    return (command_info.command_type, command_info.command_seq)
