"""The five figures of issue 7, each measured on both sides (where a floor applies) in one run.

Every figure returns `Row`s: one metric, its samples per repetition for each side, the target
and whether it was met. Workers are fresh processes per figure and side (one per side in quick
mode), so CPU and memory read from /proc belong to that side and that window only.
"""

from __future__ import annotations

import asyncio
import functools
import math
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from bench.floor import FLOOR_CHAT
from bench.procs import Proc
from bench.stack import (
    MODEL_NAME,
    SIDES,
    Side,
    Stack,
    activity_times,
    history_bytes,
    model_activity,
    new_id,
)
from waitstate.client import thread_input

T = TypeVar("T")

POLL_INTERVAL_SECONDS = 1.0  # enrich_dataset's poll interval (examples/demo/pipeline.py)
# Figure 4's short job: a wait that ends long before rebuild_after, on no model's account.
SHORT_POLL_SECONDS = 3.0
IDLE_CPU_TARGET = 0.01  # "no CPU while idle": under 1% of one core
FLOOR_MAX_TURNS = 50  # figure 5: the floor's history is quadratic in the turns
# Runs in flight at a time (figures 1-3): under the 100 a worker caches, so none is evicted
# and replayed mid-way.
ARRIVING = 50
# Figure 1's targets against the floor (issue 40): worker CPU no more than its, history bytes
# at most 1.25 times its, and no more events.
CPU_RATIO = 1.0
HISTORY_RATIO = 1.25
RSS_TARGET_MB = 130


@dataclass(frozen=True)
class Sizes:
    """How much each figure does."""

    warmup: int = 5
    sequential: int = 50
    concurrent: int = 200
    resume: int = 200
    # 10,000 runs take ~25-50 min per side to start and drain on 2 cores: run them on their own
    # (`--only 3 --reps 1 --scale 10000`); the default bench stays around half an hour.
    scale: int = 1_000
    scale_reps: int = 300  # N for the repetitions after the first, at `scale`
    idle_seconds: float = 30.0
    pipeline_seconds: float = 10.0
    turns: tuple[int, ...] = (10, 50, 200)
    messages: int = 500  # figure 6: the messages of each conversation
    event_steps_runs: int = 20  # figure 7: runs read three ways (three steps each)
    event_runs: int = 100  # figure 7: live runs, with 10 readers each
    event_idle_seconds: float = 10.0  # figure 7: the readers' idle window
    cache_messages: int = 20  # figure 8: the messages of the conversation
    rate_runs: int = 100  # figure 9: runs of one model call each, through the limited queue
    notice_samples: int = 8  # figure 10: calling runs per way of waking, per repetition
    tree_children: int = 100  # figure 11: the children of one lead's turn, all at once
    cancel_children: int = 50  # figure 12: the waiting children of a tree cancelled
    cancel_trials: int = 10  # figure 12: trees cancelled per repetition (its p99's samples)
    fork_runs: int = 100  # figure 13: recorded runs, each forked twice (client, evaluation)
    a2a_calls: int = 20  # figure 14: runs calling a remote A2A agent, per way of waking
    sides: tuple[Side, ...] = SIDES  # `ours` alone skips the floor (figures 1, 2, 3, 5)


QUICK = Sizes(
    warmup=1,
    sequential=2,
    concurrent=4,
    resume=2,
    scale=6,
    scale_reps=6,
    idle_seconds=0.5,
    pipeline_seconds=2.0,
    turns=(2, 3, 5),
    messages=4,
    event_steps_runs=2,
    event_runs=3,
    event_idle_seconds=1.0,
    cache_messages=4,
    rate_runs=12,
    notice_samples=2,
    tree_children=5,
    cancel_children=3,
    cancel_trials=2,
    fork_runs=4,
    a2a_calls=2,
)


@dataclass(eq=False)  # rows are dict keys, by identity
class Row:
    """One metric of one figure: samples per repetition, ours and the floor's."""

    figure: str
    metric: str
    unit: str
    ours: list[float] = field(default_factory=list)
    floor: list[float] = field(default_factory=list)
    target: str = ""
    # How to judge: on the ratio ours/floor, or on ours alone; None: reported, not judged.
    check: Callable[[float, float | None], bool | None] | None = None
    note: str = ""

    @property
    def ratio(self) -> float | None:
        """Median of ours over median of the floor's."""
        if not self.ours or not self.floor or statistics.median(self.floor) == 0:
            return None
        return statistics.median(self.ours) / statistics.median(self.floor)

    @property
    def met(self) -> bool | None:
        """Whether the target is met (None: no target, or a ratio target without a floor)."""
        if self.check is None or not self.ours:
            return None
        return self.check(statistics.median(self.ours), self.ratio)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


async def bounded(limit: int, jobs: Sequence[Callable[[], Awaitable[T]]]) -> list[T]:
    """Each job's result, in order, at most `limit` of them running at once."""
    semaphore = asyncio.Semaphore(limit)

    async def one(job: Callable[[], Awaitable[T]]) -> T:
        async with semaphore:
            return await job()

    return await asyncio.gather(*(one(job) for job in jobs))


async def _idle(proc: Proc, within: float = 120.0) -> None:
    """Wait until `proc` has used under 1% CPU over two consecutive half-seconds."""
    quiet, deadline = 0, time.monotonic() + within
    while quiet < 2 and time.monotonic() < deadline:
        before = proc.cpu_seconds()
        await asyncio.sleep(0.5)
        quiet = quiet + 1 if proc.cpu_seconds() - before <= 0.005 else 0


# --- 1. two model calls and one tool ---------------------------------------------------------


async def figure1(stack: Stack, sizes: Sizes, reps: int, log: Callable[[str], None]) -> list[Row]:
    """Worker CPU and history per run, sequential latency, concurrent throughput."""
    cpu = Row(
        "1", "worker CPU per run", "ms", target=f"≤ {CPU_RATIO:.2f}× floor",
        check=lambda _, ratio: ratio is not None and ratio <= CPU_RATIO,
    )  # fmt: skip
    cold_cpu = Row(
        "1", "worker CPU per run, no bytecode cache", "ms", target=f"≤ {CPU_RATIO:.2f}× floor",
        check=lambda _, ratio: ratio is not None and ratio <= CPU_RATIO,
    )  # fmt: skip
    server_cpu = Row("1", "server CPU per run", "ms")
    size = Row(
        "1", "history per run", "bytes", target=f"≤ {HISTORY_RATIO:.2f}× floor",
        check=lambda _, ratio: ratio is not None and ratio <= HISTORY_RATIO,
    )  # fmt: skip
    events = Row(
        "1", "history events per run", "events", target="≤ floor",
        check=lambda _, ratio: ratio is not None and ratio <= 1.0,
    )  # fmt: skip
    p50 = Row("1", "sequential latency p50", "ms")
    p99 = Row("1", "sequential latency p99", "ms")
    rate = Row("1", "concurrent throughput", "runs/s")
    for rep in range(reps):
        for side in sizes.sides:
            queue, worker = await stack.lease(side, f"f1-{side}-{rep}")
            try:
                run = functools.partial(_what_time_is_it, stack, side, queue, f"f1-{side}")
                for _ in range(sizes.warmup):
                    await run()
                latencies = []
                for _ in range(sizes.sequential):
                    began = time.perf_counter()
                    await run()
                    latencies.append((time.perf_counter() - began) * 1000)
                worker_before, server_before = worker.cpu_seconds(), stack.server.cpu_seconds()
                began = time.perf_counter()
                # At most ARRIVING in flight: under the cache size, so no run is evicted and
                # replayed mid-way (with more in flight than cached, both sides thrash).
                handles = await bounded(ARRIVING, [run] * sizes.concurrent)
                elapsed = time.perf_counter() - began
                worker_used = worker.cpu_seconds() - worker_before
                server_used = stack.server.cpu_seconds() - server_before
            finally:
                await stack.release(worker)
            histories = [await stack.history(h.id) for h in handles[:5]]
            samples: dict[Row, float] = {
                cpu: worker_used * 1000 / sizes.concurrent,
                server_cpu: server_used * 1000 / sizes.concurrent,
                size: statistics.median(history_bytes(h) for h in histories),
                events: statistics.median(sum(map(len, h)) for h in histories),
                p50: percentile(latencies, 50),
                p99: percentile(latencies, 99),
                rate: sizes.concurrent / elapsed,
            }
            for row, value in samples.items():
                (row.ours if side == "ours" else row.floor).append(value)
            cold = await _cold_cpu(stack, sizes, side, rep)
            (cold_cpu.ours if side == "ours" else cold_cpu.floor).append(cold)
            log(
                f"  fig 1 rep {rep + 1} {side}: cpu {samples[cpu]:.1f} ms/run "
                f"({cold:.1f} with no bytecode cache), history {samples[size]:.0f} B, "
                f"p50 {samples[p50]:.0f} ms, {samples[rate]:.1f} runs/s"
            )
    return [cpu, cold_cpu, server_cpu, size, events, p50, p99, rate]


async def _what_time_is_it(stack: Stack, side: Side, queue: str, prefix: str) -> Any:
    """Figure 1's run on `side`'s worker at `queue` (one `utc_now` call), to its end: its
    handle."""
    handle = await stack.start_run(side, queue, new_id(prefix), "What time is it?", "utc_now", 12)
    await stack.result(side, handle)
    return handle


async def _cold_cpu(stack: Stack, sizes: Sizes, side: Side, rep: int) -> float:
    """Worker CPU per run of figure 1's batch, on a worker that keeps no bytecode: every
    module it imports is compiled from source, as in container images that set
    PYTHONDONTWRITEBYTECODE (and, where a sandbox re-imports a workflow's module for each
    run, compiled again for each run)."""
    queue, worker = await stack.lease(side, f"f1-cold-{side}-{rep}", bytecode=False)
    try:
        run = functools.partial(_what_time_is_it, stack, side, queue, f"f1c-{side}")
        for _ in range(sizes.warmup):
            await run()
        before = worker.cpu_seconds()
        await bounded(ARRIVING, [run] * sizes.concurrent)
        return (worker.cpu_seconds() - before) * 1000 / sizes.concurrent
    finally:
        await stack.release(worker)


# --- 2. resume latency -----------------------------------------------------------------------


async def figure2(stack: Stack, sizes: Sizes, reps: int, log: Callable[[str], None]) -> list[Row]:
    """Webhook at the gateway (ours) or signal (floor) → the next model call starts. Ours also
    with the gateway's Update sent by the driver itself: what the HTTP hop adds."""
    p50 = Row(
        "2", "resume latency p50", "ms", target="≤ 1.15× floor",
        check=lambda _, ratio: None if ratio is None else ratio <= 1.15,
    )  # fmt: skip
    p99 = Row("2", "resume latency p99", "ms")
    direct = Row("2", "resume p50, the Update sent without the gateway", "ms")
    for rep in range(reps):
        for side in sizes.sides:
            queue, worker = await stack.lease(side, f"f2-{side}-{rep}")
            latencies: dict[bool, list[float]] = {False: [], True: []}
            try:
                for hop in (False, True) if side == "ours" else (False,):
                    for batch in range(0, sizes.resume, ARRIVING):
                        count = min(ARRIVING, sizes.resume - batch)
                        latencies[hop] += await _resumes(stack, side, queue, count, direct=hop)
            finally:
                await stack.release(worker)
            row_p50, row_p99 = percentile(latencies[False], 50), percentile(latencies[False], 99)
            (p50.ours if side == "ours" else p50.floor).append(row_p50)
            (p99.ours if side == "ours" else p99.floor).append(row_p99)
            if side == "ours":
                direct.ours.append(percentile(latencies[True], 50))
            else:
                direct.floor.append(row_p50)
            log(f"  fig 2 rep {rep + 1} {side}: p50 {row_p50:.1f} ms, p99 {row_p99:.1f} ms")
    return [p50, p99, direct]


async def _resumes(
    stack: Stack, side: Side, queue: str, count: int, *, direct: bool = False
) -> list[float]:
    """Start `count` runs (at once: they fit the worker's cache), then resume them one at a
    time, each alone, and read when its next model call started."""

    async def start() -> Any:
        handle = await stack.start_run(
            side, queue, new_id(f"f2-{side}"), "Export Q3 transactions.", "start_export", 12
        )
        await stack.waiting(side, handle, every=0.05)
        return handle

    handles = await asyncio.gather(*(start() for _ in range(count)))
    latencies = []
    for handle in handles:
        sent = time.time()
        await stack.complete(side, handle, direct=direct)
        await stack.result(side, handle)
        (events,) = await stack.history(handle.id)
        calls = [a for a in activity_times(events) if a.kind == model_activity(side)]
        latencies.append((calls[-1].started - sent) * 1000)
    return latencies


# --- 3. suspended at scale -------------------------------------------------------------------


@dataclass
class ScaleSample:
    """One side at one N."""

    n: int
    start_seconds: float
    worker_rss_mb: float
    worker_peak_rss_mb: float  # sampled every 0.5 s while runs start and drain
    server_rss_mb: float
    worker_idle_cpu: float  # cores (CPU seconds per second)
    server_idle_cpu: float
    drain_seconds: float
    completed: int


async def scale_once(stack: Stack, side: Side, n: int, idle_seconds: float) -> ScaleSample:
    """Start `n` runs that wait for a webhook (ours) or a signal (floor), measure them idle,
    then complete them all and time the drain until every result is in."""
    queue, worker = await stack.lease(side, f"f3-{side}")
    prefix = new_id(f"f3-{side}-{n}")
    peak = [worker.rss_mb()]

    async def sample() -> None:
        while True:
            peak[0] = max(peak[0], worker.rss_mb())
            await asyncio.sleep(0.5)

    sampler = asyncio.create_task(sample())
    try:
        began = time.perf_counter()

        async def start(i: int) -> Any:
            handle = await stack.start_run(
                side, queue, f"{prefix}-{i}", "Export Q3 transactions.", "start_export", 12
            )
            while stack.systems.export_for(handle.id) is None:  # noqa: ASYNC110 (another thread)
                await asyncio.sleep(0.05)
            await stack.waiting(side, handle, every=0.05)
            return handle

        # Runs arrive a few at a time, fewer than the worker caches, as they would in life: all
        # at once, every workflow task would miss the cache and replay the run's history.
        handles = await bounded(ARRIVING, [functools.partial(start, i) for i in range(n)])
        await _idle(worker)
        started = time.perf_counter() - began
        worker_cpu, server_cpu = worker.cpu_seconds(), stack.server.cpu_seconds()
        await asyncio.sleep(idle_seconds)
        worker_idle = (worker.cpu_seconds() - worker_cpu) / idle_seconds
        server_idle = (stack.server.cpu_seconds() - server_cpu) / idle_seconds
        worker_rss, server_rss = worker.rss_mb(), stack.server.rss_mb()
        # Printed now, so a failed drain does not lose them.
        print(
            f"  fig 3 N={n} {side} waiting: worker RSS {worker_rss:.0f} MB, "
            f"idle CPU {worker_idle:.2%} (server {server_rss:.0f} MB, {server_idle:.2%}), "
            f"reached in {started:.0f} s",
            flush=True,
        )
        began = time.perf_counter()

        async def finish(handle: Any) -> bool:
            await stack.complete(side, handle)
            try:
                await stack.result(side, handle)
            except (RuntimeError, TimeoutError) as err:
                # Counted, not raised: "every run completes" is what this figure checks.
                description = await handle.describe()
                print(
                    f"  fig 3: run {handle.id} did not complete ({err!r}): "
                    f"{description.status}, {description.history_length} events",
                    flush=True,
                )
                return False
            return True

        completed = sum(await bounded(ARRIVING, [functools.partial(finish, h) for h in handles]))
        drained = time.perf_counter() - began
    finally:
        sampler.cancel()
        await stack.release(worker)
    return ScaleSample(
        n, started, worker_rss, peak[0], server_rss, worker_idle, server_idle, drained, completed
    )


def _all_of(n: int) -> Callable[[float, float | None], bool]:
    """A check that every one of `n` runs completed."""
    return lambda ours, _: ours == n


async def figure3(stack: Stack, sizes: Sizes, reps: int, log: Callable[[str], None]) -> list[Row]:
    """N suspended runs: memory and idle CPU while they wait; every run completes; drain time.
    The first repetition runs at `sizes.scale`, the others at `sizes.scale_reps`."""
    rows: list[Row] = []
    plan = [sizes.scale] + [sizes.scale_reps] * (reps - 1)
    for n in dict.fromkeys(plan):
        count = plan.count(n)
        label = f"3 (N={n:,}, {count} rep{'s' if count > 1 else ''})"
        rss = Row(
            label, "worker RSS while waiting", "MB", target=f"≤ {RSS_TARGET_MB} MB",
            check=lambda ours, _: ours <= RSS_TARGET_MB,
        )  # fmt: skip
        idle = Row(
            label, "worker CPU while waiting", "% of a core", target="~0 (< 1%)",
            check=lambda ours, _: ours < IDLE_CPU_TARGET * 100,
        )  # fmt: skip
        peak = Row(label, "worker peak RSS (starting, waiting, draining)", "MB")
        server_rss = Row(label, "server RSS while waiting", "MB")
        server_idle = Row(label, "server CPU while waiting", "% of a core")
        start = Row(
            label, "time to start N runs and reach waiting", "s", target="≤ 1.15× floor",
            check=lambda _, ratio: None if ratio is None else ratio <= 1.15,
        )  # fmt: skip
        drain = Row(label, "drain: complete all N", "s")
        complete = Row(
            label, "runs completed", "runs", target=f"all {n:,}",
            check=_all_of(n),
        )  # fmt: skip
        for _ in range(count):
            for side in sizes.sides:
                sample = await scale_once(stack, side, n, sizes.idle_seconds)
                values = {
                    rss: sample.worker_rss_mb,
                    peak: sample.worker_peak_rss_mb,
                    idle: sample.worker_idle_cpu * 100,
                    server_rss: sample.server_rss_mb,
                    server_idle: sample.server_idle_cpu * 100,
                    start: sample.start_seconds,
                    drain: sample.drain_seconds,
                    complete: float(sample.completed),
                }
                for row, value in values.items():
                    (row.ours if side == "ours" else row.floor).append(value)
                log(f"  fig 3 N={n} {side}: {sample}")
        rows += [rss, peak, idle, server_rss, server_idle, start, drain, complete]
    return rows


# --- 4. waiting cost -------------------------------------------------------------------------


async def figure4(stack: Stack, sizes: Sizes, reps: int, log: Callable[[str], None]) -> list[Row]:
    """Model calls while a polled operation (enrich_dataset) runs, and per run, for a job of
    the figure's length and for a 3-second one, side by side with the floor (whose tool
    activity polls the job itself)."""
    during = Row(
        "4", "model turns during the polled wait", "calls", target="0",
        check=lambda ours, _: ours == 0,
    )  # fmt: skip
    naive = Row("4", "naive polling: model asked every poll interval", "calls")
    checkpoints = Row(
        "4", "checkpoint calls (only before a wait known to be long)", "calls", target="0",
        check=lambda ours, _: ours == 0,
    )  # fmt: skip
    long_job = Row(
        "4", f"model calls per run, a {sizes.pipeline_seconds:g} s polled job", "calls",
        target="≤ floor", check=lambda _, ratio: ratio is not None and ratio <= 1.0,
    )  # fmt: skip
    short_job = Row(
        "4", f"model calls per run, a {SHORT_POLL_SECONDS:g} s polled job", "calls",
        target="≤ floor", check=lambda _, ratio: ratio is not None and ratio <= 1.0,
    )  # fmt: skip
    waited = Row("4", "wait (poll activity scheduled → completed)", "s")
    polls = Row("4", "status checks made by the poll activity", "checks")
    for side in sizes.sides:
        queue, worker = await stack.lease(side, f"f4-{side}")
        try:
            for rep in range(reps):
                for seconds, row in (
                    (sizes.pipeline_seconds, long_job),
                    (SHORT_POLL_SECONDS, short_job),
                ):
                    stack.systems.pipeline_seconds = seconds
                    checks_before = stack.systems.pipeline_polls
                    handle = await stack.start_run(
                        side, queue, new_id(f"f4-{side}"), "Enrich the transactions.",
                        "enrich_dataset", 12,
                    )  # fmt: skip
                    await stack.result(side, handle)
                    (events,) = await stack.history(handle.id)
                    activities = activity_times(events)
                    model = model_activity(side)
                    models = [a for a in activities if a.kind == model]
                    (row.ours if side == "ours" else row.floor).append(len(models))
                    log(
                        f"  fig 4 rep {rep + 1} {side}: a {seconds:g} s job, "
                        f"{len(models)} model calls in the run"
                    )
                    if side != "ours" or row is not long_job:
                        continue
                    poll = next(a for a in activities if a.kind == "poll_operation")
                    ends = poll.closed if poll.closed is not None else poll.scheduled
                    inside = [a for a in models if poll.scheduled < a.started < ends]
                    during.ours.append(
                        sum(1 for a in inside if not a.summary.startswith("checkpoint"))
                    )
                    checkpoints.ours.append(
                        sum(1 for a in models if a.summary.startswith("checkpoint"))
                    )
                    wait = ends - poll.scheduled
                    waited.ours.append(wait)
                    naive.ours.append(math.floor(wait / POLL_INTERVAL_SECONDS))
                    polls.ours.append(stack.systems.pipeline_polls - checks_before)
        finally:
            stack.systems.pipeline_seconds = sizes.pipeline_seconds
            await stack.release(worker)
    return [during, naive, checkpoints, long_job, short_job, waited, polls]


# --- 5. history growth -----------------------------------------------------------------------


async def figure5(stack: Stack, sizes: Sizes, reps: int, log: Callable[[str], None]) -> list[Row]:
    """History bytes (summed over the continue-as-new chain) for runs of 10, 50, 200 turns with
    a 4 KB tool result each turn. The floor resends the whole conversation every turn, so its
    history grows with the square of the turns: it runs up to FLOOR_MAX_TURNS only (beyond, it
    would pass Temporal's history size limits)."""
    size_rows = {t: Row("5", f"history at {t} turns", "bytes") for t in sizes.turns}
    runs_rows = {t: Row("5", f"runs in the chain at {t} turns", "runs") for t in sizes.turns}
    for side in sizes.sides:
        queue, worker = await stack.lease(side, f"f5-{side}")
        try:
            for rep in range(reps):
                for turns in sizes.turns:
                    if side == "floor" and turns > FLOOR_MAX_TURNS:
                        continue
                    handle = await stack.start_run(
                        side, queue, new_id(f"f5-{side}-{turns}"), f"Please read {turns} chunks.",
                        "chunk", turns + 1,
                    )  # fmt: skip
                    await stack.result(side, handle)
                    runs = await stack.history(handle.id, handle.first_execution_run_id)
                    for row, value in ((size_rows, history_bytes(runs)), (runs_rows, len(runs))):
                        (row[turns].ours if side == "ours" else row[turns].floor).append(value)
                    log(
                        f"  fig 5 rep {rep + 1} {side}: {turns} turns, {history_bytes(runs)} B, "
                        f"{len(runs)} runs"
                    )
        finally:
            await stack.release(worker)
    longest = max(sizes.turns)
    size_rows[longest].target = "< 2 MB" if longest >= 200 else ""
    if longest >= 200:
        size_rows[longest].check = lambda ours, _: ours < 2 * 1024 * 1024
    rows = [row for t in sizes.turns for row in (size_rows[t], runs_rows[t])]
    rows.append(_linearity(size_rows, sizes.turns))
    return rows


def _linearity(rows: dict[int, Row], turns: tuple[int, ...]) -> Row:
    """Bytes per added turn in the last segment over the first: 1.0 is perfectly linear."""
    low, mid, high = turns
    row = Row(
        "5", f"bytes/turn {mid}→{high} over {low}→{mid} (1 = linear)", "×",
        target="≤ 1.25 (linear)", check=lambda ours, _: ours <= 1.25,
    )  # fmt: skip
    for a, b, c in zip(rows[low].ours, rows[mid].ours, rows[high].ours, strict=True):
        row.ours.append(((c - b) / (high - mid)) / ((b - a) / (mid - low)))
    return row


# --- 6. a conversation ---------------------------------------------------------------------


async def figure6(stack: Stack, sizes: Sizes, reps: int, log: Callable[[str], None]) -> list[Row]:
    """A conversation of `sizes.messages` messages, one at a time (each sent once the last is
    answered): per message, the time from its send to the start of its model call, against
    the floor's (an Update that calls the model activity); and the history per message. Ours
    is a thread (continuing as new every 20 messages); the floor resends the conversation."""
    p50 = Row(
        "6", "send → model call p50", "ms", target="≤ 1.15× floor",
        check=lambda _, ratio: ratio is not None and ratio <= 1.15,
    )  # fmt: skip
    p95 = Row("6", "send → model call p95", "ms")
    per_message = Row("6", f"history per message over {sizes.messages} messages", "bytes")
    linear = Row(
        "6", "history per message, second half over first (1 = linear)", "×",
        target="≤ 1.25 (linear)", check=lambda ours, _: ours <= 1.25,
    )  # fmt: skip
    runs = Row("6", f"runs in the chain at {sizes.messages} messages", "runs")
    for side in sizes.sides:
        queue, worker = await stack.lease(side, f"f6-{side}")
        try:
            for rep in range(reps):
                thread_id = new_id(f"f6-{side}")
                sent_at = await _converse(stack, side, queue, thread_id, sizes.messages)
                listed = [
                    r async for r in stack.client.list_workflows(f'WorkflowId = "{thread_id}"')
                ]
                first = min(listed, key=lambda r: r.start_time).run_id  # the chain's first run
                chain = await stack.history(thread_id, first)
                model = model_activity(side)
                calls = [a for events in chain for a in activity_times(events) if a.kind == model]
                if len(calls) != len(sent_at):
                    raise RuntimeError(
                        f"{thread_id}: {len(calls)} model calls for {len(sent_at)} messages"
                    )
                waits = [(c.started - s) * 1000 for c, s in zip(calls, sent_at, strict=True)]
                row = p50.ours if side == "ours" else p50.floor
                row.append(percentile(waits, 50))
                (p95.ours if side == "ours" else p95.floor).append(percentile(waits, 95))
                total = history_bytes(chain)
                (per_message.ours if side == "ours" else per_message.floor).append(
                    total / sizes.messages
                )
                (runs.ours if side == "ours" else runs.floor).append(len(chain))
                if side == "ours":
                    linear.ours.append(_halves(chain, sizes.messages))
                log(
                    f"  fig 6 rep {rep + 1} {side}: p50 {percentile(waits, 50):.0f} ms, "
                    f"{total / sizes.messages:.0f} B/message over {len(chain)} runs"
                )
                if side == "floor":
                    await stack.client.get_workflow_handle(thread_id).terminate("measured")
        finally:
            await stack.release(worker)
    return [p50, p95, per_message, linear, runs]


async def _converse(
    stack: Stack, side: Side, queue: str, thread_id: str, messages: int
) -> list[float]:
    """Send `messages` messages one after the other, each once the last is answered: when
    each was sent (epoch seconds)."""
    sent_at = []
    if side == "floor":
        handle = await stack.client.start_workflow(
            FLOOR_CHAT, MODEL_NAME, id=thread_id, task_queue=queue
        )
        for n in range(1, messages + 1):
            sent_at.append(time.time())
            await handle.execute_update("send", f"message {n}", result_type=str)
        return sent_at
    start = thread_input(model=f"openai:{MODEL_NAME}")
    for n in range(1, messages + 1):
        sent_at.append(time.time())
        sent = await stack.runs.send_message(
            thread_id, f"message {n}", start=start, task_queue=queue
        )
        await stack.runs.reply(thread_id, sent.accepted.message_id)
    return sent_at


def _halves(chain: list[list[Any]], messages: int) -> float:
    """Bytes per message of the runs of the second half of the chain over the first's (whole
    runs only, not the last): 1.0 is linear."""
    whole = [history_bytes([events]) for events in chain[:-1]]
    if len(whole) < 2:
        return 1.0
    half = len(whole) // 2
    return statistics.mean(whole[half:]) / statistics.mean(whole[:half])


FIGURES: dict[int, Callable[[Stack, Sizes, int, Callable[[str], None]], Awaitable[list[Row]]]] = {
    1: figure1,
    2: figure2,
    3: figure3,
    4: figure4,
    5: figure5,
    6: figure6,
}
