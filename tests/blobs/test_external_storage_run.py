"""What External Storage would change for a run of ours: a job's completion of 512 KB (an Update
argument, which no reference of ours keeps out of history today) sent through the gateway to the
demo run, with waitstate's converter as it is, and with External Storage over our blob store
(a driver written here, for the measurement: it is not the runtime's; docs/state.md says why).

Prints the figures docs/state.md quotes (history bytes, this process's CPU: the worker, the
gateway and the test), and asserts what holds either way: the run reads the whole completion.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.converter import (
    ExternalStorage,
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
    StorageDriverWorkflowInfo,
)
from temporalio.testing import WorkflowEnvironment

from tests.helpers import TEST_BLOBS, callback_token, eventually, history_bytes
from tests.rigs import EXPORT_TASK, EXPORT_TOOLS, serving_stack
from waitstate.blobs import LocalBlobStore, parse_ref
from waitstate.converter import DATA_CONVERTER
from waitstate.schemas import RunState
from waitstate.workflows.agent_run import AgentRunWorkflow

MANIFEST_BYTES = 524_288
THRESHOLD = 4_096
KEYS = {"test": "t" * 40}


class BlobStoreDriver(StorageDriver):
    """Payloads in our blob store, owned by the run they were stored for (so the cleanup keeps
    them while it may read them)."""

    def __init__(self, store: LocalBlobStore) -> None:
        self.blobs = store

    def name(self) -> str:
        return "waitstate.blobs"

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        target = context.target
        owner = target.id if isinstance(target, StorageDriverWorkflowInfo) else None
        refs = [await self.blobs.put(p.SerializeToString(), owner) for p in payloads]
        return [StorageDriverClaim({"sha256": parse_ref(ref)}) for ref in refs]

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        found = []
        for claim in claims:
            payload = Payload()
            payload.ParseFromString(
                await self.blobs.get(f"ref://blobs/{claim.claim_data['sha256']}")
            )
            found.append(payload)
        return found


async def completed_with_a_large_manifest(
    client: Client, task_queue: str
) -> tuple[int, float, str]:
    """The demo run, its export completed through the gateway with a 512 KB manifest: its
    history's bytes, this process's CPU seconds from the completion to the run's end, and the
    manifest as the run recorded it in the export's operation."""
    async with serving_stack(client, task_queue, KEYS, "test") as stack:
        await stack.faults(never_complete=True)
        async with stack.worker():
            handle = await stack.start(EXPORT_TASK, EXPORT_TOOLS)

            async def pending() -> RunState | None:
                state = await handle.query(AgentRunWorkflow.status)
                return state if state.operations else None

            [op] = (await eventually(pending, "the export to be pending")).operations.values()
            token = await callback_token(stack.tokens, handle, op)
            manifest = "r" * MANIFEST_BYTES
            started = time.process_time()
            answer = await stack.http.post(
                f"/v1/operations/{op.operation_id}/complete",
                json={"status": "succeeded", "result": {"file": "q3.csv", "manifest": manifest}},
                headers={"Authorization": f"Bearer {token}"},
            )
            assert answer.status_code == 200, answer.text
            result = await handle.result()
            cpu = time.process_time() - started
            state = await handle.query(AgentRunWorkflow.status)
        size, _ = await history_bytes(client, handle.id, handle.result_run_id or "")
    assert result.status == "completed", result
    recorded = state.operations[op.operation_id].result
    assert isinstance(recorded, dict)
    return size, cpu, str(recorded["manifest"])


async def test_a_large_completion_stays_in_history_and_external_storage_takes_it_out(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    inline, inline_cpu, seen = await completed_with_a_large_manifest(dev_env.client, task_queue)
    assert seen == "r" * MANIFEST_BYTES

    storing = dataclasses.replace(
        DATA_CONVERTER,
        external_storage=ExternalStorage(
            drivers=[BlobStoreDriver(LocalBlobStore(TEST_BLOBS))],
            payload_size_threshold=THRESHOLD,
        ),
    )
    client = Client(dev_env.client.service_client, namespace="default", data_converter=storing)
    stored, stored_cpu, seen = await completed_with_a_large_manifest(client, f"{task_queue}-es")
    assert seen == "r" * MANIFEST_BYTES

    print(
        f"a 512 KB completion: history {inline} bytes, {inline_cpu * 1000:.0f} ms CPU inline; "
        f"{stored} bytes, {stored_cpu * 1000:.0f} ms CPU with External Storage"
    )
    assert inline > MANIFEST_BYTES > 10 * stored
