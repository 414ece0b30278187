"""Figure 9: model calls held to a rate limit, as the provider sees them, from one worker process
and from two.

Worker processes of ours (worker.py's wiring) poll the runs' queue and the model queue
(`WAITSTATE_MODEL_TASK_QUEUE`), each declaring `WAITSTATE_MODEL_CALLS_PER_SECOND` = LIMIT: the
server holds the queue to it, and each process paces its own calls (worker.py,
`ModelCallPace`). The runs (`Sizes.rate_runs` of them, each making one call of `openai:rate`)
are all started at once, so the model queue has a backlog from the first moment, after an idle
one. The calls are timed where a provider counts them: on arrival at the model server, a
recording `WireServer` in the driver (the bench's own model server records nothing). Each
call's worker is read from its ActivityTaskStarted event's identity.

- rate: calls per second, from the first call's arrival to the last's;
- sustained rate: the same, once the first second is over;
- the busiest second: the largest number of calls in any one-second window, [t, t + 1);
- with two workers, the busier one's share of the calls (both take calls; the limit is the
  queue's).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from bench.figures import Row, Sizes
from bench.procs import Proc, start_python
from bench.stack import Stack, new_id
from bench.worker import READY
from waitstate.schemas import RunInput
from waitstate.schemas.run import CALL_MODEL
from waitstate.testing.wire_server import WireServer

LIMIT = 5.0  # model calls per second, fleet-wide
FLEETS = (1, 2)  # worker processes polling the model queue
MODEL = "openai:rate"  # one model call per run, answered at once ("ok")


async def figure9(stack: Stack, sizes: Sizes, reps: int, log: Callable[[str], None]) -> list[Row]:
    """Model calls of `sizes.rate_runs` runs through a model queue limited to LIMIT calls/s."""
    rows: list[Row] = []
    with WireServer() as model_server:
        for workers in FLEETS:
            rows += await _fleet(stack, sizes, reps, log, model_server, workers)
    return rows


async def _fleet(
    stack: Stack,
    sizes: Sizes,
    reps: int,
    log: Callable[[str], None],
    model_server: WireServer,
    workers: int,
) -> list[Row]:
    label = f"9 (limit {LIMIT:g}/s, {workers} worker{'s' if workers > 1 else ''})"
    rate = _within_the_limit(label, "model calls started per second, burst included", "calls/s")
    sustained = Row(
        label,
        "the same after the first second",
        "calls/s",
        target=f"≤ {LIMIT:g}, ≥ {LIMIT * 0.8:g}",
        check=lambda ours, _: LIMIT * 0.8 <= ours <= LIMIT,
    )
    busiest = _within_the_limit(label, "largest number of calls in any one-second window", "calls")
    share = Row(
        label,
        "the busier worker's share of the calls",
        "%",
        target="< 100 (both workers take calls)",
        check=lambda ours, _: ours < 100,
    )
    for rep in range(reps):
        arrivals, by_worker = await _one(stack, sizes.rate_runs, model_server, workers)
        first = arrivals[0]
        span = arrivals[-1] - first
        after = [t for t in arrivals if t >= first + 1.0]
        rate.ours.append((len(arrivals) - 1) / span if span else float(len(arrivals)))
        if len(after) > 1:  # quick sizes may end within the first second
            sustained.ours.append((len(after) - 1) / (after[-1] - after[0]))
        busiest.ours.append(float(busiest_second(arrivals)))
        if workers > 1:
            share.ours.append(100.0 * max(by_worker.values()) / len(arrivals))
        log(
            f"  {label} rep {rep + 1}: {len(arrivals)} calls in {span:.1f} s: "
            f"{rate.ours[-1]:.2f}/s ({sustained.ours[-1] if sustained.ours else 0:.2f}/s after "
            f"the first second; at most {busiest.ours[-1]:.0f} in one second); by worker "
            f"{sorted(by_worker.values())}"
        )
    return [rate, sustained, busiest, *([share] if workers > 1 else [])]


def _within_the_limit(label: str, metric: str, unit: str) -> Row:
    """A row whose target is the limit: met while the median is at most LIMIT."""
    return Row(
        label, metric, unit, target=f"≤ {LIMIT:g} (the limit)", check=lambda ours, _: ours <= LIMIT
    )


def busiest_second(times: list[float]) -> int:
    """The most of `times` (seconds, sorted) within any one second, [t, t + 1) from each t."""
    most, end = 0, 0
    for start, t in enumerate(times):
        while end < len(times) and times[end] < t + 1.0:
            end += 1
        most = max(most, end - start)
    return most


async def _one(
    stack: Stack, runs: int, model_server: WireServer, workers: int
) -> tuple[list[float], dict[str, int]]:
    """Start the workers and the runs; the model calls' arrival times at the model server,
    sorted, and how many calls each worker took."""
    queue, model_queue = new_id("rate"), new_id("rate-model")
    env = {
        **stack.worker_env(queue),
        "OPENAI_BASE_URL": model_server.openai_base_url,
        "WAITSTATE_MODEL_TASK_QUEUE": model_queue,
        "WAITSTATE_MODEL_CALLS_PER_SECOND": f"{LIMIT:g}",
    }
    procs: list[Proc] = list(
        await asyncio.gather(
            *(
                asyncio.to_thread(
                    start_python,
                    f"worker-rate-{n}",
                    ["-m", "bench.worker", "ours"],
                    env,
                    stack.state,
                    READY,
                )  # fmt: skip
                for n in range(workers)
            )
        )
    )
    try:
        before = len(model_server.requests)
        ids = [new_id("rate-run") for _ in range(runs)]
        run = RunInput(task="hello", model=MODEL, model_task_queue=model_queue)
        await asyncio.gather(
            *(stack.runs.start(run, run_id=run_id, task_queue=queue) for run_id in ids)
        )
        for run_id in ids:
            await stack.result("ours", stack.runs.handle(run_id))
        arrivals = sorted(r.received_at for r in model_server.requests[before:])
        assert len(arrivals) == runs, f"{len(arrivals)} model calls for {runs} runs"
        by_worker: dict[str, int] = {}
        for run_id in ids:
            scheduled: set[int] = set()
            async for event in stack.runs.handle(run_id).fetch_history_events():
                if event.HasField("activity_task_scheduled_event_attributes"):
                    attributes = event.activity_task_scheduled_event_attributes
                    if attributes.activity_type.name == CALL_MODEL:
                        assert attributes.task_queue.name == model_queue
                        scheduled.add(event.event_id)
                elif event.HasField("activity_task_started_event_attributes"):
                    started = event.activity_task_started_event_attributes
                    if started.scheduled_event_id in scheduled:
                        by_worker[started.identity] = by_worker.get(started.identity, 0) + 1
        return arrivals, by_worker
    finally:
        for proc in procs:
            await asyncio.to_thread(proc.stop)
