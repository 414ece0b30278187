"""The deploy drill (issue 24), on the real dev server: runs wait on a webhook, a person's approval
and a person's answer under version A of the worker; version B, whose `AgentRunWorkflow` cannot
replay A's histories (no patch), is deployed beside it and made current with the `temporal` CLI
as docs/deploy.md says. New runs go to B; A's runs finish on A; a run that continues as new
moves to B. None fails, none is lost, none meets code it cannot replay.

And the deploy as docs/deploy.md writes it: each of its shell blocks run, in order, as a script
runs it (bash, no terminal), on a dev server of its own."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import re
import subprocess
import textwrap
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import DescribeWorkerDeploymentRequest
from temporalio.client import Client, WorkflowHandle
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, Worker, WorkerDeploymentConfig
from temporalio.workflow import NondeterminismError

from examples.demo.purges import PurgeService, purge_tool
from examples.systems import create_app as systems_app
from tests.docs import ROOT, between, page
from tests.drill_app import AgentRunWorkflowB
from tests.helpers import (
    TEST_BLOBS,
    OpenUntilEnded,
    callback_token,
    eventually,
    first_question,
    quiet_history_length,
)
from tests.rigs import (
    EXPORT_TASK,
    EXPORT_TOOLS,
    REFUND_TASK,
    REFUND_TOOLS,
    TEMPORAL_CLI,
    Stack,
    serving_stack,
)
from waitstate.activation_order import workflow_runner
from waitstate.apps import Apps, load_apps
from waitstate.client import WaitstateClient
from waitstate.converter import DATA_CONVERTER
from waitstate.schemas import RunResult
from waitstate.schemas.approvals import DecideInput
from waitstate.schemas.operations import Operation
from waitstate.tools import ToolSpec
from waitstate.worker import WORKFLOWS, build_providers, build_worker
from waitstate.workflows.agent_run import AgentRunWorkflow
from waitstate.workflows.blob_cleanup import BlobCleanupWorkflow

# The purge's script: a job that asks a person to confirm mid-flight.
QUESTIONS_APP = "tests.workflows.questions_app:app"
PURGE_TASK = "purge the staging events"
KEYS = {"drill": "d" * 40}
# Bounds only: each step takes seconds on a loaded 2-core machine.
STEP_WITHIN = 60.0
RUN_WITHIN = 120.0
CLOSED_COMPLETED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED
CLOSED_CONTINUED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW


@pytest.fixture
async def stack(dev_env: WorkflowEnvironment, task_queue: str) -> AsyncIterator[Stack]:
    """The dev server, the gateway and the demo systems over real HTTP."""
    async with serving_stack(dev_env.client, task_queue, KEYS, "drill", systems_app()) as stack:
        yield stack


@pytest.mark.subprocess  # the `temporal` CLI
async def test_runs_waiting_across_a_version_change_finish_on_their_version(
    stack: Stack,
) -> None:
    deployment = f"drill-{uuid.uuid4().hex[:8]}"
    tools = [
        *stack.tools(),
        purge_tool(PurgeService(stack.http, stack.systems_url)),
    ]
    apps = load_apps([QUESTIONS_APP])
    people = WaitstateClient(stack.client, task_queue=stack.task_queue)
    async with _version(stack, deployment, "a", tools, apps, WORKFLOWS):
        await _make_current(stack.client, deployment, "a")
        # Under A: a run waits for a webhook that no job sends by itself...
        await stack.faults(never_complete=True)
        webhook = await stack.start(EXPORT_TASK, EXPORT_TOOLS)
        export = await _pending_operation(webhook)
        await stack.faults(never_complete=False)
        # ...one for a person's decision, one for a person's answer...
        approval = await stack.start(REFUND_TASK, REFUND_TOOLS)
        request_id = await _open_request(people, approval.id)
        question = await stack.start(PURGE_TASK, ["purge_dataset"], model="scripted:purge")
        asked = await first_question(question, "the purge's question")
        # ...and one that continues as new at its first turn after the decision: the history
        # it waits with is the approval run's, and the limit is one event past it.
        waiting = await quiet_history_length(approval)
        moving = await stack.start(
            REFUND_TASK, REFUND_TOOLS, continue_as_new_after_events=waiting + 1
        )
        moving_request = await _open_request(people, moving.id)
        a_runs = [webhook, approval, question, moving]
        for handle in a_runs:
            await quiet_history_length(handle)

        async with _version(
            stack, deployment, "b", tools, apps, [AgentRunWorkflowB, BlobCleanupWorkflow]
        ):
            await _make_current(stack.client, deployment, "b")

            # A is no longer current, and runs still need it: it drains.
            async def draining() -> bool:
                return await _drainage(stack.client, deployment, "a") == "draining"

            await eventually(draining, "version a to be draining", STEP_WITHIN)
            fresh = await stack.start(EXPORT_TASK, EXPORT_TOOLS)
            # A's waits end now, with B current: the webhook, the decision, the answer.
            await _complete(stack, webhook, export)
            await people.decide(approval.id, DecideInput(request_id=request_id, decision="approve"))
            await _answer_by_link(stack, asked.question_id)
            await people.decide(
                moving.id, DecideInput(request_id=moving_request, decision="approve")
            )
            results = await asyncio.gather(
                *(asyncio.wait_for(h.result(), RUN_WITHIN) for h in [*a_runs, fresh])
            )

            # Once no run needs A, Temporal says so: its workers can stop.
            async def drained() -> bool:
                return await _drainage(stack.client, deployment, "a") == "drained"

            await eventually(drained, "version a to be drained", STEP_WITHIN)

    # None failed, none was lost: every run's chain completed.
    assert [r.status for r in results] == ["completed"] * 5, results
    chains = {h.id: await _chain(stack.client, h) for h in [*a_runs, fresh]}
    assert [len(chain) for chain in chains.values()] == [1, 1, 1, 2, 1]
    # A's runs ran on A alone, from start to end; B's took the new run and the continued one.
    on_a = [webhook.id, approval.id, question.id]
    for workflow_id in on_a:
        [run] = chains[workflow_id]
        assert await _versions(stack.client, workflow_id, run) == ({"a"}, "a"), workflow_id
    first, second = chains[moving.id]
    assert await _versions(stack.client, moving.id, first) == ({"a"}, "a")
    assert await _versions(stack.client, moving.id, second) == ({"b"}, "b")
    [new_run] = chains[fresh.id]
    assert await _versions(stack.client, fresh.id, new_run) == ({"b"}, "b")
    # Each history replays on its own version's code, and no workflow task failed anywhere
    # (a nondeterminism error would have failed one)...
    for workflow_id, chain in chains.items():
        for run in chain:
            history = await stack.client.get_workflow_handle(
                workflow_id, run_id=run
            ).fetch_history()
            kinds = {e.event_type for e in history.events}
            assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in kinds, (workflow_id, run)
            b_ran_it = workflow_id == fresh.id or run == second
            await _replay(history, AgentRunWorkflowB if b_ran_it else AgentRunWorkflow)
    # ...and B could not have taken over A's runs: their histories fail on its code.
    approval_history = await approval.fetch_history()
    await _replay(approval_history, AgentRunWorkflowB, expect_failure=True)
    # Visibility names each run's version, as `starter.py versions` and the Web UI read it.
    query = (
        f'TaskQueue = "{stack.task_queue}" AND TemporalWorkerDeploymentVersion = "{deployment}:b"'
    )

    async def on_b() -> list[str] | None:
        ids = sorted({w.id async for w in stack.client.list_workflows(query)})
        return ids if len(ids) >= 2 else None

    assert await eventually(on_b, "the runs on B in visibility") == sorted([fresh.id, moving.id])
    # And the queue holds no other run: six executions, five completed, one continued as new.

    async def closed() -> list[str] | None:
        listed = stack.client.list_workflows(f'TaskQueue = "{stack.task_queue}"')
        statuses = sorted([w.status.name async for w in listed if w.status is not None])
        return statuses if len(statuses) >= 6 and "RUNNING" not in statuses else None

    assert await eventually(closed, "every run closed in visibility") == [
        *["COMPLETED"] * 5,
        "CONTINUED_AS_NEW",
    ]


@asynccontextmanager
async def _version(
    stack: Stack,
    deployment: str,
    build_id: str,
    tools: Sequence[ToolSpec],
    apps: Apps,
    workflows: Sequence[type],
) -> AsyncIterator[Worker]:
    """A worker of the production wiring, polling the test's queue as version `build_id` of
    `deployment`, with `workflows`."""
    settings = dataclasses.replace(
        stack.settings,
        versioning=True,
        deployment=deployment,
        build_id=build_id,
        blob_dir=TEST_BLOBS,
    )
    providers = build_providers(settings, apps.providers, apps.scripts)
    async with httpx.AsyncClient(timeout=10) as http:
        worker = build_worker(
            stack.client,
            settings,
            providers,
            [*tools, *apps.tools],
            http,
            tokens=stack.tokens,
            task_queue=stack.task_queue,
            agents=apps.agents,
            tool_deps=apps.tool_deps,
            workflows=workflows,
        )
        try:
            async with worker:
                yield worker
        finally:
            await providers.aclose()


def _cli(client: Client, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(TEMPORAL_CLI), *args, "--address", client.service_client.config.target_host],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


async def _make_current(client: Client, deployment: str, build_id: str) -> None:
    """`temporal worker deployment set-current-version`, once the version's worker has polled
    (until then Temporal does not know the version)."""

    async def made() -> bool:
        done = await asyncio.to_thread(
            _cli,
            client,
            "worker", "deployment", "set-current-version",
            "--deployment-name", deployment, "--build-id", build_id, "--yes",
        )  # fmt: skip
        return done.returncode == 0

    await eventually(made, f"{deployment}.{build_id} to be made current", within=STEP_WITHIN)


async def _drainage(client: Client, deployment: str, build_id: str) -> str:
    """The version's drainage status, as `temporal worker deployment describe-version` shows
    it (empty while the version is current or ramping)."""
    done = await asyncio.to_thread(
        _cli,
        client,
        "worker", "deployment", "describe-version",
        "--deployment-name", deployment, "--build-id", build_id, "--output", "json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout).get("drainageInfo", {}).get("drainageStatus", ""))


async def _pending_operation(handle: WorkflowHandle[Any, Any]) -> Operation:
    async def one() -> Operation | None:
        state = await handle.query(AgentRunWorkflow.status)
        return next(iter(state.operations.values()), None)

    return await eventually(one, f"run {handle.id} to have an operation pending", STEP_WITHIN)


async def _open_request(people: WaitstateClient, run_id: str) -> str:
    async def request() -> str | None:
        requests = await people.open_requests(run_id)
        return requests[0].request_id if requests else None

    return await eventually(request, f"the approval request of {run_id}", STEP_WITHIN)


async def _complete(stack: Stack, handle: WorkflowHandle[Any, Any], op: Operation) -> None:
    """The export's system reports its job done, through the gateway, as it would."""
    token = await callback_token(stack.tokens, handle, op)
    body = {
        "status": "succeeded",
        "result": {"file": "exports/transactions-2025-Q3.csv", "rows": 7},
    }
    answer = await stack.http.post(
        f"{stack.gateway_url}/v1/operations/{op.operation_id}/complete",
        json=body,
        headers={"Authorization": f"Bearer {token}"},
    )
    assert answer.status_code == 200, answer.text


async def _answer_by_link(stack: Stack, question_id: str) -> None:
    """A person confirms the purge through the link of the question's notice."""

    async def notice() -> dict[str, Any] | None:
        entries = (await stack.http.get(f"{stack.systems_url}/approvals/outbox")).json()
        bodies = [entry["body"] for entry in entries]
        return next((b for b in bodies if b.get("question_id") == question_id), None)

    link = (await eventually(notice, "the question's notice", STEP_WITHIN))["answer"]
    answer = await stack.http.post(
        link["url"],
        headers={"Authorization": link["authorization"]},
        json={"action": "accept", "content": {"confirm": True}, "responder": "ana"},
    )
    assert answer.status_code == 200, answer.text


async def _chain(client: Client, handle: WorkflowHandle[Any, RunResult]) -> list[str]:
    """The run ids of a workflow's continue-as-new chain from its first run; each run closed
    completed or continued as new."""
    runs: list[str] = []
    next_run = handle.first_execution_run_id or handle.result_run_id
    while next_run:  # a walk along the chain, not a wait: each run has closed
        runs.append(next_run)
        history = await client.get_workflow_handle(handle.id, run_id=next_run).fetch_history()
        last = history.events[-1]
        assert last.event_type in (CLOSED_COMPLETED, CLOSED_CONTINUED), (handle.id, next_run)
        continued = last.workflow_execution_continued_as_new_event_attributes
        next_run = continued.new_execution_run_id if last.event_type == CLOSED_CONTINUED else None
    return runs


async def _versions(client: Client, workflow_id: str, run_id: str) -> tuple[set[str], str]:
    """The build ids of the workers that completed the run's workflow tasks, and the version
    Temporal describes the run as on."""
    handle = client.get_workflow_handle(workflow_id, run_id=run_id)
    builds = set()
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            builds.add(event.workflow_task_completed_event_attributes.deployment_version.build_id)
    info = (await handle.describe()).raw_description.workflow_execution_info.versioning_info
    return builds, info.deployment_version.build_id


async def _replay(history: Any, workflow: type, *, expect_failure: bool = False) -> None:
    """`history` replays on `workflow`'s code, or with `expect_failure`, is nondeterministic on
    it."""
    replayer = Replayer(
        workflow_runner=workflow_runner(), workflows=[workflow], data_converter=DATA_CONVERTER
    )
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    if expect_failure:
        assert isinstance(result.replay_failure, NondeterminismError), result.replay_failure
    else:
        assert result.replay_failure is None, result.replay_failure


# --- docs/deploy.md's commands, as a script runs them ------------------------------------------

DEPLOY_STEPS = "### A deploy, step by step"
# The deploy's two versions and the deployment they are of, as the page names them.
PAGE_DEPLOYMENT = "waitstate"
SCRIPT_WITHIN = 900  # seconds, a block: the page's own loops are bounded (a day for a drain)
SCRIPT_QUEUE = "waitstate-agents"


def deploy_steps() -> list[str]:
    """The shell blocks of docs/deploy.md's deploy, in order, as a script would hold them."""
    steps = between(page("docs/deploy.md"), f"\n{DEPLOY_STEPS}\n", "\n### ")
    blocks = re.findall(r"^( *)```sh\n(.*?)^\1```", steps, re.DOTALL | re.MULTILINE)
    return [textwrap.dedent(block) for _, block in blocks]


@pytest.mark.temporal  # a dev server of its own: the page's deployment name, as written
@pytest.mark.subprocess  # bash, the `temporal` CLI and ours
async def test_the_deploy_steps_run_as_written_in_a_script() -> None:
    blocks = deploy_steps()
    *steps, deletion = blocks
    assert "delete-version" in deletion and not any("delete-version" in s for s in steps)
    env = await WorkflowEnvironment.start_local(
        data_converter=DATA_CONVERTER,
        dev_server_existing_path=str(TEMPORAL_CLI),
        dev_server_extra_args=[
            # As the suite's dev server: drainage checked every second, not every few minutes.
            "--dynamic-config-value",
            'matching.wv.VersionDrainageStatusRefreshInterval="1s"',
            "--dynamic-config-value",
            'matching.wv.VersionDrainageStatusVisibilityGracePeriod="1s"',
            # How long Temporal remembers a poller, and so refuses to delete its version: 5
            # minutes by default, which the page's loop waits out.
            "--dynamic-config-value",
            'matching.PollerHistoryTTL="10s"',
        ],
    )
    waiting_ended = False
    async with env, contextlib.AsyncExitStack() as version_b:
        client = env.client
        shell = Script(client)
        async with _polling(client, "A"):
            # The first deploy: A made current, as the page says, and a run that starts on it.
            await shell.retried(
                "temporal worker deployment set-current-version "
                f"--deployment-name {PAGE_DEPLOYMENT} --build-id A --yes"
            )
            # A run that waits until it is told to end: it keeps version A draining meanwhile.
            waiting = await client.start_workflow(
                OpenUntilEnded.run, id=f"waits-{uuid.uuid4()}", task_queue=SCRIPT_QUEUE
            )
            await version_b.enter_async_context(_polling(client, "B"))
            await shell.retried(
                f"temporal worker deployment describe-version --deployment-name "
                f"{PAGE_DEPLOYMENT} --build-id B"
            )
            for block in steps:
                if "--build-id A" in block and not waiting_ended:
                    # B is current, and the steps turn to A: A's last run ends, A drains.
                    await waiting.signal(OpenUntilEnded.end)
                    waiting_ended = True
                _succeeded(block, await shell(block))  # the next steps rely on this one's
        # A's workers have stopped.
        _succeeded(deletion, await shell(deletion))
        assert waiting_ended and await asyncio.wait_for(waiting.result(), RUN_WITHIN) is None
        described = await client.workflow_service.describe_worker_deployment(
            DescribeWorkerDeploymentRequest(
                namespace=client.namespace, deployment_name=PAGE_DEPLOYMENT
            )
        )

    # A is gone; B is the deployment's current version.
    info = described.worker_deployment_info
    assert [v.deployment_version.build_id for v in info.version_summaries] == ["B"]
    assert info.routing_config.current_deployment_version.build_id == "B"


def _succeeded(block: str, done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0, f"{block}\n{done.stdout}\n{done.stderr}"


class Script:
    """bash scripts from the checkout, the `temporal` CLI of the installed package on the PATH
    and the dev server's address in TEMPORAL_ADDRESS, as an operator's deploy job would run."""

    def __init__(self, client: Client) -> None:
        path = f"{TEMPORAL_CLI.parent}{os.pathsep}{os.environ['PATH']}"
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")},
            "PATH": path,
            "TEMPORAL_ADDRESS": client.service_client.config.target_host,
        }

    async def __call__(self, script: str) -> subprocess.CompletedProcess[str]:
        return await asyncio.to_thread(
            subprocess.run,
            ["bash", "-e", "-c", script],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=SCRIPT_WITHIN,
            stdin=subprocess.DEVNULL,  # no terminal: nobody answers a prompt
        )

    async def retried(self, script: str) -> subprocess.CompletedProcess[str]:
        """Run `script` until it succeeds: a version is known once its worker has polled."""

        async def succeeded() -> subprocess.CompletedProcess[str] | None:
            done = await self(script)
            return done if done.returncode == 0 else None

        return await eventually(succeeded, script, STEP_WITHIN)


@asynccontextmanager
async def _polling(client: Client, build_id: str) -> AsyncIterator[Worker]:
    """A worker of version `build_id` of the page's deployment, its runs pinned to it."""
    async with Worker(
        client,
        task_queue=SCRIPT_QUEUE,
        workflows=[OpenUntilEnded],
        deployment_config=WorkerDeploymentConfig(
            version=WorkerDeploymentVersion(PAGE_DEPLOYMENT, build_id),
            use_worker_versioning=True,
            default_versioning_behavior=VersioningBehavior.PINNED,
        ),
    ) as worker:
        yield worker
