"""Human approval: signals, timers and on-timeout policies on the time-skipping server (a day
passes in milliseconds), with the real demo systems over HTTP as the tools' and the outbox's
far end. A test that skips no time and decides while the request's notice may be in flight runs
on the dev server (`dev_desk`): the time-skipping server refuses the cancel of a notice that is
completing (`ACTIVITY_UNKNOWN`), the run stalls, and so does every test after it on that
server."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from datetime import timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
    Interceptor,
    OutboundInterceptor,
    StartWorkflowUpdateInput,
    WorkflowExecutionDescription,
    WorkflowHandle,
    WorkflowUpdateHandle,
)
from temporalio.converter import decode_typed_search_attributes
from temporalio.testing import WorkflowEnvironment

from examples.demo.refunds import refund_tools
from examples.systems import create_app as systems_app
from examples.systems import serving
from tests.helpers import (
    eventually,
    expiries,
    make_worker,
    process_env,
    quiet_history_length,
    replays,
    start_run,
)
from tests.rigs import REFUND_TASK, REFUND_TOOLS, ROOT, Desk
from waitstate.auth.tokens import ResumeTokens
from waitstate.converter import DATA_CONVERTER
from waitstate.gateway.app import create_app as gateway_app
from waitstate.gateway.delivery import TemporalDeliverer
from waitstate.schemas import RunInput, RunResult, RunState
from waitstate.schemas.approvals import ApprovalPolicy, ApprovalRequest, DecisionSignal
from waitstate.schemas.run import NOTIFY_APPROVAL
from waitstate.settings import Settings
from waitstate.workflows.agent_run import AgentRunWorkflow
from waitstate.workflows.search_attributes import AGENT_STATUS, WAIT_EXPIRES_AT, WAITING_FOR

DAY = timedelta(hours=24)
RESULT_TIMEOUT = 60


async def _open_request(handle: WorkflowHandle[Any, Any]) -> ApprovalRequest:
    async def open_requests() -> list[ApprovalRequest]:
        state: RunState = await handle.query(AgentRunWorkflow.status)
        return [r for r in state.approvals.values() if r.open]

    return (await eventually(open_requests, "an open approval request"))[0]


async def _refund_asking(desk: Desk) -> tuple[WorkflowHandle[Any, RunResult], ApprovalRequest]:
    """Start the refund over the threshold: its handle, and the approval request it waits on."""
    handle = await desk.start(REFUND_TASK, REFUND_TOOLS)
    return handle, await _open_request(handle)


async def _result(handle: WorkflowHandle[Any, RunResult]) -> RunResult:
    return await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)


async def test_approved_refund_runs_once_after_the_approval(dev_desk: Desk) -> None:
    # No time skipped: on the real server (see `dev_desk`).
    desk = dev_desk
    async with desk.worker():
        handle, request = await _refund_asking(desk)
        refunds_while_waiting = await desk.get("/refunds")

        async def waiting_for_approval() -> WorkflowExecutionDescription | None:
            # Visibility is updated just after the workflow task.
            described = await handle.describe()
            waiting = described.typed_search_attributes.get(WAITING_FOR) == "approval"
            return described if waiting else None

        described = await eventually(waiting_for_approval, "WaitingFor to say approval")
        await handle.signal(
            AgentRunWorkflow.approve,
            DecisionSignal(request_id=request.request_id, reviewer="dana", comment="ok"),
        )
        result = await _result(handle)
        await replays(handle, "approval_approved_by_signal")
    outbox = await desk.get("/approvals/outbox")

    assert refunds_while_waiting == [], "the gated tool must not run before the approval"
    assert described.typed_search_attributes.get(WAITING_FOR) == "approval"
    assert described.typed_search_attributes.get(AGENT_STATUS) == "waiting"
    assert request.tool == "issue_refund" and request.arguments == {
        "claim_id": "C-118",
        "amount": 420.0,
    }
    assert request.sent_to == ["claims-team"]
    assert result.status == "completed"
    assert (
        result.final_output is not None and "Refunded $420 for claim C-118" in result.final_output
    )
    assert len(await desk.get("/refunds")) == 1
    assert [entry["body"]["request_id"] for entry in outbox] == [request.request_id]


async def test_rejected_refund_never_runs_and_the_model_reads_the_reason(dev_desk: Desk) -> None:
    # No time skipped: on the real server (see `dev_desk`).
    desk = dev_desk
    async with desk.worker():
        handle, request = await _refund_asking(desk)
        await handle.signal(
            AgentRunWorkflow.reject,
            DecisionSignal(
                request_id=request.request_id, reviewer="dana", comment="duplicate claim"
            ),
        )
        result = await _result(handle)
        await replays(handle, "approval_rejected_by_signal")

    assert result.status == "completed"
    assert result.final_output is not None and "was not issued" in result.final_output
    assert (
        '"approval": "rejected"' in result.final_output and "duplicate claim" in result.final_output
    )
    assert await desk.get("/refunds") == []


async def test_a_refund_under_the_threshold_needs_no_approval(desk: Desk) -> None:
    async with desk.worker():
        handle = await desk.start("Refund $80 for claim C-200", REFUND_TOOLS)
        result = await _result(handle)
        state = await handle.query(AgentRunWorkflow.status)

    assert result.status == "completed" and state.approvals == {}
    assert len(await desk.get("/refunds")) == 1


async def test_escalation_after_a_day_then_a_late_decision_on_the_first_request_counts(
    desk: Desk,
) -> None:
    async with desk.worker():
        handle, request = await _refund_asking(desk)
        began = time.monotonic()
        await desk.env.sleep(DAY + timedelta(minutes=1))
        escalated = await _open_request(handle)
        skipped = time.monotonic() - began  # printed, never asserted: the README's figure
        await handle.signal(
            AgentRunWorkflow.approve, DecisionSignal(request_id=request.request_id, reviewer="lee")
        )
        result = await _result(handle)
    outbox = await desk.get("/approvals/outbox")
    print(f"24-hour approval timeout passed in {skipped:.3f} s of wall time")

    assert escalated.request_id == request.request_id and escalated.escalated
    assert escalated.sent_to == ["claims-team", "claims-managers"]
    assert [(e["body"]["recipient"], e["body"]["escalation"]) for e in outbox] == [
        ("claims-team", False),
        ("claims-managers", True),
    ]
    # The same link (token) reaches both: the first request stays valid.
    assert outbox[0]["body"]["decision"] == outbox[1]["body"]["decision"]
    assert result.status == "completed" and len(await desk.get("/refunds")) == 1
    await replays(handle, "approval_escalated_then_approved")


async def test_an_escalating_request_shows_its_final_deadline_and_escalates_upserting_nothing(
    desk: Desk,
) -> None:
    # A command issued as the window's timer fires or as the escalation's notice completes can
    # land before or after a decision's Update in the same workflow task, one way live and the
    # other on replay; escalating changes no search attribute.
    async with desk.worker():
        handle, request = await _refund_asking(desk)
        await desk.env.sleep(DAY + timedelta(minutes=1))

        async def escalation_noticed() -> bool:
            # Both notices completed, and a workflow task taken since (their `then` ran).
            notices: set[int] = set()
            completed, after = 0, False
            async for event in handle.fetch_history_events():
                if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                    scheduled = event.activity_task_scheduled_event_attributes
                    if scheduled.activity_type.name == NOTIFY_APPROVAL:
                        notices.add(event.event_id)
                elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                    done = event.activity_task_completed_event_attributes
                    if done.scheduled_event_id in notices:
                        completed, after = completed + 1, False
                elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
                    after = True
            return completed == 2 and after

        await eventually(escalation_noticed, "the escalation's notice to be sent and seen")
        await handle.signal(
            AgentRunWorkflow.approve, DecisionSignal(request_id=request.request_id, reviewer="lee")
        )
        result = await _result(handle)
    shown = [
        decode_typed_search_attributes(
            event.upsert_workflow_search_attributes_event_attributes.search_attributes
        ).get(WAIT_EXPIRES_AT)
        async for event in handle.fetch_history_events()
        if event.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES
    ]

    assert result.status == "completed"
    # Once, at the request: the end of the escalation's window, not the first's.
    assert [at for at in shown if at is not None] == [request.requested_at + 2 * DAY]


@pytest.mark.parametrize(
    ("policy", "status", "told", "path"),
    [
        (
            ApprovalPolicy(timeout=DAY, on_timeout="default", default_decision="approve"),
            "completed",
            '"approval": "approved"',
            "approval_timeout_default_approve",
        ),
        (
            ApprovalPolicy(timeout=DAY, on_timeout="default", default_decision="reject"),
            "completed",
            '"approval": "rejected"',
            "approval_timeout_default_reject",
        ),
        (
            ApprovalPolicy(timeout=DAY, on_timeout="escalate"),
            "completed",
            '"approval": "expired"',
            "approval_timeout_escalate_then_expire",
        ),
        (
            ApprovalPolicy(timeout=DAY, on_timeout="fail"),
            "approval_expired",
            None,
            "approval_timeout_fail",
        ),
    ],
    ids=["default-approve", "default-reject", "escalate-then-expire", "fail"],
)
async def test_on_timeout_policies(
    desk: Desk, policy: ApprovalPolicy, status: str, told: str | None, path: str
) -> None:
    async with desk.worker():
        handle = await desk.start(
            "publish the report", ["request_approval"], model="scripted:ask-first", approval=policy
        )
        # Nobody answers: the time-skipping server jumps over the day (RESULT_TIMEOUT is far
        # shorter than the timer, so a timer that was waited, not skipped, fails here).
        result = await _result(handle)
        state = await handle.query(AgentRunWorkflow.status)
        described = await handle.describe()
        passed = await expiries(handle)
        await replays(handle, path)

    [request] = state.approvals.values()
    assert result.status == status
    # The run's event stream tells each window that passed with the request open.
    windows = 2 if policy.on_timeout == "escalate" else 1
    assert passed == [("approval.expired", request.request_id)] * windows
    if told is None:
        assert request.status == "expired"
        assert (
            result.error is not None and "expired" in result.error and result.final_output is None
        )
        assert described.typed_search_attributes.get(AGENT_STATUS) == "approval_expired"
    else:
        assert result.final_output is not None and told.replace(
            " ", ""
        ) in result.final_output.replace(" ", "")
    if policy.on_timeout == "default":
        assert request.decision is not None and request.decision.by_policy
        assert request.decision.reviewer == "policy"


async def test_two_approvals_apply_once_and_the_second_is_recorded(dev_desk: Desk) -> None:
    # No time skipped: on the real server (see `dev_desk`).
    desk = dev_desk
    async with desk.worker():
        handle, request = await _refund_asking(desk)
        for reviewer in ("dana", "lee"):
            await handle.signal(
                AgentRunWorkflow.approve,
                DecisionSignal(request_id=request.request_id, reviewer=reviewer),
            )
        await handle.signal(
            AgentRunWorkflow.approve, DecisionSignal(request_id="nope", reviewer="eve")
        )
        result = await _result(handle)
        state = await handle.query(AgentRunWorkflow.status)

    decided = state.approvals[request.request_id]
    assert decided.decision is not None and decided.decision.reviewer == "dana"
    assert decided.ignored == ["approve by lee: request already approved"]
    assert state.ignored_decisions == ["approve by eve for unknown request nope"]
    assert result.status == "completed" and len(await desk.get("/refunds")) == 1


@pytest.mark.subprocess
def test_cli_decision_for_a_run_that_does_not_exist(dev_env: WorkflowEnvironment) -> None:
    env = process_env(dev_env.client)
    done = subprocess.run(
        [sys.executable, "starter.py", "approve", "no-such-run"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip

    assert done.returncode == 1
    assert done.stderr.strip() == "error: no run with id no-such-run"


async def test_approval_link_is_single_use_and_cannot_be_forged(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    tokens = ResumeTokens({"desk": "d" * 40}, "desk")
    async with (
        httpx.AsyncClient(timeout=10) as http,
        serving(systems_app()) as systems_url,
        serving(gateway_app(TemporalDeliverer(dev_env.client), tokens)) as gateway_url,
    ):
        settings = Settings(demo_systems_url=systems_url, gateway_url=gateway_url)
        tools = refund_tools(http, systems_url)
        async with make_worker(
            dev_env.client, task_queue, tools=tools, settings=settings, tokens=tokens
        ):
            handle = await start_run(
                dev_env.client, task_queue, RunInput(task=REFUND_TASK, tools=REFUND_TOOLS)
            )
            request = await _open_request(handle)

            async def posted() -> list[dict[str, Any]]:
                # The people are told while the request's window runs: the notice may come
                # a moment after the request opened.
                return list((await http.get(f"{systems_url}/approvals/outbox")).json())

            [notice] = await eventually(posted, "the approval notice")
            link = notice["body"]["decision"]
            forged = ResumeTokens({"desk": "f" * 40}, "desk").mint(
                handle.id, f"approval/{request.request_id}", request.expires_at
            )
            before = await quiet_history_length(handle)
            forged_answer = await http.post(
                link["url"],
                json=link["approve"],
                headers={"Authorization": f"Bearer {forged.token}"},
            )
            after_forged = (await handle.describe()).history_length
            first = await http.post(
                link["url"],
                json={**link["approve"], "reviewer": "dana"},
                headers={"Authorization": link["authorization"]},
            )
            second = await http.post(
                link["url"], json=link["reject"], headers={"Authorization": link["authorization"]}
            )
            result = await _result(handle)
            state = await handle.query(AgentRunWorkflow.status)

    assert forged_answer.status_code == 401 and after_forged == before
    assert first.status_code == 200 and first.json()["approval_status"] == "approved"
    assert second.status_code == 409
    decision = state.approvals[request.request_id].decision
    assert decision is not None and decision.reviewer == "dana"
    assert result.status == "completed" and "Refunded $420" in (result.final_output or "")


def _held_outbox() -> tuple[FastAPI, list[dict[str, Any]], asyncio.Event]:
    """An approvals outbox that keeps each request it receives and answers only on release,
    so a test can use a link while the run has not yet heard that it was sent."""
    app, received, release = FastAPI(), list[dict[str, Any]](), asyncio.Event()

    @app.post("/approvals/outbox", status_code=201)
    async def post(body: dict[str, Any]) -> dict[str, str]:
        received.append(body)
        await release.wait()
        return {"id": f"ntf_{len(received)}"}

    return app, received, release


class _DecisionsSent(Interceptor):
    """Passes every client call on; notes, for each decide Update sent, whether the outbox had
    answered the notice yet."""

    def __init__(self, outbox_answered: asyncio.Event) -> None:
        self.outbox_had_answered: list[bool] = []
        self._outbox_answered = outbox_answered

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        record = self

        class Outbound(OutboundInterceptor):
            async def start_workflow_update(
                self, input: StartWorkflowUpdateInput
            ) -> WorkflowUpdateHandle[Any]:
                if input.update == "decide":
                    record.outbox_had_answered.append(record._outbox_answered.is_set())
                return await super().start_workflow_update(input)

        return Outbound(next)


async def test_a_link_used_before_the_outbox_answered_is_applied_once(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    # Found by the chaos suite: a link used the moment it was posted, before the notify
    # activity had answered, used to be refused as a forgery (401 nonce mismatch).
    tokens = ResumeTokens({"desk": "d" * 40}, "desk")
    outbox, received, release = _held_outbox()
    sent = _DecisionsSent(release)
    # The real client, with a pass-through interceptor that only takes notes.
    client = Client(
        dev_env.client.service_client, data_converter=DATA_CONVERTER, interceptors=[sent]
    )
    async with (
        httpx.AsyncClient(timeout=30) as http,
        serving(systems_app()) as systems_url,
        serving(outbox) as outbox_url,
        serving(gateway_app(TemporalDeliverer(client), tokens)) as gateway_url,
    ):
        settings = Settings(
            demo_systems_url=systems_url,
            gateway_url=gateway_url,
            approvals_outbox_url=f"{outbox_url}/approvals/outbox",
        )
        async with make_worker(
            dev_env.client,
            task_queue,
            tools=refund_tools(http, systems_url),
            settings=settings,
            tokens=tokens,
        ):
            try:
                handle = await start_run(
                    dev_env.client, task_queue, RunInput(task=REFUND_TASK, tools=REFUND_TOOLS)
                )

                async def posted() -> list[dict[str, Any]]:
                    return received

                [notice] = await eventually(posted, "the notice to reach the outbox")
                link = notice["decision"]
                click = asyncio.create_task(
                    http.post(
                        link["url"],
                        json=link["approve"],
                        headers={"Authorization": link["authorization"]},
                    )
                )

                async def delivered() -> list[bool]:
                    return sent.outbox_had_answered

                await eventually(delivered, "the gateway to send the decision to the run")
            finally:
                release.set()
            answer = await click
            result = await _result(handle)
            refunds = (await http.get(f"{systems_url}/refunds")).json()

    assert sent.outbox_had_answered[0] is False, "the link was used before the outbox answered"
    assert answer.status_code == 200 and answer.json()["approval_status"] == "approved"
    assert result.status == "completed" and "Refunded $420" in (result.final_output or "")
    assert len(refunds) == 1
