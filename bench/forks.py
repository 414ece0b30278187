"""Figure 13: forks a minute. Recorded runs forked under `recorded` with the same model: through
`WaitstateClient.fork`, a bounded number at once, and through one evaluation (`EvalWorkflow`).

Per repetition, on a fresh worker (ours alone: a raw Temporal floor has no recording to fork):
N runs of the scripted `demo` model, three turns each (two tools at once, then one, then the
answer), are recorded; then each is forked at turn 0, at most FORKS_AT_ONCE at once, each fork
awaited to its result, from the first fork's start to the last fork's end; then all N through
one evaluation of that concurrency, from its start to its report. Every fork must answer as its
original did (the recording answers its tools: no tool runs again).
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable

from bench.figures import Row, Sizes, bounded
from bench.stack import RESULT_TIMEOUT, Stack, new_id
from waitstate.client import WaitstateClient
from waitstate.schemas import RunInput, RunState
from waitstate.schemas.evals import EvalInput

FORKS_AT_ONCE = 16
PER_MINUTE = 100  # the target: forks a minute, both ways
MODEL = "scripted:demo"
TOOLS = ["calculate", "utc_now", "count_words"]


async def figure13(stack: Stack, sizes: Sizes, reps: int, log: Callable[[str], None]) -> list[Row]:
    """`sizes.fork_runs` recorded runs forked, by the client and by one evaluation."""
    n = sizes.fork_runs
    label = f"13 ({n} runs)"
    by_client = Row(
        label, f"forks under recorded, {FORKS_AT_ONCE} at once, first start → last end",
        "forks/min", target=f"≥ {PER_MINUTE}", check=lambda ours, _: ours >= PER_MINUTE,
    )  # fmt: skip
    by_eval = Row(
        label, f"forks through one evaluation (concurrency {FORKS_AT_ONCE}), start → report",
        "forks/min", target=f"≥ {PER_MINUTE}", check=lambda ours, _: ours >= PER_MINUTE,
    )  # fmt: skip
    recorded = Row(label, "recording the runs, 16 at once (for comparison)", "runs/min")
    for rep in range(reps):
        queue, worker = await stack.lease("ours", f"f13-{rep}")
        client = WaitstateClient(stack.client, task_queue=queue)
        try:
            began = time.perf_counter()
            runs = await bounded(
                FORKS_AT_ONCE, [functools.partial(_recorded, client, i) for i in range(n)]
            )
            recorded.ours.append(n / (time.perf_counter() - began) * 60)
            began = time.perf_counter()
            await bounded(FORKS_AT_ONCE, [functools.partial(_forked, client, *run) for run in runs])
            by_client.ours.append(n / (time.perf_counter() - began) * 60)
            began = time.perf_counter()
            await _evaluated(client, runs)
            by_eval.ours.append(n / (time.perf_counter() - began) * 60)
        finally:
            await stack.release(worker)
        log(
            f"  fig 13 rep {rep + 1}: recorded {recorded.ours[-1]:.0f} runs/min, forked "
            f"{by_client.ours[-1]:.0f}/min by the client, {by_eval.ours[-1]:.0f}/min by one "
            "evaluation"
        )
    return [by_client, by_eval, recorded]


async def _recorded(client: WaitstateClient, n: int) -> tuple[str, str]:
    """One run recorded to its answer: its id and its answer.

    Raises:
        RuntimeError: it ended otherwise.
    """
    task = f"What is {n} * {n + 7}? Then count the words of this task."
    run = RunInput(task=task, model=MODEL, tools=TOOLS)
    started = await client.start(run, run_id=new_id("f13"))
    result = await _result(client, started.run_id)
    return started.run_id, result.final_output or ""


async def _forked(client: WaitstateClient, run_id: str, answer: str) -> None:
    """Fork `run_id` at turn 0 and await the fork's answer, which must be the original's.

    Raises:
        RuntimeError: the fork answered otherwise.
    """
    fork_id, _ = await client.fork(run_id)
    result = await _result(client, fork_id)
    if result.final_output != answer:
        raise RuntimeError(f"fork {fork_id} of {run_id} answered {result.final_output!r}")


async def _evaluated(client: WaitstateClient, runs: list[tuple[str, str]]) -> None:
    """One evaluation of `runs` to its report, every fork passing.

    Raises:
        RuntimeError: a fork did not pass (answered otherwise, or could not be made).
    """
    eval_id = await client.evaluate(
        EvalInput(runs=[run_id for run_id, _ in runs], concurrency=FORKS_AT_ONCE)
    )
    report = await asyncio.wait_for(client.eval_report(eval_id, wait=True), RESULT_TIMEOUT)
    failed = [row for row in report.rows if not row.passed or row.new_answer != row.original_answer]
    if not report.holds or failed:
        raise RuntimeError(f"evaluation {eval_id}: {len(failed)} forks did not pass: {failed[:1]}")


async def _result(client: WaitstateClient, run_id: str) -> RunState:
    outcome = await asyncio.wait_for(client.outcome(run_id), RESULT_TIMEOUT)
    if outcome.status != "completed":
        raise RuntimeError(f"run {run_id} ended {outcome.status}: {outcome.error}")
    return outcome
