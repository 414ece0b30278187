"""ExportService against the real demo systems over HTTP, and the `start_export` spec."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import httpx
import pytest

from examples.demo.exports import ExportArgs, ExportService, export_tool
from examples.demo.services import ServiceError
from examples.systems.exports import ExportRequest
from tests.examples.systems_helpers import (
    Receiver,
    assert_long_tool,
    context,
    hook_number,
    later_job_ended,
    set_faults,
    stats,
    systems_app_fixture,
    until_finished,
)
from tests.upstream import pydantic_says
from waitstate.schemas.operations import Completion, OperationError
from waitstate.tools.spec import ToolError

EXPORT_SECONDS = 0.25
ARGS = ExportArgs(dataset="transactions", period="2025-Q3")
LATER = ExportArgs(dataset="later", period="2025-Q4")


systems_app = systems_app_fixture(export_seconds=EXPORT_SECONDS)


@pytest.fixture
def service(http: httpx.AsyncClient, systems_url: str) -> ExportService:
    return ExportService(http, systems_url)


async def test_start_sends_the_key_and_the_callback(
    service: ExportService, client: httpx.AsyncClient, receiver: Receiver
) -> None:
    callback_url = f"{receiver.url}/hooks/start"
    job = await service.start(ARGS, context("wf-1/call-1", callback_url))

    running, done = await until_finished(service, job.job_id)
    hook = await hook_number(receiver, "start", 1)

    assert job.job_id.startswith("exp_")
    assert job.eta_seconds == 1
    assert running and all(c.status == "running" and c.progress for c in running)
    assert done.status == "succeeded"
    assert done.result["file"] == "exports/transactions-2025-Q3.csv"
    assert done.progress == "100%"
    assert (hook.authorization, hook.body) == (
        "Bearer token-abc",
        {"status": "succeeded", "result": done.result},
    )
    # What the webhook carries is a valid Completion, as the gateway will read it.
    assert Completion.model_validate(hook.body) == Completion(
        status="succeeded", result=done.result
    )
    seen = await stats(client)
    assert seen["keys"]["wf-1/call-1"]["job_id"] == job.job_id
    assert seen["jobs"][job.job_id]["callback_url"] == callback_url


async def test_starting_twice_with_one_key_is_one_job(
    service: ExportService, client: httpx.AsyncClient
) -> None:
    first = await service.start(ARGS, context("wf-1/call-2"))
    again = await service.start(ARGS, context("wf-1/call-2"))
    concurrent = await asyncio.gather(
        *(service.start(ARGS, context("wf-1/call-3")) for _ in range(3))
    )

    assert again.job_id == first.job_id
    assert len({job.job_id for job in concurrent}) == 1
    keys = (await stats(client))["keys"]
    assert (keys["wf-1/call-2"]["starts"], keys["wf-1/call-2"]["jobs_created"]) == (2, 1)
    assert (keys["wf-1/call-3"]["starts"], keys["wf-1/call-3"]["jobs_created"]) == (3, 1)


async def test_a_refused_start_is_a_tool_error_with_the_service_reason(
    service: ExportService, client: httpx.AsyncClient
) -> None:
    with pytest.raises(ToolError) as bad_period:
        await service.start(ExportArgs(dataset="transactions", period="Q3"), context("k-1"))
    await service.start(ARGS, context("k-2"))
    with pytest.raises(ToolError) as reused_key:
        await service.start(ExportArgs(dataset="refunds", period="2025-Q3"), context("k-2"))

    # The service names the field and passes its model's reason on (its validator's words, in
    # pydantic's frame).
    reason = pydantic_says(
        ExportRequest, {"dataset": "transactions", "period": "Q3"}, "value_error"
    )
    assert "period must be a quarter like '2025-Q3' or a month like '2025-07'" in reason
    assert str(bad_period.value) == f"export service: period: {reason}"
    assert "'k-2' was already used for a different request" in str(reused_key.value)
    assert (await stats(client))["keys"]["k-2"]["jobs_created"] == 1


async def test_a_503_before_the_job_is_retryable_and_the_retry_creates_one_job(
    service: ExportService, client: httpx.AsyncClient
) -> None:
    await set_faults(client, fail_next_starts=1)

    with pytest.raises(ServiceError) as refused:
        await service.start(ARGS, context("wf-2/call-1"))
    before = (await stats(client))["keys"]["wf-2/call-1"]
    job = await service.start(ARGS, context("wf-2/call-1"))

    assert not isinstance(refused.value, ToolError)
    assert refused.value.status_code == 503
    assert before["jobs_created"] == 0
    after = (await stats(client))["keys"]["wf-2/call-1"]
    assert (after["starts"], after["jobs_created"], after["job_id"]) == (2, 1, job.job_id)


async def test_a_retry_after_an_unseen_acceptance_finds_the_job(
    service: ExportService, client: httpx.AsyncClient
) -> None:
    await set_faults(client, accept_then_fail_next_starts=1)

    with pytest.raises(ServiceError):
        await service.start(ARGS, context("wf-3/call-1"))
    created = (await stats(client))["keys"]["wf-3/call-1"]
    job = await service.start(ARGS, context("wf-3/call-1"))

    assert created["jobs_created"] == 1
    assert job.job_id == created["job_id"]
    assert (await stats(client))["keys"]["wf-3/call-1"]["jobs_created"] == 1


async def test_an_unreachable_service_raises_a_retryable_error(closed_port: int) -> None:
    async with httpx.AsyncClient() as http:
        service = ExportService(http, f"http://127.0.0.1:{closed_port}")
        with pytest.raises(httpx.ConnectError):
            await service.start(ARGS, context("k"))
        with pytest.raises(httpx.ConnectError):
            await service.status("exp_1")


async def test_cancel_stops_the_job_and_its_webhook(
    service: ExportService, client: httpx.AsyncClient, receiver: Receiver
) -> None:
    job = await service.start(ARGS, context("wf-4/call-1", f"{receiver.url}/hooks/cancel"))

    await service.cancel(job.job_id)
    await service.cancel(job.job_id)
    # Our job would have ended, and called back, first.
    later = await later_job_ended(service, LATER)

    assert later.status == "succeeded"
    assert await service.status(job.job_id) == Completion(
        status="failed",
        error=OperationError(
            code="cancelled", message="the export service job was cancelled", retryable=False
        ),
    )
    assert receiver.hooks == []
    seen = await stats(client)
    assert seen["keys"]["wf-4/call-1"]["cancels"] == 2
    assert seen["jobs"][job.job_id]["webhooks"] == []


async def test_cancelling_an_unknown_or_finished_job_is_not_an_error(
    service: ExportService, client: httpx.AsyncClient
) -> None:
    job = await service.start(ARGS, context("wf-5/call-1"))
    _, done = await until_finished(service, job.job_id)

    await service.cancel(job.job_id)
    await service.cancel("exp_unknown")

    assert done.status == "succeeded"
    assert (await service.status(job.job_id)).status == "succeeded"


async def test_the_status_of_an_unknown_job_is_a_failure_with_a_reason(
    service: ExportService,
) -> None:
    completion = await service.status("exp_gone")

    assert completion.status == "failed"
    assert completion.error is not None
    assert completion.error.code == "job_unknown"
    assert completion.error.retryable
    assert "export service no longer knows job exp_gone" in completion.error.message


async def test_never_complete_keeps_reporting_running(
    service: ExportService, client: httpx.AsyncClient
) -> None:
    await set_faults(client, never_complete=True)
    job = await service.start(ARGS, context("wf-6/call-1"))

    await set_faults(client, never_complete=False)  # for the jobs started from now on
    later = await later_job_ended(service, LATER)  # ours has outlasted its duration

    assert later.status == "succeeded"
    assert await service.status(job.job_id) == Completion(status="running", progress="99%")


async def test_a_failed_job_reports_the_systems_error(
    service: ExportService, client: httpx.AsyncClient, receiver: Receiver
) -> None:
    error = OperationError(
        code="dataset_locked", message="dataset is being rebuilt", retryable=True
    )
    await set_faults(client, fail_jobs=error.model_dump())
    job = await service.start(ARGS, context("wf-7/call-1", f"{receiver.url}/hooks/failed"))

    _, done = await until_finished(service, job.job_id)
    hook = await hook_number(receiver, "failed", 1)

    assert done == Completion(status="failed", error=error)
    assert hook.authorization == "Bearer token-abc"
    assert Completion.model_validate(hook.body) == done


async def test_export_tool_declares_a_callback_long_tool() -> None:
    async with httpx.AsyncClient() as http:
        backend = ExportService(http, "http://x")
    default = export_tool(backend)
    custom = export_tool(backend, mode="handle", timeout=timedelta(minutes=30), max_in_flight=2)

    long = assert_long_tool(default, "start_export", backend, "callback")
    assert long.eta == timedelta(minutes=15)
    assert long.max_in_flight is None
    assert custom.long is not None
    assert (custom.long.mode, custom.long.timeout, custom.long.max_in_flight) == (
        "handle",
        timedelta(minutes=30),
        2,
    )
    schema = default.definition().parameters
    assert schema["required"] == ["dataset", "period"]
    assert "2025-Q3" in schema["properties"]["period"]["description"]
    assert schema["properties"]["dataset"]["description"]
