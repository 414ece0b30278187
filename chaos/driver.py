"""The reliability suite: runs a mix of agent runs on a real stack while injecting faults, then
checks the invariants after every run and reports one Check per fault class and invariant.

Phases (a seeded RNG picks the runs' order, the kill moments and the decision times):

A. The mixed runs (callback, polled, approval, plain tools), the model-fault runs (class 5)
   and, in `ci`, the gateway faults (classes 3, 4, 6, on their own systems and task queue),
   all at once.
   With them, the classes of issue 11 (chaos.exactly_once): progress reports before and after
   the start returns (7), expiry in every mode (8), continue-as-new while waiting (9), a key
   rotation mid-run (10) and decisions racing the timeout policy (11).
   In `full`, runs whose MCP task (on the demo's MCP server) asks a question mid-flight: the
   driver approves the destructive call, then answers the question (twice, through the
   question's link and by Update at once, or not at all, so that it expires). The MCP server
   is SIGKILLed and restarted twice (its tasks in a store of their own process): once while
   a report task runs, once while a question is open.
   With them, the classes of issue 22 (chaos.outsiders): jobs that ask in a crafted schema, a
   backtracking pattern (12) or a malformed one (13), by our own tool and by an MCP task; and
   questions that come while the model waits for operations (16) or while the checkpoint's
   model call is in flight (17). And issue 39's doors into a thread (chaos.thread_doors, 18):
   posts sent twice, with their answers lost, and while the threads' worker is stopped;
   workers SIGKILLed under model calls held in flight (chaos.model_kills, 19); and calls of
   waitstate's own MCP server sent again with their keys, twice, after a lost answer, and at
   once (chaos.mcp_doors, 20).
B. Runs parked mid-wait (webhooks, polls, approvals, a run to cancel) while the dev server is
   stopped and restarted on the same SQLite file, once by SIGKILL and once by SIGTERM
   (class 2); then they are decided, cancelled or left to finish.
C. Issue 22's outages, one after the other: the gateway SIGKILLed while jobs finish, until their
   senders have given up their webhooks (14); then the workers' blob store taken away for
   longer than the model's retry budget while runs are mid-flight (15).
Throughout A, B and C, one of the two workers of the main queue is SIGKILLed at random moments
and restarted after a pause (class 1). `full` runs the gateway faults after C, alone; `load`
replaces A, B and C with 1,000 concurrent runs (the classes of issue 11 among them, and the
kills).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import signal
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

import httpx

from chaos import exactly_once, model_kills, outsiders, streams, tree_rows
from chaos.exactly_once import (
    EARLY_COPIES,
    HOLD_START_ANSWERS,
    PROGRESS_AFTER,
    PROGRESS_REPORTS,
    Rotation,
)
from chaos.gateway_faults import run_gateway_faults
from chaos.invariants import (
    INVARIANTS,
    REFUNDS,
    check_model_fault,
    check_run,
    interrupted_start,
    refunds_once,
)
from chaos.mcp_doors import McpDoors
from chaos.model import Check, GatewayTarget
from chaos.model_kills import ModelKills
from chaos.outsiders import Outsiders
from chaos.runs import (
    Answer,
    Context,
    ModelFault,
    Outbox,
    RunOutcome,
    RunPlan,
    cancel_plan,
    drive,
    make_plans,
    model_plan,
    question_plans,
    until,
)
from chaos.sizes import Size
from chaos.stack import EARLY_QUEUE, MAIN_QUEUE, NEW_KEY, SLOW_QUEUE, TOKEN_KEYS, Stack
from chaos.streams import Streams
from chaos.thread_doors import ThreadDoors
from chaos.trees import Trees
from waitstate.mcp import McpServer
from waitstate.mcp.tasks import McpTaskBackend
from waitstate.tools.spec import ToolError

log = logging.getLogger("chaos")
MODEL_FAULTS: tuple[ModelFault, ...] = ("429", "500", "hang", "malformed")
# Kept short so a worker killed mid-call costs seconds, not the default two minutes.
ACTIVITY_TIMEOUT = timedelta(seconds=10)


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
    rotation: Rotation | None = None
    mcp_downtimes: list[float] = field(default_factory=list)
    issue22: Outsiders | None = None
    issue39: ModelKills | None = None
    mcp_doors: McpDoors | None = None
    trees: Trees | None = None
    only: str | None = None  # `--only trees`: the tree classes' rows, and the invariants'

    async def run(self, *, load: bool = False, only: str | None = None) -> list[Check]:
        """Every phase, then the table's rows (`only="trees"`: the tree classes alone, with
        class 1's kills and phase B's restarts)."""
        rng = random.Random(self.seed)
        self.only = only
        stack = self.stack
        assert stack.client is not None and stack.wire is not None
        self.issue22 = Outsiders(stack, self.size)
        self.issue39 = ModelKills(stack, self.size, self.lock)
        self.mcp_doors = McpDoors(stack.client, stack.systems_url, self.size)
        self.trees = Trees(stack, self.size, self.lock, self.seed)
        async with httpx.AsyncClient(timeout=30) as http:
            await fault_the_systems(http, stack)
            outbox = Outbox(stack.systems_url, http, every=self.size.query_every)
            watcher = asyncio.create_task(outbox.watch())
            ctx = stack_context(
                stack,
                http,
                rng,
                outbox,
                every_queue=True,
                query_every=self.size.query_every,
                result_timeout=self.size.result_timeout,
            )
            stop = asyncio.Event()
            kills = asyncio.create_task(self._kill_workers(rng, stop))
            try:
                if load:
                    await self._load(ctx, rng)
                elif only == "trees":
                    await self._trees_alone(ctx, rng)
                else:
                    # Class 20 from phase A on; its runs end before phase C's outages, which
                    # meet no other run.
                    doors = asyncio.create_task(self.mcp_doors.run(ctx.result_timeout))
                    try:
                        await self._phase_a(ctx, rng)
                        await self._phase_b(ctx, rng)
                    finally:
                        await doors
                    await self._phase_c(ctx, rng)
            finally:
                stop.set()
                killed = await kills
                watcher.cancel()
                assert ctx.streams is not None
                await ctx.streams.close()
            if self.size.gateway_alone and not load and only is None:
                self.checks += await self._gateway()
            runs = [o for o in self.outcomes if o.plan.phase in ("A", "B", "C", "L")]
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
            stats = await _stats(http, [stack.systems_url, stack.early_url, stack.slow_url])
            if stack.mcp_url:
                base = stack.mcp_url.removesuffix("/mcp")
                stats["mcp"] = (await http.get(f"{base}/_test/stats")).json()
                stats["mcp_tasks"] = await _task_states(stack.mcp_url, runs)
            if self.size.mcp and only is None:
                self.checks.insert(1, _mcp_row(runs, stats["mcp"], self.mcp_downtimes))
                if self.size.questions:
                    self.checks.insert(2, _question_row(runs, stats["mcp"]))
            refunds = (await http.get(f"{stack.systems_url}/refunds")).json()
        self._invariants(stats, refunds)
        return self.checks

    # --- phase A: mixed runs, worker kills, model faults, gateway faults --------------------

    async def _phase_a(self, ctx: Context, rng: random.Random) -> None:
        plans = make_plans("chaos-a", self.size, rng, phase="A")
        plans += exactly_once.plans("chaos-a", self.size, rng, phase="A")
        if self.size.mcp:
            plans += question_plans("chaos-a-question", self.size.questions, rng, phase="A")
        rotating = exactly_once.rotation_plans(
            "chaos-a-rotation", self.size.rotations, self.size.rotation_window, phase="A"
        )
        for plan in [*plans, *rotating]:
            _short_timeouts(plan)
        # Their own RNG: the seed's mix and kills stay what they were before them.
        assert self.issue22 is not None
        hostile = self.issue22.plans("chaos-a", random.Random(self.seed + 22), phase="A")
        await self.issue22.prepare(ctx, hostile)
        plans += hostile
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
        rotated = asyncio.create_task(self._rotation(ctx, rotating))
        assert self.issue39 is not None
        killing = asyncio.create_task(self.issue39.run(ctx, "chaos-a", phase="A"))
        done = asyncio.Event()
        restarts = asyncio.create_task(self._restart_mcp(ctx.http, done))
        doors = asyncio.create_task(ThreadDoors(self.stack, self.size).run())
        assert self.trees is not None
        growing = asyncio.create_task(self.trees.run(ctx, "chaos-a", phase="A"))
        try:
            outcomes = await asyncio.gather(*(drive(ctx, p) for p in [*plans, *models]))
            outcomes += await rotated
            outcomes += await killing
            outcomes += await growing
        finally:
            done.set()
            self.mcp_downtimes = await restarts
            if (row := await doors) is not None:
                self.checks.append(row)
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

    async def _restart_mcp(self, http: httpx.AsyncClient, done: asyncio.Event) -> list[float]:
        """SIGKILL the MCP server and start it again, `size.mcp_restarts` times: first while a
        report task runs, then while a question is open (each after a minute at most,
        whatever runs then). Its tasks are in a store of their own process: the ones it was
        running run again from their start. Returns how long it was down each time (s)."""
        downtimes: list[float] = []
        rng = random.Random(self.seed + 1)  # the kills' moments stay the seed's
        busy = [_report_running, _question_open]
        for i in range(self.size.mcp_restarts):
            deadline = time.monotonic() + 60.0
            while not done.is_set() and time.monotonic() < deadline:
                with contextlib.suppress(httpx.HTTPError):
                    seen = await http.get(f"{self.stack.mcp_url.removesuffix('/mcp')}/_test/stats")
                    if busy[i % len(busy)](seen.json()):
                        break
                await asyncio.sleep(0.3)
            if done.is_set():
                break
            downtimes.append(await self.stack.restart_mcp(pause=rng.uniform(0.5, 2.0)))
        return downtimes

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
        # Without progress reports too: each would fall in an outage.
        await _faults(
            ctx.http, systems, export_seconds=seconds, pipeline_seconds=seconds, progress_reports=0
        )
        plans = make_plans(
            "chaos-b",
            replace(self.size, mixed=self.size.parked),
            rng,
            phase="B",
            first=self.size.mixed,
        )
        # On the slow systems: their jobs are still running when the run is cancelled however
        # long the restarts took (a parked job of the main systems may have finished by then).
        plans += [
            cancel_plan(f"chaos-b-cancel-{i}", queue="slow") for i in range(self.size.cancels)
        ]
        for plan in plans:
            plan.phase = "B"
            _short_timeouts(plan)
        hold = asyncio.Event()
        self.phase = "B"
        began = time.monotonic()
        tasks = [asyncio.create_task(drive(ctx, p, hold=hold)) for p in plans]
        assert self.trees is not None
        parked = self.trees.parked("chaos-b", hold, phase="B")
        tasks += [asyncio.create_task(self.trees.drive(ctx, p)) for p in parked]
        plans += parked
        await self._until_waiting(ctx, plans)
        await self.trees.until_parked(ctx)
        async with self.lock:
            downtime = [
                await self.stack.restart_server(signal.SIGKILL, pause=1.0),
                await self.stack.restart_server(signal.SIGTERM, pause=1.0),
            ]
        self.figures["server downtime seconds (max)"] = max(downtime)
        await _faults(
            ctx.http,
            systems,
            export_seconds=self.stack.export_seconds,
            pipeline_seconds=self.stack.pipeline_seconds,
            progress_reports=PROGRESS_REPORTS,
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
                f"{_ended(outcomes)}; late completions for cancelled runs refused: "
                f"{_refusals(outcomes)}",
            )
        )

    async def _trees_alone(self, ctx: Context, rng: random.Random) -> None:
        """`--only trees`: the tree classes of phase A, then phase B with its trees alone
        (the suite's size then parks no other run)."""
        assert self.trees is not None
        self.phase = "A"
        began = time.monotonic()
        self.outcomes += await self.trees.run(ctx, "chaos-a", phase="A")
        self.figures["phase A seconds"] = time.monotonic() - began
        await self._phase_b(ctx, rng)

    # --- phase C: issue 22's outages ----------------------------------------------------------

    async def _phase_c(self, ctx: Context, rng: random.Random) -> None:
        """The gateway outage that loses webhooks, then the blob store outage (each alone:
        every other run has ended, so no other sender or caller meets them)."""
        assert self.issue22 is not None
        self.phase = "C"
        began = time.monotonic()
        if self.size.lost_webhooks:
            self.outcomes += await self.issue22.lost_webhooks(ctx, prefix="chaos-c", phase="C")
        if self.size.store_runs:
            store_rng = random.Random(self.seed + 15)
            self.outcomes += await self.issue22.store_outage(
                ctx, store_rng, prefix="chaos-c", phase="C"
            )
        if self.size.lost_webhooks or self.size.store_runs:
            self.figures["phase C seconds"] = time.monotonic() - began

    async def _until_waiting(self, ctx: Context, plans: list[RunPlan]) -> None:
        """Until every parked run is waiting (or done), so the outage falls mid-wait."""

        async def one(plan: RunPlan) -> None:
            await until(
                ctx, ctx.runs.handle(plan.id), lambda s: s.status in ("waiting", "completed")
            )

        await asyncio.gather(*(one(p) for p in plans), return_exceptions=True)

    # --- load: many concurrent runs, webhooks and approvals at random -----------------------

    async def _load(self, ctx: Context, rng: random.Random) -> None:
        """All the runs at once; approvals decided and webhooks arriving at random moments."""
        self.phase = "L"
        plans = make_plans("chaos-load", self.size, rng, phase="L")
        plans += exactly_once.plans("chaos-load", self.size, rng, phase="L")
        rotating = exactly_once.rotation_plans(
            "chaos-load-rotation", self.size.rotations, self.size.rotation_window, phase="L"
        )
        for plan in [*plans, *rotating]:
            _short_timeouts(plan)
        began = time.monotonic()
        rotated = asyncio.create_task(self._rotation(ctx, rotating))
        outcomes = await asyncio.gather(*(drive(ctx, p) for p in plans))
        outcomes += await rotated
        plans += rotating
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

    # --- class 10: the signing key rotated mid-run ------------------------------------------

    async def _rotation(self, ctx: Context, plans: list[RunPlan]) -> list[RunOutcome]:
        """Drive the rotation's runs around one rotation: once the runs planned before it have
        handed out their links and callback tokens, start the held-start runs and, while the
        early systems hold their starts' answers, SIGKILL every signing worker and restart it
        signing with the new key; then the runs planned after it start."""
        rotation = self.rotation = Rotation()
        if not plans:
            return []
        before = [p for p in plans if p.rotation == "before"]
        held = [p for p in before if p.queue == "early"]
        tasks = [asyncio.create_task(drive(ctx, p)) for p in plans if p not in held]
        try:
            # No random kill until the rotation is done: the escalations must come after it,
            # and the held answers must still be held when the workers die.
            async with self.lock, asyncio.timeout(ctx.result_timeout):
                await asyncio.gather(*(_minted(ctx, p) for p in before if p not in held))
                tasks += [asyncio.create_task(drive(ctx, p)) for p in held]
                await asyncio.gather(*(_minted(ctx, p) for p in held))
                rotation.seconds = await self.stack.rotate(NEW_KEY)
            rotation.happened = True
            rotation.workers = len(self.stack.signing_workers)
        except Exception as err:  # noqa: BLE001 - a rotation that failed is the row's violation
            log.exception("the key rotation failed")
            rotation.note = f"{type(err).__name__}: {err}"
        finally:
            ctx.rotated.set()
        return list(await asyncio.gather(*tasks))

    # --- invariants ------------------------------------------------------------------------

    def _invariants(self, stats: dict[str, Any], refunds: list[dict[str, Any]]) -> None:
        """Every run against every invariant, then the fault rows get their runs' violations."""
        rows = {name: Check(name) for name in INVARIANTS}
        # The refunds issued tell a refund its claim had no room left for from a lost one.
        stats = {**stats, "refunds": refunds}
        by_run: dict[str, list[str]] = {}
        for outcome in self.outcomes:
            found = check_run(outcome, stats)
            for name, problems in found.items():
                rows[name].attempts += 1
                rows[name].violations += problems
                by_run.setdefault(outcome.plan.id, []).extend(problems)
        rows[REFUNDS].violations += refunds_once(stats, refunds)
        if self.only is None:
            self.checks += exactly_once.rows(self.outcomes, stats, self.rotation)
            if self.issue22 is not None:
                self.checks += self.issue22.rows(self.outcomes, stats, self.stack.worker_logs())
            self.checks += model_kills.rows(self.outcomes)
            if self.mcp_doors is not None:
                self.checks += self.mcp_doors.rows()
        if self.trees is not None:
            self.checks += tree_rows.rows(self.outcomes, stats, self.trees.kills)
        # A fault row also counts the violations of the runs it was aimed at.
        for check in self.checks:
            runs = _runs_of(check.name, self.outcomes)
            for outcome in runs:
                check.violations += by_run.get(outcome.plan.id, [])
        for row in rows.values():
            row.outcome = "ok" if row.ok else f"{len(row.violations)} violations"
        self.checks += rows.values()
        read = [
            (o.streamed, streams.expected(o.first_run, o.chain))
            for o in self.outcomes
            if o.streamed is not None
        ]
        if read:
            self.checks.append(streams.check(read))


MCP_TASKS = "MCP tasks on the demo's MCP server, under the same kills"


def _mcp_row(runs: list[RunOutcome], stats: dict[str, Any], downtimes: list[float]) -> Check:
    """What the runs whose tool is an MCP task did (their invariants are in the jobs row), and
    how often the server was restarted under them."""
    mine = [o for o in runs if o.plan.kind.startswith("mcp-task")]
    ops = Counter(
        op.status for o in mine if o.state is not None for op in o.state.operations.values()
    )
    tasks = [stats.get(o.plan.id, {}) for o in mine]
    started = sum(t.get("started", 0) for t in tasks)
    cancelled = sum(t.get("cancelled", 0) for t in tasks)
    reruns = sum(t.get("reruns", 0) for t in stats.values())
    said = ", ".join(f"{n}×{status}" for status, n in sorted(ops.items())) or "none"
    down = f" (down {max(downtimes):.1f} s at most)" if downtimes else ""
    return Check(
        MCP_TASKS,
        attempts=len(mine),
        outcome=f"{len(mine)} runs: operations {said}; tasks made {started}, cancelled "
        f"{cancelled}; server SIGKILLed and restarted {len(downtimes)}×{down}, task legs run "
        f"again after it {reruns}; {_ended(mine)}",
    )


MCP_QUESTIONS = "MCP tasks' questions answered, repeated, or left to expire, under the kills"


def _question_row(runs: list[RunOutcome], stats: dict[str, Any]) -> Check:
    """What the runs whose MCP task asked a question did: how their questions closed, what
    became of the answers sent (applied, refused as duplicates, copies given the first one's
    outcome), and what the server saw (their invariants are in the questions row)."""
    mine = [o for o in runs if o.plan.question is not None]
    closed = Counter(
        q.status for o in mine if o.state is not None for q in o.state.questions.values()
    )
    sent = [a for o in mine for a in o.answers if a.kind == "answer"]
    applied = sum(1 for a in sent if a.accepted and a.via != "link (copy)")
    refused = Counter(_refusal(a) for a in sent if a.accepted is False)
    copies = sum(1 for a in sent if a.accepted and a.via == "link (copy)")
    interrupted = sum(
        1 for o in mine if o.state is not None and not o.state.questions and interrupted_start(o)
    )
    seen: Counter[str] = Counter()
    for outcome in mine:
        seen.update(stats.get(f"delete:{outcome.plan.id}", {}))
    said = ", ".join(f"{n}×{status}" for status, n in sorted(closed.items())) or "none"
    server = ", ".join(f"{k} {seen[k]}" for k in ("asked", "answered", "deleted", "kept"))
    why = ", ".join(f"{n}×{reason}" for reason, n in sorted(refused.items()))
    return Check(
        MCP_QUESTIONS,
        attempts=len(mine),
        outcome=f"{len(mine)} runs: questions {said}; answers sent {len(sent)}: {applied} "
        f"applied, {refused.total()} refused ({why or 'none'}), link copies given the first's "
        f"outcome {copies}; starts interrupted (outcome unknown, no question) {interrupted}; "
        f"server: {server}; {_ended(mine)}",
    )


def _refusal(answer: Answer) -> str:
    """Why an answer was refused, in a word: the gateway's status and code, or the Update's
    error type (`QuestionClosed`), or that the run had ended."""
    if answer.status is not None:
        return answer.code
    return answer.code.removeprefix("refused: ").split(":")[0].split(" (")[0]


def _runs_of(name: str, outcomes: list[RunOutcome]) -> list[RunOutcome]:
    if name == MCP_TASKS:
        return [o for o in outcomes if o.plan.kind.startswith("mcp-task")]
    if name == MCP_QUESTIONS:
        return [o for o in outcomes if o.plan.question is not None]
    if name == PROGRESS_AFTER:  # every callback run of the main systems
        return [o for o in outcomes if o.plan.queue == "main" and o.plan.category == "callback"]
    if name in (*exactly_once.ROWS, *outsiders.ROWS, *model_kills.ROWS, *tree_rows.ROWS):
        return [o for o in outcomes if o.plan.klass == name]
    phases = {"1": "ABCL", "5": "M", "2": "B", "load:": "L"}.get(name.split(" ")[0], "")
    return [o for o in outcomes if o.plan.phase and o.plan.phase in phases]


async def _faults(http: httpx.AsyncClient, systems_url: str, **faults: Any) -> None:
    answer = await http.post(f"{systems_url}/_test/faults", json=faults)
    answer.raise_for_status()


async def fault_the_systems(http: httpx.AsyncClient, stack: Stack) -> None:
    """The suite's faults of `stack`'s demo systems: every callback job of the mix reports
    progress; the early systems hold the answers to starts past their jobs (and send each
    report twice)."""
    await _faults(http, stack.systems_url, progress_reports=PROGRESS_REPORTS)
    await _faults(
        http,
        stack.early_url,
        hold_start_answers_seconds=HOLD_START_ANSWERS,
        progress_reports=PROGRESS_REPORTS,
        duplicate_webhooks=EARLY_COPIES,
    )


def stack_context(
    stack: Stack,
    http: httpx.AsyncClient,
    rng: random.Random,
    outbox: Outbox,
    *,
    every_queue: bool,
    **options: Any,
) -> Context:
    """What driving a run on `stack` needs: its main queue, systems, model server and gateway;
    with `every_queue`, also its other queues and systems, its token keys, and every run's
    event stream read (`options`: the Context's others)."""
    if every_queue:
        options |= {
            "queues": {"main": MAIN_QUEUE, "early": EARLY_QUEUE, "slow": SLOW_QUEUE},
            "systems": {
                "main": stack.systems_url,
                "early": stack.early_url,
                "slow": stack.slow_url,
            },
            "token_keys": dict(TOKEN_KEYS),
            "streams": Streams(stack.gateway_url, dict(TOKEN_KEYS)),
        }
    assert stack.client is not None and stack.wire is not None
    return Context(
        stack.client,
        MAIN_QUEUE,
        stack.systems_url,
        http,
        stack.wire,
        rng,
        outbox,
        gateway_url=stack.gateway_url,
        **options,
    )


async def _stats(http: httpx.AsyncClient, urls: list[str]) -> dict[str, Any]:
    """The demo systems' records, merged (keys are prefixed by run ids, job ids are unique)."""
    merged: dict[str, Any] = {"keys": {}, "jobs": {}, "refund_keys": {}}
    for url in urls:
        stats = (await http.get(f"{url}/_test/stats")).json()
        for part in merged:
            merged[part].update(stats.get(part, {}))
    return merged


def _report_running(stats: dict[str, dict[str, int]]) -> bool:
    """Whether the MCP server runs a report task now (by its records)."""
    return any(
        c.get("started", 0) > c.get("finished", 0) + c.get("cancelled", 0)
        for key, c in stats.items()
        if not key.startswith("delete:")
    )


def _question_open(stats: dict[str, dict[str, int]]) -> bool:
    """Whether a deletion task of the MCP server asked a question not yet answered."""
    return any(
        c.get("asked", 0) > c.get("answered", 0)
        for key, c in stats.items()
        if key.startswith("delete:")
    )


async def _task_states(url: str, runs: list[RunOutcome]) -> dict[str, str]:
    """What the MCP server says now of each task the runs' operations have (`tasks/get`): its
    operation status, or the error's code (`task_cancelled`...), or `unknown`."""
    backend = McpTaskBackend(McpServer(name="reports", url=url))
    states: dict[str, str] = {}
    try:
        for outcome in runs:
            ops = outcome.state.operations.values() if outcome.state is not None else []
            for op in ops:
                if not op.tool.startswith("reports__"):
                    continue
                try:
                    done = await backend.status(op.job_id)
                except ToolError:
                    states[op.job_id] = "unknown"
                    continue
                states[op.job_id] = done.error.code if done.error is not None else done.status
    finally:
        await backend.aclose()
    return states


async def _minted(ctx: Context, plan: RunPlan) -> None:
    """Until the run has handed out its token: its approval notice (with the link) is in the
    outbox, or its job was accepted by the systems (the start's answer may be held)."""
    if plan.category == "approval":
        await ctx.outbox.request(plan.id)
        return
    url = ctx.systems.get(plan.queue, ctx.systems_url)
    while True:
        stats = (await ctx.http.get(f"{url}/_test/stats")).json()
        if any(k.startswith(f"{plan.id}/") and v["job_id"] for k, v in stats["keys"].items()):
            return
        await asyncio.sleep(0.2)


def _short_timeouts(plan: RunPlan) -> None:
    plan.input = plan.input.model_copy(
        update={"model_timeout": ACTIVITY_TIMEOUT, "tool_timeout": ACTIVITY_TIMEOUT}
    )


def _refusals(outcomes: list[RunOutcome]) -> str:
    """`2×409 run_ended`: the answers to the late completions the driver sent."""
    answers = Counter(
        f"{a.status} {a.code}"
        for outcome in outcomes
        for a in outcome.answers
        if a.via.startswith("late") and not a.accepted
    )
    return " ".join(f"{n}×{answer}" for answer, n in sorted(answers.items())) or "none"


def _ended(outcomes: list[RunOutcome]) -> str:
    counts: dict[str, int] = {}
    for outcome in outcomes:
        counts[outcome.status] = counts.get(outcome.status, 0) + 1
    return ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
