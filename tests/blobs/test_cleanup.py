"""The blob cleanup on the time-skipping server, with the production worker wiring over a
directory and over S3 (moto): only blobs whose every owner ended more than the retention ago go,
with their markers, and the counts it returns are the counts in its metrics. Its retention
defaults to the namespace's (read on the dev server), and a namespace without one fails it on
purpose."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
)
from temporalio.exceptions import ApplicationError
from temporalio.runtime import MetricBuffer, Runtime, TelemetryConfig
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment
from temporalio.worker import Worker

from tests.blobs.conftest import CREDENTIALS, REGION, S3Server
from tests.helpers import OpenUntilEnded, eventually, make_worker
from waitstate.activities import CleanupActivities
from waitstate.blobs import BlobNotFound, LocalBlobStore, open_blob_store
from waitstate.converter import DATA_CONVERTER
from waitstate.schemas.cleanup import CleanInput, CleanResult, CleanupInput
from waitstate.schemas.errors import RETENTION_UNKNOWN
from waitstate.settings import Settings
from waitstate.workflows.blob_cleanup import BlobCleanupWorkflow

RETENTION = timedelta(days=7)


@pytest.fixture(params=["dir", pytest.param("s3", marks=pytest.mark.subprocess)])
def settings(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Settings:
    """A worker's settings for a store of the test's own: a directory, or a bucket's prefix."""
    if request.param == "dir":
        return Settings(blob_dir=tmp_path / "blobs")
    server: S3Server = request.getfixturevalue("s3_server")
    prefix: str = request.getfixturevalue("prefix")
    for name, value in {**CREDENTIALS, "AWS_REGION": REGION}.items():
        monkeypatch.setenv(name, value)
    return Settings(blob_url=f"s3://{server.bucket}/{prefix}", blob_endpoint=server.endpoint)


@pytest.fixture
async def metered(
    time_skipping_env: WorkflowEnvironment,
) -> AsyncIterator[tuple[Client, MetricBuffer]]:
    """A client of the time-skipping server whose workers' metrics land in a buffer."""
    buffer = MetricBuffer(10_000)
    client = await Client.connect(
        time_skipping_env.client.service_client.config.target_host,
        namespace=time_skipping_env.client.namespace,
        data_converter=DATA_CONVERTER,
        runtime=Runtime(telemetry=TelemetryConfig(metrics=buffer)),
    )
    yield client, buffer


async def _end(run: WorkflowHandle[OpenUntilEnded, None]) -> None:
    """End the run, and wait until it has (by describing it, which skips no time)."""
    await run.signal(OpenUntilEnded.end)

    async def closed() -> bool:
        return (await run.describe()).status == WorkflowExecutionStatus.COMPLETED

    await eventually(closed, f"run {run.id} to end")


def _counted(buffer: MetricBuffer) -> dict[tuple[str, tuple[tuple[str, str], ...]], int]:
    """The blob cleanup's counters, by name and their own labels (not the SDK's: task queue,
    activity type...), summed over the buffer's updates."""
    totals: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {}
    for update in buffer.retrieve_updates():
        if update.metric.name.startswith("waitstate_blob"):
            own = {k: str(v) for k, v in update.attributes.items() if k == "reason"}
            key = (update.metric.name, tuple(own.items()))
            totals[key] = totals.get(key, 0) + int(update.value)
    return totals


async def test_only_blobs_of_runs_ended_past_the_retention_are_deleted_and_counted(
    time_skipping_env: WorkflowEnvironment,
    metered: tuple[Client, MetricBuffer],
    task_queue: str,
    settings: Settings,
) -> None:
    env = time_skipping_env
    worker_client, buffer = metered
    store = open_blob_store(settings)
    runs_queue = f"{task_queue}-runs"
    run_ids = {kind: f"{kind}-{task_queue}" for kind in ("open", "recent", "past")}
    async with (
        Worker(env.client, task_queue=runs_queue, workflows=[OpenUntilEnded]),
        make_worker(worker_client, task_queue, settings=settings),
    ):
        runs = {
            kind: await env.client.start_workflow(
                OpenUntilEnded.run, id=run_id, task_queue=runs_queue
            )
            for kind, run_id in run_ids.items()
        }
        of_open = await store.put(b"of the open run", run_ids["open"])
        of_recent = await store.put(b"of the run ended within the retention", run_ids["recent"])
        of_past = await store.put(b"of the run ended past it", run_ids["past"])
        shared = await store.put(b"shared", run_ids["past"])
        await store.put(b"shared", run_ids["open"])
        unowned = await store.put(b"written before blobs had owners")
        # Its run is no longer known to Temporal: removed by the namespace's retention.
        forgotten = await store.put(b"of a forgotten run", f"forgotten-{task_queue}")

        await _end(runs["past"])
        await env.sleep(RETENTION + timedelta(days=1))
        await _end(runs["recent"])

        # By the plain client: waiting on the time-skipping client's would let the server skip
        # ahead to the open run's (ten-year) timeout.
        result = await worker_client.execute_workflow(
            BlobCleanupWorkflow.run,
            CleanupInput(retention=RETENTION),
            id=f"cleanup-{task_queue}",
            task_queue=task_queue,
        )
        await runs["open"].terminate()

    freed = len(b"of the run ended past it") + len(b"of a forgotten run")
    assert result == CleanResult(
        retention=RETENTION,
        examined=6,
        deleted=2,
        bytes_deleted=freed,
        kept_open=2,
        kept_recent=1,
        unowned=1,
    )
    for gone in (of_past, forgotten):
        with pytest.raises(BlobNotFound):
            await store.get(gone)
        assert await store.owners(gone) == []
    assert await store.get(shared) == b"shared"
    assert sorted(await store.owners(shared)) == sorted([run_ids["past"], run_ids["open"]])
    for kept in (of_open, of_recent, unowned):
        assert await store.size(kept) > 0
    assert _counted(buffer) == {
        ("waitstate_blobs_deleted", ()): 2,
        ("waitstate_blob_bytes_deleted", ()): freed,
        ("waitstate_blobs_kept", (("reason", "open"),)): 2,
        ("waitstate_blobs_kept", (("reason", "recent"),)): 1,
        ("waitstate_blobs_kept", (("reason", "unowned"),)): 1,
    }


async def test_a_retried_pass_keeps_the_deletions_of_the_attempt_before(
    time_skipping_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    store = LocalBlobStore(tmp_path)
    gone = await store.put(b"of a forgotten run", f"forgotten-{uuid.uuid4()}")
    env = ActivityEnvironment()
    earlier = CleanResult(examined=40, deleted=3, bytes_deleted=300, kept_open=5)
    env.info = dataclasses.replace(
        env.info, attempt=2, heartbeat_details=[earlier.model_dump(mode="json")]
    )
    beats: list[object] = []
    env.on_heartbeat = lambda *details: beats.append(details[0])
    activities = CleanupActivities(time_skipping_env.client, store)
    # A month ahead: the blob just written is past the retention.
    later = datetime.now(UTC) + timedelta(days=30)

    result = await env.run(activities.clean_blobs, CleanInput(now=later, retention=RETENTION))

    assert (result.examined, result.deleted, result.bytes_deleted) == (1, 4, 318)
    assert result.kept_open == 0  # what was kept is counted afresh by each attempt
    assert beats and await store.owners(gone) == []


async def test_without_a_retention_on_a_namespace_that_has_none_it_fails_on_purpose(
    time_skipping_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    # The time-skipping server reports no retention for its namespace: the cleanup never guesses.
    async with make_worker(
        time_skipping_env.client, task_queue, settings=Settings(blob_dir=tmp_path)
    ):
        with pytest.raises(WorkflowFailureError) as failed:
            await time_skipping_env.client.execute_workflow(
                BlobCleanupWorkflow.run,
                CleanupInput(),
                id=f"cleanup-{task_queue}",
                task_queue=task_queue,
            )

    cause = failed.value.cause.cause if failed.value.cause else None
    assert isinstance(cause, ApplicationError) and cause.type == RETENTION_UNKNOWN
    assert "--retention" in cause.message


async def test_the_default_retention_is_the_namespaces(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    activities = CleanupActivities(dev_env.client, LocalBlobStore(tmp_path))

    found = await ActivityEnvironment().run(activities.namespace_retention)

    assert found.namespace == dev_env.client.namespace
    assert found.retention > timedelta(0)
