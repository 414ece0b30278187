"""S3BlobStore against a real S3-protocol server (moto, over HTTP): the same references as the
directory store (what both do alike is in test_both_stores.py), missing blobs, idempotent puts,
delete and listing, prefixes; WAITSTATE_BLOB_URL from the settings; and a directory store asked
for a blob that lives only in the bucket."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import obstore
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from examples.systems import create_app as systems_app
from examples.systems import serving
from tests.blobs.conftest import CREDENTIALS, S3Server
from tests.blobs.s3_app import READ_AT, READ_LENGTH, REPORT
from tests.helpers import eventually, process_env, quiet_history_length, start_run
from tests.rigs import WorkerProcess
from waitstate.blobs import (
    BlobNotFound,
    LocalBlobStore,
    open_blob_store,
    parse_ref,
    ref_for,
)
from waitstate.blobs.s3 import S3BlobStore
from waitstate.schemas import RunInput, RunResult
from waitstate.schemas.approvals import DecideInput
from waitstate.settings import Settings, parse_blob_url
from waitstate.workflows.agent_run import AgentRunWorkflow

DIGEST = hashlib.sha256(b"hello").hexdigest()


async def test_objects_fan_out_by_the_digest_under_the_prefix(
    s3_server: S3Server, s3_store: S3BlobStore, prefix: str
) -> None:
    await s3_store.put(b"hello")

    key = f"{prefix}/{DIGEST[:2]}/{DIGEST[2:]}"
    stored = await obstore.get_async(s3_server.bucket_store(), key)
    assert bytes(await stored.bytes_async()) == b"hello"


async def test_the_same_references_as_a_directory_store(
    s3_store: S3BlobStore, tmp_path: Path
) -> None:
    local = LocalBlobStore(tmp_path)

    for data in (b"", b"same", bytes(range(256)) * 100):
        assert await s3_store.put(data) == await local.put(data)


async def test_a_slice_of_a_large_blob_reads_only_its_bytes(
    s3_store: S3BlobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = bytes(range(256)) * 8192  # 2 MB
    ref = await s3_store.put(data)
    asked: list[Any] = []
    get = obstore.get_async

    async def spy(store: Any, path: str, *, options: Any = None) -> Any:
        asked.append(options)
        return await get(store, path, options=options)

    monkeypatch.setattr(obstore, "get_async", spy)
    offset = 1_500_000

    assert await s3_store.get(ref, offset, 4000) == data[offset : offset + 4000]
    assert asked == [{"range": (offset, offset + 4000)}], "one ranged GET"


async def test_missing_blob_says_where_it_looked_and_what_to_fix(
    s3_store: S3BlobStore, prefix: str
) -> None:
    ref = ref_for(DIGEST)

    for call in (s3_store.get(ref), s3_store.get(ref, 2, 3), s3_store.get(ref, 0, 0)):
        with pytest.raises(BlobNotFound) as caught:
            await call
        message = str(caught.value)
        assert message.startswith(f"no blob stored under {ref} in the object store ")
        assert f"s3://waitstate-test/{prefix};" in message
        assert "workers of one fleet must share one store" in message
        assert "WAITSTATE_BLOB_URL" in message
    with pytest.raises(BlobNotFound, match=f"no blob stored under {ref}"):
        await s3_store.size(ref)


@pytest.mark.parametrize("ref", ["ref://blobs/../../etc/passwd", f"ref://blobs/{DIGEST.upper()}"])
async def test_malformed_refs_are_refused(s3_store: S3BlobStore, ref: str) -> None:
    for call in (s3_store.get(ref), s3_store.size(ref), s3_store.delete(ref)):
        with pytest.raises(ValueError, match="blob reference"):
            await call


async def test_put_is_idempotent_and_uploads_once(
    s3_store: S3BlobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    uploads: list[str] = []
    put = obstore.put_async

    async def spy(store: Any, path: str, data: Any, **kwargs: Any) -> Any:
        uploads.append(path)
        return await put(store, path, data, **kwargs)

    monkeypatch.setattr(obstore, "put_async", spy)

    first = await s3_store.put(b"hello")
    second = await s3_store.put(b"hello")

    assert first == second
    assert uploads == [f"{DIGEST[:2]}/{DIGEST[2:]}"]
    assert [ref async for ref, _ in s3_store.refs()] == [first]


async def test_put_repairs_an_object_of_the_wrong_size(
    s3_server: S3Server, s3_store: S3BlobStore, prefix: str
) -> None:
    ref = await s3_store.put(b"hello")
    await obstore.put_async(s3_server.bucket_store(), f"{prefix}/{DIGEST[:2]}/{DIGEST[2:]}", b"hel")

    assert await s3_store.put(b"hello") == ref
    assert await s3_store.get(ref) == b"hello"


async def test_refs_lists_every_blob_with_its_time(
    s3_server: S3Server, s3_store: S3BlobStore, prefix: str
) -> None:
    assert [item async for item in s3_store.refs()] == []
    before = datetime.now(UTC) - timedelta(seconds=5)
    refs = {await s3_store.put(data) for data in (b"one", b"two", b"three")}
    # Other objects under the prefix are not blobs.
    for key in ("README", f"{DIGEST[:2]}/not-a-digest", f"zz/{'0' * 62}", "a/b/c"):
        await obstore.put_async(s3_server.bucket_store(), f"{prefix}/{key}", b"x")

    listed = [item async for item in s3_store.refs()]

    assert {ref for ref, _ in listed} == refs and len(listed) == 3
    assert all(
        before < written <= datetime.now(UTC) + timedelta(seconds=5) for _, written in listed
    )


async def test_prefixes_do_not_see_each_other(s3_server: S3Server, prefix: str) -> None:
    one, nested, other = (
        s3_server.store(prefix),
        s3_server.store(f"{prefix}/nested"),
        s3_server.store(f"{prefix}-other"),
    )
    ref = await one.put(b"one's")
    nested_ref = await nested.put(b"nested's")

    for store in (nested, other):
        with pytest.raises(BlobNotFound):
            await store.get(ref)
        assert await store.delete(ref) is False
    assert [r async for r, _ in one.refs()] == [ref]
    assert [r async for r, _ in nested.refs()] == [nested_ref]
    assert [r async for r, _ in other.refs()] == []


async def test_a_directory_store_refuses_a_blob_that_lives_in_the_bucket(
    s3_store: S3BlobStore, tmp_path: Path
) -> None:
    ref = await s3_store.put(b"written by a worker on the bucket")
    local = LocalBlobStore(tmp_path / "blobs")

    with pytest.raises(BlobNotFound) as caught:
        await local.get(ref)

    message = str(caught.value)
    assert f"no blob stored under {ref} in the directory store {tmp_path / 'blobs'};" in message
    assert "workers of one fleet must share one store" in message
    assert "WAITSTATE_BLOB_URL" in message


# --- WAITSTATE_BLOB_URL, and the store it opens --------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("s3://bucket", ("bucket", "")),
        ("s3://bucket/", ("bucket", "")),
        ("s3://my.bucket-1/fleet/blobs/", ("my.bucket-1", "fleet/blobs")),
        ("S3://bucket/p", ("bucket", "p")),
    ],
)
def test_blob_urls(url: str, expected: tuple[str, str]) -> None:
    assert parse_blob_url(url) == expected


@pytest.mark.parametrize(
    ("url", "complaint"),
    [
        ("bucket/prefix", "is not an s3:// URL"),
        ("https://s3.amazonaws.com/bucket", "is not an s3:// URL"),
        ("/var/blobs", "is not an s3:// URL"),
        ("s3://", "does not name a bucket"),
        ("s3:///prefix", "does not name a bucket"),
        ("s3://Bucket/p", "does not name a bucket"),
        ("s3://ab", "does not name a bucket"),
        ("s3://localhost:9000/bucket", "AWS_ENDPOINT_URL"),
        ("s3://bucket/p?versionId=1", "query or fragment"),
        ("s3://bucket/a//b", "empty, '.' or '..' segment"),
        ("s3://bucket/a/../b", "empty, '.' or '..' segment"),
    ],
)
def test_bad_blob_urls_are_refused_with_what_is_wrong(url: str, complaint: str) -> None:
    with pytest.raises(ValueError, match="WAITSTATE_BLOB_URL") as caught:
        parse_blob_url(url)
    assert complaint in str(caught.value)
    assert "s3://BUCKET/PREFIX" in str(caught.value) or "segment" in complaint
    with pytest.raises(ValueError, match="WAITSTATE_BLOB_URL"):
        Settings.from_env({"WAITSTATE_BLOB_URL": url})


def test_credentials_in_the_url_are_refused_without_repeating_them() -> None:
    with pytest.raises(ValueError, match="AWS_ACCESS_KEY_ID") as caught:
        parse_blob_url("s3://AKIA:hunter2@bucket/p")
    assert "hunter2" not in str(caught.value)


def test_blob_settings_from_the_environment() -> None:
    assert (Settings.from_env({}).blob_url, Settings.from_env({}).blob_endpoint) == (None, None)
    assert Settings.from_env({"WAITSTATE_BLOB_URL": "  "}).blob_url is None
    settings = Settings.from_env(
        {
            "WAITSTATE_BLOB_URL": "s3://fleet/blobs",
            "AWS_ENDPOINT_URL": "http://minio:9000",
            "AWS_ENDPOINT_URL_S3": "http://s3.minio:9000",
        }
    )
    assert settings.blob_url == "s3://fleet/blobs"
    assert settings.blob_endpoint == "http://s3.minio:9000", "the S3-specific one wins"
    assert Settings.from_env({"AWS_ENDPOINT_URL": "http://minio:9000"}).blob_endpoint == (
        "http://minio:9000"
    )


def test_the_directory_is_the_default_store(tmp_path: Path) -> None:
    store = open_blob_store(Settings(blob_dir=tmp_path))

    assert isinstance(store, LocalBlobStore) and store.root == tmp_path


async def test_a_blob_url_opens_the_bucket_with_the_aws_environment(
    s3_server: S3Server, s3_store: S3BlobStore, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in {**CREDENTIALS, "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_REGION", raising=False)
    settings = Settings.from_env(
        {
            "WAITSTATE_BLOB_URL": f"s3://{s3_server.bucket}/{prefix}/",
            "AWS_ENDPOINT_URL": s3_server.endpoint,
        }
    )

    store = open_blob_store(settings)

    assert isinstance(store, S3BlobStore) and store.url == f"s3://{s3_server.bucket}/{prefix}"
    ref = await store.put(b"through the factory")
    assert await s3_store.get(ref) == b"through the factory", "the same objects"
    assert parse_ref(ref) == hashlib.sha256(b"through the factory").hexdigest()


# --- A fleet on one bucket ---------------------------------------------------------------------

APP = "tests.blobs.s3_app:app"
RESULT_TIMEOUT = 90


@asynccontextmanager
async def _workers(
    dev_env: WorkflowEnvironment, task_queue: str, *workers: tuple[dict[str, str], Path]
) -> AsyncIterator[list[WorkerProcess]]:
    """Worker processes of the app on the test's queue, each with its own environment on top
    and its own log, none started yet; all stopped at the end, however the test went."""
    async with serving(systems_app()) as systems_url:
        env = process_env(
            dev_env.client, task_queue, WAITSTATE_APPS=APP, DEMO_SYSTEMS_URL=systems_url
        )
        processes = [WorkerProcess({**env, **own}, log) for own, log in workers]
        try:
            yield processes
        finally:
            for process in processes:
                await process.stop()


async def _report_moved_at_its_first_wait(
    dev_env: WorkflowEnvironment,
    task_queue: str,
    workflow_id: str,
    first: WorkerProcess,
    then: WorkerProcess,
) -> tuple[WorkflowHandle[Any, RunResult], str]:
    """Start the reporter agent's run on `first`; once it waits for its first approval, stop
    `first`, start `then` and approve: the run goes on on `then`. Its handle, and the request
    approved."""
    await first.start()
    handle = await start_run(
        dev_env.client,
        task_queue,
        RunInput(task="Build, file and check the Q3 report", agent="reporter"),
        workflow_id=workflow_id,
    )
    request = await _open_request(handle, set())
    await first.stop()
    await then.start()
    await _approve(handle, request)
    return handle, request


async def _open_request(handle: WorkflowHandle[Any, Any], decided: set[str]) -> str:
    async def open_request() -> str | None:
        state = await handle.query(AgentRunWorkflow.status)
        waiting = (r.request_id for r in state.approvals.values() if r.open)
        return next((request for request in waiting if request not in decided), None)

    request_id = await eventually(open_request, "the approval request", within=60)
    await quiet_history_length(handle)
    return request_id


async def _approve(handle: WorkflowHandle[Any, Any], request_id: str) -> None:
    decision = DecideInput(request_id=request_id, decision="approve", reviewer="ana")
    outcome = await handle.execute_update(AgentRunWorkflow.decide, decision)
    assert outcome.status == "approved"


async def _model_call_workers(handle: WorkflowHandle[Any, Any]) -> list[str]:
    """The identity of the worker that took each model call, in order."""
    history = await handle.fetch_history()
    scheduled = {
        event.event_id: event.activity_task_scheduled_event_attributes.activity_type.name
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    }
    return [
        event.activity_task_started_event_attributes.identity
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        and scheduled[event.activity_task_started_event_attributes.scheduled_event_id]
        == "call_model"
    ]


async def test_a_run_alternates_between_two_workers_that_share_only_the_bucket(
    dev_env: WorkflowEnvironment, task_queue: str, s3_server: S3Server, prefix: str, tmp_path: Path
) -> None:
    """Worker A builds a 50 KB report (kept in the bucket by reference) and stops while the
    run waits for a person; worker B, with another directory of its own, reads the
    conversation and a slice of the report from the bucket, and stops at the next wait;
    A, started again, finishes from what B wrote."""
    bucket = s3_server.env(prefix)
    async with _workers(
        dev_env,
        task_queue,
        ({**bucket, "WAITSTATE_STATE_DIR": str(tmp_path / "one")}, tmp_path / "one.log"),
        ({**bucket, "WAITSTATE_STATE_DIR": str(tmp_path / "two")}, tmp_path / "two.log"),
    ) as (one, two):
        handle, first = await _report_moved_at_its_first_wait(
            dev_env, task_queue, f"s3-fleet-{task_queue}", one, two
        )
        second = await _open_request(handle, {first})
        await two.stop()
        await one.start()
        await _approve(handle, second)
        result = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)

    assert result.status == "completed", result.error
    expected = REPORT.encode()[READ_AT : READ_AT + READ_LENGTH].decode()
    assert result.final_output is not None and result.final_output.endswith(f"read: {expected}")
    workers = await _model_call_workers(handle)
    # Each wait may add a checkpoint call: what counts is which processes took the turns, in
    # what order: A, B, then A started again (a process of its own, so an identity of its own).
    turns_by = [worker for worker, _ in itertools.groupby(workers)]
    assert len(turns_by) == len(set(turns_by)) == 3, workers
    refs = [ref async for ref, _ in s3_server.store(prefix).refs()]
    assert ref_for(hashlib.sha256(REPORT.encode()).hexdigest()) in refs
    for own in ("one", "two"):  # nothing was written to a worker's own directory
        assert not (tmp_path / own / "blobs").exists()


async def test_a_worker_on_a_directory_store_refuses_the_run_cleanly(
    dev_env: WorkflowEnvironment, task_queue: str, s3_server: S3Server, prefix: str, tmp_path: Path
) -> None:
    """A run whose conversation is in the bucket, resumed by a worker configured with only a
    directory: the model call fails at once, non-retryable, saying why; no crash, no retries."""
    async with _workers(
        dev_env,
        task_queue,
        (s3_server.env(prefix), tmp_path / "bucket.log"),
        ({"WAITSTATE_BLOB_DIR": str(tmp_path / "blobs")}, tmp_path / "directory.log"),
    ) as (on_bucket, on_directory):
        handle, _ = await _report_moved_at_its_first_wait(
            dev_env, task_queue, f"s3-refused-{task_queue}", on_bucket, on_directory
        )
        with pytest.raises(WorkflowFailureError) as caught:
            await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)

    failure = caught.value.cause
    assert isinstance(failure, ApplicationError) and failure.type == "RunFailed"
    assert "is not in this worker's blob store (workers must share one)" in failure.message
    assert "not retried" in failure.message
    # The worker failed the call at its first attempt, not retried, and served on until it was
    # told to stop.
    events = (await handle.fetch_history()).events
    failed = [e for e in events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED]
    assert len(failed) == 1, failed
    started = events[failed[0].activity_task_failed_event_attributes.started_event_id - 1]
    assert started.activity_task_started_event_attributes.attempt == 1
    log = (tmp_path / "directory.log").read_text()
    assert log.rstrip().endswith("waitstate.worker: stopped")
