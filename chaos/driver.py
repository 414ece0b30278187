"""The reliability suite: runs a mix of agent runs on a real stack while injecting faults, then
checks the invariants after every run and reports one Check per fault class and invariant.

Phases (a seeded RNG picks the runs' order, the kill moments and the decision times):

A. The mixed runs (callback, polled, approval, plain tools), the model-fault runs (class 5)
   and, in `ci`, the gateway faults (classes 3, 4, 6, on their own systems and task queue),
   all at once.
B. Runs parked mid-wait (webhooks, polls, approvals, a run to cancel) while the dev server is
   stopped and restarted on the same SQLite file, once by SIGKILL and once by SIGTERM
   (class 2); then they are decided, cancelled or left to finish.
Throughout A and B, one of the two workers of the main queue is SIGKILLed at random moments
and restarted after a pause (class 1). `full` runs the gateway faults after B, alone; `load`
replaces A and B with 1,000 concurrent runs (and the kills).
"""

from __future__ import annotations

import asyncio
import logging
import random
import signal
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

import httpx

from chaos.gateway_faults import run_gateway_faults
from chaos.invariants import (
    INVARIANTS,
    REFUNDS,
    check_model_fault,
    check_run,
    refunds_once,
)
from chaos.model import Check, GatewayTarget
from chaos.runs import (
    RESULT_TIMEOUT,
    Context,
    ModelFault,
    Outbox,
    RunOutcome,
    RunPlan,
    cancel_plan,
    drive,
    make_plans,
    model_plan,
    until,
)
from chaos.stack import MAIN_QUEUE, Stack

log = logging.getLogger("chaos")
MODEL_FAULTS: tuple[ModelFault, ...] = ("429", "500", "hang", "malformed")
# Kept short so a worker killed mid-call costs seconds, not the default two minutes.
ACTIVITY_TIMEOUT = timedelta(seconds=10)


@dataclass(frozen=True)
class Size:
    """How much of everything a suite size runs."""

    mixed: int
    model_rounds: int
    parked: int
    cancels: int
    kill_every: tuple[float, float]
    gateway_runs: int
    fuzz_examples: int
    parked_seconds: float = 12.0
    query_every: float = 0.3
    result_timeout: float = RESULT_TIMEOUT
    links: float = 1 / 3
    refunds: bool = True
    # Run the gateway faults after the other phases rather than beside phase A: slower, but
    # their own timeouts then do not meet a saturated machine.
    gateway_alone: bool = False


SIZES = {
    "ci": Size(mixed=16, model_rounds=1, parked=3, cancels=1, kill_every=(2, 4),
               gateway_runs=3, fuzz_examples=40),
    "full": Size(mixed=74, model_rounds=4, parked=8, cancels=2, kill_every=(3, 8),
                 gateway_runs=10, fuzz_examples=300, parked_seconds=15.0, gateway_alone=True),
    "load": Size(mixed=1000, model_rounds=0, parked=0, cancels=0, kill_every=(10, 20),
                 gateway_runs=0, fuzz_examples=0, query_every=1.0, result_timeout=1200,
                 links=0.05, refunds=False),
}  # fmt: skip


@dataclass
class Suite:
    """One run of the suite on one stack."""

    stack: Stack
    size: Size
    seed: int
    checks: list[Check] = field(default_factory=list)
    outcomes: list[RunOutcome] = field(default_factory=list)
    figures: dict[str, float] = field(default_factory=dict)
    # Held while a worker restarts or the server does: one fault of the kind at a time, and
    # no worker starting against a server that is down.
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    phase: str = ""

    async def run(self, *, load: bool = False) -> list[Check]:
        """Every phase, then the table's rows."""
        rng = random.Random(self.seed)
        assert self.stack.client is not None and self.stack.wire is not None
        async with httpx.AsyncClient(timeout=30) as http:
            outbox = Outbox(self.stack.systems_url, http, every=self.size.query_every)
            watcher = asyncio.create_task(outbox.watch())
            ctx = Context(
                self.stack.client,
                MAIN_QUEUE,
                self.stack.systems_url,
                http,
                self.stack.wire,
                rng,
                outbox,
                query_every=self.size.query_every,
                result_timeout=self.size.result_timeout,
            )
            stop = asyncio.Event()
            kills = asyncio.create_task(self._kill_workers(rng, stop))
            try:
                if load:
                    await self._load(ctx, rng)
                else:
                    await self._phase_a(ctx, rng)
                    await self._phase_b(ctx, rng)
            finally:
                stop.set()
                killed = await kills
                watcher.cancel()
            if self.size.gateway_alone and not load:
                self.checks += await self._gateway()
            runs = [o for o in self.outcomes if o.plan.phase in ("A", "B", "L")]
            moments = ", ".join(f"{n} in {p}" for p, n in sorted(Counter(killed).items()))
            self.checks.insert(
                0,
                Check(
                    "1 worker SIGKILL (2 on one queue)",
                    attempts=len(killed),
                    outcome=f"{len(killed)} kills ({moments}) under {len(runs)} runs; "
                    f"{_ended(runs)}",
                ),
            )
            stats = (await http.get(f"{self.stack.systems_url}/_test/stats")).json()
            refunds = (await http.get(f"{self.stack.systems_url}/refunds")).json()
        self._invariants(stats, refunds)
        return self.checks

    # --- phase A: mixed runs, worker kills, model faults, gateway faults --------------------

    async def _phase_a(self, ctx: Context, rng: random.Random) -> None:
        plans = make_plans("chaos-a", self.size, rng, phase="A")
        for plan in plans:
            _short_timeouts(plan)
        models = [
            model_plan(f"chaos-m-{fault}-{i}", fault)
            for i in range(self.size.model_rounds)
            for fault in MODEL_FAULTS
        ]
        for plan in models:
            plan.phase = "M"
        self.phase = "A"
        gateway = None if self.size.gateway_alone else asyncio.create_task(self._gateway())
        began = time.monotonic()
        outcomes = await asyncio.gather(*(drive(ctx, p) for p in [*plans, *models]))
        self.figures["phase A seconds"] = time.monotonic() - began
        self.outcomes += outcomes
        model = [o for o in outcomes if o.plan.phase == "M"]
        violations: list[str] = []
        for outcome in model:
            violations += check_model_fault(outcome, ctx.wire.requests)
        self.checks.append(
            Check(
                "5 model 429/500/hang/malformed",
                attempts=len(model),
                outcome=f"{len(model)} runs over HTTP; {_ended(model)}",
                violations=violations,
            )
        )
        if gateway is not None:
            self.checks += await gateway

    async def _kill_workers(self, rng: random.Random, stop: asyncio.Event) -> list[str]:
        """SIGKILL one of the two workers at random moments (model calls, tool starts, polls,
        waits: whatever it holds then), restart it after a pause; the other keeps polling.
        Returns the phase of each kill."""
        kills: list[str] = []
        low, high = self.size.kill_every
        delay = rng.uniform(1.0, 3.0)
        while True:
            try:
                await asyncio.wait_for(stop.wait(), delay)
                return kills
            except TimeoutError:
                pass
            async with self.lock:
                victim = rng.choice(self.stack.workers)
                await victim.kill(signal.SIGKILL)
                kills.append(self.phase)
                await asyncio.sleep(rng.uniform(0.5, 2.0))
                await victim.start()
            delay = rng.uniform(low, high)

    async def _gateway(self) -> list[Check]:
        target: GatewayTarget = self.stack.target()
        began = time.monotonic()
        try:
            checks = await run_gateway_faults(
                target,
                runs=self.size.gateway_runs,
                fuzz_examples=self.size.fuzz_examples,
                seed=self.seed,
            )
        except Exception as err:  # noqa: BLE001 - a crashed attack is a failed row, not a crash
            log.exception("the gateway faults crashed")
            return [Check("3/4/6 gateway faults", violations=[f"crashed: {err!r}"])]
        self.figures["gateway faults seconds"] = time.monotonic() - began
        return checks

    # --- phase B: the dev server stopped and restarted mid-wait -----------------------------

    async def _phase_b(self, ctx: Context, rng: random.Random) -> None:
        systems = self.stack.systems_url
        seconds = self.size.parked_seconds
        # Jobs started now outlast both restarts, so no webhook falls in a server outage.
        await ctx.http.post(
            f"{systems}/_test/faults", json={"export_seconds": seconds, "pipeline_seconds": seconds}
        )
        plans = make_plans("chaos-b", replace(self.size, mixed=self.size.parked), rng, phase="B")
        plans += [cancel_plan(f"chaos-b-cancel-{i}") for i in range(self.size.cancels)]
        for plan in plans:
            plan.phase = "B"
            _short_timeouts(plan)
        hold = asyncio.Event()
        self.phase = "B"
        began = time.monotonic()
        tasks = [asyncio.create_task(drive(ctx, p, hold=hold)) for p in plans]
        await self._until_waiting(ctx, plans)
        async with self.lock:
            downtime = [
                await self.stack.restart_server(signal.SIGKILL, pause=1.0),
                await self.stack.restart_server(signal.SIGTERM, pause=1.0),
            ]
        self.figures["server downtime seconds (max)"] = max(downtime)
        await ctx.http.post(
            f"{systems}/_test/faults",
            json={
                "export_seconds": self.stack.export_seconds,
                "pipeline_seconds": self.stack.pipeline_seconds,
            },
        )
        hold.set()
        outcomes = await asyncio.gather(*tasks)
        self.figures["phase B seconds"] = time.monotonic() - began
        self.outcomes += outcomes
        self.checks.append(
            Check(
                "2 dev server SIGKILL+SIGTERM restart",
                attempts=len(downtime),
                outcome=f"down {max(downtime):.1f}s max, {len(plans)} parked runs; "
                f"{_ended(outcomes)}",
            )
        )

    async def _until_waiting(self, ctx: Context, plans: list[RunPlan]) -> None:
        """Until every parked run is waiting (or done), so the outage falls mid-wait."""

        async def one(plan: RunPlan) -> None:
            handle = ctx.client.get_workflow_handle(plan.id)
            await until(ctx, handle, lambda s: s.status in ("waiting", "completed"))

        await asyncio.gather(*(one(p) for p in plans), return_exceptions=True)

    # --- load: many concurrent runs, webhooks and approvals at random -----------------------

    async def _load(self, ctx: Context, rng: random.Random) -> None:
        """All the runs at once; approvals decided and webhooks arriving at random moments."""
        self.phase = "L"
        plans = make_plans("chaos-load", self.size, rng, phase="L")
        for plan in plans:
            _short_timeouts(plan)
        began = time.monotonic()
        outcomes = await asyncio.gather(*(drive(ctx, p) for p in plans))
        elapsed = time.monotonic() - began
        started = max(o.started_at for o in outcomes)
        drain = max(o.ended_at for o in outcomes) - started
        latencies = sorted(o.ended_at - o.started_at for o in outcomes)
        self.figures["load: seconds to start every run"] = started - began
        self.figures["load: drain seconds (last start to last end)"] = drain
        self.figures["load: wall seconds"] = elapsed
        self.figures["load: runs/s"] = len(outcomes) / elapsed
        self.figures["load: run seconds p50"] = latencies[len(latencies) // 2]
        self.figures["load: run seconds p99"] = latencies[int(len(latencies) * 0.99) - 1]
        self.outcomes += outcomes
        self.checks.append(
            Check(
                f"load: {len(plans)} concurrent runs",
                attempts=len(plans),
                outcome=f"{len(outcomes) / elapsed:.1f} runs/s, drained {drain:.0f}s; "
                f"{_ended(outcomes)}",
            )
        )

    # --- invariants ------------------------------------------------------------------------

    def _invariants(self, stats: dict[str, Any], refunds: list[dict[str, Any]]) -> None:
        """Every run against every invariant, then the fault rows get their runs' violations."""
        rows = {name: Check(name) for name in INVARIANTS}
        by_run: dict[str, list[str]] = {}
        for outcome in self.outcomes:
            found = check_run(outcome, stats)
            for name, problems in found.items():
                rows[name].attempts += 1
                rows[name].violations += problems
                by_run.setdefault(outcome.plan.id, []).extend(problems)
        rows[REFUNDS].violations += refunds_once(stats, refunds)
        # A fault row also counts the violations of the runs it was aimed at.
        for check in self.checks:
            runs = _runs_of(check.name, self.outcomes)
            for outcome in runs:
                check.violations += by_run.get(outcome.plan.id, [])
        for row in rows.values():
            row.outcome = "ok" if row.ok else f"{len(row.violations)} violations"
        self.checks += rows.values()


def _runs_of(name: str, outcomes: list[RunOutcome]) -> list[RunOutcome]:
    phases = {"1": "ABL", "5": "M", "2": "B", "l": "L"}.get(name[:1], "")
    return [o for o in outcomes if o.plan.phase and o.plan.phase in phases]


def _short_timeouts(plan: RunPlan) -> None:
    plan.input = plan.input.model_copy(
        update={"model_timeout": ACTIVITY_TIMEOUT, "tool_timeout": ACTIVITY_TIMEOUT}
    )


def _ended(outcomes: list[RunOutcome]) -> str:
    counts: dict[str, int] = {}
    for outcome in outcomes:
        counts[outcome.status] = counts.get(outcome.status, 0) + 1
    return ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
