"""Temporal External Storage against a reference the activity writes itself: history bytes,
worker CPU, store traffic, and how long a run the store lacks a payload of stays stuck. (What
a store outage at an activity's completion does is asserted by
tests/blobs/test_external_storage.py, over this module's driver and chain, not measured again
here.)

Plain temporalio (1.35), no code of waitstate's, one dev server (`temporal server start-dev`
from the venv's `temporal` binary). docs/upstream/external-storage.md has the figures.

    .venv/bin/python scripts/extstore_measure.py
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from temporalio import activity, workflow
from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.converter import (
    DataConverter,
    ExternalStorage,
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, Worker

TEMPORAL = Path(sys.executable).parent / "temporal"
CALLS = 10
THRESHOLD = 4096  # External Storage keeps the payloads over this many bytes


class CountingDriver(StorageDriver):
    """Payloads as files under `root` named by the SHA-256 of their bytes, counting each store
    and fetch; `down` fails every store, `forgetful` every fetch."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.stores = self.fetches = 0
        self.down = self.forgetful = False

    def name(self) -> str:
        return "dir"

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        return [self._write(payload) for payload in payloads]

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        return [self._read(claim) for claim in claims]

    def _write(self, payload: Payload) -> StorageDriverClaim:
        if self.down:
            raise OSError("the store is down")
        data = payload.SerializeToString()
        digest = hashlib.sha256(data).hexdigest()
        (self.root / digest).write_bytes(data)
        self.stores += 1
        return StorageDriverClaim({"sha256": digest})

    def _read(self, claim: StorageDriverClaim) -> Payload:
        if self.forgetful:
            raise KeyError("not in this store")
        payload = Payload()
        payload.ParseFromString((self.root / claim.claim_data["sha256"]).read_bytes())
        self.fetches += 1
        return payload


@dataclass
class Shared:
    root: Path
    size: int
    runs: int = 0


SHARED: Shared | None = None


@activity.defn
async def produce(by_ref: bool) -> str:
    """A tool: `size` bytes of text, or (by_ref) a reference to them it wrote itself."""
    assert SHARED is not None
    SHARED.runs += 1
    text = ("x" * 63 + "\n") * (SHARED.size // 64)
    if not by_ref:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()
    (SHARED.root / ("ref-" + digest)).write_text(text)
    return "ref:" + digest


@activity.defn
async def consume(text: str) -> int:
    """A model call: reads what it is given (by reference or not)."""
    assert SHARED is not None
    if text.startswith("ref:"):
        text = (SHARED.root / ("ref-" + text[4:])).read_text()
    return len(text)


@dataclass
class Calls:
    """How many times a `Chain` calls the tool, and whether the tool returns a reference."""

    count: int = CALLS
    by_ref: bool = False


@workflow.defn
class Chain:
    @workflow.run
    async def run(self, calls: Calls) -> int:
        total = 0
        for _ in range(calls.count):
            text = await workflow.execute_activity(
                produce,
                calls.by_ref,
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=RetryPolicy(
                    maximum_attempts=3, initial_interval=timedelta(seconds=0.1)
                ),
            )
            total += await workflow.execute_activity(
                consume, text, start_to_close_timeout=timedelta(seconds=30)
            )
        return total


def storing(env: WorkflowEnvironment, driver: CountingDriver | None) -> Client:
    """A client of `env`'s server whose payloads over THRESHOLD go to `driver` through External
    Storage (with no driver: every payload inline, as by default)."""
    converter = DataConverter.default
    if driver is not None:
        converter = DataConverter(
            external_storage=ExternalStorage(drivers=[driver], payload_size_threshold=THRESHOLD)
        )
    return Client(env.client.service_client, namespace="default", data_converter=converter)


def chain_worker(client: Client, task_queue: str, *, max_cached_workflows: int = 1000) -> Worker:
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[Chain],
        activities=[produce, consume],
        max_cached_workflows=max_cached_workflows,
    )


async def history_bytes(client: Client, workflow_id: str) -> tuple[int, object]:
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return sum(e.ByteSize() for e in history.events), history


async def main() -> None:
    env = await WorkflowEnvironment.start_local(dev_server_existing_path=str(TEMPORAL))
    async with env:
        print(json.dumps(await table(env), indent=1))


async def run_one(env: WorkflowEnvironment, mode: str, size: int, cache: int) -> dict[str, object]:
    global SHARED
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        SHARED = Shared(root, size)
        driver = CountingDriver(root)
        client = storing(env, driver if mode == "extstore" else None)
        queue = f"q-{uuid.uuid4()}"
        workflow_id = f"m-{uuid.uuid4()}"
        async with chain_worker(client, queue, max_cached_workflows=cache):
            cpu = time.process_time()
            result = await client.execute_workflow(
                Chain.run, Calls(by_ref=mode == "byref"), id=workflow_id, task_queue=queue
            )
            cpu = time.process_time() - cpu
        assert result == CALLS * (size // 64) * 64, result
        size_bytes, history = await history_bytes(client, workflow_id)
        run_traffic = (driver.stores, driver.fetches)
        replay_cpu = time.process_time()
        await Replayer(workflows=[Chain], data_converter=client.data_converter).replay_workflow(
            history
        )
        replay_cpu = time.process_time() - replay_cpu
        return {
            "mode": mode,
            "size": size,
            "cached": cache,
            "history_bytes": size_bytes,
            "cpu_ms": round(cpu * 1000),
            "stored": run_traffic[0],
            "retrieved": run_traffic[1],
            "replay_retrieved": driver.fetches - run_traffic[1],
            "replay_cpu_ms": round(replay_cpu * 1000),
        }


async def missing(env: WorkflowEnvironment) -> dict[str, object]:
    """The worker's store lacks what history names: how does the run end?"""
    global SHARED
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        SHARED = Shared(root, 65_536)
        driver = CountingDriver(root)
        driver.forgetful = True
        client = storing(env, driver)
        queue = f"q-{uuid.uuid4()}"
        async with chain_worker(client, queue):
            handle = await client.start_workflow(
                Chain.run, Calls(), id=f"n-{uuid.uuid4()}", task_queue=queue
            )
            await asyncio.sleep(15)
            status = (await handle.describe()).status
            history = await handle.fetch_history()
            failed = [
                e for e in history.events if e.HasField("workflow_task_failed_event_attributes")
            ]
            await handle.terminate()
        return {
            "status_after_15s": status.name if status else None,
            "workflow_task_failures": len(failed),
            "tool_runs": SHARED.runs,
        }


REPEATS = 3


async def table(env: WorkflowEnvironment) -> dict[str, object]:
    rows = []
    for size in (16_384, 524_288):
        for cache in (1000, 0):
            for mode in ("inline", "byref", "extstore"):
                runs = [await run_one(env, mode, size, cache) for _ in range(REPEATS)]
                row = runs[0]
                for key in ("cpu_ms", "replay_cpu_ms"):
                    row[key] = sorted(r[key] for r in runs)[REPEATS // 2]  # the median
                rows.append(row)
    return {
        "calls_per_run": CALLS,
        "rows": rows,
        "missing": await missing(env),
    }


if __name__ == "__main__":
    asyncio.run(main())
