"""The client every caller uses, on the real dev server with the production worker: runs
started once per id, read with and without a worker, followed, decided, cancelled, and the
fleet aggregated (that part pure)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import cast

import httpx
import pytest
from temporalio.api.common.v1 import ActivityType
from temporalio.api.failure.v1 import ApplicationFailureInfo, Failure, ServerFailureInfo
from temporalio.api.workflow.v1 import PendingActivityInfo
from temporalio.api.workflowservice.v1 import DescribeWorkflowExecutionResponse
from temporalio.client import WorkflowExecutionDescription, WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment

from examples.demo.basic import demo_tools
from examples.demo.refunds import refund_tools
from examples.systems import create_app as systems_app
from examples.systems import serving
from tests.helpers import eventually, make_worker
from waitstate.client import (
    ClosedRun,
    DecisionRefused,
    FailedRun,
    Fleet,
    FleetRun,
    NotAnswered,
    RunEnded,
    RunNotFound,
    StartFailed,
    Unreachable,
    Wait,
    WaitstateClient,
    fleet_report,
)
from waitstate.client._events import retries_of
from waitstate.schemas import RunInput, RunState
from waitstate.schemas.approvals import ApprovalPolicy, DecideInput
from waitstate.schemas.budgets import Budget, ModelPrice
from waitstate.schemas.run import CALL_MODEL
from waitstate.settings import Settings

ASK = RunInput(task="publish the report", model="scripted:ask-first", tools=["request_approval"])
# Short, so a test of a run nobody serves does not wait long for its answer.
NOBODY_ANSWERS = timedelta(seconds=1)
T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


@pytest.fixture
async def systems() -> AsyncIterator[str]:
    async with serving(systems_app()) as url:
        yield url


@pytest.fixture
def client(dev_env: WorkflowEnvironment, task_queue: str) -> WaitstateClient:
    return WaitstateClient(dev_env.client, task_queue=task_queue)


def _run_id() -> str:
    return f"run-{uuid.uuid4()}"


def _settings(systems: str) -> Settings:
    # Approval notices go to the test's own demo systems; links to a gateway nobody calls.
    return Settings(demo_systems_url=systems, gateway_url="http://127.0.0.1:9")


async def _open_requests(client: WaitstateClient, run_id: str, count: int) -> list[str]:
    async def open_ids() -> list[str]:
        ids = [request.request_id for request in await client.open_requests(run_id)]
        return ids if len(ids) == count else []

    return await eventually(open_ids, f"run {run_id} to ask for {count} approvals")


async def test_one_id_is_one_run_started_as_the_cli_starts_it(
    dev_env: WorkflowEnvironment, task_queue: str, client: WaitstateClient
) -> None:
    run_id = _run_id()
    run = RunInput(task="echo me", model="scripted:echo", max_turns=3)

    async with make_worker(dev_env.client, task_queue):
        first = await client.start(run, run_id=run_id)
        second = await client.start(run, run_id=run_id)
        outcome = await client.outcome(run_id)
    # Ended and no worker left: the state is read from the run's history.
    after = await client.status(run_id, rpc_timeout=NOBODY_ANSWERS)
    again = await client.start(run, run_id=run_id)
    description = await client.handle(run_id).describe()
    history = await client.handle(run_id).fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes

    assert (first.run_id, first.existing) == (run_id, False)
    assert (second.existing, second.first_run_id) == (True, first.first_run_id)
    assert (again.existing, again.first_run_id) == (True, first.first_run_id)
    assert outcome.status == "completed" and "echo me" in (outcome.final_output or "")
    assert after.state.status == "completed"
    assert after.state.final_output == outcome.final_output
    assert after.retrying == []
    assert await description.static_summary() == "echo me"
    assert await description.static_details() == (
        "model: scripted:echo\n\ntools: none\n\nmax turns: 3"
    )
    assert started.task_queue.name == task_queue
    assert "AgentStatus" in started.search_attributes.indexed_fields


@pytest.mark.parametrize(
    ("budget", "named"),
    [
        (Budget(tokens=300, on_exceed="degrade", degrade_to="openai:"), "'openai:'"),
        (Budget(tokens=300, on_exceed="degrade", degrade_to="openai: gpt-4.1"), "'openai: gpt"),
        (
            Budget(
                usd=1.0,
                prices={"scripted:echo": ModelPrice(input=1.0, output=1.0)},
                on_exceed="degrade",
                degrade_to="scripted:demo",
            ),
            "'scripted:demo' has no price",
        ),
    ],
)
async def test_a_start_naming_a_model_the_run_could_never_call_starts_nothing(
    client: WaitstateClient, budget: Budget, named: str
) -> None:
    run_id = _run_id()
    run = RunInput(task="echo me", model="scripted:echo", budget=budget)

    with pytest.raises(StartFailed) as refused:
        await client.start(run, run_id=run_id)

    assert str(refused.value).startswith(f"could not start run {run_id}: budget's degrade_to")
    assert named in str(refused.value)
    with pytest.raises(RunNotFound):
        await client.describe(run_id)


async def test_a_run_nobody_serves_is_read_from_temporal_alone(
    dev_env: WorkflowEnvironment, task_queue: str, client: WaitstateClient, systems: str
) -> None:
    run_id = _run_id()
    await client.start(ASK, run_id=run_id)

    status = await client.status(run_id, rpc_timeout=NOBODY_ANSWERS)
    with pytest.raises(NotAnswered, match="is a worker running"):
        await client.query(run_id, rpc_timeout=NOBODY_ANSWERS)
    with pytest.raises(NotAnswered, match="no answer within 1 s"):
        decision = DecideInput(request_id="apr-1", decision="approve", reviewer="dana")
        await client.decide(run_id, decision, answer_within=NOBODY_ANSWERS)
    await client.cancel(run_id)
    async with make_worker(dev_env.client, task_queue, settings=_settings(systems)):
        outcome = await client.outcome(run_id)
    with pytest.raises(RunEnded) as ended:
        await client.cancel(run_id)

    # The state is what its history says; that no worker answered, and what Temporal knows.
    assert status.state == RunState(status="running", task=ASK.task, model=ASK.model)
    assert status.unanswered is not None
    assert status.unanswered.started is not None and status.unanswered.closed is None
    assert outcome.status == "cancelled"
    assert str(ended.value) == f"run {run_id} has already ended (cancelled)"


async def test_decisions_are_applied_once_and_refusals_say_why(
    dev_env: WorkflowEnvironment, task_queue: str, client: WaitstateClient, systems: str
) -> None:
    run_id = _run_id()
    two = RunInput(task="two refunds", model="scripted:two-refunds", tools=["issue_refund"])
    async with httpx.AsyncClient(timeout=10) as http:
        tools = [*demo_tools(), *refund_tools(http, systems)]
        async with make_worker(
            dev_env.client, task_queue, tools=tools, settings=_settings(systems)
        ):
            await client.start(two, run_id=run_id)
            first, second = await _open_requests(client, run_id, 2)

            async def listed() -> list[str]:
                pending = await client.pending()
                ids = [p.request.request_id for p in pending if p.run_id == run_id]
                return ids if len(ids) == 2 else []

            pending = await eventually(listed, f"run {run_id}'s requests among the pending")
            approve = DecideInput(request_id=first, decision="approve", reviewer="dana")
            applied = await client.decide(run_id, approve)
            with pytest.raises(DecisionRefused) as twice:
                await client.decide(run_id, approve.model_copy(update={"decision": "reject"}))
            with pytest.raises(DecisionRefused) as unknown:
                await client.decide(run_id, approve.model_copy(update={"request_id": "apr-nope"}))
            reject = DecideInput(request_id=second, decision="reject", reviewer="lee", comment="no")
            rejected = await client.decide(run_id, reject)
            outcome = await client.outcome(run_id)
            state = await client.query(run_id)
    # The same decision again is the one applied (its content is its key), even now; another
    # finds the run ended.
    again = await client.decide(run_id, approve)
    with pytest.raises(RunEnded):
        await client.decide(run_id, approve.model_copy(update={"comment": "once more"}))
    with pytest.raises(RunEnded):
        await client.open_requests(run_id)
    with pytest.raises(RunNotFound, match="no run with id no-such-run"):
        await client.decide("no-such-run", approve)
    with pytest.raises(RunNotFound):
        await client.status("no-such-run")

    assert sorted(pending) == sorted([first, second])
    assert (applied.accepted, applied.status) == (True, "approved")
    assert again == applied
    assert (rejected.accepted, rejected.status) == (True, "rejected")
    assert twice.value.reason == "request already approved"
    assert "apr-nope" in unknown.value.reason
    assert outcome.status == "completed"
    decided = [state.approvals[i].decision for i in (first, second)]
    assert [(d.reviewer, d.decision) for d in decided if d] == [
        ("dana", "approve"),
        ("lee", "reject"),
    ]
    assert state.ignored_decisions == [] and state.approvals[first].ignored == []


async def test_follow_shows_each_step_then_the_outcome(
    dev_env: WorkflowEnvironment, task_queue: str, client: WaitstateClient
) -> None:
    run_id = _run_id()
    run = RunInput(task="What is 2 ** 10?", tools=["calculate", "utc_now", "count_words"])
    looks = []
    async with make_worker(dev_env.client, task_queue):
        await client.start(run, run_id=run_id)
        async for progress in client.follow(run_id, interval=timedelta(seconds=0.05)):
            looks.append(progress)

    *before, last = looks
    steps = [step for look in looks for step in look.steps]
    assert [look.outcome for look in before] == [None] * len(before)
    assert last.outcome is not None and last.outcome.status == "completed"
    assert "1024" in (last.outcome.final_output or "")
    assert last.outcome.steps == steps
    assert [(step.turn, step.name) for step in steps] == [
        (1, "scripted:demo"),
        (1, "calculate"),
        (1, "utc_now"),
        (2, "scripted:demo"),
        (2, "count_words"),
        (3, "scripted:demo"),
    ]
    with pytest.raises(RunNotFound):
        await anext(client.follow("no-such-run"))


async def test_follow_asks_again_for_the_final_steps_when_a_busy_worker_does_not_answer(
    dev_env: WorkflowEnvironment,
    task_queue: str,
    client: WaitstateClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The last look is the only one that can show a run's final steps: a worker too busy to
    # answer its first query (as under load) must not cost the follower the steps.
    run_id = _run_id()
    run = RunInput(task="What is 2 ** 10?", tools=["calculate", "utc_now", "count_words"])
    async with make_worker(dev_env.client, task_queue):
        await client.start(run, run_id=run_id)
        await client.outcome(run_id)
        query = client.query
        asked: list[timedelta] = []

        async def busy_once(
            run_id: str, *, rpc_timeout: timedelta = timedelta(seconds=5)
        ) -> RunState:
            asked.append(rpc_timeout)
            if len(asked) == 1:
                raise NotAnswered(run_id, "deadline exceeded")
            return await query(run_id, rpc_timeout=rpc_timeout)

        monkeypatch.setattr(client, "query", busy_once)
        outcome = client.outcome

        async def slow_outcome(run_id: str) -> RunState:
            # Read after the history's growth (as under load): the run has ended, so the
            # follower's first look is still its last, and patient.
            await asyncio.sleep(1)
            return await outcome(run_id)

        monkeypatch.setattr(client, "outcome", slow_outcome)
        looks = [progress async for progress in client.follow(run_id)]

    assert len(looks) == 1 and looks[0].outcome is not None
    assert looks[0].outcome.status == "completed"
    assert [step.name for step in looks[0].steps] == [
        "scripted:demo",
        "calculate",
        "utc_now",
        "scripted:demo",
        "count_words",
        "scripted:demo",
    ]
    assert asked[1] > asked[0]  # asked again, waiting longer


async def test_the_fleet_shows_a_wait_and_a_failure(
    dev_env: WorkflowEnvironment, task_queue: str, client: WaitstateClient, systems: str
) -> None:
    waiting, failing = _run_id(), _run_id()
    expires = ASK.model_copy(
        update={"approval": ApprovalPolicy(timeout=timedelta(seconds=1), on_timeout="fail")}
    )
    async with make_worker(dev_env.client, task_queue, settings=_settings(systems)):
        await client.start(ASK, run_id=waiting)
        await client.start(expires, run_id=failing)
        failed = await client.outcome(failing)

        async def both() -> tuple[FleetRun, ClosedRun] | None:
            fleet = await client.fleet()
            wait = next((r for r in fleet.running if r.run_id == waiting), None)
            closed = next((r for r in fleet.closed if r.run_id == failing), None)
            ready = wait is not None and wait.waiting_for == "approval" and closed is not None
            return (wait, closed) if ready and wait and closed else None

        wait, closed = await eventually(both, "visibility to list both runs")
        report = fleet_report(Fleet(datetime.now(UTC), [wait], [closed]))
        runs = await client.list_runs(limit=100)
        await client.cancel(waiting)

    assert failed.status == "approval_expired"
    assert (wait.agent_status, wait.pending_operations) == ("waiting", 0)
    assert wait.wait_expires_at is not None and wait.wait_expires_at > wait.started
    assert report.running_by_status == {"waiting": 1}
    assert report.waiting_for == {"approval": 1}
    assert report.oldest_wait is not None and report.oldest_wait.run_id == waiting
    assert report.recent_failures == [FailedRun(failing, "approval_expired", closed.closed)]
    assert {run.run_id for run in runs} >= {waiting, failing}


async def test_an_unreachable_server_is_one_error(
    closed_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEMPORAL_ADDRESS", f"127.0.0.1:{closed_port}")

    with pytest.raises(Unreachable) as err:
        await asyncio.wait_for(WaitstateClient.connect(), 60)

    assert str(err.value).startswith(f"cannot reach Temporal at 127.0.0.1:{closed_port}: ")
    assert "\n" not in str(err.value)


def _running(
    run_id: str,
    started: int,
    status: str | None = "waiting",
    waiting_for: str | None = "approval",
    expires: int | None = None,
) -> FleetRun:
    at = T0 + timedelta(minutes=started)
    until = None if expires is None else T0 + timedelta(minutes=expires)
    return FleetRun(run_id, at, status, waiting_for, 1 if waiting_for == "webhook" else 0, until)


def test_the_report_counts_runs_finds_the_oldest_and_overdue_waits_and_failures() -> None:
    closed_at = T0 - timedelta(hours=1)
    fleet = Fleet(
        read_at=T0,
        running=[
            _running("new-wait", started=-5, expires=+60),
            _running("old-wait", started=-90, waiting_for="webhook", expires=-30),
            _running("busy", started=-1, status="running", waiting_for="none"),
            _running("unlabelled", started=-2, status=None, waiting_for=None),
            _running("overdue", started=-60, expires=-1),
        ],
        closed=[
            ClosedRun("done", closed_at, "completed", WorkflowExecutionStatus.COMPLETED),
            ClosedRun("failed", closed_at, "failed", WorkflowExecutionStatus.COMPLETED),
            ClosedRun("expired", closed_at, "approval_expired", WorkflowExecutionStatus.COMPLETED),
            ClosedRun("killed", closed_at, "waiting", WorkflowExecutionStatus.TERMINATED),
            ClosedRun("crashed", closed_at, None, WorkflowExecutionStatus.FAILED),
            ClosedRun("cancelled", closed_at, None, WorkflowExecutionStatus.CANCELED),
        ],
    )

    report = fleet_report(fleet)

    old = Wait(
        "old-wait", "webhook", 1, T0 - timedelta(minutes=90), T0 - timedelta(minutes=30), True
    )
    overdue = Wait(
        "overdue", "approval", 0, T0 - timedelta(minutes=60), T0 - timedelta(minutes=1), True
    )
    assert report.running_by_status == {"waiting": 3, "running": 2}
    assert report.waiting_for == {"approval": 2, "webhook": 1}
    assert report.oldest_wait == old
    assert report.overdue == [old, overdue]
    assert report.recent_failures == [
        FailedRun("failed", "failed", closed_at),
        FailedRun("expired", "approval_expired", closed_at),
        FailedRun("killed", "failed", closed_at),  # terminated: no longer shown waiting
        FailedRun("crashed", "failed", closed_at),
    ]


def test_an_empty_fleet_has_no_wait_and_no_failure() -> None:
    report = fleet_report(Fleet(T0, [], []))

    assert (report.running_by_status, report.waiting_for) == ({}, {})
    assert (report.oldest_wait, report.overdue, report.recent_failures) == (None, [], [])


def test_a_retried_calls_failure_that_temporal_cut_down_is_read_from_what_it_kept() -> None:
    kept = Failure(
        message="openai: HTTP 500: the start of a long page",
        application_failure_info=ApplicationFailureInfo(type="ProviderError"),
    )
    # Temporal's own failure in place of one past its size limit (its words are its own).
    cut = Failure(
        message="the server's words",
        server_failure_info=ServerFailureInfo(non_retryable=True),
        cause=kept,
    )
    pending = [
        PendingActivityInfo(activity_type=ActivityType(name=CALL_MODEL), attempt=3, last_failure=f)
        for f in (cut, kept)
    ]
    raw = DescribeWorkflowExecutionResponse(pending_activities=pending)
    description = cast(WorkflowExecutionDescription, SimpleNamespace(raw_description=raw))

    retries = retries_of(description)

    assert [retry.last_error for retry in retries] == [
        f"{kept.message} (truncated by Temporal: over its failure size limit)",
        kept.message,
    ]
    assert [retry.error_type for retry in retries] == ["server", "ProviderError"]


async def test_runs_are_listed_and_counted_by_the_prefix_of_their_ids(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    client = WaitstateClient(dev_env.client, task_queue=task_queue)
    prefix = f"listed-{uuid.uuid4().hex[:8]}-"
    ids = [f"{prefix}a-1", f"{prefix}a-2", f"{prefix}b-1"]
    for run_id in ids:  # no worker: they wait to start, listed all the same
        await client.start(RunInput(task="wait", model="scripted:echo"), run_id=run_id)

    async def all_visible() -> bool:
        return await client.count_runs(prefix=prefix) == len(ids)

    await eventually(all_visible, "the runs to be visible")
    found = [run.run_id for run in await client.list_runs(limit=10, prefix=f"{prefix}a-")]
    counted = await client.count_runs(prefix=f"{prefix}a-")
    everything = await client.count_runs(prefix=prefix)
    for run_id in ids:
        await client.cancel(run_id)

    assert sorted(found) == ids[:2]
    assert (counted, everything) == (2, 3)
    with pytest.raises(ValueError):
        await client.list_runs(prefix='a" OR WorkflowId STARTS_WITH "')
