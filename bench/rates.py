"""Figure 9: model calls held to a fleet-wide rate limit across two workers.

Two worker processes of ours (worker.py's wiring) poll the runs' queue and the model queue
(`WAITSTATE_MODEL_TASK_QUEUE`), each declaring `WAITSTATE_MODEL_CALLS_PER_SECOND` = LIMIT. The
runs (`Sizes.rate_runs` of them, the scripted stand-in model, no keys) are all started at once,
each making one model call, so the model queue has a backlog from the first moment: what
dispatches it is the server's limiter alone. The calls' start times are read from the runs'
histories (ActivityTaskStarted), and each call's worker from the event's identity.

- rate: calls started per second, from the first call's start to the last's (the server's
  token bucket lets about one second's worth through at once: that burst is counted);
- sustained rate: the same, once the first second is over (the burst left out);
- busiest second: the most calls that started within any one second;
- the busier worker's share of the calls (both take calls; the limit is the queue's).
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

LIMIT = 5.0  # model calls per second, fleet-wide
WORKERS = 2
MODEL = "scripted:echo"  # one model call per run, its answer at once


async def figure9(stack: Stack, sizes: Sizes, reps: int, log: Callable[[str], None]) -> list[Row]:
    """Model calls of `sizes.rate_runs` runs through a model queue limited to LIMIT calls/s."""
    label = f"9 (limit {LIMIT:g}/s, {WORKERS} workers)"
    rate = Row(
        label,
        "model calls started per second, burst included",
        "calls/s",
        target=f"≤ {LIMIT * 1.1:g} (the limit, +10%: its first second's burst)",
        check=lambda ours, _: ours <= LIMIT * 1.1,
    )
    sustained = Row(
        label,
        "the same after the first second",
        "calls/s",
        target=f"≤ {LIMIT:g}, ≥ {LIMIT * 0.8:g}",
        check=lambda ours, _: LIMIT * 0.8 <= ours <= LIMIT * 1.02,
    )
    busiest = Row(label, "most calls started within one second", "calls")
    share = Row(
        label,
        "the busier worker's share of the calls",
        "%",
        target="< 100 (both workers take calls)",
        check=lambda ours, _: ours < 100,
    )
    for rep in range(reps):
        starts, workers = await _one(stack, sizes.rate_runs)
        first = starts[0]
        span = starts[-1] - first
        after = [t for t in starts if t >= first + 1.0]
        rate.ours.append((len(starts) - 1) / span if span else float(len(starts)))
        if len(after) > 1:  # quick sizes may end within the first second
            sustained.ours.append((len(after) - 1) / (after[-1] - after[0]))
        busiest.ours.append(max(sum(1 for u in starts if t <= u < t + 1.0) for t in starts))
        share.ours.append(100.0 * max(workers.values()) / len(starts))
        log(
            f"  rep {rep + 1}: {len(starts)} calls in {span:.1f} s: {rate.ours[-1]:.2f}/s "
            f"({sustained.ours[-1] if sustained.ours else 0:.2f}/s after the first second; at most "
            f"{busiest.ours[-1]:.0f} in one second); by worker {sorted(workers.values())}"
        )
    return [rate, sustained, busiest, share]


async def _one(stack: Stack, runs: int) -> tuple[list[float], dict[str, int]]:
    """Start the workers and the runs; the model calls' start times, sorted, and how many
    calls each worker took."""
    queue, model_queue = new_id("rate"), new_id("rate-model")
    env = {
        **stack.worker_env(queue),
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
                for n in range(WORKERS)
            )
        )
    )
    try:
        ids = [new_id("rate-run") for _ in range(runs)]
        run = RunInput(task="hello", model=MODEL, model_task_queue=model_queue)
        await asyncio.gather(
            *(stack.runs.start(run, run_id=run_id, task_queue=queue) for run_id in ids)
        )
        for run_id in ids:
            await stack.result("ours", stack.runs.handle(run_id))
        starts: list[float] = []
        workers: dict[str, int] = {}
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
                        when = event.event_time.seconds + event.event_time.nanos / 1e9
                        starts.append(when)
                        workers[started.identity] = workers.get(started.identity, 0) + 1
        return sorted(starts), workers
    finally:
        for proc in procs:
            await asyncio.to_thread(proc.stop)
