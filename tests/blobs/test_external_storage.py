"""Documents what Temporal's External Storage does (temporalio 1.35.0, public preview) where it
differs from the blob store's own references, with no waitstate code involved: why it is not
the runtime's mechanism for large payloads yet (docs/state.md, "Why not External Storage yet";
docs/upstream/external-storage.md). When one of these stops holding, look again.

1. A store that fails when an activity's result is stored fails the activity, whose retry runs
   its body again: a tool with effects acts twice for one result. (Our tool activity keeps such
   a result inline instead: tests/blobs/test_outages.py.)
2. A workflow task that replays from the start (a worker restart, an evicted run waking from a
   long wait, a worker without a cache) fetches every stored payload of the history again, and
   stores again the input of every command it replays; a replay needs the store.
3. A payload the worker's store lacks fails the workflow task, which is retried and fails
   again: the run stays open and stuck, where our references fail one call, non-retryably,
   naming the cause (tests/activities/test_model.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
import uuid
from collections.abc import Sequence
from datetime import timedelta

import pytest
from temporalio import activity, workflow
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError
from temporalio.common import RetryPolicy
from temporalio.converter import (
    DataConverter,
    ExternalStorage,
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)
from temporalio.exceptions import ActivityError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, Worker

from tests.helpers import eventually

CALLS = 4
RESULT_BYTES = 65_536
THRESHOLD = 4_096


class CountingDriver(StorageDriver):
    """Payloads in a dict, named by the SHA-256 of their bytes, counting each store and fetch;
    `down` fails every store, `forgetful` every fetch."""

    def __init__(self) -> None:
        self.payloads: dict[str, bytes] = {}
        self.stores = 0
        self.fetches = 0
        self.down = False
        self.forgetful = False

    def name(self) -> str:
        return "counting"

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        if self.down:
            raise OSError("the store is down")
        claims = []
        for payload in payloads:
            data = payload.SerializeToString()
            digest = hashlib.sha256(data).hexdigest()
            self.payloads[digest] = data
            self.stores += 1
            claims.append(StorageDriverClaim({"sha256": digest}))
        return claims

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        if self.forgetful:
            raise KeyError("not in this store")
        found = []
        for claim in claims:
            payload = Payload()
            payload.ParseFromString(self.payloads[claim.claim_data["sha256"]])
            self.fetches += 1
            found.append(payload)
        return found


@dataclasses.dataclass
class Tally:
    produced: int = 0


TALLY = Tally()


@activity.defn
async def produce(index: int) -> str:
    """A tool with an effect (counted): a result over the threshold."""
    TALLY.produced += 1
    return str(index) * RESULT_BYTES


@activity.defn
async def consume(text: str) -> int:
    """A model call: given what the tool returned."""
    return len(text)


@workflow.defn(sandboxed=False)
class Relay:
    @workflow.run
    async def run(self, calls: int) -> int:
        total = 0
        for index in range(calls):
            text = await workflow.execute_activity(
                produce,
                index,
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=RetryPolicy(
                    maximum_attempts=3, initial_interval=timedelta(seconds=0.1)
                ),
            )
            total += await workflow.execute_activity(
                consume, text, start_to_close_timeout=timedelta(seconds=30)
            )
        return total


def storing(env: WorkflowEnvironment, driver: CountingDriver) -> Client:
    converter = DataConverter(
        external_storage=ExternalStorage(drivers=[driver], payload_size_threshold=THRESHOLD)
    )
    return Client(env.client.service_client, namespace="default", data_converter=converter)


def worker(client: Client, task_queue: str, *, max_cached_workflows: int = 100) -> Worker:
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[Relay],
        activities=[produce, consume],
        max_cached_workflows=max_cached_workflows,
    )


@pytest.fixture(autouse=True)
def tally() -> None:
    TALLY.produced = 0


async def test_a_store_down_when_an_activity_completes_runs_the_activity_again(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    driver = CountingDriver()
    driver.down = True
    client = storing(dev_env, driver)
    async with worker(client, task_queue):
        with pytest.raises(WorkflowFailureError) as failed:
            await client.execute_workflow(
                Relay.run, 1, id=f"relay-{uuid.uuid4()}", task_queue=task_queue
            )
    assert isinstance(failed.value.cause, ActivityError)
    # One result, produced three times: each attempt's body ran, and none was kept.
    assert TALLY.produced == 3
    assert driver.payloads == {}


async def test_a_replay_from_the_start_fetches_every_stored_payload_again(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    counts = {}
    for cache in (100, 0):
        driver = CountingDriver()
        client = storing(dev_env, driver)
        queue = f"{task_queue}-{cache}"
        async with worker(client, queue, max_cached_workflows=cache):
            handle = await client.start_workflow(
                Relay.run, CALLS, id=f"relay-{uuid.uuid4()}", task_queue=queue
            )
            assert await handle.result() == CALLS * RESULT_BYTES
        counts[cache] = (driver.stores, driver.fetches)
        history = await handle.fetch_history()
    # Cached: each result stored once (by `produce`; `consume`'s input is the same bytes, stored
    # again under the same name), fetched once by the run and once by `consume`.
    assert counts[100] == (2 * CALLS, 2 * CALLS)
    # Uncached, every workflow task replays the history: what it fetches and stores grows with
    # the square of the run's length.
    stores, fetches = counts[0]
    assert stores > 2 * counts[100][0] and fetches > 2 * counts[100][1], counts
    # And replaying a history (a replay check, a deploy gate) fetches every stored result.
    before = driver.fetches
    await Replayer(workflows=[Relay], data_converter=client.data_converter).replay_workflow(history)
    assert driver.fetches - before == CALLS


async def test_a_payload_the_store_lacks_leaves_the_run_stuck_retrying_its_workflow_task(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    driver = CountingDriver()
    driver.forgetful = True
    client = storing(dev_env, driver)
    async with worker(client, task_queue):
        handle = await client.start_workflow(
            Relay.run, 1, id=f"relay-{uuid.uuid4()}", task_queue=task_queue
        )

        async def failed_tasks() -> int:
            return sum(
                [
                    event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
                    async for event in handle.fetch_history_events()
                ]
            )

        await eventually(failed_tasks, "a failed workflow task")
        description = await handle.describe()
        await handle.terminate("test over")
    assert description.status is not None and description.status.name == "RUNNING"
    assert TALLY.produced == 1
