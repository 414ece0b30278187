"""AgentRunWorkflow: one agent run, from task to answer, as a Temporal workflow."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, NamedTuple, NoReturn

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeUpdate
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    FailureError,
    RetryState,
    is_cancelled_exception,
)
from temporalio.exceptions import TimeoutError as ActivityTimeoutError

with workflow.unsafe.imports_passed_through():
    from schemas import (
        Message,
        ModelCallInput,
        ModelResponse,
        RunInput,
        RunResult,
        RunState,
        RunStatus,
        Step,
        ToolCall,
        ToolCallInput,
        ToolResult,
    )
    from schemas.approvals import (
        ApprovalNotice,
        ApprovalNoticeSent,
        ApprovalPolicy,
        ApprovalRequest,
        DecideInput,
        DecideOutcome,
        Decision,
        DecisionKind,
        DecisionSignal,
    )
    from schemas.builtin import (
        GET_OPERATION_STATUS,
        READ_REF,
        REF_PREFIX,
        REQUEST_APPROVAL,
        WAIT_FOR_OPERATIONS,
        GetOperationStatusArgs,
        RequestApprovalArgs,
        WaitForOperationsArgs,
    )
    from schemas.errors import (
        APPROVAL_DECIDED,
        APPROVAL_NONCE_MISMATCH,
        APPROVAL_NOT_READY,
        APPROVAL_UNKNOWN,
        MODEL_REQUEST_REJECTED,
        MODEL_SPEC_INVALID,
        OPERATION_NONCE_MISMATCH,
        OPERATION_RESOLVED,
        OPERATION_UNCHANGED,
        OPERATION_UNKNOWN,
        RUN_FAILED,
        RUN_INPUT_INVALID,
    )
    from schemas.operations import (
        LONG_POLL_INTERVAL,
        CancelOperationInput,
        CompleteOperation,
        Completion,
        CompletionOutcome,
        Operation,
        OperationError,
        OperationStarted,
        PollOperationInput,
    )
    from schemas.run import (
        CALL_MODEL,
        CALL_TOOL,
        CANCEL_OPERATION,
        NOTIFY_APPROVAL,
        POLL_OPERATION,
        CarriedTurn,
        Checkpoint,
        ParkedCall,
        RunCarry,
    )
    from workflows.search_attributes import (
        AGENT_STATUS,
        PENDING_OPERATIONS,
        WAIT_EXPIRES_AT,
        WAITING_FOR,
    )

# Provider SDKs never retry on their own (max_retries=0): this policy owns every attempt.
# A provider's retry-after reaches it as the ApplicationError's next_retry_delay.
MODEL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=60),
    maximum_attempts=8,
    non_retryable_error_types=[MODEL_REQUEST_REJECTED, MODEL_SPEC_INVALID, RUN_INPUT_INVALID],
)
# A sync tool that keeps failing is reported to the model, which can try something else.
# A long tool's start is safe to retry: it carries an idempotency key.
TOOL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=10),
    maximum_attempts=3,
)
# Asking an external system to stop a job: worth insisting, but not forever.
CANCEL_TIMEOUT = timedelta(seconds=30)
CANCEL_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=5)
POLL_CHECK_TIMEOUT = timedelta(seconds=30)
POLL_RETRY_FIRST = timedelta(seconds=1)
# Telling people about an approval request: retried a while; if it still fails, the request
# stands (the CLI can answer it) and the failure is logged.
NOTIFY_TIMEOUT = timedelta(seconds=30)
# The notice is one HTTP post with a 10 s timeout: past 12 s, its worker is gone, and the notice
# is posted again at once, not after the half minute a short approval window cannot spare.
NOTIFY_TIMEOUT_V2 = timedelta(seconds=12)
NOTIFY_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=5)
# Before a wait, the model is asked (once, on its own) what is done and what remains.
CHECKPOINT_PROMPT = (
    "You keep the notes of an agent that is about to wait. From the task and what is "
    "completed, reply with exactly two lines:\n"
    "Done: <what has been done, one sentence>\n"
    "Remaining: <the steps left once the wait is over, one sentence>"
)
CHECKPOINT_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=2)
PREVIEW_CHARS = 160
# The ledger's lines, and the rebuilt context made of them, are bounded, so a rebuilt context
# costs the same after ten turns or ten thousand.
LEDGER_CHARS = 300
REBUILD_COMPLETED_LINES = 20
REBUILD_EVENT_CHARS = 4000
# What continue-as-new carries beyond the open items.
KEEP_STEPS = 100
KEEP_CLOSED = 20
# Runs started from here on choose the nonces of their tokens and links, hold every early report,
# never drop a cancel they owe, continue as new while they wait, let a person's decision stand
# against the timeout policy, and notify while the approval window runs (issue 11). Runs
# recorded before keep the earlier behaviour, so their histories replay.
EXACTLY_ONCE = "exactly-once-v2"
# A model failure's message, as the run records it: Temporal refuses failures past its size.
FAILURE_CHARS = 2000


class _ApprovalExpired(Exception):
    """An approval expired under on_timeout `fail`: the run ends, cleanly, with the reason."""


class _Starting(NamedTuple):
    """A long tool's start in flight: the tool, and the hash of the nonce its token carries."""

    tool: str
    nonce_hash: str | None


@dataclass
class _Wait:
    """Something the run waits for, shown in the Web UI while it lasts."""

    kind: str
    details: str
    began: datetime
    parked: bool = False  # handed to the next run by continue-as-new: the wait goes on there


@workflow.defn
class AgentRunWorkflow:
    """Calls the model, runs the tools it asks for, and repeats until an answer or max_turns.

    Long tools start a job and return at once; the run then waits (holding no worker) for a
    webhook through the gateway, or for a polling activity, and never for the model.
    """

    @workflow.init
    def __init__(self, input: RunInput) -> None:
        self._input = input
        if input.carry is not None:
            # Continued as new: the ledger, the conversation and pending operations go on.
            self._state = input.carry.state
            self._transcript_ref = input.carry.transcript_ref
            self._unsent = list(input.carry.unsent)
        else:
            self._state = RunState(
                task=input.task, model=input.model, constraints=list(input.constraints)
            )
            self._transcript_ref = None
            self._unsent = [Message(role="user", content=input.task)]
        # Set when a wait outlasted `rebuild_after`: the next model call gets a context rebuilt
        # from the ledger instead of the stale transcript.
        self._long_wait: timedelta | None = None
        self._watchers: dict[str, asyncio.Task[None]] = {}
        self._ignored_signals = 0
        self._v2 = workflow.patched(EXACTLY_ONCE)
        # A webhook can beat the start activity's answer (the job finished fast, or the worker
        # died after the external system accepted it): its reports wait here, in order, until
        # the start is confirmed; then each is applied.
        self._starting: dict[str, _Starting] = {}  # by operation id, while its start runs
        self._early: dict[str, list[CompleteOperation]] = {}
        self._waits: list[_Wait] = []
        # Cancels sent to jobs (by operation id): a run ends or continues only once they are.
        self._cancels: dict[str, asyncio.Task[None]] = {}
        # The nonces of open approval requests' links; only their hashes go into the state.
        self._link_nonces: dict[str, str] = {}
        # The tool calls of the turn in progress still running, and those of them parked in a
        # wait the next run can take over (see `_park`).
        self._turn_open: set[str] = set()
        self._parked: set[str] = set()
        # Set when the run continues as new while it waits between turns: the wait's start.
        self._waiting_since = input.carry.waiting_since if input.carry else None

    @workflow.run
    async def run(self, input: RunInput) -> RunResult:
        self._set_status("running")
        for op in self._pending():  # carried over by continue-as-new
            self._watchers[op.operation_id] = asyncio.create_task(self._watch(op))
        for op in self._state.operations.values():
            if op.cancel == "owed":  # the previous run could not send it
                self._cancels[op.operation_id] = asyncio.create_task(self._send_cancel(op))
        # A run continued while it waited for operations goes back to waiting, not to the model.
        answer = input.carry.answer if input.carry else None
        try:
            if input.carry and input.carry.turn:  # continued in the middle of a turn
                await self._run_tools(input.carry.turn.calls, input.carry.turn)
            while self._state.turns < input.max_turns:
                if answer is None:
                    if self._should_continue_as_new():
                        await self._continue_as_new()
                    reply = await self._call_model()
                    if reply.tool_calls:
                        await self._run_tools(reply.tool_calls)
                        continue
                    answer = reply.content
                if not self._operations_to_report():
                    return await self._finish("completed", answer)
                if self._should_continue_as_new() or not await self._report_operations():
                    await self._continue_as_new(answer)
                answer = None
            return await self._finish("max_turns", None)
        except _ApprovalExpired as expired:
            self._state.error = str(expired)
            return await self._finish("approval_expired", None)
        except (asyncio.CancelledError, ActivityError) as err:
            if is_cancelled_exception(err):
                await self._end_pending("cancelled")
                self._set_status("cancelled")
            raise

    @workflow.query
    def status(self) -> RunState:
        """Where the run is: status, turns, tool calls, usage, steps and operations."""
        return self._state

    @workflow.update
    def complete_operation(self, update: CompleteOperation) -> CompletionOutcome:
        """A verified completion from the gateway: applied once, or recorded when too late."""
        return self._accept_completion(update)

    def _accept_completion(self, update: CompleteOperation) -> CompletionOutcome:
        if update.operation_id not in self._state.operations:
            self._early.setdefault(update.operation_id, []).append(update)
            return CompletionOutcome(
                applied=True,
                status="running",
                delivery_id=update.delivery_id,
                reason="held; applied once the start of the job is confirmed",
            )
        op = self._state.operations[update.operation_id]
        if op.terminal:
            # Expired or cancelled: the job was told to stop. Record, never apply.
            op.late_completions += 1
            return CompletionOutcome(
                applied=False,
                status=op.status,
                delivery_id=update.delivery_id,
                reason=f"operation {op.operation_id} is {op.status}; completion recorded, not applied",
            )
        self._apply(op, update.completion)
        return CompletionOutcome(applied=True, status=op.status, delivery_id=update.delivery_id)

    @complete_operation.validator
    def _validate_completion(self, update: CompleteOperation) -> None:
        # Rejections here add nothing to the run's history (and validators do not run on
        # replay, so they may refuse more than they used to).
        op = self._state.operations.get(update.operation_id)
        starting = self._starting.get(update.operation_id)
        if op is None and starting is not None:
            # The job reports before its start is confirmed: held, unless it cannot apply.
            if starting.nonce_hash is not None and starting.nonce_hash != _hash(update.nonce):
                raise ApplicationError(
                    "token was not issued for this operation", type=OPERATION_NONCE_MISMATCH
                )
            held = [early.completion for early in self._early.get(update.operation_id, [])]
            if any(completion.status in ("succeeded", "failed") for completion in held):
                raise ApplicationError("a final report is already held", type=OPERATION_RESOLVED)
            if held and _same_report(held[-1].status, held[-1].progress, update.completion):
                raise ApplicationError("the same report is already held", type=OPERATION_UNCHANGED)
            return
        if op is None or op.completion != "callback":
            raise ApplicationError(
                f"no operation {update.operation_id} awaits a callback in this run",
                type=OPERATION_UNKNOWN,
            )
        if op.nonce_hash != _hash(update.nonce):
            raise ApplicationError(
                "token was not issued for this operation", type=OPERATION_NONCE_MISMATCH
            )
        if op.terminal:
            # Expired or cancelled ones too: their jobs were told to stop.
            raise ApplicationError(f"operation already {op.status}", type=OPERATION_RESOLVED)
        if _same_report(op.status, op.progress, update.completion):
            raise ApplicationError(
                f"operation already shows {op.status} {op.progress or ''}".rstrip(),
                type=OPERATION_UNCHANGED,
            )

    @workflow.signal
    def operation_completed(self, update: CompleteOperation) -> None:
        """Fallback for senders that cannot use Updates: same checks, invalid ones ignored."""
        try:
            self._validate_completion(update)
        except ApplicationError as err:
            self._ignored_signals += 1
            workflow.logger.info("ignored completion signal: %s", err.message)
            return
        self._accept_completion(update)

    @workflow.signal
    def approve(self, decision: DecisionSignal) -> None:
        """A person approves a request; unknown or already decided ones are recorded, ignored."""
        self._decide_by_signal("approve", decision)

    @workflow.signal
    def reject(self, decision: DecisionSignal) -> None:
        """A person rejects a request, with a reason in `comment`."""
        self._decide_by_signal("reject", decision)

    @workflow.update
    def decide(self, input: DecideInput) -> DecideOutcome:
        """Approve or reject, with a synchronous answer (the CLI, approval links)."""
        request = self._state.approvals[input.request_id]
        self._apply_decision(request, input.decision, input.reviewer, input.comment)
        return DecideOutcome(accepted=True, status=request.status, delivery_id=input.delivery_id)

    @decide.validator
    def _validate_decision(self, input: DecideInput) -> None:
        request = self._state.approvals.get(input.request_id)
        if request is None:
            raise ApplicationError(f"no approval request {input.request_id}", type=APPROVAL_UNKNOWN)
        if input.nonce is not None and request.nonce_hash is None and request.open:
            # The links were posted, but the run has not yet recorded the notify activity's
            # answer (a fast click, or a worker that died in between): not a forgery.
            raise ApplicationError(
                "the request's links are not confirmed yet; retry shortly", type=APPROVAL_NOT_READY
            )
        if input.nonce is not None and request.nonce_hash != _hash(input.nonce):
            raise ApplicationError(
                "link was not issued for this request", type=APPROVAL_NONCE_MISMATCH
            )
        if not request.open:
            raise ApplicationError(f"request already {request.status}", type=APPROVAL_DECIDED)

    def _decide_by_signal(self, decision: DecisionKind, signal: DecisionSignal) -> None:
        request = self._state.approvals.get(signal.request_id)
        if request is None:
            note = f"{decision} by {signal.reviewer} for unknown request {signal.request_id}"
            self._state.ignored_decisions.append(note)
            workflow.logger.info("ignored decision: %s", note)
            return
        if not request.open:
            request.ignored.append(
                f"{decision} by {signal.reviewer}: request already {request.status}"
            )
            return
        self._apply_decision(request, decision, signal.reviewer, signal.comment)

    def _apply_decision(
        self, request: ApprovalRequest, decision: DecisionKind, reviewer: str, comment: str
    ) -> None:
        request.decision = Decision(
            decision=decision, reviewer=reviewer, comment=comment, decided_at=workflow.now()
        )
        request.status = "approved" if decision == "approve" else "rejected"
        self._step(
            "event", request.tool, f"approval {request.request_id} {request.status} by {reviewer}"
        )
        _approval_decided(request)

    # --- the model ---------------------------------------------------------------------

    async def _call_model(self) -> Message:
        turn = self._state.turns + 1
        try:
            response: ModelResponse = await workflow.execute_activity(
                CALL_MODEL,
                ModelCallInput(
                    model=self._input.model,
                    system_prompt=self._input.system_prompt,
                    transcript_ref=self._transcript_ref,
                    new_messages=self._unsent,
                    tools=self._model_tools(),
                    turn=turn,
                ),
                result_type=ModelResponse,
                start_to_close_timeout=self._input.model_timeout,
                retry_policy=MODEL_RETRY,
                summary=f"model {self._input.model} turn {turn}",
            )
        except ActivityError as err:
            if is_cancelled_exception(err):
                raise
            reason = self._model_failure(err) if self._v2 else str(err.cause or err)
            self._state.error = reason
            await self._end_pending("cancelled")
            self._set_status("failed")
            message = f"model call failed on turn {turn}: {reason}"
            if self._v2:
                # The reason says it all; the chained causes would carry their tracebacks
                # into a failure Temporal could refuse as too large.
                raise ApplicationError(message, type=RUN_FAILED, non_retryable=True) from None
            raise ApplicationError(message, type=RUN_FAILED, non_retryable=True) from err
        self._state.turns = turn
        self._state.usage += response.usage
        reply = response.message
        self._transcript_ref = response.transcript_ref
        self._unsent = []
        names = ", ".join(call.name for call in reply.tool_calls)
        detail = f"calls {names}" if reply.tool_calls else _preview(reply.content)
        self._step("model", self._input.model, detail)
        return reply

    def _model_failure(self, err: ActivityError) -> str:
        """Why the model could not be called, naming the provider, the limit and the attempts,
        in one bounded line."""
        spec = self._input.model
        cause = err.cause
        if isinstance(cause, ActivityTimeoutError):
            limit = self._input.model_timeout.total_seconds()
            what = f"{spec} did not answer within {limit:g} s (model_timeout)"
        elif isinstance(cause, FailureError):
            what = f"{spec}: {cause.message}"
        else:
            what = f"{spec}: {cause or err}"
        if err.retry_state == RetryState.MAXIMUM_ATTEMPTS_REACHED:
            what += f"; gave up after {MODEL_RETRY.maximum_attempts} attempts"
        elif err.retry_state == RetryState.NON_RETRYABLE_FAILURE:
            what += "; not retried: the request itself was refused"
        return _preview(what, FAILURE_CHARS)

    # --- tools -------------------------------------------------------------------------

    async def _run_tools(self, calls: list[ToolCall], carried: CarriedTurn | None = None) -> None:
        """Run one turn's tool calls concurrently (the model issued them together, so they are
        independent), then hand every result to the model at once. A turn `carried` over by
        continue-as-new keeps its results and waits on for the rest."""

        async def one(index: int, call: ToolCall) -> ToolResult | ParkedCall:
            self._turn_open.add(call.id)
            try:
                if carried is None:
                    return await self._run_tool(call)
                done = carried.results[index]
                return done if done is not None else await self._resume(call, carried)
            finally:
                self._turn_open.discard(call.id)

        outcomes = await asyncio.gather(*(one(index, call) for index, call in enumerate(calls)))
        if any(isinstance(outcome, ParkedCall) for outcome in outcomes):
            # The history grew past its limit while every unfinished call waited.
            await self._continue_as_new(
                turn=CarriedTurn(
                    calls=calls,
                    results=[o if isinstance(o, ToolResult) else None for o in outcomes],
                    parked={
                        call.id: o
                        for call, o in zip(calls, outcomes, strict=True)
                        if isinstance(o, ParkedCall)
                    },
                )
            )
        results = [o for o in outcomes if isinstance(o, ToolResult)]
        lines = []
        for result in results:
            self._step("tool", result.name, _preview(result.content), is_error=result.is_error)
            lines.append(f"{result.name}: {_preview(result.content, LEDGER_CHARS)}")
            if REF_PREFIX in result.content:
                self._state.references += 1
        self._state.tool_calls += len(calls)
        if self._long_wait is not None:
            # The turn waited long: its results become the Event of a rebuilt context, since
            # the tool calls they answer are in the transcript being left behind.
            self._rebuild("; ".join(lines))
            self._state.completed.extend(lines)
            return
        self._state.completed.extend(lines)
        self._unsent.extend(
            Message(
                role="tool",
                content=result.content,
                content_ref=result.content_ref,
                tool_call_id=result.tool_call_id,
                name=result.name,
                is_error=result.is_error,
            )
            for result in results
        )

    async def _run_tool(self, call: ToolCall) -> ToolResult | ParkedCall:
        if call.name == GET_OPERATION_STATUS:
            return self._get_operation_status(call)
        if call.name == WAIT_FOR_OPERATIONS:
            return await self._wait_for_operations(call)
        if call.name not in self._model_tools():
            # The run decides which tools exist for it, not the model.
            allowed = ", ".join(self._input.tools) or "none"
            return _error(call, f"unknown tool {call.name!r}; available: {allowed}")
        if call.name == REQUEST_APPROVAL:
            return await self._request_approval(call)
        result, operation_id = await self._call_tool(call, approved_by=None)
        if result.approval_needed is not None:
            # The tool declared that this call needs a person's approval: it has not run.
            needed = result.approval_needed
            request = await self._ask(call, needed.reason, needed.policy)
            if request.status != "approved":
                return ToolResult(
                    tool_call_id=call.id,
                    name=call.name,
                    content=_json({"ran": False, **_approval_outcome(request)}),
                    is_error=True,
                )
            result, operation_id = await self._call_tool(call, approved_by=request.request_id)
        if result.operation is None:
            if held := self._early.pop(operation_id, None):
                # Reports for a job the start says it did not start: nothing to apply them to.
                self._step(
                    "event",
                    call.name,
                    f"{operation_id}: {len(held)} early reports dropped, the start failed",
                    is_error=True,
                )
            return result
        return await self._track(call, operation_id, result.operation)

    async def _resume(self, call: ToolCall, turn: CarriedTurn) -> ToolResult | ParkedCall:
        """Take over a call the previous run was waiting on when it continued as new."""
        parked = turn.parked[call.id]
        ops = [self._state.operations[i] for i in parked.operation_ids]
        if parked.kind == "operation":
            return await self._await_operation(call, ops[0], since=parked.since)
        return await self._await_operations(call, ops, parked.deadline, since=parked.since)

    async def _call_tool(self, call: ToolCall, approved_by: str | None) -> tuple[ToolResult, str]:
        # Starts still in flight count too, since the calls of one turn start concurrently (sync
        # tools among them, conservatively: the workflow does not know a tool's kind).
        in_flight = [op.tool for op in self._pending()]
        in_flight += [start.tool for start in self._starting.values()]
        operation_id = f"op_{workflow.uuid4().hex[:16]}"
        # Chosen here, not derived from a signing key, so that every token minted for the
        # operation carries it whichever key signs it, and an early report can be checked.
        nonce = workflow.uuid4().hex if self._v2 else None
        self._starting[operation_id] = _Starting(call.name, _hash(nonce) if nonce else None)
        try:
            result: ToolResult = await workflow.execute_activity(
                CALL_TOOL,
                ToolCallInput(
                    call=call,
                    workflow_id=workflow.info().workflow_id,
                    operation_id=operation_id,
                    started_at=workflow.now(),
                    in_flight=in_flight.count(call.name),
                    run_in_flight=len(in_flight),
                    run_max_in_flight=self._input.max_in_flight,
                    approved_by=approved_by,
                    operation_timeout=self._input.operation_timeout,
                    operation_mode=self._input.operation_mode,
                    nonce=nonce,
                ),
                result_type=ToolResult,
                start_to_close_timeout=self._input.tool_timeout,
                retry_policy=TOOL_RETRY,
                summary=f"tool {call.name}",
            )
        except ActivityError as err:
            if is_cancelled_exception(err):
                raise
            reason = str(err.cause) if err.cause else str(err)
            return _error(call, f"tool {call.name} failed: {reason}"), operation_id
        finally:
            self._starting.pop(operation_id, None)
        return result, operation_id

    # --- approvals ---------------------------------------------------------------------

    async def _request_approval(self, call: ToolCall) -> ToolResult:
        try:
            args = RequestApprovalArgs.model_validate_json(call.arguments or "{}")
        except ValueError as err:
            return _error(call, f"invalid arguments for {call.name}: {err}")
        request = await self._ask(call, f"{args.action}: {args.reason}", self._input.approval)
        return ToolResult(
            tool_call_id=call.id,
            name=call.name,
            content=_json(_approval_outcome(request)),
            is_error=request.status != "approved",
        )

    async def _ask(self, call: ToolCall, reason: str, policy: ApprovalPolicy) -> ApprovalRequest:
        """Ask a person, wait (holding no worker) for the decision or the timeout policy."""
        if not self._v2:
            return await self._ask_v1(call, reason, policy)
        # Before the request exists, so that a slow checkpoint does not eat into its window.
        await self._checkpoint(f"approval of {call.name} from {policy.approvers}")
        request = self._request(call, reason, policy)
        with self._waiting("approval", f"waiting for approval: {reason}", request.expires_at):
            # The people are told while the window runs: a notice that is slow or retried
            # (a worker crashed) never delays it, nor keeps a decision from being final.
            notices = [self._notice(request, policy.approvers, escalation=False)]
            try:
                if not await self._decided(request):
                    await self._escalate_or_time_out(request, notices)
            finally:
                for notice in notices:
                    notice.cancel()  # the request is closed: no one needs telling any more
                self._link_nonces.pop(request.request_id, None)
        return request

    def _request(self, call: ToolCall, reason: str, policy: ApprovalPolicy) -> ApprovalRequest:
        now = workflow.now()
        try:
            arguments = json.loads(call.arguments or "{}")
        except json.JSONDecodeError:
            arguments = {"raw": call.arguments}
        request = ApprovalRequest(
            request_id=str(workflow.uuid4()),
            tool=call.name,
            tool_call_id=call.id,
            arguments=arguments if isinstance(arguments, dict) else {"value": arguments},
            reason=reason,
            requested_at=now,
            expires_at=now + policy.timeout,
            policy=policy,
            sent_to=[policy.approvers],
        )
        if self._v2:
            # The run chooses the links' nonce, so a link works the moment it is posted, and
            # keeps working whichever key signs the escalation's links.
            nonce = workflow.uuid4().hex
            self._link_nonces[request.request_id] = nonce
            request.nonce_hash = _hash(nonce)
        self._state.approvals[request.request_id] = request
        self._step(
            "event", call.name, f"approval {request.request_id} requested from {policy.approvers}"
        )
        return request

    async def _decided(self, request: ApprovalRequest) -> bool:
        """Whether a person decided by the request's deadline (at once if it has passed)."""
        if not self._v2:
            return await self._decided_v1(request)
        remaining = request.expires_at - workflow.now()
        if request.open and remaining > timedelta(0):
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(lambda: not request.open, timeout=remaining)
        return not request.open

    async def _escalate_or_time_out(
        self, request: ApprovalRequest, notices: list[asyncio.Task[None]]
    ) -> None:
        """The window passed with the request open: escalate once, then apply `on_timeout`."""
        policy = request.policy
        if policy.on_timeout == "escalate" and not request.escalated:
            # A second window, to the deadline the links were minted with; the first request
            # (and its links) stays valid meanwhile.
            request.escalated = True
            request.expires_at = request.expires_at + policy.timeout
            request.sent_to.append(policy.escalate_to)
            self._step(
                "event",
                request.tool,
                f"approval {request.request_id} escalated to {policy.escalate_to}",
            )
            self._show_wait()
            if request.expires_at > workflow.now():
                notices.append(self._notice(request, policy.escalate_to, escalation=True))
            if await self._decided(request):
                return
        # Nothing was awaited since `_decided` found the request open: it still is.
        self._time_out(request)

    def _notice(
        self, request: ApprovalRequest, recipient: str, *, escalation: bool
    ) -> asyncio.Task[None]:
        """Notify in a task of its own, cancelled once the request closes."""

        async def notify() -> None:
            try:
                await self._notify(request, recipient, escalation=escalation)
            except ActivityError as err:
                if not is_cancelled_exception(err):
                    raise
                # Cancelled because the request closed: nothing is lost, nothing to report.

        return asyncio.create_task(notify())

    def _time_out(self, request: ApprovalRequest) -> None:
        """Apply the request's `on_timeout` (`default` or expire; `fail` ends the run)."""
        policy = request.policy
        if policy.on_timeout == "default":
            request.decision = Decision(
                decision=policy.default_decision,
                reviewer="policy",
                comment=f"no decision by {request.expires_at.isoformat()}: default applied",
                decided_at=workflow.now(),
                by_policy=True,
            )
            request.status = "approved" if policy.default_decision == "approve" else "rejected"
            _approval_decided(request)
            self._step(
                "event", request.tool, f"approval {request.request_id} {request.status} by default"
            )
            return
        request.status = "expired"
        _approval_decided(request)
        self._step("event", request.tool, f"approval {request.request_id} expired", is_error=True)
        if policy.on_timeout == "fail":
            raise _ApprovalExpired(
                f"approval {request.request_id} for {request.tool} expired at "
                f"{request.expires_at.isoformat()} with no decision: {request.reason}"
            )

    async def _notify(self, request: ApprovalRequest, recipient: str, *, escalation: bool) -> None:
        windows = 2 if request.policy.on_timeout == "escalate" else 1
        try:
            sent: ApprovalNoticeSent = await workflow.execute_activity(
                NOTIFY_APPROVAL,
                ApprovalNotice(
                    workflow_id=workflow.info().workflow_id,
                    request=request,
                    recipient=recipient,
                    escalation=escalation,
                    nonce=self._link_nonces.get(request.request_id),
                    links_expire_at=(
                        request.requested_at + request.policy.timeout * windows
                        if self._v2
                        else None
                    ),
                ),
                result_type=ApprovalNoticeSent,
                start_to_close_timeout=NOTIFY_TIMEOUT_V2 if self._v2 else NOTIFY_TIMEOUT,
                retry_policy=NOTIFY_RETRY,
                summary=f"notify {recipient}: approval for {request.tool}",
            )
        except ActivityError as err:
            if is_cancelled_exception(err):
                raise
            workflow.logger.warning("could not notify %s: %s", recipient, err.cause or err)
            return
        if not self._v2:
            request.nonce_hash = sent.nonce_hash or request.nonce_hash

    # Runs recorded before EXACTLY_ONCE: their approvals as they were, so they replay.

    async def _ask_v1(self, call: ToolCall, reason: str, policy: ApprovalPolicy) -> ApprovalRequest:
        request = self._request(call, reason, policy)
        await self._checkpoint(f"approval of {call.name} from {policy.approvers}")
        with self._waiting("approval", f"waiting for approval: {reason}", request.expires_at):
            await self._notify(request, policy.approvers, escalation=False)
            if not await self._decided_v1(request):
                await self._on_timeout_v1(request)
        return request

    async def _decided_v1(self, request: ApprovalRequest) -> bool:
        try:
            await workflow.wait_condition(
                lambda: not request.open, timeout=request.expires_at - workflow.now()
            )
        except TimeoutError:
            return False
        return True

    async def _on_timeout_v1(self, request: ApprovalRequest) -> None:
        policy = request.policy
        if policy.on_timeout == "escalate" and not request.escalated:
            request.escalated = True
            request.expires_at = workflow.now() + policy.timeout
            request.sent_to.append(policy.escalate_to)
            self._step(
                "event",
                request.tool,
                f"approval {request.request_id} escalated to {policy.escalate_to}",
            )
            await self._notify(request, policy.escalate_to, escalation=True)
            self._show_wait()
            if await self._decided_v1(request):
                return
        self._time_out(request)

    # --- operations --------------------------------------------------------------------

    async def _track(
        self, call: ToolCall, operation_id: str, started: OperationStarted
    ) -> ToolResult | ParkedCall:
        """Register a started job, watch it, and answer the call per the tool's mode."""
        op = Operation(
            operation_id=operation_id,
            tool=call.name,
            tool_call_id=call.id,
            turn=self._state.turns,
            completion=started.completion,
            mode=started.mode,
            job_id=started.job_id,
            started_at=workflow.now(),
            expires_at=started.expires_at,
            eta_seconds=started.eta_seconds,
            poll_interval_seconds=started.poll_interval_seconds,
            nonce_hash=started.nonce_hash,
        )
        self._state.operations[op.operation_id] = op
        # Reports that beat the start's answer, in the order they came.
        for early in self._early.pop(op.operation_id, []):
            if op.nonce_hash != _hash(early.nonce):
                workflow.logger.warning("dropped an early completion with the wrong nonce")
            elif not op.terminal:
                self._apply(op, early.completion)
        self._watchers[op.operation_id] = asyncio.create_task(self._watch(op))
        self._show_wait()
        if op.mode == "handle":
            op.reported_status = op.status
            return ToolResult(tool_call_id=call.id, name=call.name, content=_json(op.handle()))
        await self._checkpoint(f"{op.tool} ({op.operation_id})")
        return await self._await_operation(call, op)

    async def _await_operation(
        self, call: ToolCall, op: Operation, since: datetime | None = None
    ) -> ToolResult | ParkedCall:
        """The outcome of an await-mode operation, as its call's result, once it has ended."""
        kind = "webhook" if op.completion == "callback" else "poll"
        with self._waiting(
            kind, f"waiting for {op.tool} ({op.job_id})", op.expires_at, since
        ) as wait:
            parked = ParkedCall(kind="operation", operation_ids=[op.operation_id], since=wait.began)
            if not await self._park(call, lambda: op.terminal, wait):
                return parked
        op.reported_status = op.status
        return ToolResult(
            tool_call_id=call.id,
            name=call.name,
            content=_json(op.outcome()),
            is_error=op.status != "succeeded",
        )

    async def _park(
        self,
        call: ToolCall,
        done: Callable[[], bool],
        wait: _Wait,
        timeout: timedelta | None = None,  # noqa: ASYNC109 (a workflow timer, not asyncio's)
    ) -> bool:
        """Wait until `done()`; False if the run must continue as new first.

        A chatty job's progress reports grow the history while the run waits in a turn. When
        every unfinished call of the turn is parked here and the history is past its limit,
        they all return False together, and the turn continues in a new run (`_run_tools`).

        Raises:
            TimeoutError: `timeout` passed first.
        """
        self._parked.add(call.id)
        try:
            await workflow.wait_condition(
                lambda: done() or self._turn_must_continue(), timeout=timeout
            )
        finally:
            self._parked.discard(call.id)
        if done():
            return True
        wait.parked = True
        return False

    def _turn_must_continue(self) -> bool:
        """Every unfinished call of the turn waits in `_park`, and the history is full."""
        return self._v2 and self._turn_open == self._parked and self._should_continue_as_new()

    async def _watch(self, op: Operation) -> None:
        """Wait for the job's end by callback or poll; past `expires_at`, cancel it."""
        remaining = max(op.expires_at - workflow.now(), timedelta(seconds=1))
        if op.completion == "callback":
            try:
                await workflow.wait_condition(lambda: op.terminal, timeout=remaining)
            except TimeoutError:
                await self._end(op, "expired")
            return
        try:
            completion = await self._poll(op, remaining)
        except ActivityError as err:
            if is_cancelled_exception(err) or op.terminal:
                return
            # Out of time: a timeout, or a retry policy that stopped at schedule-to-close.
            if isinstance(err.cause, ActivityTimeoutError) or workflow.now() >= op.expires_at:
                await self._end(op, "expired")
                return
            completion = Completion(
                status="failed",
                error=OperationError(
                    code="poll_failed", message=str(err.cause or err), retryable=True
                ),
            )
        if not op.terminal:
            self._apply(op, completion)

    async def _poll(self, op: Operation, remaining: timedelta) -> Completion:
        interval = timedelta(seconds=op.poll_interval_seconds)
        poll = PollOperationInput(
            operation_id=op.operation_id,
            tool=op.tool,
            job_id=op.job_id,
            poll_interval_seconds=op.poll_interval_seconds,
        )
        completion: Completion
        if interval >= LONG_POLL_INTERVAL:
            completion = await workflow.execute_activity(
                POLL_OPERATION,
                poll,
                result_type=Completion,
                schedule_to_close_timeout=remaining,
                start_to_close_timeout=POLL_CHECK_TIMEOUT,
                retry_policy=RetryPolicy(
                    initial_interval=interval, backoff_coefficient=1.0, maximum_interval=interval
                ),
                summary=f"poll {op.tool} {op.job_id}",
            )
            return completion
        # A crashed worker's poll is taken over once a heartbeat is missed: two intervals
        # plus slack, so a slow status call does not trigger a needless takeover.
        completion = await workflow.execute_activity(
            POLL_OPERATION,
            poll,
            result_type=Completion,
            schedule_to_close_timeout=remaining,
            heartbeat_timeout=interval * 2 + timedelta(seconds=5),
            # Retries of a crashed poll start after a second; the interval caps the backoff (never
            # below the first delay: the server rejects such a policy).
            retry_policy=RetryPolicy(
                initial_interval=POLL_RETRY_FIRST,
                maximum_interval=max(interval, POLL_RETRY_FIRST),
            ),
            summary=f"poll {op.tool} {op.job_id}",
        )
        return completion

    def _apply(self, op: Operation, completion: Completion) -> None:
        op.status = completion.status
        op.progress = completion.progress or op.progress
        if completion.status in ("succeeded", "failed"):
            op.result = completion.result
            op.result_ref = completion.result_ref
            op.error = completion.error
            op.resolved_at = workflow.now()
        self._step(
            "event", op.tool, f"{op.operation_id} {op.status}", is_error=op.status == "failed"
        )
        if op.terminal:
            _operation_finished(op)
        self._show_wait()

    async def _end(self, op: Operation, status: str) -> None:
        """Mark an operation expired or cancelled, then ask the external system to stop it."""
        if op.terminal:
            return
        op.status = "expired" if status == "expired" else "cancelled"
        op.resolved_at = workflow.now()
        op.error = OperationError(
            code=op.status,
            message=(
                f"no completion by {op.expires_at.isoformat()}; the job was cancelled"
                if op.status == "expired"
                else "the run was cancelled; the job was cancelled"
            ),
            retryable=op.status == "expired",
        )
        self._step("event", op.tool, f"{op.operation_id} {op.status}", is_error=True)
        _operation_finished(op)
        self._show_wait()
        watcher = self._watchers.get(op.operation_id)
        if watcher is not None and watcher is not asyncio.current_task():
            watcher.cancel()
        if self._v2:
            # A task of its own, not the watcher's: a watcher is cancelled when the run
            # continues as new, and the cancel must outlive it (`_cancels_sent`).
            op.cancel = "owed"
            self._cancels[op.operation_id] = asyncio.create_task(self._send_cancel(op))
            return
        await self._send_cancel(op)

    async def _send_cancel(self, op: Operation) -> None:
        try:
            await workflow.execute_activity(
                CANCEL_OPERATION,
                CancelOperationInput(
                    operation_id=op.operation_id,
                    tool=op.tool,
                    job_id=op.job_id,
                    reason="expired" if op.status == "expired" else "cancelled",
                ),
                start_to_close_timeout=CANCEL_TIMEOUT,
                retry_policy=CANCEL_RETRY,
                summary=f"cancel {op.tool} {op.job_id}",
            )
        except ActivityError as err:
            if self._v2:
                op.cancel = "failed"
            # The job may run on with nobody waiting for it: an orphan risk, worth an alert.
            workflow.logger.warning("could not cancel job %s: %s", op.job_id, err.cause or err)
            workflow.metric_meter().create_counter(
                "waitstate_cancel_failures", "Jobs that could not be cancelled"
            ).add(1, {"tool": op.tool})
            return
        if self._v2:
            op.cancel = "sent"

    async def _end_pending(self, status: str) -> None:
        await asyncio.gather(*(self._end(op, status) for op in self._pending()))
        if self._v2:
            await self._cancels_sent()

    async def _cancels_sent(self) -> None:
        """Wait until every cancel the run owes a job has been answered (or given up on)."""
        await workflow.wait_condition(lambda: all(task.done() for task in self._cancels.values()))

    def _operations_to_report(self) -> bool:
        """Whether an operation changed unreported, or a handle-mode one may still change."""
        return bool(self._unreported()) or any(op.mode == "handle" for op in self._pending())

    async def _report_operations(self) -> bool:
        """The model has nothing left to do but operations run: wait for one to change (the
        loop waits, not the model), then tell the model. False if the history grew past its
        limit first (a chatty job's progress reports): the run must continue as new."""
        # A wait the previous run began (and checkpointed) goes on, measured from its start.
        began, self._waiting_since = self._waiting_since, None
        if began is None:
            await self._checkpoint("operations to change state")
        kind = _wait_kind(self._pending())
        with self._waiting(kind, "waiting for operations", began=began) as wait:
            await workflow.wait_condition(
                lambda: bool(self._unreported()) or (self._v2 and self._should_continue_as_new())
            )
            wait.parked = not self._unreported()
        if wait.parked:
            self._waiting_since = wait.began
            return False
        changed = self._unreported()
        for op in changed:
            op.reported_status = op.status
        update = "Operation update: " + _json([op.outcome() for op in changed])
        if self._long_wait is not None:
            self._rebuild(update)
        else:
            self._unsent.append(Message(role="user", content=update))
        self._state.completed.extend(
            f"{op.tool} ({op.operation_id}): {_preview(_json(op.outcome()), LEDGER_CHARS)}"
            for op in changed
        )
        return True

    def _get_operation_status(self, call: ToolCall) -> ToolResult:
        try:
            args = GetOperationStatusArgs.model_validate_json(call.arguments or "{}")
        except ValueError as err:
            return _error(call, f"invalid arguments for {call.name}: {err}")
        op = self._state.operations.get(args.operation_id)
        if op is None:
            return _error(call, f"no operation {args.operation_id!r} in this run")
        op.reported_status = op.status
        return ToolResult(tool_call_id=call.id, name=call.name, content=_json(op.outcome()))

    async def _wait_for_operations(self, call: ToolCall) -> ToolResult | ParkedCall:
        try:
            args = WaitForOperationsArgs.model_validate_json(call.arguments or "{}")
        except ValueError as err:
            return _error(call, f"invalid arguments for {call.name}: {err}")
        ids = args.operation_ids or [op.operation_id for op in self._pending()]
        if unknown := [i for i in ids if i not in self._state.operations]:
            return _error(call, f"no such operations in this run: {', '.join(unknown)}")
        ops = [self._state.operations[i] for i in ids]
        timeout = timedelta(seconds=args.timeout_seconds) if args.timeout_seconds else None
        await self._checkpoint(f"operations {', '.join(ids)}")
        deadline = workflow.now() + timeout if timeout is not None else None
        return await self._await_operations(call, ops, deadline)

    async def _await_operations(
        self,
        call: ToolCall,
        ops: list[Operation],
        deadline: datetime | None,
        since: datetime | None = None,
    ) -> ToolResult | ParkedCall:
        """`wait_for_operations`' answer: every op's outcome once all ended, or at `deadline`."""
        with self._waiting(_wait_kind(ops), "waiting for operations", began=since) as wait:
            timeout = None if deadline is None else max(deadline - workflow.now(), timedelta(0))
            try:
                if timeout != timedelta(0) and not await self._park(
                    call, lambda: all(op.terminal for op in ops), wait, timeout
                ):
                    ids = [op.operation_id for op in ops]
                    return ParkedCall(
                        kind="operations", operation_ids=ids, deadline=deadline, since=wait.began
                    )
            except TimeoutError:
                pass
        for op in ops:
            op.reported_status = op.status
        return ToolResult(
            tool_call_id=call.id, name=call.name, content=_json([op.outcome() for op in ops])
        )

    def _pending(self) -> list[Operation]:
        return [op for op in self._state.operations.values() if not op.terminal]

    def _unreported(self) -> list[Operation]:
        return [
            op
            for op in self._state.operations.values()
            if op.mode == "handle" and op.reported_status != op.status and op.status != "running"
        ]

    # --- bookkeeping -------------------------------------------------------------------

    async def _finish(self, status: RunStatus, output: str | None) -> RunResult:
        await self._end_pending("cancelled")
        await workflow.wait_condition(workflow.all_handlers_finished)
        self._state.final_output = output
        self._set_status(status)
        return RunResult(
            status=status,
            final_output=output,
            turns=self._state.turns,
            tool_calls=self._state.tool_calls,
            usage=self._state.usage,
            error=self._state.error,
        )

    def _step(
        self,
        kind: Literal["model", "tool", "event"],
        name: str,
        detail: str,
        *,
        is_error: bool = False,
    ) -> None:
        self._state.steps.append(
            Step(turn=self._state.turns, kind=kind, name=name, detail=detail, is_error=is_error)
        )

    @contextlib.contextmanager
    def _waiting(
        self,
        kind: str,
        details: str,
        until: datetime | None = None,
        began: datetime | None = None,
    ) -> Iterator[_Wait]:
        """While the block runs, the run is `waiting` for `kind` (approval, webhook, poll); the
        Web UI shows `details`. Nested and concurrent waits show the latest. `began` is when a
        wait taken over from the previous run (continue-as-new) began."""
        if until is not None:
            details = f"{details} (expires {until.strftime('%Y-%m-%d %H:%M UTC')})"
        wait = _Wait(kind, details, began or workflow.now())
        self._waits.append(wait)
        self._show_wait()
        try:
            yield wait
        except GeneratorExit:
            # Evicted from the worker's cache: the coroutine is closed, not resumed, and the
            # workflow APIs are gone. The next worker rebuilds this state from history.
            raise
        except BaseException:
            self._end_wait(wait)
            raise
        else:
            self._end_wait(wait)

    def _end_wait(self, wait: _Wait) -> None:
        self._waits.remove(wait)
        self._show_wait()
        if wait.parked:
            return  # it goes on in the next run, which measures it from `began`
        waited = workflow.now() - wait.began
        if waited > self._input.rebuild_after:
            self._long_wait = max(self._long_wait or waited, waited)
        else:
            self._step("event", "context", f"transcript kept after waiting {waited}")

    def _show_wait(self) -> None:
        """Keep status, search attributes and the Web UI's details in step with the run."""
        kind, details = (
            (self._waits[-1].kind, self._waits[-1].details) if self._waits else ("none", "")
        )
        self._set_status("waiting" if self._waits else "running")
        pending = self._pending()
        # The earliest deadline of anything the run waits on: past it, the wait is overdue.
        deadlines = [op.expires_at for op in pending]
        deadlines += [r.expires_at for r in self._state.approvals.values() if r.open]
        expires = min(deadlines) if self._waits and deadlines else None
        current = workflow.info().typed_search_attributes
        updates: list[SearchAttributeUpdate[Any]] = []
        if current.get(WAITING_FOR) != kind:
            updates.append(WAITING_FOR.value_set(kind))
        if current.get(PENDING_OPERATIONS) != len(pending):
            updates.append(PENDING_OPERATIONS.value_set(len(pending)))
        # Left as it was when no wait is on: it means something only while WaitingFor is not
        # "none" (and unsetting a Datetime confuses the time-skipping test server's decoder).
        if expires is not None and current.get(WAIT_EXPIRES_AT) != expires:
            updates.append(WAIT_EXPIRES_AT.value_set(expires))
        if updates:
            workflow.upsert_search_attributes(updates)
        workflow.set_current_details(details)

    # --- durable state: checkpoint, rebuild, continue-as-new ------------------------------

    async def _checkpoint(self, waiting_for: str) -> None:
        """Commit what is done and what remains before the run suspends: written by the model
        in one call, or built from the ledger (scripted model, or the call failed)."""
        checkpoint = self._ledger_checkpoint(waiting_for)
        if not self._input.model.startswith("scripted:"):
            checkpoint = await self._model_checkpoint(waiting_for) or checkpoint
        self._state.checkpoint = checkpoint

    async def _model_checkpoint(self, waiting_for: str) -> Checkpoint | None:
        # A conversation of its own, from the ledger: the transcript may end in tool calls
        # still waiting for their results, which no provider accepts a question after.
        prompt = "\n".join(
            [
                f"Task: {self._state.task}",
                f"Constraints: {'; '.join(self._state.constraints) or 'none'}",
                "Completed:",
                *(f"- {line}" for line in self._state.completed[-REBUILD_COMPLETED_LINES:]),
                f"Now waiting for: {waiting_for}",
            ]
        )
        try:
            response: ModelResponse = await workflow.execute_activity(
                CALL_MODEL,
                ModelCallInput(
                    model=self._input.model,
                    system_prompt=CHECKPOINT_PROMPT,
                    new_messages=[Message(role="user", content=prompt)],
                    tools=[],
                    turn=self._state.turns,
                ),
                result_type=ModelResponse,
                start_to_close_timeout=self._input.model_timeout,
                retry_policy=CHECKPOINT_RETRY,
                summary=f"checkpoint {self._input.model}",
            )
        except ActivityError as err:
            if is_cancelled_exception(err):
                raise
            return None
        self._state.usage += response.usage
        parts = dict(
            line.split(":", 1) for line in response.message.content.splitlines() if ":" in line
        )
        done, remaining = parts.get("Done", "").strip(), parts.get("Remaining", "").strip()
        if not done or not remaining:
            return None
        return Checkpoint(
            at=workflow.now(),
            waiting_for=waiting_for,
            done=_preview(done, LEDGER_CHARS),
            remaining=_preview(remaining, LEDGER_CHARS),
        )

    def _ledger_checkpoint(self, waiting_for: str) -> Checkpoint:
        recent = "; ".join(self._state.completed[-3:]) or "nothing yet"
        pending = [f"{op.tool} ({op.operation_id})" for op in self._pending()]
        pending += [f"approval for {r.tool}" for r in self._state.approvals.values() if r.open]
        return Checkpoint(
            at=workflow.now(),
            waiting_for=waiting_for,
            done=(
                f"{self._state.turns} model turns and {self._state.tool_calls} tool calls; "
                f"latest: {_preview(recent, LEDGER_CHARS)}"
            ),
            remaining=(
                f"once {', '.join(pending) if pending else waiting_for} is resolved, "
                "continue the task from what is completed"
            ),
        )

    def _rebuild(self, event: str) -> None:
        """Start the model afresh from the ledger: Task, Constraints, Completed, Event,
        Remaining. Its size depends on the ledger's bounded lines, not the transcript."""
        waited, self._long_wait = self._long_wait, None
        checkpoint = self._state.checkpoint
        completed = self._state.completed[-REBUILD_COMPLETED_LINES:]
        skipped = len(self._state.completed) - len(completed)
        lines = [
            f"Task: {self._state.task}",
            f"Constraints: {'; '.join(self._state.constraints) or 'none'}",
            "Completed:",
            *([f"- ({skipped} earlier steps not shown)"] if skipped else []),
            *(f"- {line}" for line in completed),
            f"Event: {_preview(event, REBUILD_EVENT_CHARS)}",
            f"Remaining: {checkpoint.remaining if checkpoint else 'continue the task'}",
        ]
        self._transcript_ref = None
        self._unsent = [Message(role="user", content="\n".join(lines))]
        self._state.context_rebuilds += 1
        self._step("event", "context", f"rebuilt from the ledger after waiting {waited}")

    def _model_tools(self) -> list[str]:
        """The run's tools, plus `read_ref` once a result was passed by reference."""
        if self._state.references and READ_REF not in self._input.tools:
            return [*self._input.tools, READ_REF]
        return list(self._input.tools)

    def _should_continue_as_new(self) -> bool:
        info = workflow.info()
        limit = self._input.continue_as_new_after_events
        return info.is_continue_as_new_suggested() or (
            limit is not None and info.get_current_history_length() >= limit
        )

    async def _continue_as_new(
        self, answer: str | None = None, turn: CarriedTurn | None = None
    ) -> NoReturn:
        """Hand the ledger, the conversation reference, pending operations and an unfinished
        turn to a new run (same workflow id: completions and decisions sent later reach it)."""
        for watcher in self._watchers.values():
            watcher.cancel()  # the next run watches its pending operations itself
        if self._v2:
            # A cancel in flight is this run's to finish: the operation it is for has ended,
            # so the next run would not watch it (it sends one still `owed`, to be sure).
            await self._cancels_sent()
        await workflow.wait_condition(workflow.all_handlers_finished)
        keep = {
            i for parked in (turn.parked.values() if turn else []) for i in parked.operation_ids
        }
        self._trim(keep)
        self._state.continued_as_new += 1
        carry = RunCarry(
            state=self._state,
            transcript_ref=self._transcript_ref,
            unsent=self._unsent,
            answer=answer,
            turn=turn,
            waiting_since=self._waiting_since,
        )
        workflow.continue_as_new(self._input.model_copy(update={"carry": carry}))

    def _trim(self, keep: set[str]) -> None:
        """Bound what is carried: recent steps and lines, every open item, a few closed ones,
        and the operations an unfinished turn waits on (`keep`)."""
        state = self._state
        state.steps = state.steps[-KEEP_STEPS:]
        state.completed = state.completed[-KEEP_STEPS:]
        closed = [k for k, op in state.operations.items() if op.terminal and k not in keep]
        closed = closed[:-KEEP_CLOSED]
        decided = [k for k, r in state.approvals.items() if not r.open][:-KEEP_CLOSED]
        for key in closed:
            del state.operations[key]
        for key in decided:
            del state.approvals[key]

    def _set_status(self, status: RunStatus) -> None:
        self._state.status = status
        # AgentStatus filters the Web UI's list; skip the upsert (a history event) when the
        # value is already set.
        current = workflow.info().typed_search_attributes.get(AGENT_STATUS)
        if current != status:
            workflow.upsert_search_attributes([AGENT_STATUS.value_set(status)])


def _operation_finished(op: Operation) -> None:
    meter = workflow.metric_meter()  # silent during replay
    labels = {"tool": op.tool, "outcome": op.status}
    meter.create_counter("waitstate_operations_finished", "Operations ended").add(1, labels)
    meter.create_histogram_timedelta(
        "waitstate_operation_duration", "Start to end of an operation", unit="ms"
    ).record(workflow.now() - op.started_at, labels)


def _approval_decided(request: ApprovalRequest) -> None:
    meter = workflow.metric_meter()
    labels = {"tool": request.tool, "outcome": request.status}
    meter.create_counter("waitstate_approvals", "Approval requests decided").add(1, labels)
    meter.create_histogram_timedelta(
        "waitstate_approval_wait", "Request to decision", unit="ms"
    ).record(workflow.now() - request.requested_at, labels)


def _approval_outcome(request: ApprovalRequest) -> dict[str, object]:
    """What the model is told of a request: approved, rejected with the reason, or expired."""
    outcome: dict[str, object] = {"request_id": request.request_id, "approval": request.status}
    if request.decision is not None:
        outcome["reviewer"] = request.decision.reviewer
        outcome["comment"] = request.decision.comment
        outcome["by_policy"] = request.decision.by_policy
    if request.status == "expired":
        outcome["reason"] = f"nobody decided by {request.expires_at.isoformat()}"
    return outcome


def _wait_kind(ops: list[Operation]) -> str:
    return "webhook" if any(op.completion == "callback" for op in ops) else "poll"


def _hash(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def _same_report(status: str, progress: str | None, completion: Completion) -> bool:
    """A progress report that would change nothing an operation (or held report) shows."""
    return (
        completion.status in ("running", "input_required")
        and completion.status == status
        and (completion.progress or progress) == progress
    )


def _error(call: ToolCall, message: str) -> ToolResult:
    return ToolResult(tool_call_id=call.id, name=call.name, content=message, is_error=True)


def _json(value: object) -> str:
    return json.dumps(value, default=str, separators=(",", ":"))


def _preview(text: str, limit: int = PREVIEW_CHARS) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
