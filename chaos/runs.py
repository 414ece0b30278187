"""The runs the suite starts: what each is, how the driver plays its part (approvals decided at
random moments, cancels, scripted model faults), and what it must end as."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal, Protocol, TypeVar

import httpx
from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError

from examples.wire_server import WireServer, delayed, error, openai_tool_calls
from schemas import RunInput, RunState
from schemas.approvals import ApprovalPolicy, DecideInput, DecisionKind, DecisionSignal
from workflows.agent_run import AgentRunWorkflow

_T = TypeVar("_T")
Category = Literal["callback", "polled", "approval", "plain", "model"]
Decider = Literal["signal", "update", "link", "timeout"]
ModelFault = Literal["429", "500", "hang", "malformed"]

EXPORT_TOOLS = ["start_export", "verify_row_count", "upload_file", "notify_team"]
REFUND_TOOLS = ["check_claim", "issue_refund"]
# How long a run may take to end once the driver is done with it, before it counts as stuck.
RESULT_TIMEOUT = 150.0
LINK_RETRY_SECONDS = 2.0


@dataclass
class RunPlan:
    """One run: its input, the part the driver plays, and the status it must end with."""

    id: str
    kind: str
    category: Category
    input: RunInput
    expect: str = "completed"
    decider: Decider | None = None
    decision: DecisionKind = "approve"
    duplicate_decision: bool = False
    cancel: bool = False
    fault: ModelFault | None = None
    refund_key: str | None = None
    phase: str = ""


@dataclass
class RunOutcome:
    """What became of a run, as the invariants read it."""

    plan: RunPlan
    status: str = "unknown"
    state: RunState | None = None
    events: list[Any] = field(default_factory=list)
    seconds: float = 0.0
    started_at: float = 0.0  # time.monotonic(), once the start was acknowledged
    ended_at: float = 0.0  # once its end was seen
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


@dataclass
class Outbox:
    """The approvals outbox, read by one poller for every run: which runs asked for approval,
    and the decision link each was sent (cheaper than querying every run)."""

    url: str
    http: httpx.AsyncClient
    every: float = 0.3
    links: dict[str, dict[str, Any]] = field(default_factory=dict)
    _seen: int = 0
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def watch(self) -> None:
        """Poll until cancelled; errors (the systems busy) are retried."""
        while True:
            try:
                entries = (await self.http.get(f"{self.url}/approvals/outbox")).json()
            except (httpx.HTTPError, ValueError):  # the systems busy: next time
                entries = []
            for entry in entries[self._seen :]:
                body = entry["body"]
                self.links.setdefault(f"{body['workflow_id']}/{body['request_id']}", body)
                self.links.setdefault(body["workflow_id"], body)
            if len(entries) > self._seen:
                self._seen = len(entries)
                self._changed.set()
                self._changed = asyncio.Event()
            await asyncio.sleep(self.every)

    async def request(self, workflow_id: str) -> dict[str, Any]:
        """The first approval notice the run posted (request_id, decision link...)."""
        while workflow_id not in self.links:
            await self._changed.wait()
        return self.links[workflow_id]


@dataclass
class Context:
    """What driving a run needs: the client, where things are, the RNG, the model server."""

    client: Client
    task_queue: str
    systems_url: str
    http: httpx.AsyncClient
    wire: WireServer
    rng: random.Random
    outbox: Outbox
    query_every: float = 0.3
    result_timeout: float = RESULT_TIMEOUT


class Mix(Protocol):
    """How many runs, and what share of decisions go through approval links."""

    @property
    def mixed(self) -> int: ...
    @property
    def links(self) -> float: ...
    @property
    def refunds(self) -> bool: ...


def make_plans(prefix: str, mix: Mix, rng: random.Random, *, phase: str) -> list[RunPlan]:
    """`mix.mixed` runs of the mix, in a seeded random order (each kind once if it fits).
    Without `mix.refunds`, refunds become ask-first runs (a claim's refunds are bounded)."""
    makers: list[Callable[[str, int], RunPlan]] = [
        _export, _two_exports, _check_and_wait, _enrich, _ask_first,
        _refund if mix.refunds else _ask_first, _ask_timeout, _plain,
    ]  # fmt: skip
    order = [makers[i % len(makers)] for i in range(mix.mixed)]
    rng.shuffle(order)
    plans = [make(f"{prefix}-{i:04d}", i) for i, make in enumerate(order)]
    for plan in plans:
        plan.phase = phase
        if plan.decider is not None and plan.decider != "timeout":
            link = rng.random() < mix.links
            plan.decider = "link" if link else rng.choice(["signal", "update"])
            plan.decision = "reject" if rng.random() < 0.25 else "approve"
            plan.duplicate_decision = rng.random() < 0.5
    return plans


def _export(wid: str, i: int) -> RunPlan:
    task = "Export transactions for Q3 2025 to the compliance folder"
    return RunPlan(wid, "export", "callback", RunInput(task=task, tools=EXPORT_TOOLS))


def _two_exports(wid: str, i: int) -> RunPlan:
    run = RunInput(task="two exports", model="scripted:two-exports", tools=["start_export"])
    return RunPlan(wid, "two-exports", "callback", run)


def _check_and_wait(wid: str, i: int) -> RunPlan:
    run = RunInput(task="check and wait", model="scripted:check-and-wait", tools=["start_export"])
    return RunPlan(wid, "check-and-wait", "callback", run)


def _enrich(wid: str, i: int) -> RunPlan:
    run = RunInput(task="enrich", model="scripted:enrich", tools=["enrich_dataset"])
    return RunPlan(wid, "enrich", "polled", run)


def _ask_first(wid: str, i: int) -> RunPlan:
    run = RunInput(
        task="publish the quarterly report", model="scripted:ask-first", tools=["request_approval"]
    )
    return RunPlan(wid, "ask-first", "approval", run, decider="signal")


def _refund(wid: str, i: int) -> RunPlan:
    # A distinct amount per run: a refund's idempotency key is its claim and amount.
    claim, amount = ("C-305", 101.0 + i % 1000) if i % 2 else ("C-118", 100.5 + (i % 300) / 100)
    run = RunInput(task=f"Refund ${amount:.2f} for claim {claim}", tools=REFUND_TOOLS)
    return RunPlan(
        wid, "refund", "approval", run, decider="signal", refund_key=f"refund/{claim}/{amount!r}"
    )


def _ask_timeout(wid: str, i: int) -> RunPlan:
    """Nobody decides: the policy does (a default decision, escalation, or the run fails)."""
    on_timeout = ("default", "fail", "escalate")[i % 3]
    policy = ApprovalPolicy(
        timeout=timedelta(seconds=2), on_timeout=on_timeout, default_decision="approve"
    )
    run = RunInput(
        task="publish", model="scripted:ask-first", tools=["request_approval"], approval=policy
    )
    expect = "approval_expired" if on_timeout == "fail" else "completed"
    return RunPlan(wid, f"ask-timeout-{on_timeout}", "approval", run, expect, decider="timeout")


def _plain(wid: str, i: int) -> RunPlan:
    model, tools, task = [
        ("fix-args", ["calculate"], "add two and two"),
        ("fan-out", ["calculate"], "squares"),
        ("echo", [], "say hello"),
        ("demo", ["calculate", "utc_now", "count_words"], "what is 6 * 7?"),
    ][i % 4]
    run = RunInput(task=task, model=f"scripted:{model}", tools=tools)
    return RunPlan(wid, model, "plain", run)


def cancel_plan(wid: str) -> RunPlan:
    """Two exports, then the run is cancelled while they run: both jobs must get a cancel."""
    run = RunInput(task="two exports", model="scripted:two-exports", tools=["start_export"])
    return RunPlan(wid, "cancelled-exports", "callback", run, "cancelled", cancel=True)


MODEL_TIMEOUT = timedelta(seconds=2)
RETRY_AFTER = 2
HANG_SECONDS = 8.0


def model_plan(wid: str, fault: ModelFault) -> RunPlan:
    """A run against the wire server whose first answer is `fault`; the default rule then calls
    `calculate` and answers, so the run must complete."""
    run = RunInput(
        task="add two and two",
        model=f"openai:{wid}",
        tools=["calculate"],
        model_timeout=MODEL_TIMEOUT,
    )
    return RunPlan(wid, f"model-{fault}", "model", run, fault=fault)


def script_model_fault(wire: WireServer, plan: RunPlan) -> None:
    """Queue the fault for this run's model name (the run's conversation only)."""
    name = plan.id
    if plan.fault == "429":
        wire.enqueue_for(name, error(429, "slow down", {"retry-after": str(RETRY_AFTER)}))
    elif plan.fault == "500":
        wire.enqueue_for(name, error(500, "internal error"), error(500, "internal error"))
    elif plan.fault == "hang":
        wire.enqueue_for(name, delayed(HANG_SECONDS))
    elif plan.fault == "malformed":
        bad = openai_tool_calls([("call_bad", "calculate", '{"expression": "2 +')])
        wire.enqueue_for(name, bad)


# --- driving a run ---------------------------------------------------------------------------


async def drive(ctx: Context, plan: RunPlan, *, hold: asyncio.Event | None = None) -> RunOutcome:
    """Start the run, play the driver's part, wait for its end; never raises for the run's
    own failure (that is the outcome's status). `hold`: decide/cancel only once it is set."""
    outcome = RunOutcome(plan)
    began = time.monotonic()
    if plan.fault is not None:
        script_model_fault(ctx.wire, plan)
    handle = await _start(ctx, plan)
    outcome.started_at = time.monotonic()
    try:
        await _play(ctx, plan, handle, outcome, hold)
    except Exception as err:  # noqa: BLE001 - the driver's failure is reported, not raised
        outcome.problems.append(f"driver: {type(err).__name__}: {err}")
    try:
        outcome.status = await _result(ctx, handle)
    except TimeoutError:
        outcome.status = "stuck"
    outcome.ended_at = time.monotonic()
    outcome.seconds = outcome.ended_at - began
    try:
        outcome.state = await _retrying(lambda: handle.query(AgentRunWorkflow.status))
        outcome.events = [e async for e in handle.fetch_history_events()]
    except (RPCError, TimeoutError) as err:
        outcome.notes.append(f"could not read the run's state: {err}")
    return outcome


async def _play(
    ctx: Context,
    plan: RunPlan,
    handle: WorkflowHandle[Any, Any],
    outcome: RunOutcome,
    hold: asyncio.Event | None,
) -> None:
    """The driver's part: decide approvals, cancel."""
    if plan.decider is not None and plan.decider != "timeout":
        await _decide(ctx, plan, handle, outcome, hold)
    if plan.cancel:
        await until(ctx, handle, lambda s: any(not o.terminal for o in s.operations.values()))
        if hold is not None:
            await hold.wait()
        await _retrying(handle.cancel)


async def _start(ctx: Context, plan: RunPlan) -> WorkflowHandle[Any, Any]:
    """Start the run; a start whose answer was lost to a restart is found, not repeated."""
    try:
        return await _retrying(
            lambda: ctx.client.start_workflow(
                AgentRunWorkflow.run, plan.input, id=plan.id, task_queue=ctx.task_queue
            )
        )
    except WorkflowAlreadyStartedError:
        return ctx.client.get_workflow_handle_for(AgentRunWorkflow.run, plan.id)


async def _result(ctx: Context, handle: WorkflowHandle[Any, Any]) -> str:
    deadline = time.monotonic() + ctx.result_timeout
    while True:
        try:
            result = await asyncio.wait_for(handle.result(), deadline - time.monotonic())
            return str(result.status)
        except WorkflowFailureError:
            description = await _retrying(handle.describe)
            return str(description.status.name).lower() if description.status else "failed"
        except RPCError:
            # The server went away mid-wait: ask again once it is back.
            if time.monotonic() > deadline:
                raise TimeoutError from None
            await asyncio.sleep(0.5)


async def _decide(
    ctx: Context,
    plan: RunPlan,
    handle: WorkflowHandle[Any, Any],
    outcome: RunOutcome,
    hold: asyncio.Event | None,
) -> None:
    """Wait for the approval request, then decide it at a random moment by the plan's means;
    maybe decide again by another means (a duplicate that must not be applied)."""
    async with asyncio.timeout(ctx.result_timeout):
        notice = await ctx.outbox.request(plan.id)
    request_id = str(notice["request_id"])
    # A link may be used the moment it reaches the outbox, before the run has recorded that
    # it was sent (the gateway waits for the run to confirm it).
    if hold is not None:
        await hold.wait()
    await asyncio.sleep(ctx.rng.uniform(0.0, 1.5))
    assert plan.decider is not None and plan.decider != "timeout"
    first = await _send_decision(ctx, plan, handle, request_id, plan.decider)
    outcome.notes.append(f"decision by {plan.decider}: {first}")
    if plan.duplicate_decision:
        means: list[Decider] = ["signal", "update", "link"]
        other = ctx.rng.choice([d for d in means if d != plan.decider])
        flipped: DecisionKind = "reject" if plan.decision == "approve" else "approve"
        second = await _send_decision(ctx, plan, handle, request_id, other, decision=flipped)
        outcome.notes.append(f"duplicate by {other}: {second}")


async def _send_decision(
    ctx: Context,
    plan: RunPlan,
    handle: WorkflowHandle[Any, Any],
    request_id: str,
    decider: Decider,
    decision: DecisionKind | None = None,
) -> str:
    """One decision; returns what the sender was told (the decision may be refused)."""
    decision = decision or plan.decision
    reviewer = f"chaos-{decider}"
    if decider == "signal":
        signal = AgentRunWorkflow.approve if decision == "approve" else AgentRunWorkflow.reject
        await _retrying(
            lambda: handle.signal(signal, DecisionSignal(request_id=request_id, reviewer=reviewer))
        )
        return "signalled"
    if decider == "update":
        return await _update_decision(ctx, handle, request_id, decision, reviewer)
    link = ctx.outbox.links[f"{plan.id}/{request_id}"]["decision"]
    deadline = time.monotonic() + ctx.result_timeout
    while True:
        response = await ctx.http.post(
            link["url"],
            json={"decision": decision, "reviewer": reviewer},
            headers={"Authorization": link["authorization"]},
        )
        # 503: the run or Temporal is busy; the gateway says to retry later, so we do.
        if response.status_code != 503 or time.monotonic() > deadline:
            break
        await asyncio.sleep(LINK_RETRY_SECONDS)
    if response.status_code >= 500:
        said = f"{response.status_code} {response.text[:200]}"
        raise RuntimeError(f"the gateway answered {said} to a decision link")
    return str(response.status_code)


async def _update_decision(
    ctx: Context,
    handle: WorkflowHandle[Any, Any],
    request_id: str,
    decision: DecisionKind,
    reviewer: str,
) -> str:
    """The `decide` Update, asked again under the same id until it is answered: Temporal
    dedupes by id, so an answer lost to a timeout is found, never applied twice."""
    update_id = f"chaos-decide/{request_id}/{reviewer}/{decision}"
    deadline = time.monotonic() + ctx.result_timeout
    while True:
        try:
            answer = await handle.execute_update(
                AgentRunWorkflow.decide,
                DecideInput(request_id=request_id, decision=decision, reviewer=reviewer),
                id=update_id,
            )
        except WorkflowUpdateFailedError as err:  # the validator's refusal: an answer
            return f"refused: {err.cause}"
        except (WorkflowUpdateRPCTimeoutOrCancelledError, RPCError) as err:
            message = str(err).lower()
            if "already completed" in message or "aborted by closing workflow" in message:
                # The run ended (e.g. the first decision let it finish): an answer, not a fault.
                return f"refused: the run has ended ({err})"
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(LINK_RETRY_SECONDS)
            continue
        return f"accepted: {answer.status}"


async def until(
    ctx: Context, handle: WorkflowHandle[Any, Any], ready: Callable[[RunState], bool]
) -> RunState:
    """Query the run until `ready` holds (queries fail while workers or the server restart)."""
    deadline = time.monotonic() + ctx.result_timeout
    while time.monotonic() < deadline:
        try:
            state: RunState = await asyncio.wait_for(
                handle.query(AgentRunWorkflow.status), timeout=10
            )
            if ready(state):
                return state
        except (RPCError, TimeoutError):
            pass
        await asyncio.sleep(ctx.query_every)
    raise TimeoutError("the run never got there")


async def _retrying(call: Callable[[], Awaitable[_T]]) -> _T:
    """Call, retrying through a server restart (RPC errors of an unavailable server)."""
    deadline = time.monotonic() + RESULT_TIMEOUT
    while True:
        try:
            return await asyncio.wait_for(call(), timeout=15)
        except (RPCError, TimeoutError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


def update_inputs(events: list[Any], name: str) -> list[dict[str, Any]]:
    """The arguments of every accepted Update named `name` in a history, decoded."""
    found: list[dict[str, Any]] = []
    for event in events:
        if event.event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            continue
        request = event.workflow_execution_update_accepted_event_attributes.accepted_request
        if request.input.name != name:
            continue
        for payload in request.input.args.payloads:
            found.append(json.loads(payload.data))
    return found


def signal_inputs(events: list[Any], name: str) -> list[dict[str, Any]]:
    """The arguments of every signal named `name` in a history, decoded."""
    found: list[dict[str, Any]] = []
    for event in events:
        if event.event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            continue
        attributes = event.workflow_execution_signaled_event_attributes
        if attributes.signal_name != name:
            continue
        found.extend(json.loads(p.data) for p in attributes.input.payloads)
    return found
