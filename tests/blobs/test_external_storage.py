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

The driver and the workflow are those scripts/extstore_measure.py measures with.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ActivityError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from scripts import extstore_measure
from scripts.extstore_measure import Calls, Chain, CountingDriver, Shared, chain_worker, storing
from tests.helpers import eventually

CALLS = 4
RESULT_BYTES = 65_536


@pytest.fixture(autouse=True)
def shared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Shared:
    """What the tool's runs share: each returns RESULT_BYTES of text, and counts itself."""
    shared = Shared(tmp_path, RESULT_BYTES)
    monkeypatch.setattr(extstore_measure, "SHARED", shared)
    return shared


@pytest.fixture
def driver(tmp_path: Path) -> CountingDriver:
    (tmp_path / "store").mkdir()
    return CountingDriver(tmp_path / "store")


@pytest.fixture
def client(dev_env: WorkflowEnvironment, driver: CountingDriver) -> Client:
    """A client whose large payloads go to `driver`."""
    return storing(dev_env, driver)


async def test_a_store_down_when_an_activity_completes_runs_the_activity_again(
    client: Client, task_queue: str, driver: CountingDriver, shared: Shared
) -> None:
    driver.down = True
    async with chain_worker(client, task_queue):
        with pytest.raises(WorkflowFailureError) as failed:
            await client.execute_workflow(
                Chain.run, Calls(1), id=f"chain-{uuid.uuid4()}", task_queue=task_queue
            )
    assert isinstance(failed.value.cause, ActivityError)
    # One result, produced three times: each attempt's body ran, and none was kept.
    assert shared.runs == 3
    assert list(driver.root.iterdir()) == []


async def test_a_replay_from_the_start_fetches_every_stored_payload_again(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    counts = {}
    for cache in (100, 0):
        (tmp_path / f"store-{cache}").mkdir()
        driver = CountingDriver(tmp_path / f"store-{cache}")
        client = storing(dev_env, driver)
        queue = f"{task_queue}-{cache}"
        async with chain_worker(client, queue, max_cached_workflows=cache):
            handle = await client.start_workflow(
                Chain.run, Calls(CALLS), id=f"chain-{uuid.uuid4()}", task_queue=queue
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
    await Replayer(workflows=[Chain], data_converter=client.data_converter).replay_workflow(history)
    assert driver.fetches - before == CALLS


async def test_a_payload_the_store_lacks_leaves_the_run_stuck_retrying_its_workflow_task(
    client: Client, task_queue: str, driver: CountingDriver, shared: Shared
) -> None:
    driver.forgetful = True
    async with chain_worker(client, task_queue):
        handle = await client.start_workflow(
            Chain.run, Calls(1), id=f"chain-{uuid.uuid4()}", task_queue=task_queue
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
    assert shared.runs == 1
