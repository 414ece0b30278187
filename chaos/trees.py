"""Fault classes 21-23 (agent trees): workers and the server killed mid-tree, and trees cancelled
mid-flight. The agents are chaos.tree_app's; the invariants chaos.tree_checks', the rows
chaos.tree_rows'.

21. A lead fans out to `size.tree_fan` sub-agents in one turn (round robin: one answers at once,
    one waits for two exports' webhooks, one polls an enrichment, one waits for an approval the
    driver gives). Under the suite's kill lock, the main queue's workers are SIGKILLed at three
    moments of each tree: once its children are started (running: the lock held from the
    tree's start), once its askers wait for their approvals (waiting), and the moment the
    lead's history records an asker's end (just finished: both workers, so the one holding the
    lead's next workflow task dies with it). Class 1's random kills go on meanwhile.
22. Leads parked mid-tree (exports running, approvals open) through phase B's restarts of the
    dev server, SIGKILL then SIGTERM; their approvals are decided once it is back.
23. A three-level tree (top, two teams, an exporter and an asker under each) on the slow queue,
    whose jobs last 60 s: once every leaf waits, the root is cancelled, and the slow queue's
    worker is SIGKILLed around the cancel (down when it is requested, or right after), then
    started again; the kill lock is held from the tree's start until then, one tree at a time.

What a tree left is read once its root has ended: every node (listed by `RootWorkflowId`) and
its history, until each is closed (at most `CLOSE_TIMEOUT`). The tree's budget (what its nodes
may spend together) is not built yet: no row checks it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError

from chaos import tree_checks as checks
from chaos.history import replay_failures
from chaos.runs import Act, Context, RunOutcome, RunPlan, bounded, drive, until, until_answered
from chaos.sizes import Size
from chaos.stack import Service, Stack
from chaos.tree_app import ASKER, BUDGET_LEAD, EXPORTER, LEAD, TOP, fan_of
from chaos.tree_checks import Execution, Tree
from chaos.tree_rows import CLOSE_TIMEOUT, ROW_BUDGET, ROW_CANCEL, ROW_KILLS, ROW_RESTART
from waitstate.client import ClientError
from waitstate.schemas import RunInput, RunState
from waitstate.schemas.approvals import DecideInput

_T = TypeVar("_T")
# A tree's part, played holding the kill lock until it sets its event (or ends).
Play = Callable[[Context, RunPlan, RunOutcome, asyncio.Event], Awaitable[None]]
# How long a killed worker stays down (as class 1's).
KILL_PAUSE = (0.5, 2.0)
# How often the lead's history is read for an asker's end (the "just finished" kill).
WATCH_EVERY = 0.1
# The cancelled trees' fan-out at each level: 2 teams, each an exporter and an asker.
CANCEL_FAN = 2


@dataclass
class Trees:
    """The tree classes' runs and kills, on the suite's stack, under its kill lock."""

    stack: Stack
    size: Size
    lock: asyncio.Lock
    seed: int
    kills: list[dict[str, Any]] = field(default_factory=list)
    _parked: list[asyncio.Event] = field(default_factory=list)

    # --- the plans ------------------------------------------------------------------------

    async def run(self, ctx: Context, prefix: str, *, phase: str) -> list[RunOutcome]:
        """Classes 21 and 23, at once: their runs' outcomes, each with what its tree left."""
        growing = []
        for i in range(self.size.trees):
            run = RunInput(task=f"survey {prefix}-{i} fan={self.size.tree_fan}", agent=LEAD)
            wid = f"{prefix}-tree-kill-{i:02d}"
            plan = RunPlan(wid, "tree-lead", "plain", run, phase=phase, klass=ROW_KILLS)
            growing.append(self._locked(ctx, plan, self._play_kills))
        for i in range(self.size.tree_budgets):
            run = RunInput(task=f"spend {prefix}-{i} fan={self.size.tree_fan}", agent=BUDGET_LEAD)
            wid = f"{prefix}-tree-budget-{i:02d}"
            plan = RunPlan(wid, "tree-budget", "plain", run, "budget_exceeded", phase=phase,
                           klass=ROW_BUDGET)  # fmt: skip
            growing.append(self._locked(ctx, plan, self._play_budget))
        for i in range(self.size.tree_cancels):
            run = RunInput(task=f"cancel {prefix}-{i} fan={CANCEL_FAN}", agent=TOP)
            wid = f"{prefix}-tree-cancel-{i:02d}"
            plan = RunPlan(wid, "tree-cancel", "plain", run, "cancelled", phase=phase,
                           klass=ROW_CANCEL, queue="slow")  # fmt: skip
            growing.append(self._locked(ctx, plan, self._play_cancel))
        return list(await asyncio.gather(*growing))

    async def _locked(self, ctx: Context, plan: RunPlan, play: Play) -> RunOutcome:
        """A tree driven holding the kill lock from its start until `play` says (its `release`
        set, or its end): no other class's kill, and no wait for one, comes between the tree's
        start and its first moment (a lead's children running; a cancelled tree's leaves
        waiting, whose exporters' jobs last 60 s: a cancel that waited for the lock past them
        found them ended, in a run of the whole suite). One tree at a time, so."""
        release = asyncio.Event()

        async def act(
            ctx: Context, plan: RunPlan, handle: WorkflowHandle[Any, Any], outcome: RunOutcome
        ) -> None:
            try:
                await play(ctx, plan, outcome, release)
            finally:
                release.set()

        plan.act = act
        async with self.lock:
            driving = asyncio.create_task(self.drive(ctx, plan))
            await release.wait()
        return await driving

    def parked(self, prefix: str, hold: asyncio.Event, *, phase: str) -> list[RunPlan]:
        """Class 22's leads: their acts wait for `hold` (the server's restarts done) before
        deciding their approvals; `until_parked` says when all wait."""

        def act() -> Act:
            ready = asyncio.Event()
            self._parked.append(ready)

            async def play(
                ctx: Context, plan: RunPlan, handle: WorkflowHandle[Any, Any], outcome: RunOutcome
            ) -> None:
                await self._play_parked(ctx, plan, outcome, hold, ready)

            return play

        plans = []
        for i in range(self.size.tree_parked):
            run = RunInput(task=f"survey {prefix}-{i} fan={self.size.tree_fan}", agent=LEAD)
            wid = f"{prefix}-tree-parked-{i:02d}"
            plans.append(
                RunPlan(wid, "tree-lead", "plain", run, phase=phase, klass=ROW_RESTART, act=act())
            )
        return plans

    async def until_parked(self, ctx: Context) -> None:
        """Until every parked lead's children wait, or the result timeout (a lead whose children
        never all waited fails its act, a problem the invariants report)."""
        with contextlib.suppress(TimeoutError):
            await bounded(ctx, asyncio.gather(*(e.wait() for e in self._parked)))

    async def drive(self, ctx: Context, plan: RunPlan) -> RunOutcome:
        """Drive a tree's root (chaos.runs.drive), then read what its tree left."""
        outcome = await drive(ctx, plan)
        outcome.facts["tree"] = await read_tree(ctx, outcome)
        return outcome

    # --- the driver's parts ---------------------------------------------------------------

    async def _play_kills(
        self, ctx: Context, plan: RunPlan, outcome: RunOutcome, release: asyncio.Event
    ) -> None:
        """Kill at the three moments; decide the askers' approvals once they all wait. Called
        holding the kill lock, which it gives back (`release`) after the first kill."""
        rng = random.Random(f"{self.seed}/{plan.id}")
        children = await _children(ctx, plan.id, self.size.tree_fan)
        askers = [c for c in children if c.startswith(f"{plan.id}/{ASKER}-")]
        await self._kill_now(ctx, plan.id, "running", rng.random() < 0.5, rng)
        release.set()
        notices = await bounded(ctx, asyncio.gather(*(ctx.outbox.request(a) for a in askers)))
        async with self.lock:
            await self._kill_now(ctx, plan.id, "waiting", rng.random() < 0.5, rng)
        # The lock from before the approvals: no other kill comes between an asker's end and
        # the kill it calls for.
        async with self.lock:
            watch = asyncio.create_task(_first_end(ctx, plan.id, askers))
            approvals = asyncio.gather(
                *(
                    _approve(ctx, a, str(n["request_id"]), rng, outcome)
                    for a, n in zip(askers, notices, strict=True)
                )
            )
            try:
                if askers:
                    seen = await bounded(ctx, watch)
                    await self._kill_now(ctx, plan.id, "finished", True, rng, since=seen)
            finally:
                watch.cancel()
                await approvals

    async def _play_parked(
        self,
        ctx: Context,
        plan: RunPlan,
        out: RunOutcome,
        hold: asyncio.Event,
        ready: asyncio.Event,
    ) -> None:
        rng = random.Random(f"{self.seed}/{plan.id}")
        try:
            children = await _children(ctx, plan.id, self.size.tree_fan)
            askers = [c for c in children if c.startswith(f"{plan.id}/{ASKER}-")]
            notices = await bounded(ctx, asyncio.gather(*(ctx.outbox.request(a) for a in askers)))
            await until(ctx, ctx.runs.handle(plan.id), lambda s: s.status == "waiting")
        finally:
            ready.set()
        await hold.wait()
        await asyncio.gather(
            *(
                _approve(ctx, a, str(n["request_id"]), rng, out)
                for a, n in zip(askers, notices, strict=True)
            )
        )

    async def _play_budget(
        self, ctx: Context, plan: RunPlan, outcome: RunOutcome, release: asyncio.Event
    ) -> None:
        """Kill a main worker (or both) twice while the spenders reserve and spend: once their
        calls run, then a moment later. Called holding the kill lock, which it gives back after
        the first kill."""
        rng = random.Random(f"{self.seed}/{plan.id}")
        await _children(ctx, plan.id, self.size.tree_fan)
        await asyncio.sleep(rng.uniform(0.1, 0.6))
        await self._kill_now(ctx, plan.id, "spending", rng.random() < 0.5, rng)
        release.set()
        await asyncio.sleep(rng.uniform(0.2, 1.0))
        async with self.lock:
            await self._kill_now(ctx, plan.id, "spending", rng.random() < 0.5, rng)

    async def _play_cancel(
        self, ctx: Context, plan: RunPlan, outcome: RunOutcome, release: asyncio.Event
    ) -> None:
        """Once every leaf waits, cancel the root with the slow worker down, or kill it right
        after the cancel; then start it again. The caller holds the kill lock. The jobs running
        then are in `facts["cancel"]["jobs"]`: each must end cancelled."""
        rng = random.Random(f"{self.seed}/{plan.id}")
        leaves = await bounded(ctx, _leaves_waiting(ctx, plan.id))
        jobs = await _running_jobs(ctx, leaves)
        down = int(plan.id.rsplit("-", 1)[1]) % 2 == 0
        worker = self.stack.slow_worker
        assert worker is not None
        if down:
            killed_at = datetime.now(UTC)
            await worker.kill(signal.SIGKILL)
        await _again(lambda: ctx.runs.cancel(plan.id))
        cancelled_at = datetime.now(UTC)
        if not down:
            await worker.kill(signal.SIGKILL)
            killed_at = datetime.now(UTC)
        await asyncio.sleep(rng.uniform(*KILL_PAUSE))
        await worker.start()
        outcome.facts["cancel"] = {
            "worker": "down at the cancel" if down else "killed right after the cancel",
            "killed_at": killed_at.isoformat(),
            "cancelled_at": cancelled_at.isoformat(),
            "leaves": len(leaves),
            "jobs": jobs,
        }

    async def _kill_now(
        self,
        ctx: Context,
        root: str,
        moment: str,
        both: bool,
        rng: random.Random,
        since: float | None = None,
    ) -> None:
        """SIGKILL one main worker (or both), start it again after a pause; record the moment,
        how long after `since` (by `time.monotonic()`) it came, and what the lead's history
        says of its children then. The caller holds the kill lock."""
        victims: list[Service] = (
            list(self.stack.workers) if both else [rng.choice(self.stack.workers)]
        )
        late = None if since is None else time.monotonic() - since
        await asyncio.gather(*(w.kill(signal.SIGKILL) for w in victims))
        seen = await _counts(ctx.client, root)
        await asyncio.sleep(rng.uniform(*KILL_PAUSE))
        await asyncio.gather(*(w.start() for w in victims))
        self.kills.append(
            {"tree": root, "moment": moment, "workers": len(victims), "late": late, **seen}
        )


# --- reading a tree ------------------------------------------------------------------------


async def _again(call: Callable[[], Awaitable[_T]]) -> _T:
    """`call`, again while the server is away (the suite restarts it), for a minute at most."""
    deadline = time.monotonic() + 60.0
    while True:
        try:
            return await asyncio.wait_for(call(), 15.0)
        except (RPCError, ClientError, TimeoutError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


async def _children(ctx: Context, root: str, count: int) -> list[str]:
    """The workflow ids of the root's children, once it has started `count`."""

    def ready(state: RunState) -> bool:
        return state.tree is not None and len(state.tree.children) >= count

    state = await until(ctx, ctx.runs.handle(root), ready)
    assert state.tree is not None
    return list(state.tree.children)


async def _history(client: Client, workflow_id: str, run_id: str | None = None) -> list[Any]:
    handle = client.get_workflow_handle(workflow_id, run_id=run_id)
    return [event async for event in handle.fetch_history_events()]


async def _counts(client: Client, root: str) -> dict[str, int]:
    """What the lead's history says of its children now: started, ended."""
    try:
        seen = checks.child_events(await _again(lambda: _history(client, root)))
    except (RPCError, ClientError, TimeoutError):
        return {"started": -1, "ended": -1}
    return {"started": sum(seen.started.values()), "ended": len(seen.ends)}


async def _first_end(ctx: Context, root: str, askers: list[str]) -> float:
    """When (time.monotonic()) the lead's history first records an asker's end."""
    while True:
        try:
            ends = checks.child_events(await _history(ctx.client, root)).ends
            if any(a in ends for a in askers):
                return time.monotonic()
        except RPCError:
            pass
        await asyncio.sleep(WATCH_EVERY)


async def _approve(
    ctx: Context, run_id: str, request_id: str, rng: random.Random, out: RunOutcome
) -> None:
    """Approve an asker's request by Update, after a moment (its answer kept in `facts`: the
    generic invariants read `answers` as the root's own)."""
    await asyncio.sleep(rng.uniform(0.0, 1.5))
    decide = DecideInput(request_id=request_id, decision="approve", reviewer="chaos-tree")
    answer, refusal = await until_answered(
        ctx, lambda: ctx.runs.decide(run_id, decide, update_id=f"chaos-tree/{request_id}")
    )
    said = refusal if answer is None else f"accepted: {answer.status}"
    out.facts.setdefault("decisions", []).append(f"{run_id}: {said}")


async def _leaves_waiting(ctx: Context, root: str) -> list[str]:
    """Until each team's exporter has its jobs running and its asker its approval open; the
    leaves' workflow ids."""
    teams = await _children(ctx, root, CANCEL_FAN)
    leaves = [leaf for team in teams for leaf in await _children(ctx, team, CANCEL_FAN)]

    def waits(leaf: str) -> Callable[[RunState], bool]:
        if f"/{EXPORTER}-" in leaf:
            return lambda s: any(not op.terminal for op in s.operations.values())
        return lambda s: any(r.open for r in s.approvals.values())

    await asyncio.gather(*(until(ctx, ctx.runs.handle(leaf), waits(leaf)) for leaf in leaves))
    return leaves


async def _running_jobs(ctx: Context, leaves: list[str]) -> list[str]:
    """The job ids of the leaves' operations still running."""
    jobs = []
    for leaf in leaves:
        state = await until(ctx, ctx.runs.handle(leaf), lambda s: True)
        jobs += [op.job_id for op in state.operations.values() if not op.terminal and op.job_id]
    return jobs


async def _listed(client: Client, root: str) -> dict[str, list[tuple[str, str]]]:
    """Every execution under the root (its own included), by workflow id: (run id, status)."""
    found: dict[str, list[tuple[str, str]]] = {}
    async for execution in client.list_workflows(f"RootWorkflowId = '{root}'"):
        status = execution.status.name if execution.status is not None else "UNKNOWN"
        found.setdefault(execution.id, []).append((execution.run_id, status))
    return found


async def _executions(client: Client, node: str, runs: list[tuple[str, str]]) -> list[Execution]:
    """The node's executions, each with its history."""
    found = []
    for run, status in runs:
        history = await _again(functools.partial(_history, client, node, run))
        found.append(Execution(run, status, history))
    return found


async def read_tree(ctx: Context, outcome: RunOutcome) -> Tree:
    """What the tree of `outcome`'s root left, once every node has closed (or CLOSE_TIMEOUT
    after the root's end): each node's executions and histories, the lead's answer."""
    plan = outcome.plan
    state = outcome.state
    tree = Tree(
        plan.id,
        outcome.status,
        answer=(state.final_output or "") if state is not None else "",
        fan=fan_of(plan.input.task),
    )
    deadline = outcome.ended_at + CLOSE_TIMEOUT
    while True:
        try:
            listing = await _again(lambda: _listed(ctx.client, plan.id))
            nodes = {
                node: await _executions(ctx.client, node, runs) for node, runs in listing.items()
            }
        except (RPCError, ClientError, TimeoutError) as err:
            tree.unread.append(f"{plan.id}: the tree could not be read: {err!r}")
            return tree
        tree.nodes = nodes
        started = {
            child
            for executions in nodes.values()
            for e in executions
            for child in checks.child_events(e.history).initiated
        }
        still = [n for n, runs in nodes.items() for e in runs if e.status == "RUNNING"]
        if not still and started <= set(nodes):
            tree.closing = max(0.0, time.monotonic() - outcome.ended_at)
            break
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(1.0)
    for node, executions in tree.nodes.items():
        if node != plan.id:
            chain = [e.history for e in executions]
            tree.unread += await replay_failures(node, chain, ctx.nondeterministic)
    return tree
