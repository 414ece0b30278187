"""The model queue's rate (WAITSTATE_MODEL_CALLS_PER_SECOND) as a provider counts it: the calls
of many runs, all waiting on the queue at once, reach the model server no more than the limit
in any one second, read from the times the server received them (`WireServer.requests`).

It is a bound, not a speed: a loaded machine only spreads the calls further apart. How fast the
calls go, and how the two workers of a fleet share them, is the bench's (figure 9)."""

from __future__ import annotations

import asyncio

from temporalio.testing import WorkflowEnvironment

from tests.helpers import make_worker, start_run
from waitstate.schemas import RunInput
from waitstate.settings import Settings
from waitstate.testing.wire_server import WireServer

LIMIT = 4  # model calls a second
RUNS = 6 * LIMIT  # one model call each: six seconds' worth, and a burst's worth many times over
RUNS_END_WITHIN = 120.0  # a bound only: the limit alone makes it 6 s


def busiest_second(times: list[float]) -> int:
    """The most of `times` (seconds) within any one second, [t, t + 1)."""
    return max(sum(1 for u in times if t <= u < t + 1.0) for t in times)


def test_the_busiest_second_counts_a_window_from_each_time() -> None:
    assert busiest_second([0.0, 0.5, 0.99, 1.0, 1.2]) == 4  # from 0.5
    assert busiest_second([0.0, 1.0, 2.0]) == 1


async def test_no_second_holds_more_model_calls_than_the_limit(
    dev_env: WorkflowEnvironment, task_queue: str, wire: WireServer
) -> None:
    model_queue = f"{task_queue}-model"
    settings = Settings(
        model_task_queue=model_queue,
        model_calls_per_second=float(LIMIT),
        openai_base_url=wire.openai_base_url,
        openai_api_key="test-key",
    )
    run = RunInput(task="hello", model="openai:rate-test", model_task_queue=model_queue)
    async with make_worker(dev_env.client, task_queue, settings=settings):
        # One call first, not counted: an SDK client's first request reaches the model later
        # after its turn than the next do, by about the pace's slack (ModelCallPace); counted,
        # it would measure the stand-in's first request, not the pace.
        first = await start_run(dev_env.client, task_queue, run)
        await asyncio.wait_for(first.result(), RUNS_END_WITHIN)
        warm = len(wire.requests)
        handles = await asyncio.gather(
            *(start_run(dev_env.client, task_queue, run) for _ in range(RUNS))
        )
        results = await asyncio.wait_for(
            asyncio.gather(*(handle.result() for handle in handles)), RUNS_END_WITHIN
        )

    assert [result.status for result in results] == ["completed"] * RUNS
    calls = sorted(request.received_at for request in wire.requests[warm:])
    assert len(calls) == RUNS
    assert busiest_second(calls) <= LIMIT, [round(t - calls[0], 3) for t in calls]
