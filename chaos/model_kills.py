"""Fault class 19 (issue 39): a worker SIGKILLed while model calls are in flight.

Runs whose model (the suite's model server, over the OpenAI wire protocol) holds its first call
unanswered until the call's retry arrives: plain runs (the model then calls `calculate` and
answers) and threads (their first message's call is held, a second message queued behind it).
Under the suite's kill lock, held until the runs have ended (no other kill meanwhile, not under
a call's retry nor under a later turn's call: each call's takeover is this class's), they are
started, and once every held call has reached the model, every worker holding one is
SIGKILLed, then started again after a pause. The calls keep the runs' default model timeout
(two minutes): what takes them over is their heartbeat timeout.

What holds, per run: it completes, every message of a thread is answered, once; the model was
asked once per turn, plus once for each call a kill cut short (nothing asked twice, nothing
lost); and each killed call was taken over within its heartbeat timeout, read from its history:
the heartbeat timeout its scheduled event records, and the start of its next attempt, against
the moment of the kill (or the moment a worker was back, if that came later), plus the first
retry's interval and `TAKEOVER_SLACK`.
"""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import WorkflowHandle

from chaos.history import ACTIVITY_SCHEDULED, ACTIVITY_STARTED, CONTINUED
from chaos.model import Check
from chaos.runs import Context, RunOutcome, RunPlan, bounded, drive, until
from chaos.sizes import Size
from chaos.stack import Service, Stack
from waitstate.client import thread_input
from waitstate.schemas import RunInput, RunState
from waitstate.schemas.run import CALL_MODEL
from waitstate.schemas.threads import ThreadSettings
from waitstate.workflows.policies import MODEL_RETRY

ROW = "19 worker SIGKILL during model calls"
ROWS = (ROW,)
# What a takeover may take past the heartbeat timeout and the first retry's interval: the
# server's timer, and the attempt's dispatch, on a loaded machine. Without heartbeats the
# takeover waits for the call's start-to-close, two minutes.
TAKEOVER_SLACK = timedelta(seconds=5)
# How long a killed worker stays down before it is started again (as class 1's, about).
KILL_PAUSE = 1.0
# A thread closes this long after its last reply, which ends its run for the driver.
CLOSE_AFTER = timedelta(seconds=20)
MESSAGES = ("what is two and two?", "and three and three?")


@dataclass(frozen=True)
class Held:
    """A call held by the model server: which run, which activity, on which worker."""

    plan: RunPlan
    run: str  # the Temporal run id the call is of (a thread's turn: the run of that turn)
    activity: str
    worker: Service


@dataclass
class ModelKills:
    """The class's runs and its kills, on the suite's stack, under its kill lock."""

    stack: Stack
    size: Size
    lock: asyncio.Lock

    def plans(self, prefix: str, *, phase: str) -> list[RunPlan]:
        """`size.model_kills` plain runs and as many threads, their model the run's own name
        (so the held call is the run's), with the default model timeout."""
        plans = []
        for i in range(self.size.model_kills):
            wid = f"{prefix}-19-run-{i:02d}"
            run = RunInput(task="add two and two", model=f"openai:{wid}", tools=["calculate"])
            plans.append(RunPlan(wid, "model-kill", "model", run, phase=phase, klass=ROW))
            wid = f"{prefix}-19-thread-{i:02d}"
            settings = ThreadSettings(close_after=CLOSE_AFTER)
            thread = thread_input(model=f"openai:{wid}", settings=settings)
            kind = "model-kill-thread"
            plans.append(RunPlan(wid, kind, "model", thread, phase=phase, klass=ROW, act=converse))
        return plans

    async def run(self, ctx: Context, prefix: str, *, phase: str) -> list[RunOutcome]:
        """Drive the class's runs, kill the workers holding their calls, and return the runs'
        outcomes with what the kills were (`facts["killed"]`) and how often each run's model
        was asked (`facts["asked"]`)."""
        plans = self.plans(prefix, phase=phase)
        if not plans:
            return []
        for plan in plans:
            ctx.wire.hang_until_retry(plan.id)  # its first call, until its retry arrives
        killed: dict[str, list[dict[str, Any]]] = {plan.id: [] for plan in plans}
        notes: list[str] = []
        # The lock is held until the runs have ended: another class's kill under any of their
        # calls (a thread's second message's, a run's last turn's) would make its model be asked
        # once more, not this class's doing.
        async with self.lock:
            runs = [asyncio.create_task(drive(ctx, plan)) for plan in plans]
            try:
                held = await bounded(ctx, asyncio.gather(*(self._held(ctx, p) for p in plans)))
                await bounded(ctx, self._kill(ctx, held, killed))
            except Exception as err:  # noqa: BLE001 - the class's failure is its runs' problem
                notes.append(f"driver: the kills: {type(err).__name__}: {err}")
            outcomes = list(await asyncio.gather(*runs))
        for outcome in outcomes:
            outcome.facts["killed"] = killed[outcome.plan.id]
            outcome.facts["asked"] = _asked(ctx, outcome.plan.id)
            outcome.problems += notes
        return outcomes

    async def _held(self, ctx: Context, plan: RunPlan) -> Held:
        """The run's call once the model holds it: at the model server, started on a worker."""
        handle = ctx.client.get_workflow_handle(plan.id)
        while True:
            if _asked(ctx, plan.id):
                found = await _started_call(handle)
                if found is not None:
                    run, activity, identity = found
                    return Held(plan, run, activity, self._worker(identity))
            await asyncio.sleep(ctx.query_every)

    def _worker(self, identity: str) -> Service:
        """The main queue's worker of `identity` (a worker's default, `<pid>@<host>`)."""
        pid = identity.split("@", 1)[0]
        for worker in self.stack.workers:
            if worker.process is not None and str(worker.process.pid) == pid:
                return worker
        raise RuntimeError(f"no worker of the main queue is {identity}")

    async def _kill(
        self, ctx: Context, held: list[Held], killed: dict[str, list[dict[str, Any]]]
    ) -> None:
        """SIGKILL every worker holding a call, start them again after a pause, and wait until
        every call has ended (taken over by its next attempt, which ran to its end)."""
        victims = list({id(h.worker): h.worker for h in held}.values())
        at = datetime.now(UTC)
        await asyncio.gather(*(w.kill(signal.SIGKILL) for w in victims))
        spared = len(victims) < len(self.stack.workers)
        await asyncio.sleep(KILL_PAUSE)
        await asyncio.gather(*(w.start() for w in victims))
        back = at if spared else datetime.now(UTC)  # a worker polled again (its twin, or they)
        for call in held:
            killed[call.plan.id].append(
                {
                    "run": call.run,
                    "activity": call.activity,
                    "worker": call.worker.name,
                    "killed_at": at.isoformat(),
                    "back_at": back.isoformat(),
                }
            )
        await asyncio.gather(*(_taken_over(ctx, call) for call in held))


async def converse(
    ctx: Context, plan: RunPlan, handle: WorkflowHandle[Any, Any], outcome: RunOutcome
) -> None:
    """A thread's part: two messages (the second queued behind the first's held call), then
    their replies; the message ids in `facts["messages"]`."""
    sent = [await ctx.runs.send_message(plan.id, text, key=text) for text in MESSAGES]
    ids = [s.accepted.message_id for s in sent]
    outcome.facts["messages"] = ids
    await until(ctx, handle, lambda state: _replied(state, ids))


def _replied(state: RunState, ids: list[str]) -> bool:
    messages = {m.message_id: m for m in state.thread.messages} if state.thread else {}
    return all(i in messages and messages[i].status == "replied" for i in ids)


def _asked(ctx: Context, model: str) -> int:
    """How many calls the model server got for `model`."""
    return sum(
        1
        for request in ctx.wire.requests
        if isinstance(request.body, dict) and request.body.get("model") == model
    )


async def _started_call(handle: WorkflowHandle[Any, Any]) -> tuple[str, str, str] | None:
    """The run's model call started on a worker, as (run id, activity id, worker identity)."""
    described = await handle.describe()
    for pending in described.raw_description.pending_activities:
        if (
            pending.activity_type.name == CALL_MODEL
            and pending.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
            and pending.attempt == 1
        ):
            return described.run_id, pending.activity_id, pending.last_worker_identity
    return None


async def _taken_over(ctx: Context, call: Held) -> None:
    """Until the killed call has ended: its next attempt has not only started but finished (the
    kill lock, held until the runs end, keeps every other class's kill off that attempt: a
    worker killed under the retry would make the model be asked once more, and the retry be
    taken over a heartbeat timeout later, neither this class's doing)."""
    handle = ctx.client.get_workflow_handle(call.plan.id, run_id=call.run)
    while True:
        pending = (await handle.describe()).raw_description.pending_activities
        if all(p.activity_id != call.activity for p in pending):
            return
        await asyncio.sleep(ctx.query_every)


# --- the check -------------------------------------------------------------------------------


def rows(outcomes: list[RunOutcome]) -> list[Check]:
    """The class's row: its runs, their messages and kills, how soon each call was taken over,
    and every violation of `check`."""
    mine = [o for o in outcomes if o.plan.klass == ROW]
    check = Check(ROW, attempts=len(mine))
    took: list[float] = []
    for outcome in mine:
        check.violations += violations(outcome, took)
    threads = [o for o in mine if o.plan.input.thread is not None]
    messages = sum(len(o.facts.get("messages", [])) for o in threads)
    calls = sum(len(o.facts.get("killed", [])) for o in mine)
    workers = {k["worker"] for o in mine for k in o.facts.get("killed", [])}
    ended = Counter(o.status for o in mine)
    taken = f"{min(took):.1f}-{max(took):.1f} s" if took else "never"
    check.outcome = (
        f"{len(mine)} runs, {len(threads)} of them threads ({messages} messages): {calls} calls "
        f"held at the model, workers SIGKILLed under them: {len(workers)}; taken over {taken} "
        "after the kill; " + ", ".join(f"{n} {status}" for status, n in sorted(ended.items()))
    )
    return [check]


def violations(outcome: RunOutcome, took: list[float] | None = None) -> list[str]:
    """What the run broke of the class's promises (see the module's docstring); the seconds
    each killed call took to be taken over are appended to `took`."""
    plan = outcome.plan
    tag = f"{plan.id} ({plan.kind})"
    found: list[str] = []
    state = outcome.state
    if outcome.status != "completed":
        found.append(f"{tag}: ended {outcome.status}, not completed")
    killed = outcome.facts.get("killed", [])
    if not killed:
        found.append(f"{tag}: no call of it was killed")
    if state is None:
        return [*found, f"{tag}: no state to check"]
    turns = state.turns
    if plan.input.thread is not None:
        found += _answered_once(tag, state, outcome.facts.get("messages", []))
        turns = sum(m.model_calls for m in state.thread.messages) if state.thread else 0
    asked = outcome.facts.get("asked", 0)
    if asked != turns + len(killed):
        found.append(
            f"{tag}: the model was asked {asked} times for {turns} turns and {len(killed)} "
            "calls killed (each turn once, and each killed call once more)"
        )
    for kill in killed:
        found += _takeover(tag, outcome, kill, took if took is not None else [])
    return found


def _answered_once(tag: str, state: RunState, ids: list[str]) -> list[str]:
    """Each message sent replied, by one reply."""
    if not ids:
        return [f"{tag}: no message was sent"]
    messages = {m.message_id: m for m in state.thread.messages} if state.thread else {}
    replies = Counter(s.detail for s in state.steps if s.kind == "event" and s.name == "reply")
    found = []
    for message_id in ids:
        message = messages.get(message_id)
        status = message.status if message is not None else "lost"
        if status != "replied":
            found.append(f"{tag}: message {message_id} {status}, not replied")
        if replies[f"{message_id} replied"] > 1:
            found.append(f"{tag}: message {message_id} replied to twice")
    return found


def _takeover(tag: str, outcome: RunOutcome, kill: dict[str, Any], took: list[float]) -> list[str]:
    """The killed call's heartbeat timeout and its next attempt's start, from the history of
    its run, against the kill."""
    what = f"{tag}: call {kill['activity']} of run {kill['run']}"
    events = _history(outcome, kill["run"])
    if events is None:
        return [f"{what}: its run is not in the chain read"]
    scheduled = next(
        (
            e
            for e in events
            if e.event_type == ACTIVITY_SCHEDULED
            and e.activity_task_scheduled_event_attributes.activity_id == kill["activity"]
        ),
        None,
    )
    if scheduled is None:
        return [f"{what}: not in its run's history"]
    started = next(
        (
            e
            for e in events
            if e.event_type == ACTIVITY_STARTED
            and e.activity_task_started_event_attributes.scheduled_event_id == scheduled.event_id
        ),
        None,
    )
    heartbeat = scheduled.activity_task_scheduled_event_attributes.heartbeat_timeout.ToTimedelta()
    found = []
    if not heartbeat:
        found.append(f"{what}: scheduled with no heartbeat timeout")
    attempt = started.activity_task_started_event_attributes.attempt if started else 0
    if started is None or attempt < 2:
        return [*found, f"{what}: not tried again after the kill (its last attempt {attempt})"]
    at = started.event_time.ToDatetime(tzinfo=UTC)
    killed_at = datetime.fromisoformat(kill["killed_at"])
    back_at = datetime.fromisoformat(kill["back_at"])
    limit = max(killed_at + heartbeat + MODEL_RETRY.initial_interval, back_at) + TAKEOVER_SLACK
    took.append((at - killed_at).total_seconds())
    if at > limit:
        found.append(
            f"{what}: taken over {(at - killed_at).total_seconds():.1f} s after the kill, past "
            f"its heartbeat timeout of {heartbeat.total_seconds():g} s (and the first retry's "
            f"{MODEL_RETRY.initial_interval.total_seconds():g} s, {TAKEOVER_SLACK.seconds} s of "
            "slack)"
        )
    return found


def _history(outcome: RunOutcome, run_id: str) -> list[Any] | None:
    """The history of the run `run_id` of the outcome's chain (the first is `first_run`)."""
    current = outcome.first_run
    for events in outcome.chain:
        if current == run_id:
            return events
        last = events[-1] if events else None
        if last is None or last.event_type != CONTINUED:
            return None
        current = last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
    return None
