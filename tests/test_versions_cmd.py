"""`waitstate versions`, as an operator runs it before retiring a patch or stopping a version's
workers: in a subprocess against the real dev server, counting runs whose search attributes
Temporal itself set (`TemporalChangeVersion` when the SDK records a patch marker,
`TemporalWorkerDeploymentVersion` when a versioned worker runs a task).

Since the 1.0 baseline the agent run checks for no marker (workflows/versions.py): the command
lists none, and a run of today's code records none. How runs are counted per marker, for the
next patch, is checked with the report's function given markers of the test's own, recorded
by stand-in runs."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from temporalio import workflow
from temporalio.api.enums.v1 import EventType, WorkerDeploymentVersionStatus
from temporalio.api.workflowservice.v1 import (
    DescribeWorkerDeploymentRequest,
    SetWorkerDeploymentCurrentVersionRequest,
    SetWorkerDeploymentRampingVersionRequest,
)
from temporalio.client import Client, WorkflowHandle
from temporalio.common import (
    PinnedVersioningOverride,
    SearchAttributeKey,
    VersioningBehavior,
    WorkerDeploymentVersion,
)
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker, WorkerDeploymentConfig

from tests.helpers import eventually, process_env, start_run
from tests.test_starter import Cli, assert_refused
from tests.tiers import SUBPROCESS, needs
from waitstate.activation_order import workflow_runner
from waitstate.cli.versions import MarkerCount, versions_report
from waitstate.names import AGENT_RUN
from waitstate.schemas import RunInput
from waitstate.workflows.agent_run import AgentRunWorkflow
from waitstate.workflows.versions import MARKERS

TASK = RunInput(task="What is 1234 * 5678?", tools=["calculate"])
CHANGE_VERSION = SearchAttributeKey.for_keyword_list("TemporalChangeVersion")
# The worker's runner (worker.py).
RUNNER = workflow_runner()
# Stand-ins for the next patches after the baseline, oldest first.
NEXT_PATCH = "agent-run-next"
NEWER_PATCH = "agent-run-newer"


# Unsandboxed: they read nothing but the patch API and wait.
@workflow.defn(name=AGENT_RUN, sandboxed=False)
class RunOfNextPatch:
    """An open run started while `NEXT_PATCH` was the newest marker: it recorded that one."""

    @workflow.run
    async def run(self, run_input: RunInput) -> None:
        workflow.patched(NEXT_PATCH)
        await workflow.wait_condition(lambda: False)


@workflow.defn(name=AGENT_RUN, sandboxed=False)
class RunBeforeAnyMarker:
    """An open run of the baseline, on code of its own: it records none."""

    @workflow.run
    async def run(self, run_input: RunInput) -> None:
        await workflow.wait_condition(lambda: False)


@pytest.fixture
@needs(SUBPROCESS)
def cli(dev_env: WorkflowEnvironment, task_queue: str) -> Cli:
    return Cli(process_env(dev_env.client, task_queue))


async def taken(handle: WorkflowHandle[Any, Any]) -> None:
    """Wait until a worker has completed the run's first workflow task."""

    async def completed() -> bool:
        async for event in handle.fetch_history_events():
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
                return True
        return False

    await eventually(completed, f"{handle.id}'s first workflow task")


async def counted(client: Client, query: str, count: int) -> None:
    """Wait until visibility counts `count` runs for `query` (it follows a run's state)."""

    async def as_many() -> bool:
        return (await client.count_workflows(query)).count == count

    await eventually(as_many, f"{count} runs counted for {query}")


async def _open_runs_of_every_kind(
    client: Client, task_queue: str, version: WorkerDeploymentVersion
) -> tuple[str, list[WorkflowHandle[Any, Any]]]:
    """Five open runs, each on a task queue of the test's own: two of today's code (one on a
    worker of deployment `version`, pinned to it), one of a stand-in `NEXT_PATCH`, one of
    stand-in code with no marker, one no worker has taken. Returns the filter that lists them, and their handles."""
    queues = [f"{task_queue}-{kind}" for kind in ("today", "versioned", "old", "oldest", "idle")]
    today, versioned, old, oldest, idle = queues
    handles: list[WorkflowHandle[Any, Any]] = []
    # No activity worker: today's runs take their first task, then wait for their first model
    # call for as long as the test needs.
    async with Worker(
        client, task_queue=today, workflows=[AgentRunWorkflow], workflow_runner=RUNNER
    ):
        handles.append(await start_run(client, today, TASK))
        await taken(handles[-1])
    deployment = WorkerDeploymentConfig(
        version=version,
        use_worker_versioning=True,
        default_versioning_behavior=VersioningBehavior.PINNED,
    )
    async with Worker(
        client,
        task_queue=versioned,
        workflows=[AgentRunWorkflow],
        workflow_runner=RUNNER,
        deployment_config=deployment,
    ):
        handles.append(await pinned_run(client, versioned, version))
        await taken(handles[-1])
    for queue, earlier in ((old, RunOfNextPatch), (oldest, RunBeforeAnyMarker)):
        async with Worker(client, task_queue=queue, workflows=[earlier]):
            handles.append(
                await client.start_workflow(
                    earlier.run, TASK, id=f"run-{uuid.uuid4()}", task_queue=queue
                )
            )
            await taken(handles[-1])
    handles.append(await start_run(client, idle, TASK))
    ours = "TaskQueue IN ({})".format(", ".join(f'"{queue}"' for queue in queues))
    await counted(client, f'{ours} AND ExecutionStatus = "Running"', 5)
    await counted(client, f"{ours} AND TemporalChangeVersion IS NOT NULL", 1)
    await counted(client, f"{ours} AND TemporalWorkerDeploymentVersion IS NOT NULL", 1)
    return ours, handles


async def pinned_run(
    client: Client, task_queue: str, version: WorkerDeploymentVersion
) -> WorkflowHandle[Any, Any]:
    """A run pinned to `version`, started once the version's worker has made it known to the
    task queue (until then Temporal refuses the pin)."""
    workflow_id = f"run-{uuid.uuid4()}"

    async def started() -> WorkflowHandle[Any, Any] | None:
        try:
            return await client.start_workflow(
                AgentRunWorkflow.run,
                TASK,
                id=workflow_id,
                task_queue=task_queue,
                versioning_override=PinnedVersioningOverride(version),
            )
        except RPCError as err:
            if "is not present in task queue" in err.message:
                return None
            raise

    return await eventually(started, f"a run pinned to {version}")


@dataclass
class OpenRuns:
    """The five open runs of `_open_runs_of_every_kind`, and the version one is pinned to."""

    query: str
    version: str
    handles: list[WorkflowHandle[Any, Any]]

    async def end(self) -> None:
        """Terminate the runs still open (the fixture's teardown ends what a test did not)."""
        while self.handles:
            await self.handles.pop().terminate("the test is over")


@pytest.fixture
async def open_runs(dev_env: WorkflowEnvironment, task_queue: str) -> AsyncIterator[OpenRuns]:
    version = WorkerDeploymentVersion(f"waitstate-{uuid.uuid4().hex[:8]}", "build-1")
    query, handles = await _open_runs_of_every_kind(dev_env.client, task_queue, version)
    runs = OpenRuns(query, f"{version.deployment_name}:{version.build_id}", handles)
    try:
        yield runs
    finally:
        await runs.end()


async def test_a_run_of_the_baseline_records_no_marker(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    # What the command counts by: the SDK (temporalio 1.35) upserts TemporalChangeVersion when
    # `workflow.patched` first returns true; since 1.0 the agent run calls it for no marker.
    client = dev_env.client
    async with Worker(
        client, task_queue=task_queue, workflows=[AgentRunWorkflow], workflow_runner=RUNNER
    ):
        handle = await start_run(client, task_queue, TASK)
        await taken(handle)
    try:
        described = await handle.describe()
    finally:
        await handle.terminate("the test is over")

    assert MARKERS == ()
    assert not described.typed_search_attributes.get(CHANGE_VERSION)


async def test_open_runs_are_counted_per_marker_and_per_deployment_version(
    dev_env: WorkflowEnvironment, open_runs: OpenRuns, cli: Cli
) -> None:
    ours, on_ours = open_runs.query, open_runs.version
    table = await cli("versions", "--query", ours)
    as_json = await cli("versions", "--query", ours, "--json")
    await open_runs.end()
    await counted(dev_env.client, f'{ours} AND ExecutionStatus = "Running"', 0)
    await _stands(dev_env.client, *on_ours.split(":"), "drained")
    after = await cli("versions", "--query", ours, "--json")

    assert (table.code, table.stderr) == (0, ""), table.stdout + table.stderr
    lines = table.stdout.splitlines()
    assert lines[0] == "open agent runs: 5"
    assert lines[2] == "patch markers: none (every run has the 1.0 baseline)"
    # The version was never current nor ramping, and a run is pinned to it (by hand): Temporal
    # has it draining.
    assert [line.split() for line in lines if line.startswith((on_ours, "(none)"))] == [
        [on_ours, "1", "1", "draining", "no"],
        ["(none)", "4", "-", "-", "-"],
    ]
    report = json.loads(as_json.stdout)
    assert as_json.code == 0
    assert report["open_runs"] == 5
    assert report["markers"] == []
    mine = [v for v in report["versions"] if v["version"] in (on_ours, None)]
    assert mine == [
        {
            "version": on_ours,
            "open_runs": 1,
            "pinned": 1,
            "state": "draining",
            "ramp_percentage": None,
            "can_stop": False,
        },
        {
            "version": None,
            "open_runs": 4,
            "pinned": 0,
            "state": None,
            "ramp_percentage": None,
            "can_stop": None,
        },
    ]
    assert (report["scanned"], report["unlisted"]) == (5, 0)
    # Once its runs have ended, the version is still listed (the deployment knows it), with
    # no open run, drained: its workers can stop.
    ended = json.loads(after.stdout)
    assert ended["open_runs"] == 0
    assert {
        "version": on_ours,
        "open_runs": 0,
        "pinned": 0,
        "state": "drained",
        "ramp_percentage": None,
        "can_stop": True,
    } in ended["versions"]
    assert ended["markers"] == []


async def test_open_runs_are_counted_per_marker_once_the_code_checks_for_some(
    dev_env: WorkflowEnvironment, open_runs: OpenRuns
) -> None:
    # The counts the next patch's lifecycle reads: of the five runs, one recorded NEXT_PATCH;
    # the four others recorded neither it nor a newer one, and none recorded NEWER_PATCH.
    report = await versions_report(
        dev_env.client, [NEXT_PATCH, NEWER_PATCH], open_runs.query, limit=10
    )

    assert report.open_runs == 5
    assert report.markers == [
        MarkerCount(NEXT_PATCH, recorded=1, without=4),
        MarkerCount(NEWER_PATCH, recorded=0, without=5),
    ]


async def test_the_limit_bounds_the_listing_and_says_so(open_runs: OpenRuns, cli: Cli) -> None:
    done = await cli("versions", "--query", open_runs.query, "--limit", "1")

    assert (done.code, done.stderr) == (0, ""), done.stdout + done.stderr
    lines = done.stdout.splitlines()
    # The counts stay exact: the version the listing may not have met is known to its
    # deployment.
    on_ours = open_runs.version
    assert [line.split()[:3] for line in lines if line.startswith((on_ours, "(none)"))] == [
        [on_ours, "1", "1"],
        ["(none)", "4", "-"],
    ]
    assert lines[-1] == (
        "listed 1 of the 5 open runs to find the versions they are on (--limit 1); the counts "
        "are of all of them"
    )


async def test_each_version_says_where_it_stands_and_whether_its_workers_can_stop(
    dev_env: WorkflowEnvironment, task_queue: str, cli: Cli
) -> None:
    client = dev_env.client
    deployment = f"states-{uuid.uuid4().hex[:8]}"
    builds = ("gone", "older", "now", "next", "idle")
    async with contextlib.AsyncExitStack() as workers:
        for build in builds:  # one worker per version, all polling the test's queue
            await workers.enter_async_context(
                Worker(
                    client,
                    task_queue=task_queue,
                    workflows=[AgentRunWorkflow],
                    workflow_runner=RUNNER,
                    deployment_config=WorkerDeploymentConfig(
                        version=WorkerDeploymentVersion(deployment, build),
                        use_worker_versioning=True,
                        default_versioning_behavior=VersioningBehavior.PINNED,
                    ),
                )
            )
        # `gone` was current and took no run; `older` was current and one run stays pinned to it
        # (waiting for its model call: no activity worker); `now` is current, `next` ramps.
        await _route(client, deployment, "gone")
        await _route(client, deployment, "older")
        waiting = await start_run(client, task_queue, TASK)
        try:
            await taken(waiting)
            await _route(client, deployment, "now")
            await _route(client, deployment, "next", ramp=10.0)
            for build, state in (("gone", "drained"), ("older", "draining")):
                await _stands(client, deployment, build, state)
            ours = f'TaskQueue = "{task_queue}"'
            await counted(client, f'{ours} AND TemporalWorkflowVersioningBehavior = "Pinned"', 1)
            table = await cli("versions", "--query", ours)
            as_json = await cli("versions", "--query", ours, "--json")
        finally:
            await waiting.terminate("the test is over")

    assert (table.code, table.stderr) == (0, ""), table.stdout + table.stderr
    lines = table.stdout.splitlines()
    header = next(line for line in lines if line.startswith("deployment version"))
    assert header.split() == [
        "deployment",
        "version",
        "open",
        "runs",
        "pinned",
        "state",
        "can",
        "stop",
    ]
    rows = {line.split()[0]: line.split()[1:] for line in lines if line.startswith(deployment)}
    assert rows == {
        f"{deployment}:gone": ["0", "0", "drained", "yes"],
        f"{deployment}:older": ["1", "1", "draining", "no"],
        f"{deployment}:now": ["0", "0", "current", "no"],
        f"{deployment}:next": ["0", "0", "ramping", "10%", "no"],
        f"{deployment}:idle": ["0", "0", "inactive", "yes"],
    }
    versions = {
        v["version"]: (v["state"], v["ramp_percentage"], v["can_stop"])
        for v in json.loads(as_json.stdout)["versions"]
        if (v["version"] or "").startswith(deployment)
    }
    assert versions == {
        f"{deployment}:gone": ("drained", None, True),
        f"{deployment}:older": ("draining", None, False),
        f"{deployment}:now": ("current", None, False),
        f"{deployment}:next": ("ramping", 10.0, False),
        f"{deployment}:idle": ("inactive", None, True),
    }


async def _route(client: Client, deployment: str, build: str, ramp: float | None = None) -> None:
    """Make a version current, or ramping at `ramp` percent, once its worker has polled (until
    then Temporal does not know it)."""
    service = client.workflow_service

    async def routed() -> bool:
        try:
            if ramp is None:
                await service.set_worker_deployment_current_version(
                    SetWorkerDeploymentCurrentVersionRequest(
                        namespace=client.namespace, deployment_name=deployment, build_id=build
                    )
                )
            else:
                await service.set_worker_deployment_ramping_version(
                    SetWorkerDeploymentRampingVersionRequest(
                        namespace=client.namespace,
                        deployment_name=deployment,
                        build_id=build,
                        percentage=ramp,
                    )
                )
        except RPCError as err:
            if err.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.FAILED_PRECONDITION):
                return False
            raise
        return True

    await eventually(routed, f"{deployment}:{build} routed")


async def _stands(client: Client, deployment: str, build: str, state: str) -> None:
    """Wait until the deployment describes the version as `state` (Temporal checks drainage
    periodically: every second on the tests' dev server)."""
    status = getattr(
        WorkerDeploymentVersionStatus, f"WORKER_DEPLOYMENT_VERSION_STATUS_{state.upper()}"
    )

    async def reached() -> bool:
        described = await client.workflow_service.describe_worker_deployment(
            DescribeWorkerDeploymentRequest(namespace=client.namespace, deployment_name=deployment)
        )
        summaries = described.worker_deployment_info.version_summaries
        return any(
            summary.deployment_version.build_id == build and summary.status == status
            for summary in summaries
        )

    await eventually(reached, f"{deployment}:{build} {state}")


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--limit", "many"], "argument --limit: not a whole number: 'many'"),
    ],
)
async def test_bad_input_is_a_usage_error(cli: Cli, args: list[str], error: str) -> None:
    assert_refused(await cli("versions", *args), error)
