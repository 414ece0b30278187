"""The runs the suite starts: what each is, how the driver plays its part (approvals decided at
random moments or racing the timeout policy, cancels, late completions, scripted model faults,
links used across a key rotation, MCP tasks' questions answered, repeated or left to expire),
and what it must end as.

After a run ends the driver reads its state and the history of every run of its
continue-as-new chain; a read that fails is reported, never skipped: an invariant that could
not be checked has not held."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

import httpx
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from chaos.app import DELETE_SCRIPT, DELETE_TOOL
from chaos.history import completed_activities, fetch_chain, replay_failures
from chaos.sizes import RESULT_TIMEOUT, Size
from chaos.streams import StreamRead, Streams
from chaos.tokens import job_token
from chaos.wire import HangingWire
from waitstate.client import AnswerRefused, ClientError, DecisionRefused, RunEnded, WaitstateClient
from waitstate.schemas import RunInput, RunState
from waitstate.schemas.approvals import ApprovalPolicy, DecideInput, DecisionKind, DecisionSignal
from waitstate.schemas.operations import Operation
from waitstate.schemas.questions import AnswerInput, QuestionStatus
from waitstate.schemas.run import NOTIFY_APPROVAL, TERMINAL_STATUSES
from waitstate.testing.wire_server import error, openai_tool_calls
from waitstate.workflows.agent_run import AgentRunWorkflow

_T = TypeVar("_T")
Category = Literal["callback", "polled", "approval", "plain", "model"]
# `race`: sent at a moment that races the request's timeout policy (either may win, not both).
Decider = Literal["signal", "update", "link", "timeout", "race"]
ModelFault = Literal["429", "500", "hang", "malformed"]
# Which demo systems (and task queue) a run's tools use: see chaos.stack.
Queue = Literal["main", "early", "slow"]
# What the driver does with the question a run's MCP task asks (`delete_dataset`'s "Delete
# dataset NAME for good?"): see `_answer_question`.
QuestionPlay = Literal["repeat", "link-copies", "decline", "race", "refuse", "expire"]
# The answers it sends: `confirm` deletes, `refuse` (an accept saying no) and `decline` keep.
Reply = Literal["confirm", "refuse", "decline"]

EXPORT_TOOLS = ["start_export", "verify_row_count", "upload_file", "notify_team"]
REFUND_TOOLS = ["check_claim", "issue_refund"]
LINK_RETRY_SECONDS = 2.0
# The gateway's answers that ask for the same request again: 503 (nothing was recorded) and 504
# `outcome_unknown` (it may yet be applied; the same request is the same Update, applied once).
SEND_AGAIN = frozenset({503, 504})
# How often a racing decision's run is asked whether its request is there yet (each query is a
# workflow task on a worker: kept to a few runs).
RACE_QUERY_EVERY = 0.05
# One call of the driver's, before it is asked again (the server may be restarting).
CALL_TIMEOUT = 15.0
# How long `until` lets one query of its run take.
UNTIL_QUERY_TIMEOUT = timedelta(seconds=10)


@dataclass
class RunPlan:
    """One run: its input, the part the driver plays, and the status it must end with."""

    id: str
    kind: str
    category: Category
    input: RunInput
    expect: str = "completed"  # a status, or several as `a|b`
    decider: Decider | None = None
    decision: DecisionKind = "approve"
    duplicate_decision: bool = False
    cancel: bool = False
    fault: ModelFault | None = None
    refund_key: str | None = None
    phase: str = ""
    # The fault classes of issue 11 (chaos.exactly_once): the row that counts this run, the
    # systems it runs against, and what it must show.
    klass: str = ""
    queue: Queue = "main"
    operations: Literal["succeeded", "expired", "cancelled"] | None = None  # each must end so
    late_completions: bool = False  # once its operations ended, complete them again
    rotation: Literal["before", "after"] | None = None  # its tokens minted before/after it
    link: Literal["first", "escalation"] = "first"  # which notice's link decides
    race: Literal["at-once", "at-deadline", "late"] = "at-once"  # when a `race` decision is sent
    question: QuestionPlay | None = None  # the answers to its MCP task's question
    # Issue 22's rows (chaos.outsiders): the schema its job asks in, and the driver's part
    # particular to the run, played after the decisions.
    schema: dict[str, Any] | None = None
    act: Act | None = None


@dataclass(frozen=True)
class Answer:
    """What the sender of a decision, a completion or an answer was told."""

    kind: Literal["decision", "completion", "answer"]
    subject: str  # the request id, operation id or question id
    via: str  # signal, update, link, late (a completion after the operation ended)
    status: int | None  # the HTTP status (links, completions)
    code: str  # the gateway's error code, or the Update's answer
    accepted: bool | None  # None: unknown (a signal, a 503, no answer)
    decision: str = ""  # approve or reject (decisions); a Reply (answers)
    late: bool = False  # sent once its link had expired (answers through a question's link)


@dataclass
class RunOutcome:
    """What became of a run, as the invariants read it."""

    plan: RunPlan
    status: str = "unknown"
    state: RunState | None = None
    events: list[Any] = field(default_factory=list)  # every run of the chain, in order
    chain: list[list[Any]] = field(default_factory=list)  # the same, one list per run
    seconds: float = 0.0
    started_at: float = 0.0  # time.monotonic(), once the start was acknowledged
    ended_at: float = 0.0  # once its end was seen
    answers: list[Answer] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)  # state or history that could not be read
    unreplayable: list[str] = field(default_factory=list)  # histories today's code cannot replay
    facts: dict[str, Any] = field(default_factory=dict)  # what the driver's `act` measured
    # What a reader of its event stream got (None: the suite read no streams).
    streamed: StreamRead | None = None
    first_run: str = ""


@dataclass
class Outbox:
    """The approvals outbox, read by one poller for every run: which runs asked for approval,
    and the decision links each was sent (cheaper than querying every run)."""

    url: str
    http: httpx.AsyncClient
    every: float = 0.3
    links: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Every notice per `workflow_id/request_id`, oldest first (the first, then an escalation).
    notices: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # The notices of operations' questions (`kind: question`), per `workflow_id/question_id`.
    questions: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
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
                if body.get("kind") == "question":
                    key = f"{body['workflow_id']}/{body['question_id']}"
                    self.questions.setdefault(key, []).append(body)
                    continue
                key = f"{body['workflow_id']}/{body['request_id']}"
                self.links.setdefault(key, body)
                self.links.setdefault(body["workflow_id"], body)
                self.notices.setdefault(key, []).append(body)
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

    async def question(self, workflow_id: str, question_id: str) -> dict[str, Any]:
        """The first notice of the run's question (its answer link...)."""
        key = f"{workflow_id}/{question_id}"
        while key not in self.questions:
            await self._changed.wait()
        return self.questions[key][0]

    async def notice(self, workflow_id: str, request_id: str, index: int) -> dict[str, Any]:
        """The request's notice number `index` (0: the first, 1: the escalation)."""
        key = f"{workflow_id}/{request_id}"
        while len(self.notices.get(key, [])) <= index:
            await self._changed.wait()
        return self.notices[key][index]


@dataclass
class Context:
    """What driving a run needs: the client, where things are, the RNG, the model server."""

    client: Client
    task_queue: str
    systems_url: str
    http: httpx.AsyncClient
    wire: HangingWire
    rng: random.Random
    outbox: Outbox
    query_every: float = 0.3
    result_timeout: float = RESULT_TIMEOUT
    # Per queue of chaos.stack: its task queue and its demo systems (default: the main ones).
    queues: Mapping[str, str] = field(default_factory=dict)
    systems: Mapping[str, str] = field(default_factory=dict)
    gateway_url: str = ""
    token_keys: Mapping[str, str] = field(default_factory=dict)
    # Set once the signing key was rotated: runs planned `after` it start then.
    rotated: asyncio.Event = field(default_factory=asyncio.Event)
    # Reads every driven run's event stream through the gateway (None: no streams read).
    streams: Streams | None = None
    # Where a history that does not replay is kept (it outlives the stack's directory).
    nondeterministic: Path = field(
        default_factory=lambda: Path(tempfile.gettempdir()) / "waitstate-chaos-nondeterministic"
    )

    @functools.cached_property
    def runs(self) -> WaitstateClient:
        """Runs started, read, decided and cancelled as every caller does."""
        return WaitstateClient(self.client, task_queue=self.task_queue)


class Act(Protocol):
    """The driver's part particular to a run (`RunPlan.act`): it records what it saw in the
    outcome (`facts`, `answers`, `notes`); an error it raises is the run's `driver` problem."""

    async def __call__(
        self,
        ctx: Context,
        plan: RunPlan,
        handle: WorkflowHandle[Any, Any],
        outcome: RunOutcome,
    ) -> None: ...


def make_plans(
    prefix: str, mix: Size, rng: random.Random, *, phase: str, first: int = 0
) -> list[RunPlan]:
    """`mix.mixed` runs of the mix, in a seeded random order (each kind once if it fits).
    Without `mix.refunds`, refunds become ask-first runs (a claim's refunds are bounded).
    Each run's number (which makes its refund's amount, and so its key) counts from `first`,
    so the phases' runs never share a refund."""
    makers: list[Callable[[str, int], RunPlan]] = [
        _export, _two_exports, _check_and_wait, _enrich, _ask_first,
        _refund if mix.refunds else _ask_first, _ask_timeout, _plain,
    ]  # fmt: skip
    if mix.mcp:
        makers.append(_mcp_task)
    order = [makers[i % len(makers)] for i in range(mix.mixed)]
    rng.shuffle(order)
    plans = [make(f"{prefix}-{i:04d}", first + i) for i, make in enumerate(order)]
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


def _mcp_task(wid: str, i: int) -> RunPlan:
    """A report built by an MCP task (the demo's MCP server), named by the run's id; one run
    in three gives it less time than it takes, so it expires and is sent `tasks/cancel`."""
    expires = i % 3 == 0
    run = RunInput(
        task=f"build the report for {wid}",
        model="scripted:mcp-build",
        tools=["reports__build_report"],
        operation_timeout=timedelta(seconds=1) if expires else None,
    )
    return RunPlan(wid, "mcp-task-expiring" if expires else "mcp-task", "polled", run)


# What each way of answering must leave: the question's status, and what the MCP server did.
QUESTION_ENDS: dict[QuestionPlay, tuple[QuestionStatus, Literal["deleted", "kept"]]] = {
    "repeat": ("answered", "deleted"),
    "link-copies": ("answered", "deleted"),
    "decline": ("declined", "kept"),
    "race": ("answered", "deleted"),
    "refuse": ("answered", "kept"),
    "expire": ("expired", "kept"),
}
QUESTION_PLAYS: tuple[QuestionPlay, ...] = tuple(QUESTION_ENDS)
# How a question run's approval is decided (an approval, so its task can start at all).
DECIDERS: tuple[Decider, ...] = ("signal", "update", "link")


def question_plans(prefix: str, count: int, rng: random.Random, *, phase: str) -> list[RunPlan]:
    """`count` runs whose MCP task asks a question: each deletes a dataset named by its id (a
    destructive tool: the driver approves the call, by the means the mix picks, maybe twice),
    and its task asks to confirm; the driver answers per `QUESTION_PLAYS`, in turn."""
    plans = []
    for i in range(count):
        wid = f"{prefix}-{i:02d}"
        play = QUESTION_PLAYS[i % len(QUESTION_PLAYS)]
        run = RunInput(
            task=f"delete the dataset {wid}",
            model=f"scripted:{DELETE_SCRIPT}",
            tools=[DELETE_TOOL],
        )
        # Its operation is checked with its question (chaos.invariants): a start its worker
        # was killed in may leave the run without one, as the mix's MCP tasks may.
        plan = RunPlan(
            wid, f"mcp-question-{play}", "approval", run, decider=rng.choice(DECIDERS),
            duplicate_decision=rng.random() < 0.5, phase=phase, question=play,
        )  # fmt: skip
        plans.append(plan)
    return plans


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


def cancel_plan(wid: str, queue: Queue = "main") -> RunPlan:
    """Two exports, then the run is cancelled while they run: both jobs must get a cancel;
    then their completions come late (each a refusal that changes nothing)."""
    run = RunInput(task="two exports", model="scripted:two-exports", tools=["start_export"])
    return RunPlan(
        wid, "cancelled-exports", "callback", run, "cancelled", cancel=True, queue=queue,
        operations="cancelled", late_completions=True,
    )  # fmt: skip


# The hung call's model timeout: the timeout is what cuts it, and its retry comes soon after.
MODEL_TIMEOUT = timedelta(seconds=2)
# The other faults' (a 429, two 500s, malformed arguments): long enough that the fault's answer
# reaches the call on a loaded machine. At 2 s the call's own deadline (1.8 s) could pass before
# the 429 was read, and the retry then came after the retry policy's first second, not after
# the 429's retry-after, which the call never saw ("retried 0.98s after a 429", once).
ANSWERED_FAULT_TIMEOUT = timedelta(seconds=20)
TOOL_TIMEOUT = timedelta(seconds=10)
RETRY_AFTER = 2


def model_plan(wid: str, fault: ModelFault) -> RunPlan:
    """A run against the wire server whose first answer is `fault`; the default rule then calls
    `calculate` and answers, so the run must complete."""
    run = RunInput(
        task="add two and two",
        model=f"openai:{wid}",
        tools=["calculate"],
        model_timeout=MODEL_TIMEOUT if fault == "hang" else ANSWERED_FAULT_TIMEOUT,
        # A worker killed holding its `calculate` call must not cost the run two minutes.
        tool_timeout=TOOL_TIMEOUT,
    )
    return RunPlan(wid, f"model-{fault}", "model", run, fault=fault)


def script_model_fault(wire: HangingWire, plan: RunPlan) -> None:
    """Queue the fault for this run's model name (the run's conversation only)."""
    name = plan.id
    if plan.fault == "429":
        wire.enqueue_for(name, error(429, "slow down", {"retry-after": str(RETRY_AFTER)}))
    elif plan.fault == "500":
        wire.enqueue_for(name, error(500, "internal error"), error(500, "internal error"))
    elif plan.fault == "hang":
        # Unanswered until the retry arrives: the fault is the timeout cutting the call.
        wire.hang_until_retry(name)
    elif plan.fault == "malformed":
        bad = openai_tool_calls([("call_bad", "calculate", '{"expression": "2 +')])
        wire.enqueue_for(name, bad)


# --- driving a run ---------------------------------------------------------------------------


async def drive(ctx: Context, plan: RunPlan, *, hold: asyncio.Event | None = None) -> RunOutcome:
    """Start the run, play the driver's part, wait for its end, read what it recorded; never
    raises for the run's own failure (that is the outcome's status). `hold`: decide/cancel
    only once it is set."""
    outcome = RunOutcome(plan)
    if plan.rotation == "after":
        # Its tokens and links are minted under the new signing key.
        await bounded(ctx, ctx.rotated.wait())
    began = time.monotonic()
    if plan.fault is not None:
        script_model_fault(ctx.wire, plan)
    handle, first_run_id = await _start(ctx, plan)
    outcome.started_at = time.monotonic()
    outcome.first_run = first_run_id
    reading = ctx.streams.follow(handle.id, first_run_id) if ctx.streams else None
    try:
        await _play(ctx, plan, handle, first_run_id, outcome, hold)
    except Exception as err:  # noqa: BLE001 - the driver's failure is reported, not raised
        outcome.problems.append(f"driver: {type(err).__name__}: {err}")
    try:
        outcome.status = await _result(ctx, handle)
    except TimeoutError:
        outcome.status = "stuck"
    outcome.ended_at = time.monotonic()
    outcome.seconds = outcome.ended_at - began
    if plan.late_completions:
        # After the end too: the run has ended, so nothing may reach it.
        try:
            await _late_completions(ctx, plan, first_run_id, outcome)
        except Exception as err:  # noqa: BLE001 - reported, not raised
            outcome.problems.append(f"driver: late completions: {type(err).__name__}: {err}")
    await _read(ctx, handle, first_run_id, outcome)
    if ctx.streams is not None and reading is not None:
        outcome.streamed = await ctx.streams.finish(reading)
    return outcome


async def _read(
    ctx: Context, handle: WorkflowHandle[Any, Any], first_run_id: str, outcome: RunOutcome
) -> None:
    """The run's state (from its last run) and the history of every run of its chain."""
    try:
        outcome.state = await _retrying(lambda: _query(ctx, handle.id))
    except (ClientError, RPCError, TimeoutError) as err:
        outcome.unread.append(f"state query failed: {type(err).__name__}: {err}")
    try:
        outcome.chain = await _retrying(lambda: fetch_chain(ctx.client, handle.id, first_run_id))
    except (RPCError, TimeoutError, RuntimeError) as err:
        outcome.unread.append(f"history fetch failed: {type(err).__name__}: {err}")
    outcome.events = [event for events in outcome.chain for event in events]
    ctx.nondeterministic.mkdir(parents=True, exist_ok=True)
    outcome.unreplayable = await replay_failures(handle.id, outcome.chain, ctx.nondeterministic)


async def bounded(ctx: Context, awaitable: Awaitable[_T]) -> _T:
    """`awaitable`'s result, if it comes within the context's result timeout."""
    async with asyncio.timeout(ctx.result_timeout):
        return await awaitable


async def _play(
    ctx: Context,
    plan: RunPlan,
    handle: WorkflowHandle[Any, Any],
    first_run_id: str,
    outcome: RunOutcome,
    hold: asyncio.Event | None,
) -> None:
    """The driver's part: complete expired operations late, decide approvals, cancel."""
    if plan.late_completions and not plan.cancel:
        # Once every callback operation has ended (expired), while the run is still open (it
        # waits for a decision, sent next): the run's own validator must refuse them.
        await until(ctx, handle, _callbacks_ended)
        await _late_completions(ctx, plan, first_run_id, outcome)
    if plan.decider == "race":
        await _race_decision(ctx, plan, handle, outcome)
    elif plan.decider is not None and plan.decider != "timeout":
        await _decide(ctx, plan, handle, outcome, hold)
    if plan.question is not None:
        await _answer_question(ctx, plan, plan.question, handle, outcome)
    if plan.act is not None:
        await plan.act(ctx, plan, handle, outcome)
    if plan.cancel:
        await until(ctx, handle, lambda s: any(not o.terminal for o in s.operations.values()))
        if hold is not None:
            await hold.wait()
        # Asked again, its first answer lost, a cancel finds the run ended: it took the first
        # (the run's status says whether it ended cancelled).
        with contextlib.suppress(RunEnded):
            await _retrying(lambda: ctx.runs.cancel(plan.id), answered=_is(RunEnded))


def _callbacks_ended(state: RunState) -> bool:
    ops = [op for op in state.operations.values() if op.completion == "callback"]
    return bool(ops) and all(op.terminal for op in ops)


# A completion as the job would have sent it, had it ignored its cancel.
LATE_COMPLETION = {"status": "succeeded", "result": {"file": "exports/late.csv", "rows": 1}}


async def _late_completions(
    ctx: Context, plan: RunPlan, first_run_id: str, outcome: RunOutcome
) -> None:
    """For every callback operation of the run that expired or was cancelled: a completion
    with the job's own token (expired with the operation: 410) and with the same token minted
    by a gateway whose clock is behind (still valid: the run must refuse it, 409). Both are
    refusals, and neither may add a history event."""
    state = await _retrying(lambda: _query(ctx, plan.id))
    chain = await _retrying(lambda: fetch_chain(ctx.client, plan.id, first_run_id))
    ended = [
        op
        for op in state.operations.values()
        if op.completion == "callback" and op.status in ("expired", "cancelled")
    ]
    later = datetime.now(UTC) + timedelta(hours=1)
    for op in ended:
        own = job_token(ctx.token_keys, plan.id, op, chain)
        skewed_op = op.model_copy(update={"expires_at": later})
        skewed = job_token(ctx.token_keys, plan.id, skewed_op, chain)
        for via, token in (("late", own), ("late (clock behind)", skewed)):
            if token is None:
                outcome.problems.append(f"no key gives {op.operation_id}'s nonce hash")
                continue
            outcome.answers.append(await _complete(ctx, op, token, via))


async def _complete(ctx: Context, op: Operation, token: str, via: str) -> Answer:
    response = await _post(
        ctx,
        f"{ctx.gateway_url}/v1/operations/{op.operation_id}/complete",
        json=LATE_COMPLETION,
        headers={"Authorization": f"Bearer {token}"},
    )
    status = response.status_code
    accepted = True if status < 300 else (None if status >= 500 else False)
    return Answer("completion", op.operation_id, via, status, error_code(response), accepted)


async def _post(ctx: Context, url: str, **request: Any) -> httpx.Response:
    """POST to the gateway, again while the connection fails (a gateway restarted under the
    suite's faults closes the pooled connection a request was sent on: httpx's ReadError, seen
    in full runs, seeds 6 and 7), until the context's result timeout. A decision or completion
    sent twice is the same one: the run answers the second as it answered the first."""
    deadline = time.monotonic() + ctx.result_timeout
    while True:
        try:
            return await ctx.http.post(url, **request)
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(LINK_RETRY_SECONDS)


def error_code(response: httpx.Response) -> str:
    """The gateway's error code (`operation_resolved`...), or the status for a success."""
    try:
        return str(response.json()["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return str(response.status_code)


async def _start(ctx: Context, plan: RunPlan) -> tuple[WorkflowHandle[Any, Any], str]:
    """Start the run; a start whose answer was lost to a restart is found, not repeated.
    Returns its handle and the id of its first run (where its chain of runs begins)."""
    queue = ctx.queues.get(plan.queue, ctx.task_queue)
    started = await _retrying(lambda: ctx.runs.start(plan.input, run_id=plan.id, task_queue=queue))
    return ctx.runs.handle(plan.id), started.first_run_id


async def _result(ctx: Context, handle: WorkflowHandle[Any, Any]) -> str:
    deadline = time.monotonic() + ctx.result_timeout
    while True:
        try:
            outcome = await asyncio.wait_for(
                ctx.runs.outcome(handle.id), deadline - time.monotonic()
            )
            return outcome.status
        except ClientError:
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
    maybe decide again by another means (a duplicate that must not be applied). A run planned
    across the key rotation decides after it, by the link of its first notice or of its
    escalation."""
    if plan.queue == "main":
        async with asyncio.timeout(ctx.result_timeout):
            notice = await ctx.outbox.request(plan.id)
    else:  # its notices go to other systems' outbox: signals and Updates only
        state = await until(ctx, handle, lambda s: bool(s.approvals))
        notice = {"request_id": next(iter(state.approvals))}
    request_id = str(notice["request_id"])
    link = notice
    if plan.rotation == "before":
        await bounded(ctx, ctx.rotated.wait())
    if plan.link == "escalation" or (plan.rotation == "before" and _escalates(plan)):
        link = await bounded(ctx, _after_escalation(ctx, plan, handle, request_id, outcome))
    # A link may be used the moment it reaches the outbox, before the run has recorded that
    # it was sent (the gateway waits for the run to confirm it).
    if hold is not None:
        await hold.wait()
    if plan.rotation is None:
        await asyncio.sleep(ctx.rng.uniform(0.0, 1.5))
    assert plan.decider is not None and plan.decider not in ("timeout", "race")
    first = await _send_decision(ctx, plan, handle, request_id, plan.decider, link=link)
    outcome.answers.append(first)
    outcome.notes.append(f"decision by {plan.decider}: {first.code}")
    if plan.duplicate_decision:
        means: list[Decider] = ["signal", "update", "link"]
        other = ctx.rng.choice([d for d in means if d != plan.decider])
        flipped: DecisionKind = "reject" if plan.decision == "approve" else "approve"
        second = await _send_decision(
            ctx, plan, handle, request_id, other, decision=flipped, link=link
        )
        outcome.answers.append(second)
        outcome.notes.append(f"duplicate by {other}: {second.code}")


def _escalates(plan: RunPlan) -> bool:
    return plan.input.approval.on_timeout == "escalate"


async def _after_escalation(
    ctx: Context,
    plan: RunPlan,
    handle: WorkflowHandle[Any, Any],
    request_id: str,
    outcome: RunOutcome,
) -> dict[str, Any]:
    """The link to decide with once the request has escalated: wait for the event itself, the
    run having recorded its escalation notice (minted under the new key), so the request's
    links are as they will stay; the escalation's link once it is in the outbox. A notice
    lost with its worker is retried only after its activity timeout, while the second window
    runs on: by the middle of that window a person decides with the link they have."""
    first = ctx.outbox.links[f"{plan.id}/{request_id}"]
    key = f"{plan.id}/{request_id}"
    while True:
        state = await _retrying(lambda: _query(ctx, handle.id))
        request = state.approvals[request_id]
        events = [event async for event in handle.fetch_history_events()]
        recorded = completed_activities(events, NOTIFY_APPROVAL) >= 2
        posted = len(ctx.outbox.notices.get(key, [])) >= 2
        if recorded and (plan.link == "first" or posted):
            break
        window = request.policy.timeout.total_seconds()
        late = request.escalated and time.time() > request.expires_at.timestamp() - window / 2
        if not request.open or late:
            outcome.notes.append(f"escalation notice recorded: {recorded}, posted: {posted}")
            break
        await asyncio.sleep(ctx.query_every)
    if plan.link == "escalation" and posted:
        return ctx.outbox.notices[key][1]
    return first


async def _race_decision(
    ctx: Context, plan: RunPlan, handle: WorkflowHandle[Any, Any], outcome: RunOutcome
) -> None:
    """A person's decision racing the request's timeout policy: sent the moment the request
    appears (while the run is still sending its notice), around its deadline, or late (when
    the policy has most likely acted: the server fires timers up to about a second late).
    Either may win; the other must then change nothing."""
    state = await until(ctx, handle, lambda s: bool(s.approvals), every=RACE_QUERY_EVERY)
    request = next(iter(state.approvals.values()))
    after = {"at-once": None, "at-deadline": (-0.25, 0.25), "late": (1.5, 3.0)}[plan.race]
    if after is not None:
        moment = request.expires_at.timestamp() + ctx.rng.uniform(*after)
        await asyncio.sleep(max(0.0, moment - time.time()))
    means: Decider = ctx.rng.choice(["signal", "update"])
    answer = await _send_decision(ctx, plan, handle, request.request_id, means)
    outcome.answers.append(answer)
    outcome.notes.append(f"race ({plan.race}) by {means}: {answer.code}")


async def _send_decision(
    ctx: Context,
    plan: RunPlan,
    handle: WorkflowHandle[Any, Any],
    request_id: str,
    decider: Decider,
    decision: DecisionKind | None = None,
    link: dict[str, Any] | None = None,
) -> Answer:
    """One decision; returns what the sender was told (the decision may be refused)."""
    decision = decision or plan.decision
    reviewer = f"chaos-{decider}"
    if decider == "signal":
        signal = AgentRunWorkflow.approve if decision == "approve" else AgentRunWorkflow.reject
        try:
            await _retrying(
                lambda: handle.signal(
                    signal, DecisionSignal(request_id=request_id, reviewer=reviewer)
                ),
                answered=_run_ended,
            )
        except RPCError as err:
            if not _run_ended(err):
                raise
            code = f"refused: the run has ended ({err})"
            return Answer("decision", request_id, "signal", None, code, False, decision)
        return Answer("decision", request_id, "signal", None, "signalled", None, decision)
    if decider == "update":
        return await _update_decision(ctx, handle, request_id, decision, reviewer)
    notice = link or ctx.outbox.links[f"{plan.id}/{request_id}"]
    body = {"decision": decision, "reviewer": reviewer}
    response, _ = await _post_link(ctx, notice["decision"], body, "a decision link")
    status = response.status_code
    which = "escalation link" if notice.get("escalation") else "link"
    code = error_code(response)
    # After a 503 or 504, the same decision again is the same Update: "duplicate_decision" then
    # says the first attempt's was applied (the driver never sends one decision twice on purpose).
    taken = status < 300 or code == "duplicate_decision"
    return Answer("decision", request_id, which, status, code, taken, decision)


async def _post_link(
    ctx: Context, target: dict[str, str], body: dict[str, Any], link: str
) -> tuple[httpx.Response, datetime]:
    """POST `body` to a gateway link (its `url`, with its `authorization`), again while the
    gateway answers 503 or 504 (the run or Temporal is busy, or did not answer in time; it says
    to send it again, so we do) until the context's result timeout: its last answer, and when
    that was sent.

    Raises:
        RuntimeError: the gateway answered another 5xx to `link` ("a decision link").
    """
    deadline = time.monotonic() + ctx.result_timeout
    while True:
        sent_at = datetime.now(UTC)
        response = await _post(
            ctx, target["url"], json=body, headers={"Authorization": target["authorization"]}
        )
        if response.status_code not in SEND_AGAIN or time.monotonic() > deadline:
            break
        await asyncio.sleep(LINK_RETRY_SECONDS)
    if response.status_code >= 500:
        said = f"{response.status_code} {response.text[:200]}"
        raise RuntimeError(f"the gateway answered {said} to {link}")
    return response, sent_at


async def _update_decision(
    ctx: Context,
    handle: WorkflowHandle[Any, Any],
    request_id: str,
    decision: DecisionKind,
    reviewer: str,
) -> Answer:
    """The `decide` Update, asked again under the same id until it is answered
    (`until_answered`); returns what the sender was told."""
    update_id = f"chaos-decide/{request_id}/{reviewer}/{decision}"
    decide = DecideInput(request_id=request_id, decision=decision, reviewer=reviewer)
    answer, refusal = await until_answered(
        ctx, lambda: ctx.runs.decide(handle.id, decide, update_id=update_id)
    )
    code = refusal if answer is None else f"accepted: {answer.status}"
    return Answer("decision", request_id, "update", None, code, answer is not None, decision)


async def until_answered(
    ctx: Context, update: Callable[[], Awaitable[_T]]
) -> tuple[_T | None, str]:
    """An Update (`update` sends it, always under the same id) asked again until the run answers
    it: Temporal dedupes by id, so an answer lost to a timeout or a worker's restart is found,
    never applied twice. Returns the Update's result, or None and what the sender is told of
    the run's refusal (its validator's, or its end: answers, not faults)."""
    deadline = time.monotonic() + ctx.result_timeout
    while True:
        try:
            return await update(), ""
        except DecisionRefused as err:
            return None, f"refused: {err.reason}"
        except AnswerRefused as err:
            return None, f"refused: {err.error_type}: {err.reason}"
        except RunEnded as err:
            # The run ended (e.g. the first decision let it finish): an answer, not a fault.
            return None, f"refused: the run has ended ({err})"
        except ClientError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(LINK_RETRY_SECONDS)


async def _answer_question(
    ctx: Context,
    plan: RunPlan,
    play: QuestionPlay,
    handle: WorkflowHandle[Any, Any],
    outcome: RunOutcome,
) -> None:
    """Once the run records its task's question, answer it per the plan:

    - `repeat`: confirm by the `answer` Update, then the same answer again by another Update
      (a second person): refused, the question being answered;
    - `link-copies`: confirm through the question's link, then the identical request again
      (a retry): the same Update, so applied once, and the copy gets its outcome;
    - `decline`: decline by Update, then confirm through the link: refused;
    - `race`: confirm by Update and through the link at once: one applied, the other refused;
    - `refuse`: accept through the link, saying no (`confirm: false`): the dataset is kept;
    - `expire`: nobody answers; the policy tells the task no, and a late answer is refused.
    """
    state = await until(ctx, handle, lambda s: bool(s.questions) or s.status in TERMINAL_STATUSES)
    if not state.questions:
        # Its start was interrupted, say (chaos.invariants.interrupted_start): nothing to answer.
        outcome.notes.append(f"the run ended {state.status} with no question")
        return
    question_id = next(iter(state.questions))
    if play == "expire":
        await until(ctx, handle, lambda s: not s.questions[question_id].open)
        late = await _update_answer(ctx, handle, question_id, "confirm", "update (late)")
        outcome.answers.append(late)
        outcome.notes.append(f"late answer by update: {late.code}")
        return
    link: dict[str, Any] = {}
    if any(means == "link" for means, _, _ in _ANSWERS[play]):
        link = await bounded(ctx, ctx.outbox.question(plan.id, question_id))

    async def send(means: Literal["update", "link"], reply: Reply, via: str) -> Answer:
        began = time.monotonic()
        if means == "update":
            answer = await _update_answer(ctx, handle, question_id, reply, via)
        else:
            answer = await _link_answer(ctx, link, question_id, reply, via)
        outcome.notes.append(f"{reply} by {via}: {answer.code} ({time.monotonic() - began:.1f}s)")
        return answer

    await asyncio.sleep(ctx.rng.uniform(0.0, 1.5))
    if play == "race":
        outcome.answers += await asyncio.gather(*(send(*a) for a in _ANSWERS[play]))
    else:
        # One after the other, each recorded once sent (a driver failure keeps those before).
        for answer in _ANSWERS[play]:
            outcome.answers.append(await send(*answer))


# The answers of each play, in order (`race`: at once): by what means, saying what, and how
# the sender is known (an Update's id and a link's responder follow from it).
_ANSWERS: dict[QuestionPlay, list[tuple[Literal["update", "link"], Reply, str]]] = {
    "repeat": [("update", "confirm", "update"), ("update", "confirm", "update (again)")],
    "link-copies": [("link", "confirm", "link"), ("link", "confirm", "link (copy)")],
    "decline": [("update", "decline", "update"), ("link", "confirm", "link")],
    "race": [("update", "confirm", "update"), ("link", "confirm", "link")],
    "refuse": [("link", "refuse", "link")],
    "expire": [],
}


# What each Reply sends (by name, as `Answer.decision` has it): the action and its content
# (the question's schema is `{confirm: bool}`).
REPLIES: dict[str, tuple[Literal["accept", "decline"], dict[str, Any] | None]] = {
    "confirm": ("accept", {"confirm": True}),
    "refuse": ("accept", {"confirm": False}),
    "decline": ("decline", None),
}


async def _update_answer(
    ctx: Context, handle: WorkflowHandle[Any, Any], question_id: str, reply: Reply, via: str
) -> Answer:
    """The `answer` Update, asked again under the same id until it is answered (an answer lost
    to a worker's restart is found, never applied twice); returns what the sender was told."""
    action, content = REPLIES[reply]
    answer = AnswerInput(
        question_id=question_id, action=action, content=content, responder=f"chaos-{via}"
    )
    update_id = f"chaos-answer/{question_id}/{via}"
    got, refusal = await until_answered(
        ctx, lambda: ctx.runs.answer(handle.id, answer, update_id=update_id)
    )
    if got is None:
        return Answer("answer", question_id, via, None, refusal, False, reply)
    code = f"accepted: {got.status}, delivered {got.delivered}"
    return Answer("answer", question_id, via, None, code, got.accepted, reply)


async def _link_answer(
    ctx: Context, notice: dict[str, Any], question_id: str, reply: Reply, via: str
) -> Answer:
    """An answer through the question's link (the gateway), retried on 503 or 504 as the gateway says
    (the same body is the same Update: a retry learns the first one's outcome)."""
    action, content = REPLIES[reply]
    # The link's token lasts as long as the question's window (no escalation here).
    expires_at = datetime.fromisoformat(notice["expires_at"])
    body = {"action": action, "content": content, "responder": "chaos-link"}
    response, sent_at = await _post_link(ctx, notice["answer"], body, "an answer link")
    late = sent_at >= expires_at
    status = response.status_code
    if status < 300:
        taken = response.json()
        code = f"{status} {taken['question_status']}, delivered {taken['delivered']}"
    else:
        code = f"{status} {error_code(response)}"
    return Answer("answer", question_id, via, status, code, status < 300, reply, late=late)


async def until(
    ctx: Context,
    handle: WorkflowHandle[Any, Any],
    ready: Callable[[RunState], bool],
    *,
    every: float | None = None,
) -> RunState:
    """Query the run until `ready` holds (queries fail while workers or the server restart),
    every `every` seconds (default: the context's)."""
    deadline = time.monotonic() + ctx.result_timeout
    while time.monotonic() < deadline:
        try:
            state = await ctx.runs.query(handle.id, rpc_timeout=UNTIL_QUERY_TIMEOUT)
            if ready(state):
                return state
        except ClientError:
            pass
        await asyncio.sleep(ctx.query_every if every is None else every)
    raise TimeoutError("the run never got there")


def _run_ended(err: BaseException) -> bool:
    """The server's answer that the run has ended (before, or while, the call was handled): the
    driver started every run it signals, so a run it does not find is one that has ended."""
    return isinstance(err, RPCError) and err.status == RPCStatusCode.NOT_FOUND


async def _query(ctx: Context, run_id: str) -> RunState:
    """The run's state, as one call of `_retrying`'s."""
    return await ctx.runs.query(run_id, rpc_timeout=timedelta(seconds=CALL_TIMEOUT))


def _is(kind: type[Exception]) -> Callable[[Exception], bool]:
    return lambda err: isinstance(err, kind)


async def _retrying(
    call: Callable[[], Awaitable[_T]], *, answered: Callable[[Exception], bool] | None = None
) -> _T:
    """Call, retrying through a server restart (RPC and client errors while it is away); an
    error `answered` accepts is the server's answer, raised at once."""
    deadline = time.monotonic() + RESULT_TIMEOUT
    while True:
        try:
            return await asyncio.wait_for(call(), timeout=CALL_TIMEOUT)
        except (RPCError, ClientError) as err:
            if (answered is not None and answered(err)) or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)
        except TimeoutError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)
