"""Fault classes 3, 4 and 6 of the reliability suite: attacks on the webhook gateway.

3. Duplicate completions and decisions (20 concurrent, identical), late ones after the
   operation or approval expired, and ones for cancelled runs: each applied at most once,
   and the run resumed once.
4. Forged, tampered, cross-run, cross-operation, cross-endpoint, expired and replayed tokens
   on both endpoints: the documented status, and no event added to the run's history.
6. Fuzzed requests (`chaos.fuzz`): never a 5xx, never a 2xx, nothing added to any history.

The runs are real: scripted agent runs on the target's task queue, served by a worker whose
demo systems are the target's own, so its faults (`never_complete`) touch no other run. The
tokens are minted with the fleet's keys: minting is deterministic, so a token minted here for
a run's operation, with the nonce the run chose for it (recorded in its start's input), is the
very token its external system holds (checked through the nonce hash the run keeps), and a key
we do not hold makes a forgery.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import logging
import shutil
import tempfile
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import httpx
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle

from chaos.fuzz import FuzzTarget, fuzz_gateway
from chaos.history import completed_activities, operation_nonce
from chaos.model import Check, GatewayTarget
from examples.demo.basic import demo_tools
from examples.demo.compliance import compliance_tools
from examples.demo.exports import ExportService, export_tool
from waitstate.auth.tokens import (
    MintedToken,
    ResumeTokens,
    approval_subject,
    nonce_hash,
    question_subject,
)
from waitstate.client import WaitstateClient
from waitstate.providers import Providers
from waitstate.providers.base import ModelRequest
from waitstate.providers.scripted import ScriptedProvider
from waitstate.schemas import ModelResponse, RunInput, RunResult, RunState
from waitstate.schemas.approvals import ApprovalPolicy, ApprovalRequest
from waitstate.schemas.operations import Operation
from waitstate.schemas.run import NOTIFY_APPROVAL
from waitstate.settings import Settings

EXPORT_TASK = "Export Q3 transactions and file them in the compliance folder"
EXPORT_TOOLS = ["start_export", "verify_row_count", "upload_file", "notify_team"]
# The export scenario's model turns when the export succeeds: start, verify, upload, notify,
# answer. One more would mean the run was resumed twice.
EXPORT_TURNS = 5
ASK_TASK = "Archive the Q3 ledger, but ask a person first"
ASK_TURNS = 2  # ask, then answer with the decision
SUCCEEDED = {
    "status": "succeeded",
    "result": {"file": "exports/transactions-2025-Q3.csv", "rows": 7},
}
FAILED = {"status": "failed", "error": {"code": "boom", "message": "late", "retryable": False}}
APPROVE = {"decision": "approve", "reviewer": "chaos", "comment": "ok"}
DUPLICATES = 20
FUZZED_AGENT = "chaos-exporter"  # the AG-UI route's agent, in fuzzed requests
# The operation expiry and approval timeout of the late-completion runs.
SHORT_EXPIRY = timedelta(seconds=2)
# How long the late runs' models think after a tool result: the window in which a late
# completion reaches the open run.
MODEL_PAUSE = timedelta(seconds=1)
# Every wait is bounded: a regression fails a check instead of hanging the suite.
WAIT_SECONDS = 60.0
UPDATE_ACCEPTED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED

_T = TypeVar("_T")

log = logging.getLogger("waitstate.chaos.gateway")


async def run_gateway_faults(
    target: GatewayTarget, *, runs: int, fuzz_examples: int, seed: int
) -> list[Check]:
    """Attack the gateway with duplicate, late and cancelled completions, bad tokens and fuzzed
    requests; one `Check` per attack, plus the "no 5xx for bad input" invariant over them all.

    Args:
        target: The gateway, its keys, and the systems and task queue reserved for these runs.
        runs: Operations attacked with duplicates (approvals get half as many, late and
            cancelled ones a quarter, at least one each).
        fuzz_examples: Fuzzed requests.
        seed: Seeds the fuzzer, so a failing run can be repeated.
    """
    async with httpx.AsyncClient(timeout=WAIT_SECONDS) as http:
        rig = _Rig(target, http)
        await rig.faults(never_complete=True)  # the attacks deliver every completion
        try:
            async with _expiring_worker(rig) as expiry_queue:
                few = max(1, runs // 4)
                checks = await asyncio.gather(
                    _duplicate_completions(rig, runs),
                    _duplicate_decisions(rig, max(1, runs // 2)),
                    _late_completions(rig, few, expiry_queue),
                    _late_decisions(rig, few, expiry_queue),
                    _cancelled_runs(rig, few),
                    _bad_tokens(rig),
                    _fuzzed(rig, fuzz_examples, seed),
                )
        finally:
            await rig.faults(never_complete=False)
    rows = [row for group in checks for row in group]
    return [*rows, rig.no_5xx()]


# --- the rig: starting runs, finding their tokens, calling the gateway -------------------------


@dataclass
class _Rig:
    """What every attack uses: the target, one HTTP client, the fleet's keys, and a record of
    every refused request for the "no 5xx" row."""

    target: GatewayTarget
    http: httpx.AsyncClient
    refused: Counter[int] = field(default_factory=Counter)
    server_errors: list[str] = field(default_factory=list)

    @property
    def tokens(self) -> ResumeTokens:
        return ResumeTokens(self.target.token_keys, self.target.signing_key_id)

    @functools.cached_property
    def runs(self) -> WaitstateClient:
        """Runs started, read and cancelled as every caller does."""
        return WaitstateClient(self.target.client, task_queue=self.target.task_queue)

    async def start(
        self, task: str, tools: list[str], *, task_queue: str | None = None, **fields: Any
    ) -> WorkflowHandle[Any, RunResult]:
        run_input = RunInput(task=task, tools=tools, **fields)
        run_id = f"chaos-gateway-{uuid.uuid4().hex[:12]}"
        await self.runs.start(run_input, run_id=run_id, task_queue=task_queue)
        return self.runs.handle(run_id)

    async def start_export(self, task_queue: str | None = None) -> WorkflowHandle[Any, RunResult]:
        return await self.start(EXPORT_TASK, EXPORT_TOOLS, task_queue=task_queue)

    async def start_ask(self, **fields: Any) -> WorkflowHandle[Any, RunResult]:
        return await self.start(
            ASK_TASK, ["request_approval"], model="scripted:ask-first", **fields
        )

    async def state(self, handle: WorkflowHandle[Any, Any]) -> RunState:
        return await self.runs.query(handle.id, rpc_timeout=timedelta(seconds=WAIT_SECONDS))

    async def outcome(self, handle: WorkflowHandle[Any, Any]) -> RunState:
        """How the run ended, once it has (within WAIT_SECONDS)."""
        return await asyncio.wait_for(self.runs.outcome(handle.id), WAIT_SECONDS)

    async def operation(self, handle: WorkflowHandle[Any, Any]) -> tuple[Operation, str]:
        """The run's first operation once it is pending, and the token its job was given.

        The token is minted again with the fleet's key (minting is deterministic); the run's
        nonce hash proves it is the one the external system holds.
        """

        async def pending() -> Operation | None:
            ops = (await self.state(handle)).operations.values()
            return next((op for op in ops if op.nonce_hash), None)

        op = await _until(pending, f"run {handle.id} started no operation")
        minted = await self.mint(handle, op.operation_id, op.expires_at)
        if minted.nonce_hash != op.nonce_hash:
            raise AssertionError(f"run {handle.id}: a re-minted token is not the job's token")
        return op, minted.token

    async def mint(
        self, handle: WorkflowHandle[Any, Any], operation_id: str, expires_at: datetime
    ) -> MintedToken:
        """A token for the run's operation with the nonce the run chose for it (from its
        history; derived from the key for runs that did not choose one)."""
        events = [event async for event in handle.fetch_history_events()]
        nonce = operation_nonce([events], operation_id)
        return self.tokens.mint(handle.id, operation_id, expires_at, nonce=nonce)

    async def approval(self, handle: WorkflowHandle[Any, Any]) -> tuple[ApprovalRequest, str]:
        """The run's first approval request once its links were sent and the run recorded it,
        and the links' token (read from the outbox the run posted them to)."""

        async def sent() -> tuple[ApprovalRequest, str] | None:
            requests = (await self.state(handle)).approvals.values()
            request = next((r for r in requests if r.nonce_hash), None)
            if request is None:
                return None
            # A run that chose its links' nonce knows its hash before the notice is posted.
            events = [event async for event in handle.fetch_history_events()]
            if not completed_activities(events, NOTIFY_APPROVAL):
                return None
            outbox = (await self.http.get(f"{self.target.systems_url}/approvals/outbox")).json()
            for entry in outbox:
                body = entry["body"]
                if body.get("request_id") == request.request_id and "decision" in body:
                    return request, str(body["decision"]["authorization"]).removeprefix("Bearer ")
            return None

        request, token = await _until(sent, f"run {handle.id} sent no approval link")
        # As of when it was issued: a short approval may have expired by now.
        claims = self.tokens.verify(token, now=request.requested_at)
        if nonce_hash(claims.nonce) != request.nonce_hash:
            raise AssertionError(f"run {handle.id}: the outbox link is not the run's")
        return request, token

    async def post(
        self,
        path: str,
        token: str | None,
        body: Any,
        *,
        refusal: bool = True,
    ) -> httpx.Response:
        """POST to the gateway; a refusal expected is counted for the "no 5xx" row."""
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        answer = await self.http.post(
            f"{self.target.gateway_url}{path}", json=body, headers=headers
        )
        if refusal:
            self.count_refusal(path, answer)
        return answer

    def count_refusal(self, path: str, answer: httpx.Response) -> None:
        """Count an answer to a request that should have been refused, for the "no 5xx" row."""
        self.refused[answer.status_code] += 1
        if answer.status_code >= 500:
            self.server_errors.append(f"{path}: {answer.status_code} {answer.text[:200]}")

    async def complete(
        self, operation_id: str, token: str | None, body: Any = SUCCEEDED, **kw: Any
    ) -> httpx.Response:
        return await self.post(f"/v1/operations/{operation_id}/complete", token, body, **kw)

    async def decide(
        self, request_id: str, token: str | None, body: Any = APPROVE, **kw: Any
    ) -> httpx.Response:
        return await self.post(f"/v1/approvals/{request_id}/decision", token, body, **kw)

    async def history_length(self, handle: WorkflowHandle[Any, Any]) -> int:
        """The run's history length once it stops moving (a waiting run adds nothing)."""
        last = -1
        while True:
            length = (await handle.describe()).history_length
            if length == last:
                return length
            last = length
            await asyncio.sleep(0.3)

    async def stats(self) -> dict[str, Any]:
        return dict((await self.http.get(f"{self.target.systems_url}/_test/stats")).json())

    async def faults(self, **faults: Any) -> None:
        answer = await self.http.post(f"{self.target.systems_url}/_test/faults", json=faults)
        answer.raise_for_status()

    def no_5xx(self) -> Check:
        """Every request the attacks expected to be refused, over all attacks but the fuzzer
        (which checks its own)."""
        return Check(
            name="gateway: no 5xx for bad input",
            attempts=sum(self.refused.values()),
            outcome=_tally(self.refused),
            violations=list(self.server_errors),
        )


async def _until(probe: Callable[[], Awaitable[_T | None]], failure: str) -> _T:
    """The first truthy value of `probe`, polled until WAIT_SECONDS have passed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_SECONDS
    while loop.time() < deadline:
        value = await probe()
        if value:
            return value
        await asyncio.sleep(0.05)
    raise AssertionError(failure)


async def _accepted_updates(handle: WorkflowHandle[Any, Any], prefix: str) -> int:
    """Updates the run accepted whose id starts with `prefix` (`complete/<op>`, `decide/<req>`)."""
    count = 0
    async for event in handle.fetch_history_events():
        if event.event_type == UPDATE_ACCEPTED:
            attributes = event.workflow_execution_update_accepted_event_attributes
            if attributes.accepted_request.meta.update_id.startswith(prefix):
                count += 1
    return count


def _tally(statuses: Counter[int] | Iterable[int]) -> str:
    """`1×200 19×409`: how many answers of each status, lowest status first."""
    counts = statuses if isinstance(statuses, Counter) else Counter(statuses)
    return " ".join(f"{n}×{status}" for status, n in sorted(counts.items())) or "none"


async def _guarded(check: Check, attack: Awaitable[None]) -> None:
    """Run one attack; an error in it (a run that never waits, an unreachable gateway) is a
    violation of its row, not a crash of the suite."""
    try:
        await attack
    except Exception as err:  # noqa: BLE001 - reported in the row
        check.violations.append(f"{type(err).__name__}: {err}")


def _job_cancels(stats: dict[str, Any], workflow_id: str) -> list[tuple[str, int]]:
    """(job status, cancels) of every job the run started, from the systems' own records."""
    out = []
    for key, record in stats["keys"].items():
        if key.startswith(f"{workflow_id}/") and record["job_id"]:
            out.append((stats["jobs"][record["job_id"]]["status"], record["cancels"]))
    return out


class _Unhurried(ScriptedProvider):
    """The scripted models, pausing before every answer after a tool result: the run stays
    open a moment after an operation expires or an approval times out, so a late completion
    or decision reaches the run itself (not only the closed run's refusal)."""

    async def answer(self, request: ModelRequest) -> ModelResponse:
        if any(message.role == "tool" for message in request.messages):
            await asyncio.sleep(MODEL_PAUSE.total_seconds())
        return await super().answer(request)


@asynccontextmanager
async def _expiring_worker(rig: _Rig) -> AsyncIterator[str]:
    """A worker of our own, in this process, on a task queue of its own (yielded): its exports
    expire after SHORT_EXPIRY (the fleet's after an hour) and its models are `_Unhurried`."""
    from waitstate.worker import build_worker  # the production wiring; imported late, it is heavy

    target = rig.target
    blobs = Path(tempfile.mkdtemp(prefix="waitstate-chaos-gateway-"))
    settings = Settings(
        gateway_url=target.gateway_url,
        demo_systems_url=target.systems_url,
        token_keys=dict(target.token_keys),
        token_signing_key=target.signing_key_id,
        blob_dir=blobs,
    )
    queue = f"{target.task_queue}-expiry"
    providers = Providers({"scripted": _Unhurried})
    tools = [
        *demo_tools(),
        export_tool(ExportService(rig.http, target.systems_url), timeout=SHORT_EXPIRY),
        *compliance_tools(rig.http, target.systems_url),
    ]
    worker = build_worker(
        target.client, settings, providers, tools, rig.http, tokens=rig.tokens, task_queue=queue
    )
    try:
        async with worker:
            yield queue
    finally:
        await providers.aclose()
        shutil.rmtree(blobs, ignore_errors=True)


# --- 3. duplicates, late and cancelled --------------------------------------------------------


async def _duplicate_completions(rig: _Rig, runs: int) -> list[Check]:
    """20 identical completions at once per operation: one 200, the rest 409, one Update
    accepted, and the run resumed once."""

    async def target(handle: WorkflowHandle[Any, Any]) -> tuple[str, str, str]:
        op, token = await rig.operation(handle)
        return f"/v1/operations/{op.operation_id}/complete", token, f"complete/{op.operation_id}/"

    check = Check(name=f"3 duplicate completions ({DUPLICATES} concurrent)")
    return await _bursts(rig, check, runs, "ops", rig.start_export, target, SUCCEEDED, EXPORT_TURNS)


async def _duplicate_decisions(rig: _Rig, runs: int) -> list[Check]:
    """20 identical decisions at once through one approval link: one 200, the rest 409, one
    Update accepted, and the run resumed once."""

    async def target(handle: WorkflowHandle[Any, Any]) -> tuple[str, str, str]:
        request, token = await rig.approval(handle)
        path = f"/v1/approvals/{request.request_id}/decision"
        return path, token, f"decide/{request.request_id}/"

    check = Check(name=f"3 duplicate decisions ({DUPLICATES} concurrent)")
    return await _bursts(rig, check, runs, "approvals", rig.start_ask, target, APPROVE, ASK_TURNS)


async def _bursts(
    rig: _Rig,
    check: Check,
    runs: int,
    noun: str,
    start: Callable[[], Awaitable[WorkflowHandle[Any, Any]]],
    target: Callable[[WorkflowHandle[Any, Any]], Awaitable[tuple[str, str, str]]],
    body: dict[str, Any],
    turns: int,
) -> list[Check]:
    """For each of `runs` runs: `DUPLICATES` identical requests at once to the path `target`
    names (with its token and the Update id prefix of what it delivers); judge the answers,
    the Updates accepted, and that the run was resumed once (`turns` model turns)."""
    tally = _Burst()

    async def one() -> None:
        handle = await start()
        path, token, update_prefix = await target(handle)
        answers = await asyncio.gather(
            *(rig.post(path, token, body, refusal=False) for _ in range(DUPLICATES))
        )
        result = await rig.outcome(handle)
        applied = await _accepted_updates(handle, update_prefix)
        tally.judge(rig, check, handle.id, path, answers, applied)
        if result.status != "completed" or result.turns != turns:
            check.violations.append(
                f"{handle.id}: {result.status} after {result.turns} turns "
                f"(expected completed after {turns}: resumed once)"
            )

    await asyncio.gather(*(_guarded(check, one()) for _ in range(runs)))
    check.outcome = f"{runs} {noun}: {tally}"
    return [check]


@dataclass
class _Burst:
    """The answers to bursts of identical requests, over all the runs of one row."""

    statuses: Counter[int] = field(default_factory=Counter)
    codes: Counter[str] = field(default_factory=Counter)

    def judge(
        self,
        rig: _Rig,
        check: Check,
        workflow_id: str,
        path: str,
        answers: list[httpx.Response],
        applied: int,
    ) -> None:
        """Exactly one answer 200 and one Update applied; every other answer a 409."""
        statuses = Counter(answer.status_code for answer in answers)
        self.statuses.update(statuses)
        self.codes.update(_code(answer) for answer in answers if answer.status_code != 200)
        for answer in answers:
            if answer.status_code != 200:
                rig.count_refusal(path, answer)
        check.attempts += len(answers)
        if statuses != Counter({200: 1, 409: len(answers) - 1}):
            codes = Counter(f"{a.status_code} {_code(a)}" for a in answers)
            check.violations.append(f"{workflow_id}: answers {_codes(codes)}")
        if applied != 1:
            check.violations.append(f"{workflow_id}: applied {applied} times")

    def __str__(self) -> str:
        return f"{_tally(self.statuses)} ({_codes(self.codes)})"


async def _late_completions(rig: _Rig, runs: int, queue: str) -> list[Check]:
    """Completions after the operation expired: refused (410 with the job's own, expired token;
    409 with a token that is still valid, as from a gateway whose clock is behind), nothing
    applied, the run resumed once (by the expiry), and the job sent one cancel."""
    check = Check(name="3 late completions after expiry")
    statuses: Counter[int] = Counter()
    codes: Counter[str] = Counter()

    async def one() -> None:
        handle = await rig.start_export(queue)
        op, token = await rig.operation(handle)

        async def expired() -> bool:
            state = await rig.state(handle)
            return state.operations[op.operation_id].status == "expired"

        await _until(expired, f"{handle.id}: operation {op.operation_id} never expired")
        # At once, while the run is still open (its model pauses): the run must refuse it.
        skewed = await rig.mint(handle, op.operation_id, datetime.now(UTC) + timedelta(hours=1))
        early = await rig.complete(op.operation_id, skewed.token)
        result = await rig.outcome(handle)
        before = await rig.history_length(handle)
        late = await rig.complete(op.operation_id, token)
        replayed = await rig.complete(op.operation_id, skewed.token, FAILED)
        after = await rig.history_length(handle)
        state = await rig.state(handle)
        jobs = _job_cancels(await rig.stats(), handle.id)
        recorded = await _accepted_updates(handle, f"complete/{op.operation_id}/")

        answers = [early, late, replayed]
        check.attempts += len(answers)
        statuses.update(answer.status_code for answer in answers)
        codes.update(_code(answer) for answer in answers)
        expected = [409, 410, 409]
        if [a.status_code for a in answers] != expected:
            got = [f"{a.status_code} {_code(a)}" for a in answers]
            check.violations.append(f"{handle.id}: answers {got}, expected {expected}")
        final = state.operations[op.operation_id]
        if final.status != "expired" or final.result is not None:
            check.violations.append(
                f"{handle.id}: operation {final.status} after a late completion"
            )
        # Refused while the run was open: by its validator, so nothing reached its history.
        if recorded:
            check.violations.append(
                f"{handle.id}: the refused late completion added {recorded} accepted Update(s) "
                f"to the history (answered {early.status_code} {_code(early)})"
            )
        if after != before:
            check.violations.append(f"{handle.id}: history grew {before} -> {after}")
        if result.turns != 2 or result.status != "completed":
            check.violations.append(f"{handle.id}: {result.status} after {result.turns} turns")
        if jobs != [("cancelled", 1)]:
            check.violations.append(f"{handle.id}: jobs (status, cancels) {jobs}")

    await asyncio.gather(*(_guarded(check, one()) for _ in range(runs)))
    check.outcome = f"{runs} ops: {_tally(statuses)} ({_codes(codes)})"
    return [check]


async def _late_decisions(rig: _Rig, runs: int, queue: str) -> list[Check]:
    """Decisions after the approval timed out (default: reject): refused, and the default
    decision stands."""
    check = Check(name="3 late decisions after expiry")
    statuses: Counter[int] = Counter()
    codes: Counter[str] = Counter()
    policy = ApprovalPolicy(timeout=SHORT_EXPIRY, on_timeout="default", default_decision="reject")

    async def one() -> None:
        handle = await rig.start_ask(approval=policy, task_queue=queue)
        request, token = await rig.approval(handle)

        async def timed_out() -> bool:
            state = await rig.state(handle)
            return state.approvals[request.request_id].status != "pending"

        await _until(timed_out, f"{handle.id}: approval {request.request_id} never timed out")
        subject = approval_subject(request.request_id)
        nonce = rig.tokens.verify(token, now=request.requested_at).nonce  # the link's own
        later = datetime.now(UTC) + timedelta(hours=1)
        skewed = rig.tokens.mint(handle.id, subject, later, nonce=nonce)
        early = await rig.decide(request.request_id, skewed.token)
        result = await rig.outcome(handle)
        before = await rig.history_length(handle)
        late = await rig.decide(request.request_id, token)
        after = await rig.history_length(handle)
        final = (await rig.state(handle)).approvals[request.request_id]

        answers = [early, late]
        check.attempts += len(answers)
        statuses.update(answer.status_code for answer in answers)
        codes.update(_code(answer) for answer in answers)
        if [a.status_code for a in answers] != [409, 410]:
            got = [f"{a.status_code} {_code(a)}" for a in answers]
            check.violations.append(f"{handle.id}: answers {got}, expected [409, 410]")
        if (
            final.status != "rejected"
            or final.decision is None
            or final.decision.reviewer == "chaos"
        ):
            check.violations.append(f"{handle.id}: request {final.status} by {final.decision}")
        if after != before:
            check.violations.append(f"{handle.id}: history grew {before} -> {after}")
        if result.status != "completed" or result.turns != ASK_TURNS:
            check.violations.append(f"{handle.id}: {result.status} after {result.turns} turns")

    await asyncio.gather(*(_guarded(check, one()) for _ in range(runs)))
    check.outcome = f"{runs} approvals: {_tally(statuses)} ({_codes(codes)})"
    return [check]


async def _once_cancelled(
    rig: _Rig,
    check: Check,
    handle: WorkflowHandle[Any, Any],
    send: Callable[[], Awaitable[httpx.Response]],
) -> httpx.Response:
    """Cancel the run and, once it has ended, `send` (a completion, a decision): its answer,
    counted as an attempt. A violation when the run did not end cancelled, or when the answer
    grew its history."""
    await rig.runs.cancel(handle.id)
    if (await rig.outcome(handle)).status != "cancelled":
        check.violations.append(f"{handle.id}: not cancelled")
    before = await rig.history_length(handle)
    answer = await send()
    after = await rig.history_length(handle)
    check.attempts += 1
    if after != before:
        check.violations.append(f"{handle.id}: history grew {before} -> {after}")
    return answer


async def _cancelled_runs(rig: _Rig, runs: int) -> list[Check]:
    """Completions and decisions for runs cancelled while they waited: 409 (the run has ended),
    nothing applied, and the external job was sent its cancel."""
    check = Check(name="3 completions/decisions for cancelled runs")
    statuses: Counter[int] = Counter()

    async def export() -> None:
        handle = await rig.start_export()
        op, token = await rig.operation(handle)
        answer = await _once_cancelled(
            rig, check, handle, lambda: rig.complete(op.operation_id, token)
        )
        state = await rig.state(handle)
        jobs = _job_cancels(await rig.stats(), handle.id)
        statuses[answer.status_code] += 1
        if answer.status_code != 409:
            check.violations.append(f"{handle.id}: completion answered {answer.status_code}")
        final = state.operations[op.operation_id]
        if state.status != "cancelled" or final.status != "cancelled" or final.result is not None:
            check.violations.append(f"{handle.id}: run {state.status}, operation {final.status}")
        if jobs != [("cancelled", 1)]:
            check.violations.append(f"{handle.id}: jobs (status, cancels) {jobs}")

    async def ask() -> None:
        handle = await rig.start_ask()
        request, token = await rig.approval(handle)
        answer = await _once_cancelled(
            rig, check, handle, lambda: rig.decide(request.request_id, token)
        )
        final = (await rig.state(handle)).approvals[request.request_id]
        statuses[answer.status_code] += 1
        if answer.status_code != 409:
            check.violations.append(f"{handle.id}: decision answered {answer.status_code}")
        if final.decision is not None:
            check.violations.append(f"{handle.id}: a decision was applied: {final.decision}")

    attacks = [export() for _ in range(runs)] + [ask() for _ in range(runs)]
    await asyncio.gather(*(_guarded(check, attack) for attack in attacks))
    check.outcome = f"{runs} ops, {runs} approvals: {_tally(statuses)}"
    return [check]


def _code(answer: httpx.Response) -> str:
    """The gateway's error code (`duplicate_completion`...), or the status for a success."""
    try:
        return str(answer.json()["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return str(answer.status_code)


def _codes(codes: Counter[str]) -> str:
    return ", ".join(f"{n} {code}" for code, n in sorted(codes.items()))


# --- 4. bad tokens ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Attack:
    """One request with a bad token, and the statuses the gateway documents for it."""

    label: str
    path: str
    token: str | None
    body: Any
    expected: frozenset[int]


def _tampered(token: str) -> str:
    """The token with its expiry pushed a year on and its signature kept: a forgery."""
    payload, _, signature = token.partition(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["exp"] = (datetime.fromisoformat(claims["exp"]) + timedelta(days=365)).isoformat()
    raw = json.dumps(claims, sort_keys=True, separators=(",", ":")).encode()
    return f"{base64.urlsafe_b64encode(raw).rstrip(b'=').decode()}.{signature}"


def _token_attacks(
    rig: _Rig,
    kind: str,
    path: str,
    body: Any,
    workflow_id: str,
    subject: str,
    expires_at: datetime,
    real: str,
    sibling: tuple[str, str],
    foreign: str,
) -> list[_Attack]:
    """Every bad token for one endpoint's URL.

    Args:
        kind: `complete` or `decision`, for the labels.
        path: The URL path of the run's own operation or request.
        workflow_id, subject, expires_at: What the real token was minted for.
        real: The real token (only tampered with here).
        sibling: Another run's (workflow id, subject) of the same kind.
        foreign: A real token of the other endpoint's kind.
    """
    kid = rig.target.signing_key_id
    secret = rig.target.token_keys[kid]
    forger = ResumeTokens({kid: ("f" if secret[0] != "f" else "g") * 40}, kid)
    stranger = ResumeTokens({"intruder": "i" * 40}, "intruder")
    past = datetime.now(UTC) - timedelta(minutes=1)
    mint = rig.tokens.mint
    other_wf, other_subject = sibling
    attacks = [
        ("missing token", None, {401}),
        ("garbage token", "not-a-token", {401}),
        ("forged (wrong secret)", forger.mint(workflow_id, subject, expires_at).token, {401}),
        ("unknown key id", stranger.mint(workflow_id, subject, expires_at).token, {401}),
        ("tampered expiry", _tampered(real), {401}),
        ("truncated", real[:-4], {401}),
        ("expired", mint(workflow_id, subject, past).token, {410}),
        ("cross-operation (same run)", mint(workflow_id, f"{subject}x", expires_at).token, {401}),
        ("cross-run (other run's token)", mint(other_wf, other_subject, expires_at).token, {401}),
        # Names another run but this URL's subject: signed and for this URL, the run refuses.
        ("cross-run (this subject)", mint(other_wf, subject, expires_at).token, {401, 404}),
        (
            "unknown run",
            mint(f"no-such-run-{uuid.uuid4().hex[:8]}", subject, expires_at).token,
            {404},
        ),
        ("cross-endpoint token", foreign, {401}),
    ]
    other_keys = [k for k in rig.target.token_keys if k != kid]
    if other_keys:
        # Signed with another valid key: verifies, but its nonce is not the one the run keeps.
        rotated = ResumeTokens(rig.target.token_keys, other_keys[0])
        attacks.append(
            ("nonce mismatch", rotated.mint(workflow_id, subject, expires_at).token, {401})
        )
    return [
        _Attack(f"{kind}: {label}", path, token, body, frozenset(expected))
        for label, token, expected in attacks
    ]


async def _bad_tokens(rig: _Rig) -> list[Check]:
    """Every kind of bad token on both endpoints, against two waiting export runs and two
    waiting approval runs: the documented status and no event added; then the real tokens
    work, each once (a replay is a 409), and every run completes."""
    complete = Check(name="4 bad tokens: complete endpoint")
    decision = Check(name="4 bad tokens: decision endpoint")
    tallies: dict[str, Counter[int]] = {complete.name: Counter(), decision.name: Counter()}

    async def attack() -> None:
        exports = list(await asyncio.gather(rig.start_export(), rig.start_export()))
        asks = list(await asyncio.gather(rig.start_ask(), rig.start_ask()))
        ops = [await rig.operation(h) for h in exports]
        requests = [await rig.approval(h) for h in asks]
        handles = [*exports, *asks]
        before = [await rig.history_length(h) for h in handles]

        (op, op_token), (other_op, _) = ops
        (request, link), (other_request, _) = requests
        req_subject = approval_subject(request.request_id)
        attacks = [
            *_token_attacks(
                rig,
                "complete",
                f"/v1/operations/{op.operation_id}/complete",
                SUCCEEDED,
                exports[0].id,
                op.operation_id,
                op.expires_at,
                op_token,
                (exports[1].id, other_op.operation_id),
                link,
            ),  # fmt: skip
            # The approval link's token on the complete URL named by its own request id.
            _Attack(
                "complete: approval token, its request id as operation",
                f"/v1/operations/{request.request_id}/complete",
                link,
                SUCCEEDED,
                frozenset({401}),
            ),  # fmt: skip
            *_token_attacks(
                rig,
                "decision",
                f"/v1/approvals/{request.request_id}/decision",
                APPROVE,
                asks[0].id,
                req_subject,
                request.expires_at,
                link,
                (asks[1].id, approval_subject(other_request.request_id)),
                op_token,
            ),  # fmt: skip
            _Attack(
                "decision: operation token, its operation id as request",
                f"/v1/approvals/{op.operation_id}/decision",
                op_token,
                APPROVE,
                frozenset({401}),
            ),  # fmt: skip
        ]
        for bad in attacks:
            answer = await rig.post(bad.path, bad.token, bad.body)
            log.debug("%s: %d %s", bad.label, answer.status_code, _code(answer))
            row = complete if bad.label.startswith("complete") else decision
            row.attempts += 1
            tallies[row.name][answer.status_code] += 1
            if answer.status_code not in bad.expected:
                row.violations.append(
                    f"{bad.label}: {answer.status_code} {_code(answer)} "
                    f"(expected {sorted(bad.expected)})"
                )
        after = [await rig.history_length(h) for h in handles]
        for handle, was, now in zip(handles, before, after, strict=True):
            if was != now:
                row = complete if handle in exports else decision
                row.violations.append(f"{handle.id}: history grew {was} -> {now} on bad tokens")

        # The real tokens still work, once; their replays are refused.
        completions = [
            _RealUse(
                handle,
                functools.partial(rig.complete, op.operation_id, token),
                (SUCCEEDED, FAILED),  # the same report again, then a different one
                f"complete/{op.operation_id}/",
                EXPORT_TURNS,
                ("token", "completions"),
            )
            for handle, (op, token) in zip(exports, ops, strict=True)
        ]
        decisions = [
            _RealUse(
                handle,
                functools.partial(rig.decide, request.request_id, token),
                ({"decision": "reject"},),
                f"decide/{request.request_id}/",
                ASK_TURNS,
                ("link", "decisions"),
            )
            for handle, (request, token) in zip(asks, requests, strict=True)
        ]
        await _use_and_replay(rig, complete, tallies[complete.name], completions)
        await _use_and_replay(rig, decision, tallies[decision.name], decisions)

    both = Check(name="4 bad tokens")
    await _guarded(both, attack())
    complete.violations += both.violations  # the attack broke off: both rows are incomplete
    decision.violations += both.violations
    for row in (complete, decision):
        row.outcome = _tally(tallies[row.name])
    return [complete, decision]


@dataclass(frozen=True)
class _RealUse:
    """A run's real completion or decision, to be used once and then replayed."""

    handle: WorkflowHandle[Any, RunResult]
    # `rig.complete` or `rig.decide` bound to the id and the real token (its own body by default).
    send: Callable[..., Awaitable[httpx.Response]]
    # Replayed while the run is still open; its own body is sent once more after the run ended.
    replay_bodies: tuple[Any, ...]
    update_prefix: str
    turns: int
    # What the violations call the real token ("token", "link") and its Updates ("completions").
    words: tuple[str, str]


async def _use_and_replay(
    rig: _Rig, check: Check, tally: Counter[int], uses: Iterable[_RealUse]
) -> None:
    """Use each real token once and replay it; count the first use and its replays. A violation
    for a first use that did not answer 200, a replay that was not refused as a duplicate
    (409), a run that did not apply exactly one Update or did not complete in its turns."""
    for use in uses:
        first = await use.send(refusal=False)
        replays = [await use.send(body) for body in use.replay_bodies]
        result = await rig.outcome(use.handle)
        replays.append(await use.send())  # after the run ended
        accepted = await _accepted_updates(use.handle, use.update_prefix)
        check.attempts += 1 + len(replays)
        tally.update([first.status_code, *(r.status_code for r in replays)])
        token, applied = use.words
        if any(r.status_code != 409 for r in replays):
            got = [f"{r.status_code} {_code(r)}" for r in replays]
            check.violations.append(f"{use.handle.id}: replays answered {got}")
        if result.status != "completed" or result.turns != use.turns:
            check.violations.append(f"{use.handle.id}: {result.status} after {result.turns} turns")
        if first.status_code != 200:
            check.violations.append(f"{use.handle.id}: real {token} answered {first.status_code}")
        if accepted != 1:
            check.violations.append(f"{use.handle.id}: {accepted} {applied} applied")


# --- 6. fuzzing -------------------------------------------------------------------------------


async def _fuzzed(rig: _Rig, examples: int, seed: int) -> list[Check]:
    """Fuzzed requests at a waiting export run, a waiting approval run and a thread no run has
    (their real ids and tokens among the fuzzer's choices): never a 5xx, never a 2xx, nothing
    added to either history, no thread started; then both runs complete normally."""
    check = Check(name="6 fuzzed requests (OpenAPI)")

    async def fuzz() -> None:
        export, ask = await asyncio.gather(rig.start_export(), rig.start_ask())
        (op, op_token), (request, link) = await asyncio.gather(
            rig.operation(export), rig.approval(ask)
        )
        before = [await rig.history_length(h) for h in (export, ask)]
        openapi = (await rig.http.get(f"{rig.target.gateway_url}/openapi.json")).json()
        far = datetime.now(UTC) + timedelta(hours=1)
        # No run of these asks a question: the answer endpoint is aimed at the waiting approval
        # run with a question it does not have, under a genuine token for it, so the furthest
        # a request gets is the run's own refusal (404).
        question_id = f"q_fuzz{seed}"
        question_token = rig.tokens.mint(ask.id, question_subject(question_id), far).token
        # The thread routes are aimed at a thread no run has, with a genuine token for it: the
        # furthest a request gets is 404, and none may start the thread.
        thread_id = f"thread-fuzz{seed}"
        thread_token = rig.tokens.mint_thread(thread_id, far)
        # A run's deltas are aimed at the waiting export, with a publish token of its own: a
        # delta taken reaches its readers (none), and is never in its history.
        publish_token = rig.tokens.mint_publish(export.id, far)
        fuzz_target = FuzzTarget(
            gateway_url=rig.target.gateway_url,
            ids={
                "operation_id": op.operation_id,
                "request_id": request.request_id,
                "question_id": question_id,
                "thread_id": thread_id,
                "run_id": export.id,
                "agent": FUZZED_AGENT,
            },
            tokens={
                "operation_id": op_token,
                "request_id": link,
                "question_id": question_token,
                "thread_id": thread_token,
                "run_id": publish_token,
                # An AG-UI client's run of an agent, under the token of the thread no run has:
                # a fuzzed body names another thread, and is refused (401).
                "agent": thread_token,
            },
            other_tokens=(
                rig.tokens.mint(export.id, "op_0000000000000000", far).token,
                rig.tokens.mint(f"no-such-run-{seed}", op.operation_id, far).token,
                rig.tokens.mint(export.id, op.operation_id, datetime(2020, 1, 1, tzinfo=UTC)).token,
                ResumeTokens({"intruder": "i" * 40}, "intruder")
                .mint(ask.id, approval_subject(request.request_id), far)
                .token,
            ),
        )
        report = await asyncio.to_thread(
            fuzz_gateway, fuzz_target, openapi, examples=examples, seed=seed
        )
        check.attempts = report.sent
        check.outcome = _tally(report.statuses) + (
            f" ({report.skipped} not sendable)" if report.skipped else ""
        )
        log.debug("fuzz: not sendable: %s", dict(report.skip_reasons))
        check.violations += report.violations
        after = [await rig.history_length(h) for h in (export, ask)]
        for handle, was, now in zip((export, ask), before, after, strict=True):
            if was != now:
                check.violations.append(f"{handle.id}: history grew {was} -> {now} while fuzzed")
        if [r async for r in rig.target.client.list_workflows(f'WorkflowId = "{thread_id}"')]:
            check.violations.append(f"a fuzzed request started thread {thread_id}")
        # Both still resume normally with their real tokens.
        done = await rig.complete(op.operation_id, op_token, refusal=False)
        decided = await rig.decide(request.request_id, link, refusal=False)
        results = await asyncio.gather(rig.outcome(export), rig.outcome(ask))
        if (done.status_code, decided.status_code) != (200, 200):
            check.violations.append(
                f"after fuzzing, the real tokens answered {done.status_code}, {decided.status_code}"
            )
        for handle, result in zip((export, ask), results, strict=True):
            if result.status != "completed":
                check.violations.append(f"{handle.id}: {result.status} after fuzzing")

    await _guarded(check, fuzz())
    return [check]
