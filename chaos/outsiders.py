"""The fault classes of issue 22 ("what outsiders broke"): hostile questions, lost webhooks, a
blob store outage, and questions that come while the run is busy, on the same stack and under
the same worker kills as the rest.

12. A crafted schema, a backtracking pattern: a purge (our own long tool, through the gateway)
    asks in `{confirm: boolean, name: string matching ^(a+)+$}`, and so does an MCP task of the
    demo's server (`DEMO_MCP_DELETE_SCHEMAS`); the driver answers with the crafted answer (thirty
    `a`s and a `!`) through the question's link and by the `answer` Update: each must be
    refused promptly (a backtracking match takes minutes and, run where the workflow runs,
    stalls every run of its worker), then a valid answer is applied once. The workers' logs
    must hold no deadlock (TMPRL1101).
13. A crafted schema, malformed: `{"type": 12}`, a dangling `$ref`, a remote `$ref`. A purge's
    question is refused by the gateway (422 `invalid_question`, the purge fails saying why); an
    MCP task's is recorded `refused` and declined with the reason. No question is left
    unanswerable, no run stuck.
14. A gateway outage that loses webhooks: exports whose status is checked every few seconds
    (`LongSpec.reconcile_every`); the gateway is SIGKILLed once their jobs are accepted and
    kept down until every job has finished and its sender (told to give up after a second)
    has given up; the runs must learn each end by a status check, well before the operations'
    timeout, and no finished job may be sent a cancel.
15. A blob store outage longer than the model's retry budget (in `full` three minutes): runs
    mid-flight (approvals decided as the store goes, exports whose webhooks come during it,
    model calls in flight over the OpenAI wire protocol) must end as they would have; the
    store's failures are waited out, not charged to the model (asked once per turn).
16. Questions during `wait_for_operations`: a purge in handle mode whose question goes to the
    model, which is waiting for it: the wait must end, and the model answer.
17. Questions during a checkpoint: a purge asks a person while the checkpoint's model call
    (over the wire protocol) is held in flight; once the run waits, it must be found by
    `WaitingFor = "input"` and listed by `waiting_for_people` (`starter.py pending`), then
    answered.

The invariants of chaos.invariants hold for these runs as for all; each row adds what its
class is about, counted, and the driver adds the violations of the class's runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import random
import re
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

import httpx
from temporalio.client import WorkflowHandle

from chaos.app import (
    DELETE_SCRIPT,
    DELETE_TOOL,
    MODEL_PURGE_TOOL,
    PURGE_SCRIPT,
    PURGE_TOOL,
    RECONCILED_EXPORT_SCRIPT,
    RECONCILED_EXPORT_TOOL,
    WAIT_AND_ANSWER_SCRIPT,
)
from chaos.history import ACTIVITY_SCHEDULED, ACTIVITY_STARTED
from chaos.invariants import answer_code, interrupted_start, run_keys
from chaos.model import Check
from chaos.runs import (
    DECIDERS,
    EXPORT_TOOLS,
    LINK_RETRY_SECONDS,
    SEND_AGAIN,
    Answer,
    Context,
    RunOutcome,
    RunPlan,
    bounded,
    drive,
    error_code,
    until,
    until_answered,
)
from chaos.sizes import Size
from chaos.stack import Stack
from examples.systems import WebhookRetry
from examples.systems.webhooks import WEBHOOK_RETRYABLE
from waitstate.client import ClientError
from waitstate.schemas import RunInput
from waitstate.schemas.questions import AnswerInput, InputRequest
from waitstate.schemas.run import CALL_MODEL, TERMINAL_STATUSES
from waitstate.testing.wire_server import HeldReply, openai_text, openai_tool_calls
from waitstate.workflows.policies import MODEL_RETRY, STORE_RETRY_MAX
from waitstate.workflows.search_attributes import WAITING_FOR

CRAFTED_PATTERN = "12 crafted schema: a backtracking pattern"
CRAFTED_MALFORMED = "13 crafted schema: malformed"
LOST_WEBHOOK = "14 gateway outage that loses webhooks"
STORE_OUTAGE = "15 blob store outage"
WAIT_QUESTION = "16 questions during wait_for_operations"
CHECKPOINT_QUESTION = "17 questions during a checkpoint"
ROWS = (
    CRAFTED_PATTERN, CRAFTED_MALFORMED, LOST_WEBHOOK, STORE_OUTAGE, WAIT_QUESTION,
    CHECKPOINT_QUESTION,
)  # fmt: skip

# The issue's backtracking pattern, beside the `confirm` both askers need; its worst case, and
# an answer that fits.
PATTERN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "confirm": {"type": "boolean"},
        "name": {"type": "string", "pattern": "^(a+)+$"},
    },
    "required": ["confirm"],
}
CRAFTED_ANSWER: dict[str, Any] = {"confirm": True, "name": "a" * 30 + "!"}
VALID_ANSWER: dict[str, Any] = {"confirm": True, "name": "aaaa"}
# Schemas no answer could fit (issue 22, defect 2).
MALFORMED: dict[str, dict[str, Any]] = {
    "type-12": {"type": 12},
    "dangling-ref": {"type": "object", "properties": {"confirm": {"$ref": "#/$defs/missing"}}},
    "remote-ref": {"$ref": "https://schemas.example/answer.json"},
}
Asker = Literal["purge", "mcp"]
# A refusal of a crafted answer within this is prompt (a worker killed on the way, and its
# successor's start, included); the backtracking it is about takes minutes.
PROMPTLY = 30.0
# Bounds the crafted runs' operations: before the fixes, a question nobody can answer left
# them waiting until this, not for the purge's hour.
CRAFTED_OPERATION_TIMEOUT = timedelta(seconds=90)
# The suite's short call timeouts (chaos.driver's), and the checkpoint runs' model timeout:
# past the checkpoint call's hold (seconds), which a timeout must not cut.
CALL_TIMEOUT = timedelta(seconds=10)
CHECKPOINT_MODEL_TIMEOUT = timedelta(seconds=30)
# The checkpoint call is held until the run records the purge's question (or this passes).
HOLD_LIMIT = 60.0
CHECKPOINT = "Done: started the purge\nRemaining: report the purge's outcome"
# How soon a run waiting for a person's answer must be found as such (visibility included).
LISTED_WITHIN = 30.0
LIST_EVERY = 0.5
# The lost webhooks: their senders give up after this (instead of ten minutes); the gateway
# stays down until they have, within this.
GIVE_UP_SECONDS = 1.0
LOST_EXPORT_SECONDS = 12.0  # how long class 14's exports run
GIVE_UP_WITHIN = 60.0
# What a run records when a status check found its operation's end (workflows/jobs.py).
_FOUND = re.compile(
    r"^(\S+) (succeeded|failed): found by (a status check|the status check before its expiry)"
)
# What a run records when a blob store outage is over (workflows/outages.py).
_STORE_BACK = re.compile(r"back after (\S+) \((\d+) tries of the (.+) met the outage\)")
# How often the driver looks at the outage runs' status while the store is away.
STATUS_EVERY = 3.0
# Deadlock-detector trips a worker logs (the SDK's "Potential deadlock detected", TMPRL1101).
_DEADLOCK = re.compile(r"deadlock|TMPRL1101", re.IGNORECASE)


def old_model_budget() -> float:
    """How long the model call's retry policy lets it fail (the waits between its attempts):
    what a blob store outage cost a run before it was waited out."""
    policy = MODEL_RETRY
    waits = [
        min(
            policy.initial_interval.total_seconds() * policy.backoff_coefficient**k,
            (policy.maximum_interval or timedelta(days=1)).total_seconds(),
        )
        for k in range(max(policy.maximum_attempts - 1, 0))
    ]
    return sum(waits)


def _run_id(prefix: str, kind: str, i: int) -> str:
    """The id of the `i`th run of a kind of issue 22's, under the phase's `prefix`."""
    return f"{prefix}-22-{kind}-{i:02d}"


def _mcp_name(prefix: str, kind: str, i: int) -> str:
    return _run_id(prefix, f"{kind}-mcp", i)


def _purge(wid: str, model: str, tool: str, **fields: Any) -> RunInput:
    """A run that purges the dataset named after it, with `tool` as `model` asks."""
    return RunInput(task=f"purge the dataset {wid}", model=model, tools=[tool], **fields)


def mcp_schemas(mix: Size, prefix: str = "chaos-a") -> dict[str, dict[str, Any]]:
    """What the demo MCP server's deletions ask in, by dataset (the run's id), for the crafted
    runs `Outsiders.plans` makes with `prefix` (the server is started before them)."""
    if not mix.crafted_mcp:
        return {}
    schemas = {_mcp_name(prefix, "pattern", i): PATTERN_SCHEMA for i in range(mix.crafted)}
    for case, schema in MALFORMED.items():
        schemas |= {_mcp_name(prefix, f"malformed-{case}", i): schema for i in range(mix.crafted)}
    return schemas


@dataclass
class LostWebhooks:
    """What the gateway outage did, for its row."""

    down_seconds: float = 0.0
    gave_up: bool = False
    note: str = ""


@dataclass
class StoreOutageSeen:
    """What the blob store outage did, for its row."""

    how: str = ""
    down_seconds: float = 0.0
    restore_seconds: float = 0.0
    blobs_before: int = 0
    blobs_lost: int = 0


@dataclass
class Outsiders:
    """Issue 22's runs, the driver's part in them, and their rows."""

    stack: Stack
    mix: Size
    held: dict[str, HeldReply] = field(default_factory=dict)
    lost: LostWebhooks | None = None
    store: StoreOutageSeen | None = None

    # --- phase A: crafted schemas, questions during a wait and during a checkpoint ----------

    def plans(self, prefix: str, rng: random.Random, *, phase: str) -> list[RunPlan]:
        """The runs of classes 12, 13, 16 and 17 (each with its call timeouts set)."""
        mix = self.mix
        out: list[RunPlan] = []
        askers: list[Asker] = ["purge", "mcp"] if mix.crafted_mcp else ["purge"]
        cases: list[tuple[str, str, dict[str, Any]]] = [
            ("pattern", CRAFTED_PATTERN, PATTERN_SCHEMA),
            *((f"malformed-{case}", CRAFTED_MALFORMED, s) for case, s in MALFORMED.items()),
        ]
        for kind, row, schema in cases:
            for asker in askers:
                for i in range(mix.crafted):
                    out.append(self._crafted(prefix, kind, row, schema, asker, i, rng))
        for i in range(mix.wait_questions):
            wid = _run_id(prefix, "wait-question", i)
            run = _purge(wid, f"scripted:{WAIT_AND_ANSWER_SCRIPT}", MODEL_PURGE_TOOL)
            out.append(RunPlan(wid, "wait-question", "callback", run, klass=WAIT_QUESTION))
        for i in range(mix.checkpoint_questions):
            wid = _run_id(prefix, "checkpoint-question", i)
            # Shorter than the purge's eta (seconds): its wait is worth a checkpoint.
            run = _purge(
                wid, f"openai:{wid}", PURGE_TOOL, rebuild_after=timedelta(milliseconds=100)
            )
            out.append(
                RunPlan(wid, "checkpoint-question", "callback", run, klass=CHECKPOINT_QUESTION,
                        act=self._checkpoint_question)
            )  # fmt: skip
        for plan in out:
            plan.phase = phase
            held = plan.klass == CHECKPOINT_QUESTION
            model_timeout = CHECKPOINT_MODEL_TIMEOUT if held else CALL_TIMEOUT
            plan.input = plan.input.model_copy(
                update={"tool_timeout": CALL_TIMEOUT, "model_timeout": model_timeout}
            )
        return out

    def _crafted(
        self,
        prefix: str,
        kind: str,
        row: str,
        schema: dict[str, Any],
        asker: Asker,
        i: int,
        rng: random.Random,
    ) -> RunPlan:
        if asker == "mcp":
            wid = _mcp_name(prefix, kind, i)
            run = RunInput(
                task=f"delete the dataset {wid}",
                model=f"scripted:{DELETE_SCRIPT}",
                tools=[DELETE_TOOL],
                operation_timeout=CRAFTED_OPERATION_TIMEOUT,
            )
            # A destructive tool: the driver approves the call first, by the means the mix
            # picks, so that its task can ask at all.
            plan = RunPlan(wid, f"crafted-{kind}-mcp", "approval", run,
                           decider=rng.choice(DECIDERS))  # fmt: skip
        else:
            wid = _run_id(prefix, f"{kind}-purge", i)
            run = _purge(
                wid,
                f"scripted:{PURGE_SCRIPT}",
                PURGE_TOOL,
                operation_timeout=CRAFTED_OPERATION_TIMEOUT,
            )
            plan = RunPlan(wid, f"crafted-{kind}-purge", "callback", run)
        plan.klass, plan.schema = row, schema
        if row == CRAFTED_PATTERN:
            plan.act = self._crafted_answers
        return plan

    async def prepare(self, ctx: Context, plans: list[RunPlan]) -> None:
        """Before the runs start: to the main systems, the schemas the crafted purges ask in
        and the checkpoint runs' purges to hold (each asks when the driver says); to the wire
        server, the checkpoint runs' model replies (the checkpoint call held until the driver
        releases it)."""
        schemas = {
            plan.id: plan.schema
            for plan in plans
            if plan.schema is not None and PURGE_TOOL in plan.input.tools
        }
        asking_late = [plan.id for plan in plans if plan.klass == CHECKPOINT_QUESTION]
        await _faults(ctx, purge_schemas=schemas, held_purges=asking_late)
        for plan in plans:
            if plan.klass != CHECKPOINT_QUESTION:
                continue
            purge = json.dumps({"dataset": plan.id})
            held = HeldReply(HOLD_LIMIT, openai_text(CHECKPOINT))
            self.held[plan.id] = held
            ctx.wire.enqueue_for(
                plan.id,
                openai_tool_calls([("call_purge", PURGE_TOOL, purge)]),
                held,
                openai_text(f"purged {plan.id}"),
            )

    async def _crafted_answers(
        self, ctx: Context, plan: RunPlan, handle: WorkflowHandle[Any, Any], outcome: RunOutcome
    ) -> None:
        """The crafted answer through the question's link and by Update (each timed), then a
        valid one, by one or the other."""
        question = await _question(ctx, handle, outcome)
        if question is None:
            return
        notice = await bounded(ctx, ctx.outbox.question(plan.id, question.question_id))
        link = notice["answer"]

        async def record(sent: Awaitable[tuple[Answer, float]]) -> None:
            answer, took = await sent
            outcome.answers.append(answer)
            outcome.facts[answer.via] = took
            outcome.notes.append(f"{answer.via}: {answer.code} ({took:.1f}s)")

        await record(_link_answer(ctx, link, question, CRAFTED_ANSWER, "link (crafted)"))
        await record(_update_answer(ctx, handle.id, question, CRAFTED_ANSWER, "update (crafted)"))
        # Then the valid answer, by one means or the other, in turn across runs.
        if _odd(plan.id):
            await record(_link_answer(ctx, link, question, VALID_ANSWER, "link"))
        else:
            await record(_update_answer(ctx, handle.id, question, VALID_ANSWER, "update"))

    async def _checkpoint_question(
        self, ctx: Context, plan: RunPlan, handle: WorkflowHandle[Any, Any], outcome: RunOutcome
    ) -> None:
        """Once the purge's question is in the run: whether the checkpoint call was still in
        flight (held), then its release; once the checkpoint is recorded and the run waits,
        what it says it waits for (its search attribute, as Temporal holds it now), and how
        soon it is found waiting for input by visibility and by `waiting_for_people`; then the
        answer."""
        held = self.held[plan.id]
        # Its purge asks once the checkpoint call (the run's second to the model) is in flight.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(HOLD_LIMIT):
                await _requests(ctx, plan.id, 2)
        told = await ctx.http.post(f"{ctx.systems_url}/_test/purges/{plan.id}/ask")
        told.raise_for_status()
        question = await _question(ctx, handle, outcome)
        requests = [r for r in ctx.wire.requests if _model(r.body) == plan.id]
        outcome.facts["asked during the checkpoint"] = (
            question is not None
            and not held.release.is_set()
            and len(requests) >= 2
            and requests[1].answered_at is None
        )
        held.release.set()
        if question is None:
            return
        # The question came while the checkpoint call was in flight: what counts is what the
        # run shows once that call has ended and its wait has begun (before, it shows input).
        await until(ctx, handle, lambda s: s.checkpoint is not None and s.status == "waiting")
        attributes = (await handle.describe()).typed_search_attributes
        outcome.facts["WaitingFor"] = attributes.get(WAITING_FOR)
        began = time.monotonic()
        query = f'WorkflowId = "{plan.id}" AND {WAITING_FOR.name} = "input"'

        async def found() -> bool:
            return bool([run async for run in ctx.client.list_workflows(query)])

        async def listed() -> bool:
            listing = time.monotonic()
            pending = await ctx.runs.waiting_for_people()
            took = time.monotonic() - listing
            outcome.facts["pending's listing"] = max(
                outcome.facts.get("pending's listing", 0), took
            )
            return any(
                q.run_id == plan.id and q.question.question_id == question.question_id
                for q in pending.questions
            )

        for name, check in (("found by WaitingFor", found), ("listed by pending", listed)):
            seen = await _within(LISTED_WITHIN, check)
            outcome.facts[name] = None if seen is None else seen - began
            began = time.monotonic()
        confirm = {"confirm": True}
        if _odd(plan.id):
            notice = await bounded(ctx, ctx.outbox.question(plan.id, question.question_id))
            answer, _ = await _link_answer(ctx, notice["answer"], question, confirm, "link")
        else:
            answer, _ = await _update_answer(ctx, handle.id, question, confirm, "update")
        outcome.answers.append(answer)

    # --- phase C: the gateway outage, then the blob store outage ----------------------------

    async def lost_webhooks(self, ctx: Context, *, prefix: str, phase: str) -> list[RunOutcome]:
        """Class 14: exports reconciled every few seconds, their webhooks lost to a gateway
        outage that outlasts their senders' patience."""
        plans = [
            RunPlan(
                _run_id(prefix, "lost-webhook", i), "lost-webhook", "callback",
                RunInput(task="export", model=f"scripted:{RECONCILED_EXPORT_SCRIPT}",
                         tools=[RECONCILED_EXPORT_TOOL], model_timeout=CALL_TIMEOUT,
                         tool_timeout=CALL_TIMEOUT),
                klass=LOST_WEBHOOK, operations="succeeded", phase=phase,
            )
            for i in range(self.mix.lost_webhooks)
        ]  # fmt: skip
        lost = self.lost = LostWebhooks()
        # Only these jobs are started while it is set: every other run has ended. They run
        # long enough (LOST_EXPORT_SECONDS) that none ends before the last has started and the
        # gateway is down: under load, a job of 2 s ended and was reported before it (and in
        # CI, beside the other tests, one of 8 s: its sender, answered, never gave up, and the
        # wait for it did; a report taken is now a sender done, counted as `taken`).
        await _faults(
            ctx, webhook_give_up_seconds=GIVE_UP_SECONDS, export_seconds=LOST_EXPORT_SECONDS
        )
        tasks = [asyncio.create_task(drive(ctx, plan)) for plan in plans]
        try:
            await bounded(ctx, asyncio.gather(*(_job_of(ctx, plan) for plan in plans)))
            began = time.monotonic()
            await self.stack.stop_gateway()
            try:
                async with asyncio.timeout(GIVE_UP_WITHIN):
                    await asyncio.gather(*(_given_up(ctx, plan) for plan in plans))
                lost.gave_up = True
            except TimeoutError:
                lost.note = f"not every sender gave up within {GIVE_UP_WITHIN:.0f}s"
            finally:
                await self.stack.start_gateway()
                lost.down_seconds = time.monotonic() - began
        finally:
            await _faults(ctx, webhook_give_up_seconds=None, export_seconds=None)
        return list(await asyncio.gather(*tasks))

    async def store_outage(
        self, ctx: Context, rng: random.Random, *, prefix: str, phase: str
    ) -> list[RunOutcome]:
        """Class 15: runs mid-flight while the blob store is away for `mix.store_outage` s."""
        plans: list[RunPlan] = []
        for i in range(self.mix.store_runs):
            wid = _run_id(prefix, "store-approval", i)
            ask = RunInput(task="publish", model="scripted:ask-first", tools=["request_approval"])
            plans.append(RunPlan(wid, "store-approval", "approval", ask,
                                 decider=rng.choice(DECIDERS)))  # fmt: skip
            wid = _run_id(prefix, "store-export", i)
            export = RunInput(
                task="Export transactions for Q3 2025 to the compliance folder", tools=EXPORT_TOOLS
            )
            plans.append(RunPlan(wid, "store-export", "callback", export, operations="succeeded"))
            wid = _run_id(prefix, "store-model", i)
            add = RunInput(task="add six and seven", model=f"openai:{wid}", tools=["calculate"])
            plans.append(RunPlan(wid, "store-model-call", "plain", add))
        for plan in plans:
            plan.klass, plan.phase = STORE_OUTAGE, phase
            plan.input = plan.input.model_copy(
                update={"model_timeout": CALL_TIMEOUT, "tool_timeout": CALL_TIMEOUT}
            )
            if plan.kind == "store-model-call":
                # Its first call answered only once the store has gone: the reply comes back
                # to a worker that cannot store it.
                calculate = json.dumps({"expression": "6 + 7"})
                held = HeldReply(
                    HOLD_LIMIT, openai_tool_calls([("call_1", "calculate", calculate)])
                )
                self.held[plan.id] = held
                ctx.wire.enqueue_for(plan.id, held)
        seen = self.store = StoreOutageSeen()
        store = self.stack.blob_store()
        hold = asyncio.Event()
        # Their ends are awaited from the outage's start: as long again as the outage, and the
        # runs' backoff after it (their tries come up to a minute apart).
        patience = self.mix.store_outage + STORE_RETRY_MAX.total_seconds()
        patient = dataclasses.replace(ctx, result_timeout=ctx.result_timeout + patience)
        tasks = [asyncio.create_task(drive(patient, plan, hold=hold)) for plan in plans]
        await bounded(
            ctx, asyncio.gather(*(_mid_flight(ctx, p, wire=p.id in self.held) for p in plans))
        )
        before = {ref async for ref, _ in store.refs()}
        seen.blobs_before = len(before)
        began = time.monotonic()
        seen.how = await self.stack.blobs_away()
        hold.set()  # the approvals are decided now
        for plan in plans:
            if plan.id in self.held:
                self.held[plan.id].release.set()
        samples: dict[str, dict[str, Any]] = {plan.id: {} for plan in plans}
        watching = asyncio.create_task(_watch_status(ctx, plans, samples))
        try:
            await asyncio.sleep(self.mix.store_outage)  # the outage itself: its length is the fault
        finally:
            watching.cancel()
            seen.restore_seconds = await self.stack.blobs_back()
            seen.down_seconds = time.monotonic() - began
        after = {ref async for ref, _ in store.refs()}
        seen.blobs_lost = len(before - after)
        outcomes = list(await asyncio.gather(*tasks))
        for outcome in outcomes:
            outcome.facts.update(samples[outcome.plan.id])
            asked = [r for r in ctx.wire.requests if _model(r.body) == outcome.plan.id]
            outcome.facts["model requests"] = len(asked)
        return outcomes

    # --- the rows ---------------------------------------------------------------------------

    def rows(
        self, outcomes: list[RunOutcome], stats: dict[str, Any], worker_logs: Iterable[Path]
    ) -> list[Check]:
        """One row per class of issue 22 this size runs, with its counts and what its runs
        must show."""
        mine = {row: [o for o in outcomes if o.plan.klass == row] for row in ROWS}
        checks = []
        if mine[CRAFTED_PATTERN]:
            checks.append(_crafted_pattern(mine[CRAFTED_PATTERN], stats, _deadlocks(worker_logs)))
        if mine[CRAFTED_MALFORMED]:
            checks.append(_crafted_malformed(mine[CRAFTED_MALFORMED], stats))
        if self.lost is not None:
            checks.append(_lost_webhooks(mine[LOST_WEBHOOK], stats, self.lost))
        if self.store is not None:
            checks.append(_store_outage(mine[STORE_OUTAGE], self.store, self.stack.blobs))
        if mine[WAIT_QUESTION]:
            checks.append(_wait_question(mine[WAIT_QUESTION], stats))
        if mine[CHECKPOINT_QUESTION]:
            checks.append(_checkpoint_question(mine[CHECKPOINT_QUESTION]))
        return checks


# --- the driver's helpers ---------------------------------------------------------------------


def _model(body: Any) -> str | None:
    return body.get("model") if isinstance(body, dict) else None


def _odd(run_id: str) -> bool:
    """Half the runs, the same half on every suite run: which means a run's answer goes by."""
    return sum(map(ord, run_id)) % 2 == 1


async def _question(
    ctx: Context, handle: WorkflowHandle[Any, Any], outcome: RunOutcome
) -> InputRequest | None:
    """The run's first question, once it has one (None: the run ended without)."""
    state = await until(ctx, handle, lambda s: bool(s.questions) or s.status in TERMINAL_STATUSES)
    if not state.questions:
        outcome.notes.append(f"the run ended {state.status} with no question")
        return None
    return next(iter(state.questions.values()))


async def _within(seconds: float, check: Callable[[], Awaitable[bool]]) -> float | None:
    """When `check` first held (time.monotonic()), checked every LIST_EVERY s for `seconds`
    (a check begun then may take as long again); None if it never did. A check that fails
    (the server busy) is tried again."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if await asyncio.wait_for(check(), seconds):
                return time.monotonic()
        except (ClientError, TimeoutError, RuntimeError):
            pass
        await asyncio.sleep(LIST_EVERY)
    return None


async def _link_answer(
    ctx: Context,
    link: dict[str, Any],
    question: InputRequest,
    content: dict[str, Any],
    via: str,
) -> tuple[Answer, float]:
    """An accept through the question's link, retried on 503 or 504 as the gateway says (the
    same body is the same Update); and how long its sender waited for the outcome (s)."""
    body = {"action": "accept", "content": content, "responder": "chaos-link"}
    began = time.monotonic()
    deadline = began + ctx.result_timeout
    while True:
        try:
            response = await ctx.http.post(
                link["url"], json=body, headers={"Authorization": link["authorization"]}
            )
        except httpx.TimeoutException:
            if time.monotonic() > deadline:
                raise
            continue
        if response.status_code not in SEND_AGAIN or time.monotonic() > deadline:
            break
        await asyncio.sleep(LINK_RETRY_SECONDS)
    status = response.status_code
    code = f"{status} {error_code(response)}"
    answer = Answer("answer", question.question_id, via, status, code, status < 300)
    return answer, time.monotonic() - began


async def _update_answer(
    ctx: Context, run_id: str, question: InputRequest, content: dict[str, Any], via: str
) -> tuple[Answer, float]:
    """An accept by the `answer` Update, asked again under the same id until it is answered;
    and how long its sender waited for the outcome (s)."""
    answer = AnswerInput(
        question_id=question.question_id, action="accept", content=content, responder="chaos"
    )
    update_id = f"chaos-answer/{question.question_id}/{via}"
    began = time.monotonic()
    got, refusal = await until_answered(
        ctx, lambda: ctx.runs.answer(run_id, answer, update_id=update_id)
    )
    took = time.monotonic() - began
    if got is None:
        return Answer("answer", question.question_id, via, None, refusal, False), took
    code = f"accepted: {got.status}, delivered {got.delivered}"
    return Answer("answer", question.question_id, via, None, code, got.accepted), took


async def _requests(ctx: Context, model: str, count: int) -> None:
    """Until the model over the wire has had `count` requests for this run."""
    # The wire server runs in threads of its own: polled, not awaited.
    while True:
        if sum(1 for r in ctx.wire.requests if _model(r.body) == model) >= count:
            return
        await asyncio.sleep(0.1)


async def _faults(ctx: Context, **faults: Any) -> None:
    answer = await ctx.http.post(f"{ctx.systems_url}/_test/faults", json=faults)
    answer.raise_for_status()


async def _stats(ctx: Context) -> dict[str, Any]:
    stats: dict[str, Any] = (await ctx.http.get(f"{ctx.systems_url}/_test/stats")).json()
    return stats


async def _job_of(ctx: Context, plan: RunPlan) -> str:
    """The id of the run's job, once the systems have accepted it."""
    while True:
        stats = await _stats(ctx)
        for key, value in stats["keys"].items():
            if key.startswith(f"{plan.id}/") and value["job_id"]:
                return str(value["job_id"])
        await asyncio.sleep(0.2)


def give_up_attempts(seconds: float) -> int:
    """How many times the main systems send a report that is not taken before they give up,
    told to give up after `seconds` (their backoff: examples.systems.WebhookRetry)."""
    return 1 + len(list(WebhookRetry(give_up_after=seconds).delays()))


async def _given_up(ctx: Context, plan: RunPlan) -> None:
    """Until the run's job has finished and its sender is done with its final report: given
    up (every attempt met the outage), or answered for good before the gateway went down (a
    job that ended first, under load: its report is `taken` and the check counts it so)."""
    job_id = await _job_of(ctx, plan)
    attempts = give_up_attempts(GIVE_UP_SECONDS)
    while True:
        job = (await _stats(ctx))["jobs"].get(job_id, {})
        final = [w for w in job.get("webhooks", []) if w["report"] in ("succeeded", "failed")]
        if job.get("status") in ("succeeded", "failed") and final:
            last = final[-1]
            if _answered_for_good(last["status_code"]):
                return
            if len(final) >= attempts and (
                last["status_code"] is not None or last["error"] is not None
            ):
                return
        await asyncio.sleep(0.2)


def _answered_for_good(status_code: int | None) -> bool:
    """Whether a webhook's answer ends its sender's attempts (examples.systems.webhooks)."""
    if status_code is None:
        return False
    return status_code < 500 and status_code not in WEBHOOK_RETRYABLE


async def _mid_flight(ctx: Context, plan: RunPlan, *, wire: bool) -> None:
    """Until the run is mid-flight: its approval requested, its operation running, or (`wire`)
    its first model call, held, made."""
    while wire:
        if any(_model(r.body) == plan.id for r in ctx.wire.requests):
            return
        await asyncio.sleep(0.2)
    handle = ctx.runs.handle(plan.id)
    if plan.category == "approval":
        await until(ctx, handle, lambda s: bool(s.approvals))
    else:
        await until(ctx, handle, lambda s: any(not o.terminal for o in s.operations.values()))


async def _watch_status(
    ctx: Context, plans: list[RunPlan], samples: dict[str, dict[str, Any]]
) -> None:
    """What `status` shows of each run while the store is away: whether it shows the outage,
    and the highest attempt of a model call it shows (until cancelled)."""
    while True:
        for plan in plans:
            try:
                shown = await ctx.runs.status(plan.id)
            except ClientError:
                continue
            seen = samples[plan.id]
            outage = shown.state.store_outage
            if outage is not None:
                seen["outage tries shown"] = max(seen.get("outage tries shown", 0), outage.tries)
            attempts = [r.attempt for r in shown.retrying if r.call == "model call"]
            seen["model call attempt"] = max([seen.get("model call attempt", 0), *attempts])
        await asyncio.sleep(STATUS_EVERY)


# --- the rows' checks ---------------------------------------------------------------------------


def _tag(outcome: RunOutcome) -> str:
    return f"{outcome.plan.id} ({outcome.plan.kind})"


def _ended(outcomes: list[RunOutcome]) -> str:
    counts = Counter(o.status for o in outcomes)
    return ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "no runs"


def _tally(values: Iterable[object]) -> str:
    counts = Counter(str(v) for v in values)
    return " ".join(f"{n}×{v}" for v, n in sorted(counts.items())) or "none"


def answered_once(received: list[dict[str, Any]]) -> bool:
    """Whether a job was given the valid answer once: one accept applied; any other delivery
    is the same answer again, refused by the job as already answered (the answering activity
    retried after its worker died with the job's reply in flight: at least once, by design)."""
    applied = [(a["action"], a["responder"]) for a in received if a["applied"]]
    again = [a for a in received if not a["applied"]]
    return (
        len(applied) == 1
        and applied[0][0] == "accept"
        and all(
            (a["action"], a["responder"], a.get("reason")) == (*applied[0], "already answered")
            for a in again
        )
    )


def _job(outcome: RunOutcome, stats: dict[str, Any]) -> dict[str, Any]:
    """The systems' record of the run's (one) job, or {} if it has none."""
    for key_stats in run_keys(outcome, stats).values():
        job: dict[str, Any] = stats["jobs"].get(key_stats.get("job_id") or "", {})
        if job:
            return job
    return {}


def _cancels(outcome: RunOutcome, stats: dict[str, Any]) -> int:
    return sum(k["cancels"] for k in run_keys(outcome, stats).values())


def _ops(outcome: RunOutcome) -> list[Any]:
    return list(outcome.state.operations.values()) if outcome.state else []


def _questions(outcome: RunOutcome) -> list[InputRequest]:
    return list(outcome.state.questions.values()) if outcome.state else []


def _deleted(outcome: RunOutcome, stats: dict[str, Any]) -> dict[str, int]:
    """What the demo MCP server did of the run's deletion (asked, answered, deleted...)."""
    counts: dict[str, int] = stats.get("mcp", {}).get(f"delete:{outcome.plan.id}", {})
    return counts


def _deadlocks(logs: Iterable[Path]) -> list[str]:
    """Every line of the workers' logs that tells of a deadlock (the SDK's detector)."""
    found = []
    for log in logs:
        for line in log.read_text(errors="replace").splitlines():
            if _DEADLOCK.search(line):
                found.append(f"{log.name}: {line.strip()[:300]}")
    return found


def _crafted_pattern(
    outcomes: list[RunOutcome], stats: dict[str, Any], deadlocks: list[str]
) -> Check:
    """Every crafted answer refused, promptly; the valid answer applied once, and it is what
    the job got; no worker logged a deadlock."""
    check = Check(CRAFTED_PATTERN)
    refused: list[Answer] = []
    slowest = 0.0
    applied = interrupted = 0
    for outcome in outcomes:
        tag = _tag(outcome)
        crafted = [a for a in outcome.answers if a.via.endswith("(crafted)")]
        valid = [a for a in outcome.answers if a.kind == "answer" and a not in crafted]
        if not crafted and _interrupted(outcome):
            interrupted += 1
            continue
        if not crafted:
            check.violations.append(
                f"{tag}: no crafted answer was sent ({'; '.join(outcome.notes)})"
            )
        for answer in crafted:
            took = float(outcome.facts.get(answer.via, 0.0))
            slowest = max(slowest, took)
            if answer.accepted is not False:
                check.violations.append(f"{tag}: the crafted answer by {answer.via}: {answer.code}")
                continue
            refused.append(answer)
            if answer.status is not None and answer.status != 422:
                check.violations.append(
                    f"{tag}: the crafted answer by {answer.via} refused {answer.code}, not 422"
                )
            if took > PROMPTLY:
                check.violations.append(
                    f"{tag}: the crafted answer by {answer.via} refused after {took:.1f}s "
                    f"(bound {PROMPTLY:.0f}s)"
                )
        if [a.accepted for a in valid] != [True]:
            said = "; ".join(f"{a.via}: {a.code}" for a in valid) or "none sent"
            check.violations.append(f"{tag}: the valid answer was not applied: {said}")
            continue
        applied += 1
        check.violations += _got_the_valid_answer(tag, outcome, stats)
    for line in deadlocks:
        check.violations.append(f"a worker logged a deadlock: {line}")
    if outcomes and not refused:
        check.violations.append("no crafted answer was refused (not exercised)")
    askers = Counter(o.plan.kind.rsplit("-", 1)[1] for o in outcomes)
    check.attempts = len(refused) + applied
    check.outcome = (
        f"{len(outcomes)} runs ({_tally(askers.elements())}): crafted answers refused "
        f"{len(refused)} ({_tally(_why(a) for a in refused)}), the slowest in {slowest:.1f}s "
        f"(bound {PROMPTLY:.0f}s); valid answers applied {applied}; MCP starts interrupted "
        f"(outcome unknown, no question) {interrupted}; deadlocks in the workers' logs "
        f"{len(deadlocks)}; {_ended(outcomes)}"
    )
    return check


def _interrupted(outcome: RunOutcome) -> bool:
    """An MCP run whose task's start was cut short by a worker's death: the call is not sent
    again, the model is told its outcome is unknown, and no question reaches the run (its
    task, if it was made, asks with nobody to answer: chaos.invariants.interrupted_start)."""
    return (
        outcome.plan.kind.endswith("-mcp")
        and not _questions(outcome)
        and interrupted_start(outcome)
    )


def _why(answer: Answer) -> str:
    """A refusal in a word: the link's status and code, the Update's error type."""
    if answer.status is not None:
        return answer.code
    return answer.code.removeprefix("refused: ").split(":")[0]


def _got_the_valid_answer(tag: str, outcome: RunOutcome, stats: dict[str, Any]) -> list[str]:
    """The question holds the valid answer, and the job got it, once (never a crafted one)."""
    problems = []
    questions = _questions(outcome)
    answers = [q.answer.content if q.answer else None for q in questions]
    if answers != [VALID_ANSWER]:
        problems.append(f"{tag}: the run's questions hold {answers}, expected the valid answer")
    if outcome.plan.kind.endswith("-mcp"):
        seen = _deleted(outcome, stats)
        if (seen.get("answered", 0), seen.get("deleted", 0)) != (1, 1):
            problems.append(f"{tag}: the MCP server saw {seen}, expected one answer, deleted")
        return problems
    job = _job(outcome, stats)
    received = job.get("answers", [])
    if not answered_once(received):
        problems.append(f"{tag}: the purge received {received}, expected the valid answer once")
    if job.get("status") != "succeeded":
        problems.append(f"{tag}: the purge ended {job.get('status')}")
    return problems


def _crafted_malformed(outcomes: list[RunOutcome], stats: dict[str, Any]) -> Check:
    """A purge's question refused by the gateway (422 invalid_question), the purge failed
    saying why, the run never held the question; an MCP task's question recorded refused and
    declined with the reason, the task told so; every run ended."""
    check = Check(CRAFTED_MALFORMED)
    refused_reports: list[str] = []
    declined = interrupted = unconfirmed = 0
    for outcome in outcomes:
        tag = _tag(outcome)
        if _interrupted(outcome):
            interrupted += 1
            continue
        if outcome.plan.kind.endswith("-mcp"):
            problems = _mcp_declined(tag, outcome, stats)
            declined += not problems
            unconfirmed += sum(q.delivery != "sent" for q in _questions(outcome))
        else:
            problems, answers = _report_refused(tag, outcome, stats)
            refused_reports += answers
        check.violations += problems
    if outcomes and not refused_reports and not declined:
        check.violations.append("no malformed question was asked (not exercised)")
    check.attempts = len(refused_reports) + declined
    purges = sum(1 for o in outcomes if o.plan.kind.endswith("-purge"))
    check.outcome = (
        f"{len(outcomes)} runs ({_tally(o.plan.kind.split('-', 2)[2] for o in outcomes)}): our "
        f"tool's questions answered {_tally(refused_reports)} ({purges} purges); MCP tasks' "
        f"questions refused and declined with the reason {declined} (its delivery unconfirmed "
        f"by the run, the task's end first {unconfirmed}), starts interrupted (outcome "
        f"unknown, no question) {interrupted}; {_ended(outcomes)}"
    )
    return check


def _report_refused(
    tag: str, outcome: RunOutcome, stats: dict[str, Any]
) -> tuple[list[str], list[str]]:
    """Problems with a purge's malformed question, and what its question's report was told."""
    job = _job(outcome, stats)
    asked = [w for w in job.get("webhooks", []) if w["report"].startswith("input_required")]
    told = [f"{w['status_code']} {answer_code(w)}".strip() for w in asked]
    problems = []
    if not asked:
        problems.append(f"{tag}: the purge never asked (job {job.get('status', 'unknown')})")
    elif told[-1] != "422 invalid_question":
        problems.append(f"{tag}: the question in {outcome.plan.schema} was answered {told}")
    ops = _ops(outcome)
    said = [(op.status, op.error.code if op.error else None) for op in ops]
    if said != [("failed", "question_refused")]:
        problems.append(f"{tag}: its operations ended {said}, expected failed: question_refused")
    if _questions(outcome):
        statuses = [q.status for q in _questions(outcome)]
        problems.append(f"{tag}: the run holds the malformed question ({statuses})")
    return problems, told


def _mcp_declined(tag: str, outcome: RunOutcome, stats: dict[str, Any]) -> list[str]:
    """Problems with an MCP task's malformed question."""
    problems = []
    questions = _questions(outcome)
    if len(questions) != 1:
        return [f"{tag}: {len(questions)} questions, expected the task's one"]
    [question] = questions
    answer = question.answer
    where = f"question {question.question_id} ({question.status})"
    if question.status != "refused":
        problems.append(f"{tag}: {where}, expected refused with the reason")
    elif not question.refusal:
        problems.append(f"{tag}: {where} without a reason")
    if answer is None or (answer.action, answer.by_policy) != ("decline", True):
        problems.append(f"{tag}: {where} answered {answer}, expected a decline by the policy")
    # What the server saw is the truth of the delivery: the run's own record of it may stay
    # `sending` when the task's end (polled) came before its answer's activity reported (its
    # worker killed), and the run ended on it.
    seen = _deleted(outcome, stats)
    if (seen.get("reasoned", 0), seen.get("kept", 0), seen.get("deleted", 0)) != (1, 1, 0):
        problems.append(
            f"{tag}: the MCP server saw {seen}, expected one decline with a reason "
            f"(the run's delivery: {question.delivery})"
        )
    return problems


def _lost_webhooks(outcomes: list[RunOutcome], stats: dict[str, Any], lost: LostWebhooks) -> Check:
    """Each job's final report lost for good (or late, and refused as resolved); each run
    learned the job's end by a status check well before the timeout; no cancel sent."""
    check = Check(LOST_WEBHOOK)
    fates: Counter[str] = Counter()
    found: Counter[str] = Counter()
    learned: list[float] = []
    timeout = 0.0
    cancels = 0
    for outcome in outcomes:
        tag = _tag(outcome)
        job = _job(outcome, stats)
        final = [w for w in job.get("webhooks", []) if w["report"] in ("succeeded", "failed")]
        fate = _fate(final)
        fates[fate] += 1
        sent = _cancels(outcome, stats)
        cancels += sent
        if sent and job.get("status") in ("succeeded", "failed"):
            check.violations.append(f"{tag}: its finished job was sent {sent} cancel(s)")
        for op in _ops(outcome):
            how = _found_by(outcome, op.operation_id)
            # No check found it: its webhook came after all, or the expiry ended it.
            found[how or ("the expiry" if op.status == "expired" else "its webhook")] += 1
            limit = (op.expires_at - op.started_at).total_seconds()
            timeout = max(timeout, limit)
            took = (op.resolved_at - op.started_at).total_seconds() if op.resolved_at else None
            if took is not None:
                learned.append(took)
            if fate == "lost" and how != "a status check":
                check.violations.append(
                    f"{tag}: its webhook was lost; the run learned the job's end "
                    f"{'by ' + how if how else 'otherwise'} ({op.status}"
                    f"{f' after {took:.0f}s' if took is not None else ''} of {limit:.0f}s)"
                )
            elif took is not None and took > limit / 2:
                check.violations.append(
                    f"{tag}: learned the job's end after {took:.0f}s of a {limit:.0f}s timeout"
                )
    if lost.note:
        check.violations.append(lost.note)
    if outcomes and not fates["lost"]:
        check.violations.append(f"no webhook was lost for good (not exercised): {dict(fates)}")
    check.attempts = len(outcomes)
    attempts = give_up_attempts(GIVE_UP_SECONDS)
    check.outcome = (
        f"{len(outcomes)} runs; gateway down {lost.down_seconds:.1f}s; final reports "
        f"{_tally(fates.elements())} (senders give up after {attempts} attempts in "
        f"{GIVE_UP_SECONDS:g}s); ends learned by {_tally(found.elements())}, at most "
        f"{max(learned, default=0):.1f}s after the start (timeout {timeout:.0f}s); cancels sent "
        f"{cancels}; {_ended(outcomes)}"
    )
    return check


def _found_by(outcome: RunOutcome, operation_id: str) -> str | None:
    """How a status check found the operation's end, as the run's steps say (`a status
    check`, `the status check before its expiry`); None if none did."""
    for step in outcome.state.steps if outcome.state else []:
        if (m := _FOUND.match(step.detail)) and m.group(1) == operation_id:
            return m.group(3)
    return None


def _fate(final: list[dict[str, Any]]) -> str:
    """What became of a job's final report: `taken`, `lost` (no attempt reached the gateway),
    `refused 409 operation_resolved` (came after a check had found the end)..."""
    if not final:
        return "never sent"
    told = {(w["status_code"], answer_code(w)) for w in final if w["status_code"] is not None}
    if any(status < 300 for status, _ in told):
        return "taken"
    if not told:
        return "lost"
    return "refused " + " ".join(sorted(f"{s} {c}".strip() for s, c in told))


def _store_outage(outcomes: list[RunOutcome], seen: StoreOutageSeen, blobs: str) -> Check:
    """Every run ended as it would have; each waited the outage out (its tries counted in
    its steps), past the old retry budget; the model asked once per turn; no blob lost."""
    check = Check(STORE_OUTAGE)
    budget = old_model_budget()
    tries: list[int] = []
    waited: list[float] = []
    shown = shown_tries = attempts = 0
    requests = turns = 0
    for outcome in outcomes:
        tag = _tag(outcome)
        steps = [s for s in outcome.state.steps if s.name == "blob store"] if outcome.state else []
        backs = [m for s in steps if (m := _STORE_BACK.search(s.detail))]
        tries += [int(m.group(2)) for m in backs]
        waited += [_seconds(m.group(1)) for m in backs]
        shown += "outage tries shown" in outcome.facts
        shown_tries = max(shown_tries, int(outcome.facts.get("outage tries shown", 0)))
        attempts = max(attempts, int(outcome.facts.get("model call attempt", 0)))
        if outcome.plan.kind == "store-model-call" and outcome.state is not None:
            asked, calls = _model_requests(outcome)
            requests, turns = requests + asked, turns + calls
            if asked > calls:
                check.violations.append(
                    f"{tag}: the model was asked {asked} times for {calls} calls"
                )
    if seen.down_seconds < budget:
        check.violations.append(
            f"the store was away {seen.down_seconds:.0f}s, within the old retry budget "
            f"({budget:.0f}s): the row proves nothing"
        )
    if outcomes and not tries:
        check.violations.append("no run met the outage (not exercised)")
    if seen.blobs_lost:
        check.violations.append(
            f"{seen.blobs_lost} of {seen.blobs_before} blobs were gone when the store came back"
        )
    check.attempts = sum(tries)
    kinds = Counter(o.plan.kind.removeprefix("store-") for o in outcomes)
    check.outcome = (
        f"{len(outcomes)} runs mid-flight ({_tally(kinds.elements())}) through {blobs} store "
        f"outage of {seen.down_seconds:.0f}s ({seen.how}; back in {seen.restore_seconds:.1f}s, "
        f"{seen.blobs_before - seen.blobs_lost} of {seen.blobs_before} blobs kept); old model "
        f"retry budget {budget:.0f}s; tries that met it {sum(tries)} (at most {max(tries, default=0)} "
        f"a run), waited out up to {max(waited, default=0):.0f}s; status showed it for {shown} "
        f"runs (up to {shown_tries} tries; a model call's attempt up to {attempts}); model "
        f"requests {requests} for {turns} calls over the wire; {_ended(outcomes)}"
    )
    return check


def _seconds(text: str) -> float:
    """A timedelta's str (`0:02:31.5`, `1 day, 0:00:01`) in seconds (0.0 if it is not one)."""
    days = 0
    if "day" in text:
        head, _, text = text.partition(", ")
        days = int(head.split()[0])
    try:
        h, m, s = text.split(":")
        return days * 86400 + int(h) * 3600 + int(m) * 60 + float(s)
    except ValueError:
        return 0.0


def _model_requests(outcome: RunOutcome) -> tuple[int, int]:
    """The requests the model over the wire got for this run (recorded on the run's facts by
    the driver), and the model calls that asked it: attempts of `call_model` activities not
    handed a reply to keep (a worker killed mid-call asks again)."""
    asked = int(outcome.facts.get("model requests", 0))
    scheduled: set[int] = set()
    calls = 0
    for event in outcome.events:
        if event.event_type == ACTIVITY_SCHEDULED:
            attributes = event.activity_task_scheduled_event_attributes
            if attributes.activity_type.name != CALL_MODEL:
                continue
            payloads = attributes.input.payloads
            args = json.loads(payloads[0].data) if payloads else {}
            if not (isinstance(args, dict) and args.get("answered")):
                scheduled.add(event.event_id)
        elif event.event_type == ACTIVITY_STARTED:
            attributes = event.activity_task_started_event_attributes
            if attributes.scheduled_event_id in scheduled:
                calls += max(1, attributes.attempt)
    return asked, calls


def _wait_question(outcomes: list[RunOutcome], stats: dict[str, Any]) -> Check:
    """The question reached the model, which answered it before it expired; the purge was
    confirmed by the model and succeeded."""
    check = Check(WAIT_QUESTION)
    closed: Counter[str] = Counter()
    by_model = 0
    for outcome in outcomes:
        tag = _tag(outcome)
        questions = _questions(outcome)
        closed.update(q.status for q in questions)
        if len(questions) != 1:
            check.violations.append(f"{tag}: {len(questions)} questions, expected the purge's one")
            continue
        [question] = questions
        answer = question.answer
        if answer is None or answer.by_policy or answer.responder != "model":
            check.violations.append(
                f"{tag}: question {question.question_id} {question.status}, answered by "
                f"{'the policy' if answer and answer.by_policy else answer and answer.responder}: "
                "the model never saw it"
            )
            continue
        by_model += 1
        job = _job(outcome, stats)
        applied = [a["responder"] for a in job.get("answers", []) if a["applied"]]
        if job.get("status") != "succeeded" or applied != ["model"]:
            check.violations.append(
                f"{tag}: the purge ended {job.get('status')}, confirmed by {applied}"
            )
    check.attempts = len(outcomes)
    check.outcome = (
        f"{len(outcomes)} runs: questions {_tally(closed.elements())}; answered by the model "
        f"while it waited {by_model}; {_ended(outcomes)}"
    )
    return check


def _checkpoint_question(outcomes: list[RunOutcome]) -> Check:
    """Each run, waiting for a person's answer, was found by `WaitingFor = "input"` and listed
    as waiting for people, however its question came; then answered."""
    check = Check(CHECKPOINT_QUESTION)
    raced = found = listed = answered = 0
    slowest = listing = 0.0
    for outcome in outcomes:
        tag = _tag(outcome)
        facts = outcome.facts
        raced += bool(facts.get("asked during the checkpoint"))
        if "found by WaitingFor" not in facts:
            check.violations.append(f"{tag}: never looked for ({'; '.join(outcome.notes)})")
            continue
        if facts.get("WaitingFor") != "input":
            check.violations.append(
                f"{tag}: waiting for its question's answer, it shows WaitingFor "
                f"{facts.get('WaitingFor')!r}"
            )
        for name in ("found by WaitingFor", "listed by pending"):
            took = facts.get(name)
            if took is None:
                check.violations.append(
                    f"{tag}: not {name} within {LISTED_WITHIN:.0f}s of its wait's start"
                )
            else:
                slowest = max(slowest, float(took))
        listing = max(listing, float(facts.get("pending's listing", 0.0)))
        found += facts.get("found by WaitingFor") is not None
        listed += facts.get("listed by pending") is not None
        taken = [a for a in outcome.answers if a.kind == "answer"]
        if [a.accepted for a in taken] != [True]:
            said = "; ".join(f"{a.via}: {a.code}" for a in taken) or "none sent"
            check.violations.append(f"{tag}: its answer was not applied: {said}")
        else:
            answered += 1
    if outcomes and not raced:
        check.violations.append("no question came while a checkpoint call was in flight")
    check.attempts = len(outcomes)
    shown = Counter(str(o.facts.get("WaitingFor")) for o in outcomes)
    check.outcome = (
        f"{len(outcomes)} runs: questions asked while the checkpoint call was in flight {raced}; "
        f"once waiting, WaitingFor {_tally(shown.elements())}; found by WaitingFor = "
        f'"input" {found}, listed by pending {listed} (within {slowest:.1f}s; a listing took up '
        f"to {listing:.1f}s); answered {answered}; {_ended(outcomes)}"
    )
    return check
