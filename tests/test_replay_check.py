"""The replay gate, `starter.py replay-check`, as an operator runs it before a deploy: in a
subprocess against the real dev server, replaying the histories it lists there on the
worker's workflow code."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import Client, WorkflowHandle
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker, WorkerDeploymentConfig
from temporalio.workflow import NondeterminismError

import waitstate.cli.main as starter
from tests.helpers import eventually, make_worker, process_env, start_run
from tests.test_starter import Cli, assert_refused
from tests.test_versions_cmd import counted, pinned_run, taken
from tests.tiers import SUBPROCESS, needs
from waitstate.activation_order import workflow_runner
from waitstate.cli.replay import default_query, replayer
from waitstate.names import AGENT_RUN
from waitstate.schemas import RunInput
from waitstate.workflows.agent_run import AgentRunWorkflow

TASK = RunInput(task="What is 1234 * 5678?", tools=["calculate"])
# The version a deploy brings, for the queries that need one (none of their runs is pinned).
VERSION = "waitstate:b"
# The worker's runner (worker.py).
RUNNER = workflow_runner()


# Unsandboxed: the sandbox would import this module (and the CLI tests' imports) afresh; the
# class reads nothing but its input and workflow.sleep.
@workflow.defn(name=AGENT_RUN, sandboxed=False)
class EarlierAgentRun:
    """`AgentRunWorkflow` as a change shipped without `workflow.patched` would have left its
    runs: this one's first command is a timer, where today's code starts with the run's own
    commands. Its history is one the code at hand cannot replay."""

    @workflow.run
    async def run(self, run_input: RunInput) -> str:
        await workflow.sleep(timedelta(milliseconds=1))
        return run_input.task


@pytest.fixture
@needs(SUBPROCESS)
def cli(dev_env: WorkflowEnvironment, task_queue: str) -> Cli:
    return Cli(process_env(dev_env.client, task_queue))


async def _completed_run(client: Client, task_queue: str) -> tuple[str, str]:
    """A demo run, done on the production worker: its workflow id and run id."""
    async with make_worker(client, task_queue):
        handle = await start_run(client, task_queue, TASK)
        await handle.result()
    return handle.id, handle.result_run_id or ""


async def _earlier_run(client: Client, task_queue: str) -> tuple[str, str]:
    """A run of `EarlierAgentRun`, done: its workflow id and run id."""
    async with Worker(client, task_queue=task_queue, workflows=[EarlierAgentRun]):
        handle = await client.start_workflow(
            EarlierAgentRun.run, TASK, id=f"earlier-{uuid.uuid4()}", task_queue=task_queue
        )
        assert await handle.result() == TASK.task
    return handle.id, handle.result_run_id or ""


async def _listed(client: Client, query: str, count: int) -> None:
    """Wait until visibility lists `count` closed runs for `query`."""

    async def closed() -> bool:
        found = await client.count_workflows(f'({query}) AND ExecutionStatus != "Running"')
        return found.count == count

    await eventually(closed, f"{count} closed runs listed for {query}")


async def test_a_cluster_whose_runs_replay_passes_the_gate(
    dev_env: WorkflowEnvironment, task_queue: str, cli: Cli
) -> None:
    workflow_id, _ = await _completed_run(dev_env.client, task_queue)
    query = f'WorkflowId = "{workflow_id}"'
    await _listed(dev_env.client, query, 1)

    done = await cli("replay-check", "--query", query)

    assert (done.code, done.stdout, done.stderr) == (0, "replayed 1 run: 1 ok\n", "")


async def test_a_run_the_code_cannot_replay_fails_the_gate_and_is_named(
    dev_env: WorkflowEnvironment, task_queue: str, cli: Cli
) -> None:
    client = dev_env.client
    good_id, _ = await _completed_run(client, task_queue)
    bad_id, bad_run = await _earlier_run(client, task_queue)
    query = f'TaskQueue = "{task_queue}"'
    await _listed(client, query, 2)

    done = await cli("replay-check", "--query", query)

    assert done.code == 1, done.stdout + done.stderr
    failing, summary = done.stdout.splitlines()
    named = f"does not replay: {bad_id} (run {bad_run}): "
    # Then why, in Core's words (its own), on the same line.
    assert failing.startswith(named) and len(failing) > len(named)
    # The run fails as the gate is for: a replay of it on today's code is nondeterministic.
    bad = await client.get_workflow_handle(bad_id, run_id=bad_run).fetch_history()
    replay = await replayer([AgentRunWorkflow]).replay_workflow(bad, raise_on_replay_failure=False)
    assert isinstance(replay.replay_failure, NondeterminismError), replay.replay_failure
    assert good_id not in done.stdout
    assert summary == "replayed 2 runs: 1 ok, 1 does not replay"
    assert done.stderr == ""


async def test_a_bounded_gate_checks_the_oldest_runs_and_fails_for_those_it_left(
    dev_env: WorkflowEnvironment, task_queue: str, cli: Cli
) -> None:
    client = dev_env.client
    # The oldest run is one the code cannot replay: a run of the version before, still listed
    # when two newer ones (visibility lists the newest first) are.
    bad_id, bad_run = await _earlier_run(client, task_queue)
    newer = [await _completed_run(client, task_queue) for _ in range(2)]
    query = f'TaskQueue = "{task_queue}"'
    await _listed(client, query, 3)
    good_only = f'{query} AND WorkflowId != "{bad_id}"'

    oldest = await cli("replay-check", "--query", query, "--limit", "1")
    cut = await cli("replay-check", "--query", good_only, "--limit", "1")
    whole = await cli("replay-check", "--query", good_only, "--limit", "2")

    failing, *rest = oldest.stdout.splitlines()
    assert oldest.code == 1, oldest.stdout + oldest.stderr
    assert failing.startswith(f"does not replay: {bad_id} (run {bad_run}): ")
    assert rest == [
        "replayed 1 run: 0 ok, 1 does not replay",
        "not checked: 2 of the 3 runs the query lists (--limit 1: the oldest were checked)",
    ]
    # Every run it checked replays, and yet it did not check them all: not a pass.
    assert (cut.code, cut.stderr) == (2, "")
    assert cut.stdout.splitlines() == [
        "replayed 1 run: 1 ok",
        "not checked: 1 of the 2 runs the query lists (--limit 1: the oldest were checked)",
    ]
    assert (whole.code, whole.stdout) == (0, "replayed 2 runs: 2 ok\n")
    assert all(workflow_id not in oldest.stdout + cut.stdout for workflow_id, _ in newer)


async def test_the_default_lists_open_runs_and_runs_closed_within_the_window(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    client = dev_env.client
    closed_id, _ = await _completed_run(client, task_queue)
    # No worker polls this queue: the run stays open.
    idle = f"{task_queue}-idle"
    open_run = await start_run(client, idle, TASK)
    ours = f'(TaskQueue = "{task_queue}" OR TaskQueue = "{idle}")'
    await _listed(client, f'TaskQueue = "{task_queue}"', 1)

    async def both_listed() -> bool:
        return (await client.count_workflows(ours)).count == 2

    # Visibility lists a run some time after it starts: both, before the queries that count.
    await eventually(both_listed, "the open run listed beside the closed one")
    try:
        now = await _ids(client, f"{default_query(timedelta(days=7), VERSION)} AND {ours}")
        week_on = datetime.now(UTC) + timedelta(days=8)
        later = await _ids(
            client, f"{default_query(timedelta(days=7), VERSION, week_on)} AND {ours}"
        )
    finally:
        await open_run.terminate("the test is over")

    assert now == {closed_id, open_run.id}
    assert later == {open_run.id}


async def test_the_default_scope_is_the_runs_the_new_version_can_meet(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    client = dev_env.client
    deployment = f"gate-{uuid.uuid4().hex[:8]}"
    queues = [f"{task_queue}-{kind}" for kind in ("none", "a", "b")]
    ours = "TaskQueue IN ({})".format(", ".join(f'"{queue}"' for queue in queues))
    runs: list[WorkflowHandle[Any, Any]] = []
    try:
        # Each run waits for its first model call (no activity worker) once its first task is
        # done: one on no version, one pinned to A (the version before), one pinned to B.
        for queue, build in zip(queues, (None, "a", "b"), strict=True):
            version = None if build is None else WorkerDeploymentVersion(deployment, build)
            async with Worker(
                client,
                task_queue=queue,
                workflows=[AgentRunWorkflow],
                workflow_runner=RUNNER,
                deployment_config=None
                if version is None
                else WorkerDeploymentConfig(
                    version=version,
                    use_worker_versioning=True,
                    default_versioning_behavior=VersioningBehavior.PINNED,
                ),
            ):
                runs.append(
                    await start_run(client, queue, TASK)
                    if version is None
                    else await pinned_run(client, queue, version)
                )
                await taken(runs[-1])
        await counted(client, f'{ours} AND TemporalWorkflowVersioningBehavior = "Pinned"', 2)
        await counted(client, ours, 3)
        scoped = await _ids(
            client, f"{default_query(timedelta(days=7), f'{deployment}:b')} AND {ours}"
        )
        every = await _ids(client, f"{default_query(timedelta(days=7), None)} AND {ours}")
    finally:
        for handle in runs:
            await handle.terminate("the test is over")

    unversioned, on_a, on_b = (run.id for run in runs)
    # B meets the run no version holds, and its own; the run pinned to A stays on A's workers.
    assert scoped == {unversioned, on_b}
    assert every == {unversioned, on_a, on_b}


async def _ids(client: Client, query: str) -> set[str]:
    return {execution.id async for execution in client.list_workflows(query)}


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--limit", "-3"], "argument --limit: must be 1 or more, got -3"),
        (["--closed-within", "0d"], "argument --closed-within: a duration must be more than 0"),
        (["--closed-within", "1d", "--query", "WorkflowId = 'x'"], "not allowed with argument"),
        (["--all-versions", "--query", "WorkflowId = 'x'"], "not allowed with argument --query"),
    ],
)
async def test_bad_input_is_a_usage_error_and_nothing_is_replayed(
    cli: Cli, args: list[str], error: str
) -> None:
    assert_refused(await cli("replay-check", *args), error)


async def test_the_gate_replays_on_the_workflows_the_worker_registers(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    async with make_worker(dev_env.client, task_queue) as worker:
        registered = list(worker.config()["workflows"])

    assert starter.worker_workflows() == registered
