"""A webhook lost to a gateway outage (issue 22, defect 3), against the real dev server, the
gateway (in the test's process, or as its own process) and the demo systems over HTTP.

A callback operation's job status is checked every `reconcile_every` in case its webhook was
lost, and once more before the operation would expire: a lost webhook costs seconds here
(minutes by default), not the timeout, and a job that finished is never expired and sent a
cancel. The demo systems send a webhook that was not taken again for minutes, so an outage of
the gateway process shorter than that loses nothing.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from examples.demo.basic import demo_tools
from examples.demo.compliance import compliance_tools
from examples.demo.exports import ExportService, export_tool
from examples.systems import WebhookRetry, serving
from examples.systems import create_app as systems_app
from tests.helpers import callback_token, eventually, make_worker, process_env, replays, start_run
from tests.rigs import EXPORT_TASK, EXPORT_TOOLS, ServerProcess, service_port
from waitstate.auth.tokens import ResumeTokens
from waitstate.client import CompletionRefused, WaitstateClient
from waitstate.converter import DATA_CONVERTER
from waitstate.gateway.app import create_app as gateway_app
from waitstate.gateway.delivery import TemporalDeliverer
from waitstate.schemas import RunInput, RunResult
from waitstate.schemas.calls import ToolCallInput
from waitstate.schemas.errors import OPERATION_NOT_CHECKED
from waitstate.schemas.operations import CheckOperation, Operation
from waitstate.schemas.run import CALL_TOOL, POLL_OPERATION
from waitstate.settings import Settings
from waitstate.tools import ToolSpec
from waitstate.workflows.agent_run import AgentRunWorkflow
from waitstate.workflows.jobs import ASKED_CHECK

KEYS = {"test": "t" * 40}
# Every wait is bounded, so a regression fails instead of hanging; far below the timeouts.
RESULT_TIMEOUT = 90
HOUR = timedelta(hours=1)


class InProcessGateway:
    """The gateway app served in the test's process on a port of its own, which a test can
    stop (an outage: connections refused) and start again on the same port."""

    def __init__(self, client: Client) -> None:
        self.port = service_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._client = client
        self._serving: AbstractAsyncContextManager[str] | None = None

    async def start(self) -> None:
        app = gateway_app(TemporalDeliverer(self._client), ResumeTokens(KEYS, "test"))
        self._serving = serving(app, port=self.port)
        await self._serving.__aenter__()

    async def stop(self) -> None:
        if self._serving is not None:
            serving_, self._serving = self._serving, None
            await serving_.__aexit__(None, None, None)


@dataclass
class OutageStack:
    """The dev server, the demo systems and a gateway URL the worker's callbacks go to."""

    client: Client
    http: httpx.AsyncClient
    systems_url: str
    gateway_url: str
    task_queue: str

    def tools(
        self, *, reconcile_every: timedelta | None, timeout: timedelta = HOUR
    ) -> list[ToolSpec]:
        export = export_tool(
            ExportService(self.http, self.systems_url),
            timeout=timeout,
            reconcile_every=reconcile_every,
        )
        return [*demo_tools(), export, *compliance_tools(self.http, self.systems_url)]

    def worker(self, tools: Sequence[ToolSpec]) -> AbstractAsyncContextManager[Worker]:
        settings = Settings(
            gateway_url=self.gateway_url,
            demo_systems_url=self.systems_url,
            token_keys=KEYS,
            token_signing_key="test",
        )
        return make_worker(
            self.client,
            self.task_queue,
            tools=tools,
            settings=settings,
            tokens=ResumeTokens(KEYS, "test"),
        )

    async def start(self) -> WorkflowHandle[Any, RunResult]:
        return await start_run(
            self.client,
            self.task_queue,
            RunInput(task=EXPORT_TASK, tools=EXPORT_TOOLS),
            workflow_id=f"run-{os.urandom(8).hex()}",
        )

    async def stats(self) -> dict[str, Any]:
        return dict((await self.http.get(f"{self.systems_url}/_test/stats")).json())

    async def faults(self, **faults: Any) -> None:
        (await self.http.post(f"{self.systems_url}/_test/faults", json=faults)).raise_for_status()

    async def export_job(self) -> dict[str, Any]:
        """The export job, once the export service has created it."""

        async def created() -> dict[str, Any] | None:
            jobs = (await self.stats())["jobs"].values()
            return next((job for job in jobs if job["kind"] == "export"), None)

        return await eventually(created, "the export job")

    async def webhook_given_up(self) -> list[dict[str, Any]]:
        """The export's webhook attempts, once its one attempt failed (the sender gives up at
        once in `outage_stack`)."""

        async def given_up() -> list[dict[str, Any]] | None:
            webhooks: list[dict[str, Any]] = (await self.export_job())["webhooks"]
            return webhooks if webhooks and webhooks[-1]["error"] else None

        return await eventually(given_up, "the export's webhook to fail")


@asynccontextmanager
async def outage_stack(
    dev_env: WorkflowEnvironment, task_queue: str, gateway_url: str | None = None
) -> AsyncIterator[tuple[OutageStack, InProcessGateway]]:
    """Exports take three seconds (time for a test to stop the gateway first); the sender
    tries each webhook once, so one sent while the gateway is down is lost for good."""
    gateway = InProcessGateway(dev_env.client)
    async with AsyncExitStack() as stack:
        http = await stack.enter_async_context(httpx.AsyncClient(timeout=10))
        retry = WebhookRetry(give_up_after=0)
        url = await stack.enter_async_context(
            serving(systems_app(export_seconds=3.0, webhook_retry=retry))
        )
        await gateway.start()
        stack.push_async_callback(gateway.stop)
        yield (
            OutageStack(dev_env.client, http, url, gateway_url or gateway.url, task_queue),
            gateway,
        )


async def _export_operation(handle: WorkflowHandle[Any, Any]) -> Operation:
    state = await handle.query(AgentRunWorkflow.status)
    [op] = [op for op in state.operations.values() if op.tool == "start_export"]
    return op


async def _events(handle: WorkflowHandle[Any, Any]) -> list[str]:
    """The run's ledger events (what `status` lists as its steps)."""
    state = await handle.query(AgentRunWorkflow.status)
    return [step.detail for step in state.steps if step.kind == "event"]


async def test_a_webhook_lost_to_a_gateway_outage_is_found_by_a_check_in_seconds(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    async with outage_stack(dev_env, task_queue) as (stack, gateway):
        tools = stack.tools(reconcile_every=timedelta(seconds=2))
        async with stack.worker(tools):
            handle = await stack.start()
            await stack.export_job()
            await gateway.stop()  # the job ends while the gateway is down
            lost = await stack.webhook_given_up()
            await gateway.start()  # back, but the sender gave up: the report is lost
            result = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)
            op = await _export_operation(handle)
            events = await _events(handle)
            await replays(handle, "reconcile_lost_webhook_found_by_a_check")
        stats = await stack.stats()

    assert [w["status_code"] for w in lost] == [None], lost
    assert result.status == "completed", result.error
    assert result.final_output is not None and "filed them at compliance/" in result.final_output
    assert op.status == "succeeded" and op.result is not None and op.error is None
    # By a check (one every 2 s) while the operation was open, not by its timeout an hour on.
    assert op.resolved_at is not None and op.resolved_at < op.expires_at
    assert f"{op.operation_id} succeeded: found by a status check (no report came)" in events
    [job] = stats["jobs"].values()
    assert job["status"] == "succeeded" and job["status_checks"] >= 1
    assert sum(key["cancels"] for key in stats["keys"].values()) == 0, "a finished job"


async def test_a_job_that_finished_but_whose_webhook_was_lost_is_found_before_it_expires(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    async with outage_stack(dev_env, task_queue) as (stack, gateway):
        # No regular checks: only the one before the operation expires.
        tools = stack.tools(reconcile_every=None, timeout=timedelta(seconds=10))
        async with stack.worker(tools):
            handle = await stack.start()
            await stack.export_job()
            await gateway.stop()
            await stack.webhook_given_up()
            await gateway.start()
            result = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)
            op = await _export_operation(handle)
            events = await _events(handle)
            await replays(handle, "reconcile_lost_webhook_found_before_expiry")
        stats = await stack.stats()

    assert result.status == "completed", result.error
    assert result.final_output is not None and "filed them at compliance/" in result.final_output
    assert op.status == "succeeded" and op.cancel is None
    # Found by the check at the expiry, not before it (there were no other checks).
    assert op.resolved_at is not None and op.resolved_at >= op.expires_at
    found = "found by the status check before its expiry (no report came)"
    assert f"{op.operation_id} succeeded: {found}" in events
    [job] = stats["jobs"].values()
    assert job["status"] == "succeeded" and job["status_checks"] == 1
    assert sum(key["cancels"] for key in stats["keys"].values()) == 0, "never cancelled"


async def test_a_job_still_running_at_its_expiry_is_checked_then_cancelled(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    async with outage_stack(dev_env, task_queue) as (stack, _):
        await stack.faults(never_complete=True)
        tools = stack.tools(reconcile_every=None, timeout=timedelta(seconds=3))
        async with stack.worker(tools):
            handle = await stack.start()
            result = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)
            op = await _export_operation(handle)
            await replays(handle, "reconcile_checked_then_expired")
        stats = await stack.stats()

    assert result.status == "completed", result.error
    assert op.status == "expired" and op.cancel == "sent"
    assert op.error is not None and op.error.message.endswith("; the job was cancelled")
    [job] = stats["jobs"].values()
    assert job["status"] == "cancelled" and job["status_checks"] == 1
    assert sum(key["cancels"] for key in stats["keys"].values()) == 1


async def _start_in_flight(handle: WorkflowHandle[Any, Any]) -> CheckOperation:
    """A check of the export's operation, asked as its system would ask it (its id and nonce,
    from the start activity's input), once that start is scheduled."""

    async def scheduled() -> CheckOperation | None:
        async for event in handle.fetch_history_events():
            if event.event_type != EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                continue
            attributes = event.activity_task_scheduled_event_attributes
            if attributes.activity_type.name != CALL_TOOL:
                continue
            [call] = DATA_CONVERTER.payload_converter.from_payloads(
                attributes.input.payloads, [ToolCallInput]
            )
            if call.call.name == "start_export" and call.nonce is not None:
                return CheckOperation(operation_id=attributes.activity_id, nonce=call.nonce)
        return None

    return await eventually(scheduled, "the export's start")


async def test_a_check_asked_before_the_start_returned_is_made_once_the_run_watches(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    # The job ends, and its one webhook is lost, while its start is not answered yet; its
    # system asks for a check then (as an A2A agent's `completed` status does). Checks come
    # every 5 minutes: only the ask, held until the start is confirmed, ends it in seconds.
    async with outage_stack(dev_env, task_queue) as (stack, gateway):
        await stack.faults(hold_start_answers_seconds=6.0)
        tools = stack.tools(reconcile_every=timedelta(minutes=5))
        async with stack.worker(tools):
            handle = await stack.start()
            ask = await _start_in_flight(handle)
            await stack.export_job()
            await gateway.stop()
            runs = WaitstateClient(dev_env.client)
            asked = await runs.check_operation(handle.id, ask, update_id="early")
            with pytest.raises(CompletionRefused) as again:
                await runs.check_operation(handle.id, ask, update_id="early, again")
            await stack.webhook_given_up()
            await gateway.start()
            result = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)
            op = await _export_operation(handle)
            events = await _events(handle)
            await replays(handle, "reconcile_check_asked_before_the_start")
        stats = await stack.stats()

    assert asked.checking and asked.operation_id == ask.operation_id
    # One ask at a time: the first is not made yet.
    assert again.value.error_type == OPERATION_NOT_CHECKED
    assert result.status == "completed", result.error
    assert op.status == "succeeded" and op.resolved_at is not None
    assert (op.resolved_at - op.started_at) < timedelta(seconds=60)
    assert f"{op.operation_id} succeeded: found by {ASKED_CHECK} (no report came)" in events
    [job] = stats["jobs"].values()
    assert job["status_checks"] == 1


async def _history_length(handle: WorkflowHandle[Any, Any]) -> int:
    return (await handle.describe()).history_length


async def test_a_check_that_finds_the_job_running_adds_nothing_to_the_history(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    """Events per reconcile: two runs whose job's webhook (sent here, by the test) comes after
    one check and after six have histories of the same length."""
    lengths, checks = [], []
    tokens = ResumeTokens(KEYS, "test")
    body = {"status": "succeeded", "result": {"file": "exports/t.csv", "rows": 7}}
    async with outage_stack(dev_env, task_queue) as (stack, _):
        tools = stack.tools(reconcile_every=timedelta(seconds=1))
        async with stack.worker(tools):
            for wanted in (1, 6):
                await stack.http.post(f"{stack.systems_url}/_test/reset")
                await stack.faults(never_complete=True)  # every check finds it running
                handle = await stack.start()
                op = await _pending_export(handle)

                async def checked(wanted: int = wanted) -> bool:
                    return int((await stack.export_job())["status_checks"]) >= wanted

                await eventually(checked, f"{wanted} checks of the job's status")
                token = await callback_token(tokens, handle, op)
                delivered = await stack.http.post(
                    f"{stack.gateway_url}/v1/operations/{op.operation_id}/complete",
                    json=body,
                    headers={"Authorization": f"Bearer {token}"},
                )
                assert delivered.status_code == 200, delivered.text
                result = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)
                assert result.status == "completed", result.error
                assert (await _export_operation(handle)).status == "succeeded"
                lengths.append(await _history_length(handle))
                checks.append((await stack.export_job())["status_checks"])
                # The checks' activity was scheduled once, whatever the number of checks.
                polls = [
                    e
                    async for e in handle.fetch_history_events()
                    if e.HasField("activity_task_scheduled_event_attributes")
                    and e.activity_task_scheduled_event_attributes.activity_type.name
                    == POLL_OPERATION
                ]
                assert len(polls) == 1
                await replays(handle, "reconcile_many_checks_then_webhook")

    print(f"status checks {checks}, history lengths {lengths}")
    assert checks[0] >= 1 and checks[1] >= 6 and checks[1] >= checks[0] + 3, checks
    # Three checks more would cost three events or more if a check cost any; the ending of
    # the checks' activity (cancelled between attempts or during one) may differ by two.
    assert abs(lengths[1] - lengths[0]) <= 2, (lengths, checks)


async def _pending_export(handle: WorkflowHandle[Any, Any]) -> Operation:
    async def pending() -> Operation | None:
        state = await handle.query(AgentRunWorkflow.status)
        return next((op for op in state.operations.values() if not op.terminal), None)

    return await eventually(pending, "the export's operation")


# --- the gateway as its own process ---------------------------------------------------------


@pytest.mark.subprocess
async def test_the_export_services_retries_deliver_its_webhook_after_a_gateway_outage(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    port = service_port()
    env = process_env(
        dev_env.client,
        GATEWAY_PORT=str(port),
        WAITSTATE_TOKEN_KEYS=",".join(f"{kid}:{secret}" for kid, secret in KEYS.items()),
        WAITSTATE_TOKEN_SIGNING_KEY="test",
        WAITSTATE_RUN_COUNTS_SECONDS="0",
    )
    gateway = ServerProcess(["-m", "waitstate.gateway"], port, tmp_path / "gateway.log", env)
    await gateway.start()
    try:
        # The demo's own webhook policy, with waits capped at 2 s (30 s by default).
        retry = WebhookRetry(cap=2.0)
        async with (
            httpx.AsyncClient(timeout=10) as http,
            serving(systems_app(export_seconds=2.0, webhook_retry=retry)) as systems_url,
        ):
            stack = OutageStack(
                dev_env.client, http, systems_url, f"http://127.0.0.1:{port}", task_queue
            )
            # No checks before the hour is up: only the webhook can end the export in time.
            async with stack.worker(stack.tools(reconcile_every=None)):
                handle = await stack.start()
                await stack.export_job()
                await gateway.kill()  # SIGKILL: down while the export ends and calls back

                async def refused_a_while() -> bool:
                    job = await stack.export_job()
                    failed = [w for w in job["webhooks"] if w["error"]]
                    return job["status"] == "succeeded" and len(failed) >= 4

                # Four attempts refused take 3.5 s (the old sender gave up by 0.7 s).
                await eventually(refused_a_while, "the service to retry its webhook")
                await gateway.start()
                result = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)
                op = await _export_operation(handle)
            stats = await stack.stats()
    finally:
        await gateway.stop()

    assert result.status == "completed", result.error
    assert op.status == "succeeded"
    [job] = stats["jobs"].values()
    webhooks = job["webhooks"]
    assert all(w["error"] and "ConnectError" in w["error"] for w in webhooks[:-1]), webhooks
    assert webhooks[-1]["status_code"] == 200, webhooks
    assert len({w["webhook_id"] for w in webhooks}) == 1, "one report, sent until taken"
    assert job["status_checks"] == 0, "delivered by the webhook, not found by a check"
    assert sum(key["cancels"] for key in stats["keys"].values()) == 0
