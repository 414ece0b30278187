"""Figure 7: a run's events at a reader, and the gateway holding many readers.

Sooner: for each step of figure 1's run (two model calls and a tool call), the time from the
step's end as Temporal recorded it (its activity's `ActivityTaskCompleted` event time) to a
reader knowing it: through the gateway's event stream (`GET /v1/runs/{id}/events`), against
the query-polling `watch` of before (`follow(wake=False)`: the status query every 250 ms), and
the `watch` of now (`follow`, woken by the run's history). Only steps that ended after every
reader had connected count, for all three alike.

Many: 100 live threads (each answered one message and waits for the next), 1,000 readers (10
per thread) on the gateway: its memory with them and without, its CPU while they wait, and
its CPU per event it hands out while each thread answers one more message (every reader must
get every event of it).

Chosen: against Temporal's own `contrib.workflow_streams` (a stream the workflow publishes to,
read by Updates that long-poll it), on one workflow of three short activities that publishes a
step to its stream after each: from each activity's `ActivityTaskCompleted` to a reader of the
history (what the gateway streams) and to a `WorkflowStreamClient` subscriber, at once.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from temporalio import activity, workflow
from temporalio.api.enums.v1 import EventType
from temporalio.contrib.workflow_streams import WorkflowStream, WorkflowStreamClient
from temporalio.worker import Worker

from bench.figures import Row, Sizes, percentile
from bench.stack import MODEL_NAME, Stack, new_id
from waitstate.auth.tokens import ResumeTokens
from waitstate.client import Position, RunEvents, thread_input
from waitstate.schemas.run import CALL_MODEL, CALL_TOOL
from waitstate.settings import parse_keys

SOONER_TARGET = 5.0  # the stream at least 5x sooner than the polling watch, at p50
READERS_PER_RUN = 10
CONNECT_TRIES = 5  # a reader's tries at opening its stream
# Figure 7's CPU per event handed out: measured over at least this much of the gateway's CPU
# (in no more than MAX_ROUNDS rounds of a message to each thread).
MIN_MEASURED_CPU = 0.2
MAX_ROUNDS = 20
COMPLETED = EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
SCHEDULED = EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED


STEPS = 3  # the compared workflow's activities


@activity.defn(name="bench_step")
async def _step() -> None:
    return None


@workflow.defn(name="BenchStreamedSteps", sandboxed=False)
class StreamedSteps:
    """Three short activities, a step published to its workflow stream after each."""

    @workflow.init
    def __init__(self) -> None:
        self.stream = WorkflowStream()

    @workflow.run
    async def run(self) -> None:
        steps = self.stream.topic("steps")
        for n in range(STEPS):
            await workflow.execute_activity(
                "bench_step", start_to_close_timeout=timedelta(seconds=30)
            )
            steps.publish(n)
        await workflow.sleep(timedelta(seconds=1))  # its last poll answered before it ends


async def _compared(stack: Stack, runs: int) -> dict[str, list[float]]:
    """Each step's delay (ms) to a reader of the history and to a workflow-stream subscriber."""
    queue = new_id("f7-compare")
    delays: dict[str, list[float]] = {"history": [], "workflow_streams": []}
    async with Worker(
        stack.client, task_queue=queue, workflows=[StreamedSteps], activities=[_step]
    ):
        for _ in range(runs):
            for way, values in (await _compare_once(stack, queue)).items():
                delays[way] += values
    return delays


async def _compare_once(stack: Stack, queue: str) -> dict[str, list[float]]:
    run_id = new_id("f7-compare")
    handle = await stack.client.start_workflow(StreamedSteps.run, id=run_id, task_queue=queue)
    got: dict[str, list[float]] = {"history": [], "workflow_streams": []}
    events = RunEvents(stack.client)

    async def history() -> None:
        start = Position((await handle.describe()).run_id, 0)
        async for event in events.follow(run_id, start):
            if event.kind == "activity.ended":
                got["history"].append(time.time())

    async def subscribed() -> None:
        streamed = WorkflowStreamClient.create(stack.client, run_id)
        async for _ in streamed.subscribe(["steps"], poll_cooldown=timedelta(0)):
            got["workflow_streams"].append(time.time())
            if len(got["workflow_streams"]) == STEPS:
                return

    await asyncio.wait_for(asyncio.gather(history(), subscribed()), 120)
    ends = [
        event.event_time.ToDatetime(tzinfo=UTC).timestamp()
        async for event in handle.fetch_history_events()
        if event.event_type == COMPLETED
    ]
    return {
        way: [(a - e) * 1000 for a, e in zip(arrivals, ends, strict=True)]
        for way, arrivals in got.items()
    }


def _view_tokens(stack: Stack) -> ResumeTokens:
    keys = parse_keys(stack.token_keys, "WAITSTATE_TOKEN_KEYS")
    return ResumeTokens(keys, next(iter(keys)))


async def _sse(
    http: httpx.AsyncClient, url: str, connected: asyncio.Event | None = None
) -> AsyncIterator[tuple[float, dict[str, Any]]]:
    """Each event of an SSE stream with when it arrived (epoch seconds), to the stream's end."""
    async with http.stream("GET", url) as response:
        response.raise_for_status()
        if connected is not None:
            connected.set()
        data = None
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                data = line[len("data: ") :]
            elif not line and data is not None:
                yield time.time(), json.loads(data)
                data = None


async def _step_ends(stack: Stack, run_id: str) -> list[float]:
    """When each model and tool call of the run ended, as Temporal recorded it (epoch s)."""
    kinds: dict[int, str] = {}
    ends = []
    async for event in stack.client.get_workflow_handle(run_id).fetch_history_events():
        if event.event_type == SCHEDULED:
            kinds[event.event_id] = (
                event.activity_task_scheduled_event_attributes.activity_type.name
            )
        elif event.event_type == COMPLETED:
            scheduled = event.activity_task_completed_event_attributes.scheduled_event_id
            if kinds.get(scheduled) in (CALL_MODEL, CALL_TOOL):
                ends.append(event.event_time.ToDatetime(tzinfo=UTC).timestamp())
    return ends


async def _one_run(stack: Stack, queue: str, http: httpx.AsyncClient) -> dict[str, list[float]]:
    """Figure 1's run, read three ways at once: each way's delays (ms) for the run's steps."""
    run_id = new_id("f7")
    tokens = _view_tokens(stack)
    await stack.start_run("ours", queue, run_id, "What time is it?", "utc_now", 12)
    token = tokens.mint_view(run_id, datetime.now(UTC) + timedelta(hours=1))
    url = f"{stack.gateway_url}/v1/runs/{run_id}/events?token={token}"
    seen: dict[str, list[float]] = {"stream": [], "polled": [], "woken": []}
    ready = {way: asyncio.Event() for way in seen}
    connected_at: dict[str, float] = {}

    async def stream() -> None:
        async for at, event in _sse(http, url, ready["stream"]):
            connected_at.setdefault("stream", time.time())
            if event["kind"] in ("model.ended", "tool.ended"):
                seen["stream"].append(at)

    async def watch(way: str, wake: bool) -> None:
        ready[way].set()
        async for progress in stack.runs.follow(run_id, retries=False, wake=wake):
            now = time.time()
            seen[way] += [now for step in progress.steps if step.kind in ("model", "tool")]
            if progress.outcome is not None:
                return

    began = time.time()
    await asyncio.wait_for(
        asyncio.gather(stream(), watch("polled", False), watch("woken", True)), 120
    )
    ends = await _step_ends(stack, run_id)
    # The run's first steps may end before a reader is connected: only later ones count.
    connected = max(began, *(connected_at.values()))
    delays: dict[str, list[float]] = {}
    for way, arrivals in seen.items():
        if len(arrivals) != len(ends):
            raise RuntimeError(f"{run_id}: {way} saw {len(arrivals)} steps of {len(ends)}")
        delays[way] = [(a - e) * 1000 for a, e in zip(arrivals, ends, strict=True) if e > connected]
    return delays


async def figure7(stack: Stack, sizes: Sizes, reps: int, log: Callable[[str], None]) -> list[Row]:
    """A step to its reader, through the stream and by the watches; the gateway with 1,000
    readers on 100 live runs."""
    p50 = Row(
        "7", "step → reader p50: stream (ours) vs polling watch (floor)", "ms",
        target=f"≥ {SOONER_TARGET:g}× sooner",
        check=lambda _, ratio: ratio is not None and ratio <= 1 / SOONER_TARGET,
    )  # fmt: skip
    p95 = Row("7", "step → reader p95: stream vs polling watch", "ms")
    woken = Row("7", "step → reader p50: watch woken by the history (ours) vs polling", "ms")
    rss = Row("7", f"gateway memory with {READERS_PER_RUN * sizes.event_runs} readers", "MB")
    rss_more = Row("7", "gateway memory the readers add", "MB")
    idle = Row(
        "7", f"gateway CPU with the readers, idle {sizes.event_idle_seconds:g} s", "% of a core"
    )
    per_event = Row("7", "gateway CPU per event handed to a reader", "µs")
    compared = Row(
        "7", "step → reader p50: history (ours) vs contrib.workflow_streams (floor)", "ms"
    )
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(timeout=httpx.Timeout(None), limits=limits) as http:
        queue, worker = await stack.lease("ours", "f7")
        try:
            for rep in range(reps):
                delays: dict[str, list[float]] = {"stream": [], "polled": [], "woken": []}
                for _ in range(sizes.event_steps_runs):
                    for way, values in (await _one_run(stack, queue, http)).items():
                        delays[way] += values
                p50.ours.append(percentile(delays["stream"], 50))
                p50.floor.append(percentile(delays["polled"], 50))
                p95.ours.append(percentile(delays["stream"], 95))
                p95.floor.append(percentile(delays["polled"], 95))
                woken.ours.append(percentile(delays["woken"], 50))
                woken.floor.append(percentile(delays["polled"], 50))
                log(
                    f"  fig 7 rep {rep + 1}: step → reader p50 stream "
                    f"{p50.ours[-1]:.1f} ms, woken watch {woken.ours[-1]:.1f} ms, polling "
                    f"watch {p50.floor[-1]:.1f} ms ({len(delays['stream'])} steps)"
                )
                ways = await _compared(stack, sizes.event_steps_runs)
                compared.ours.append(percentile(ways["history"], 50))
                compared.floor.append(percentile(ways["workflow_streams"], 50))
                log(
                    f"  fig 7 rep {rep + 1}: step → reader p50 history {compared.ours[-1]:.1f} "
                    f"ms, workflow_streams {compared.floor[-1]:.1f} ms"
                )
                many = await _many_readers(
                    stack, queue, http, sizes.event_runs, sizes.event_idle_seconds
                )
                rss.ours.append(many["rss"])
                rss_more.ours.append(many["rss"] - many["rss_before"])
                idle.ours.append(many["idle_cpu"] * 100 / sizes.event_idle_seconds)
                per_event.ours.append(many["cpu"] * 1e6 / many["handed"])
                log(
                    f"  fig 7 rep {rep + 1}: {many['readers']:.0f} readers: gateway "
                    f"{many['rss']:.0f} MB (+{rss_more.ours[-1]:.0f}), idle CPU "
                    f"{idle.ours[-1]:.2f}%, {per_event.ours[-1]:.0f} µs per event handed out "
                    f"({many['handed']:.0f} events)"
                )
        finally:
            await stack.release(worker)
    return [p50, p95, woken, compared, rss, rss_more, idle, per_event]


async def _all_connected(connected: list[asyncio.Event], readers: list[asyncio.Task[None]]) -> None:
    """Wait for every reader's stream to open, at most 2 minutes; a reader that gave up first
    fails the figure with its error, at once."""
    opened: asyncio.Future[Any] = asyncio.ensure_future(
        asyncio.gather(*(c.wait() for c in connected))
    )
    reader_of: dict[asyncio.Future[Any], int] = {task: n for n, task in enumerate(readers)}
    waiting: set[asyncio.Future[Any]] = {opened, *readers}
    try:
        async with asyncio.timeout(120):
            while not opened.done():
                ended, waiting = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                for task in ended - {opened}:
                    if not connected[reader_of[task]].is_set():
                        task.result()  # its error, raised here
                        raise RuntimeError("a reader's stream ended before it opened")
    finally:
        opened.cancel()


async def _many_readers(
    stack: Stack, queue: str, http: httpx.AsyncClient, runs: int, idle_seconds: float
) -> dict[str, float]:
    """`runs` threads that answered a message, READERS_PER_RUN readers on each; then a message
    to each, read by all of them."""
    assert stack.gateway is not None
    tokens = _view_tokens(stack)
    start = thread_input(model=f"openai:{MODEL_NAME}")
    threads = [new_id("f7-thread") for _ in range(runs)]

    async def first(thread_id: str) -> None:
        sent = await stack.runs.send_message(thread_id, "hello", start=start, task_queue=queue)
        await stack.runs.reply(thread_id, sent.accepted.message_id)

    await asyncio.gather(*(first(t) for t in threads))
    rss_before = stack.gateway.rss_mb()
    read = asyncio.Condition()  # notified at each event a reader gets
    replies: dict[str, int] = {}  # reader -> the model calls' ends it saw
    received: dict[str, int] = {}  # reader -> the events it got
    connected = [asyncio.Event() for _ in range(runs * READERS_PER_RUN)]

    async def reader(n: int, thread_id: str) -> None:
        token = tokens.mint_view(thread_id, datetime.now(UTC) + timedelta(hours=1))
        url = f"{stack.gateway_url}/v1/runs/{thread_id}/events?token={token}"
        key = f"{thread_id}/{n}"
        replies[key] = received[key] = 0
        for attempt in range(1, CONNECT_TRIES + 1):
            try:
                async for _, event in _sse(http, url, connected[n]):
                    received[key] += 1
                    if event["kind"] == "model.ended":
                        replies[key] += 1
                        async with read:
                            read.notify_all()
                return
            except httpx.HTTPError:
                # Refused or cut before it opened (the gateway, beside a whole test suite on
                # two cores, can be slow to read the thread): connect again, as a browser's
                # EventSource does. Once open, its counts are the figure's: no second stream.
                if connected[n].is_set() or attempt == CONNECT_TRIES:
                    raise
                await asyncio.sleep(1)

    readers = [
        asyncio.create_task(reader(i * READERS_PER_RUN + j, thread_id))
        for i, thread_id in enumerate(threads)
        for j in range(READERS_PER_RUN)
    ]
    try:
        await _all_connected(connected, readers)
        await asyncio.sleep(2)  # the catch-up of each reader
        counted, handed_before = dict(replies), sum(received.values())
        cpu_before = stack.gateway.cpu_seconds()
        await asyncio.sleep(idle_seconds)
        idle_cpu = stack.gateway.cpu_seconds() - cpu_before
        rss = stack.gateway.rss_mb()
        cpu_before = stack.gateway.cpu_seconds()

        async def again(thread_id: str) -> None:
            sent = await stack.runs.send_message(thread_id, "again", task_queue=queue)
            await stack.runs.reply(thread_id, sent.accepted.message_id)

        async def all_read(want: dict[str, int]) -> None:
            async with read:
                await read.wait_for(lambda: all(replies[key] >= want[key] for key in want))

        # A message to each thread, read by all its readers, as many rounds as it takes the
        # gateway's CPU clock (in ticks of 10 ms) to count enough to divide: a few runs' events
        # may all fit in one tick, and read as none.
        for rounds in range(1, MAX_ROUNDS + 1):
            await asyncio.gather(*(again(t) for t in threads))
            want = {key: counted[key] + rounds for key in counted}  # its answer's model call
            await asyncio.wait_for(all_read(want), 120)
            cpu = stack.gateway.cpu_seconds() - cpu_before
            if cpu >= MIN_MEASURED_CPU:
                break
        handed = sum(received.values()) - handed_before
    finally:
        for task in readers:
            task.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
        for thread_id in threads:
            await stack.client.get_workflow_handle(thread_id).terminate("measured")
    return {
        "rss_before": rss_before,
        "rss": rss,
        "idle_cpu": idle_cpu,
        "cpu": cpu,
        "handed": float(handed),
        "readers": float(len(readers)),
    }
