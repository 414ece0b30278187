"""A blob store outage longer than the model's retry budget is waited out (issue 22, defect 4):
the run goes on once the store is back, the model is asked once per turn (a reply it gave
before the store failed is stored, not asked for again), and the job the run had started is
never cancelled.

A real worker keeps its blobs in a directory of the test's own, which a tool of the run takes
away mid-run: `read-only`, writes fail but reads work (the owners' directory, where every
write begins, is made a file: root ignores permission bits, so no chmod would do); or
`unreachable`, the whole directory is made a file (reads fail too, as when a mount is gone).
On the time-skipping server: the run's backoff, and the old retry policy's two minutes, take
no time, so the outage lasts as many tries as the test wants."""

from __future__ import annotations

import asyncio
import errno
import shutil
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from tests.helpers import eventually, make_worker, replays, scheduled_activities, start_run
from tests.workflows.steering_app import Exports
from waitstate import tool
from waitstate.client import RunStatus, WaitstateClient
from waitstate.schemas import TERMINAL_STATUSES, RunInput, RunResult, RunState
from waitstate.schemas.run import CANCEL_OPERATION
from waitstate.settings import Settings
from waitstate.testing.wire_server import WireServer, openai_text, openai_tool_calls
from waitstate.tools import LongSpec, ToolSpec
from waitstate.workflows.agent_run import AgentRunWorkflow
from waitstate.workflows.policies import MODEL_RETRY

Outage = Literal["read-only", "unreachable"]
# The paths each outage takes: the model's reply in hand, kept by one activity that Temporal
# retries; or tried again by the run, before the model is asked.
HISTORIES = {
    "read-only": "blob_store_outage_reply_in_hand",
    "unreachable": "blob_store_outage_unreachable",
}
CONTINUED = "blob_store_outage_continued_as_new"  # the last run of the chain
# Longer than a failure's 4 KB that Temporal keeps for a retrying activity: the reply handed
# back to the run must come through whole.
# Far more than the outage takes to outlast the model call's retries (time is skipped, but each
# attempt is a real activity): only turns a hang into a failure.
OUTAGE_WITHIN = 90.0
LONG_REPLY = "The export runs; meanwhile I noted: " + "x" * 6000


class NoArgs(BaseModel):
    pass


# A job system the run's long tool starts a job on; it reports the job done when told.
JOB_ETA_SECONDS = 60


class Store:
    """The worker's blob directory, and taking it away and back."""

    def __init__(self, root: Path, outage: Outage) -> None:
        self.root = root
        self.taken = root / "owners" if outage == "read-only" else root
        self.away = self.taken.with_name(self.taken.name + ".away")

    def go_away(self) -> None:
        self.taken.rename(self.away)
        self.taken.write_text("not a directory")

    def come_back(self) -> None:
        self.taken.unlink()
        while True:
            try:
                self.away.rename(self.taken)
                return
            except OSError as err:
                if err.errno != errno.ENOTEMPTY:
                    raise
            # The worker's store, retrying, made the directory again the moment the file was
            # gone, and wrote to it: what it wrote is kept, then the store is back whole.
            shutil.copytree(self.taken, self.away, dirs_exist_ok=True)
            shutil.rmtree(self.taken)


@dataclass
class Outcome:
    """What a run through an outage did, and what people saw of it meanwhile."""

    result: RunResult
    state: RunState
    during: RunStatus
    activities: list[str]


async def _through_an_outage(
    env: WorkflowEnvironment,
    task_queue: str,
    wire: WireServer,
    store: Store,
    jobs: Exports,
    history: str,
    continue_after: int | None = None,
) -> Outcome:
    """A run that starts a job, takes the store away (a tool of its own), then calls the model
    while the store is out; the store comes back once `status` shows the model call tried more
    often than its retries allow (or, with `continue_after`, tried in a continued run)."""

    @tool
    async def storage_goes_down() -> str:
        """Take the blob store away."""
        store.go_away()
        return "done"

    export = ToolSpec(
        name="start_export",
        description="Start an export job.",
        args=NoArgs,
        long=LongSpec(
            backend=jobs,
            completion="poll",
            mode="handle",
            # A minute: one check per attempt, retried (no activity held); a second in real
            # time, checked by one heartbeating activity.
            poll_interval=timedelta(seconds=60 if continue_after is None else 1),
            eta=timedelta(minutes=1),
        ),
    )
    wire.enqueue(
        openai_tool_calls(
            [("call_1", "start_export", "{}"), ("call_2", "storage_goes_down", "{}")]
        ),
        openai_text(LONG_REPLY),
        openai_text("all done"),
    )
    settings = Settings(
        blob_dir=store.root, openai_base_url=wire.openai_base_url, openai_api_key="test-key"
    )
    client = env.client
    async with make_worker(
        client, task_queue, tools=[export, storage_goes_down], settings=settings
    ):
        handle: WorkflowHandle[Any, RunResult] = await start_run(
            client,
            task_queue,
            RunInput(
                task="export, then tell me",
                model="openai:outages",
                tools=["start_export", "storage_goes_down"],
                # The wait for the job is never long enough to rebuild the model's context.
                rebuild_after=timedelta(days=1),
                continue_as_new_after_events=continue_after,
            ),
        )
        waitstate = WaitstateClient(client, task_queue=task_queue)

        async def long_enough() -> RunStatus | None:
            shown = await waitstate.status(handle.id)
            if shown.state.status in TERMINAL_STATUSES:
                raise AssertionError(f"the run ended {shown.state.status}: {shown.state.error}")
            tries = [r.attempt for r in shown.retrying if r.call == "model call"]
            if continue_after is not None:
                return shown if shown.state.continued_as_new and tries else None
            return shown if max(tries, default=0) > MODEL_RETRY.maximum_attempts else None

        # The time-skipping server skips time only while a result is awaited.
        ended = asyncio.create_task(handle.result())
        try:
            # As `status` shows it: tried again by the run, or (the reply in hand) by Temporal.
            during = await eventually(
                long_enough, "the outage to last long enough", within=OUTAGE_WITHIN
            )
            store.come_back()
            jobs.done = True
            result = await ended
        finally:
            ended.cancel()
        state = await handle.query(AgentRunWorkflow.status)
        activities = await scheduled_activities(handle)
        await replays(handle, history)
    return Outcome(result, state, during, activities)


def _check(outcome: Outcome, wire: WireServer, jobs: Exports) -> None:
    """The run went on once the store was back: the model asked once per turn, the job never
    cancelled, the outage shown while it lasted and noted in the steps."""
    result, state, during = outcome.result, outcome.state, outcome.during
    assert result.status == "completed", result.error
    assert result.final_output == "all done"
    # Once per turn: the reply to turn 2 given before the store failed was kept, not asked again.
    assert len(wire.requests) == 3
    assert state.usage.model_calls == 3
    turn_3 = wire.requests[2].body["messages"]
    assert any(m["role"] == "assistant" and m.get("content") == LONG_REPLY for m in turn_3)
    assert (jobs.started, jobs.cancelled) == (1, 0)
    assert CANCEL_OPERATION not in outcome.activities
    [op] = state.operations.values()
    assert op.status == "succeeded"
    # What people saw meanwhile, and after.
    assert during.state.status == "running" and during.state.store_outage is not None
    assert during.state.store_outage.call == "model call"
    assert "blob store unavailable" in during.state.store_outage.error
    [retry] = during.retrying
    assert retry.call == "model call" and "blob store unavailable" in retry.last_error
    events = [s.detail for s in state.steps if s.name == "blob store"]
    assert len(events) == 2
    assert events[0].startswith("unavailable: blob store unavailable: the directory store")
    assert events[1].startswith("back after")
    assert state.store_outage is None


@pytest.mark.parametrize("outage", ["read-only", "unreachable"])
async def test_a_blob_store_outage_longer_than_the_models_retries_is_waited_out(
    time_skipping_env: WorkflowEnvironment,
    task_queue: str,
    wire: WireServer,
    tmp_path: Path,
    outage: Outage,
) -> None:
    jobs = Exports(eta_seconds=JOB_ETA_SECONDS)
    store = Store(tmp_path / "blobs", outage)

    outcome = await _through_an_outage(
        time_skipping_env, task_queue, wire, store, jobs, HISTORIES[outage]
    )

    _check(outcome, wire, jobs)
    assert outcome.during.retrying[0].attempt > MODEL_RETRY.maximum_attempts
    assert outcome.state.continued_as_new == 0


async def test_an_outage_that_outgrows_the_history_goes_on_in_a_continued_run(
    dev_env: WorkflowEnvironment, task_queue: str, wire: WireServer, tmp_path: Path
) -> None:
    # On the dev server, in real time (a few seconds of the run's backoff): the time-skipping
    # server does not move a run continued as new along.
    jobs = Exports(eta_seconds=JOB_ETA_SECONDS)
    store = Store(tmp_path / "blobs", "unreachable")

    outcome = await _through_an_outage(
        dev_env, task_queue, wire, store, jobs, CONTINUED, continue_after=60
    )

    _check(outcome, wire, jobs)
    assert outcome.state.continued_as_new >= 1
    # The outage carried over: its tries counted on from the first run's.
    assert outcome.during.retrying[0].attempt > 2
