"""EnrichmentPipeline against the real demo systems over HTTP, and the `enrich_dataset` spec."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import httpx
import pytest

from examples.demo.pipeline import EnrichArgs, EnrichmentPipeline, enrich_tool
from examples.demo.services import ServiceError
from tests.examples.systems_helpers import (
    assert_long_tool,
    context,
    later_job_ended,
    set_faults,
    stats,
    systems_app_fixture,
    until_finished,
)
from waitstate.schemas.operations import Completion, OperationError
from waitstate.tools.spec import StartContext, ToolError

PIPELINE_SECONDS = 0.4
ARGS = EnrichArgs(dataset="transactions")


systems_app = systems_app_fixture(pipeline_seconds=PIPELINE_SECONDS)


@pytest.fixture
def pipeline(http: httpx.AsyncClient, systems_url: str) -> EnrichmentPipeline:
    return EnrichmentPipeline(http, systems_url)


async def test_status_reports_growing_progress_then_the_result(
    pipeline: EnrichmentPipeline, client: httpx.AsyncClient
) -> None:
    job = await pipeline.start(ARGS, context("wf-1/call-1"))
    reports, completion = await until_finished(pipeline, job.job_id)

    assert job.job_id.startswith("enr_")
    assert job.eta_seconds == 1
    percents = [int(str(report.progress).removesuffix("%")) for report in reports]
    assert len(set(percents)) >= 3
    assert percents == sorted(percents)
    assert all(report.result is None and report.error is None for report in reports)
    assert completion.status == "succeeded"
    assert completion.progress == "100%"
    assert completion.result == {
        "dataset": "transactions",
        "enriched_rows": completion.result["enriched_rows"],
    }
    assert isinstance(completion.result["enriched_rows"], int)
    # The same dataset always gives the same count.
    await set_faults(client, pipeline_seconds=0)
    again = await pipeline.start(ARGS, context("wf-1/call-2"))
    _, done = await until_finished(pipeline, again.job_id)
    assert done.result == completion.result


async def test_starting_twice_with_one_key_is_one_job(
    pipeline: EnrichmentPipeline, client: httpx.AsyncClient
) -> None:
    first = await pipeline.start(ARGS, context("wf-2/call-1"))
    jobs = await asyncio.gather(*(pipeline.start(ARGS, context("wf-2/call-1")) for _ in range(3)))

    assert {job.job_id for job in jobs} == {first.job_id}
    key = (await stats(client))["keys"]["wf-2/call-1"]
    assert (key["starts"], key["jobs_created"]) == (4, 1)


async def test_a_callback_in_the_context_is_not_sent(
    pipeline: EnrichmentPipeline, client: httpx.AsyncClient
) -> None:
    job = await pipeline.start(
        ARGS,
        StartContext(
            idempotency_key="wf-3/call-1",
            operation_id="op_1",
            callback_url="http://127.0.0.1:9/never",
            callback_token="t",
        ),
    )

    assert (await stats(client))["jobs"][job.job_id]["callback_url"] is None


async def test_retries_after_503s_create_exactly_one_job(
    pipeline: EnrichmentPipeline, client: httpx.AsyncClient
) -> None:
    await set_faults(client, fail_next_starts=1, accept_then_fail_next_starts=1)

    with pytest.raises(ServiceError):  # refused before a job exists
        await pipeline.start(ARGS, context("wf-4/call-1"))
    with pytest.raises(ServiceError):  # the job was created, the answer lost
        await pipeline.start(ARGS, context("wf-4/call-1"))
    job = await pipeline.start(ARGS, context("wf-4/call-1"))

    key = (await stats(client))["keys"]["wf-4/call-1"]
    assert (key["starts"], key["jobs_created"], key["job_id"]) == (3, 1, job.job_id)


async def test_a_bad_dataset_is_a_tool_error(pipeline: EnrichmentPipeline) -> None:
    with pytest.raises(ToolError, match="enrichment pipeline: dataset: .*lowercase letters"):
        await pipeline.start(EnrichArgs(dataset="Transactions"), context("k"))


async def test_cancel_ends_the_job(pipeline: EnrichmentPipeline, client: httpx.AsyncClient) -> None:
    job = await pipeline.start(ARGS, context("wf-5/call-1"))

    await pipeline.cancel(job.job_id)
    await pipeline.cancel(job.job_id)
    await pipeline.cancel("enr_unknown")
    later = await later_job_ended(pipeline, EnrichArgs(dataset="later"))  # ours would end first

    assert later.status == "succeeded"
    completion = await pipeline.status(job.job_id)
    assert completion.status == "failed"
    assert completion.error is not None
    assert completion.error.code == "cancelled"
    seen = await stats(client)
    assert seen["jobs"][job.job_id]["status"] == "cancelled"
    assert seen["keys"]["wf-5/call-1"]["cancels"] == 2


async def test_a_failed_job_and_an_unknown_job_report_why(
    pipeline: EnrichmentPipeline, client: httpx.AsyncClient
) -> None:
    error = OperationError(code="reference_data_stale", message="try tomorrow", retryable=True)
    await set_faults(client, fail_jobs=error.model_dump(), pipeline_seconds=0)
    job = await pipeline.start(ARGS, context("wf-6/call-1"))
    _, done = await until_finished(pipeline, job.job_id)

    assert done == Completion(status="failed", error=error)
    unknown = await pipeline.status("enr_unknown")
    assert unknown.error is not None
    assert unknown.error.code == "job_unknown"


async def test_enrich_tool_declares_a_polled_long_tool() -> None:
    async with httpx.AsyncClient() as http:
        backend = EnrichmentPipeline(http, "http://x")
    default = enrich_tool(backend)
    custom = enrich_tool(
        backend,
        mode="handle",
        timeout=timedelta(minutes=5),
        poll_interval=timedelta(seconds=10),
        max_in_flight=1,
    )

    long = assert_long_tool(default, "enrich_dataset", backend, "poll")
    assert long.poll_interval == timedelta(seconds=1)
    assert custom.long is not None
    assert (
        custom.long.mode,
        custom.long.timeout,
        custom.long.poll_interval,
        custom.long.max_in_flight,
    ) == ("handle", timedelta(minutes=5), timedelta(seconds=10), 1)
    assert default.definition().parameters["properties"]["dataset"]["description"]
