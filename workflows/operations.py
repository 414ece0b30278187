"""The operations book: long tools' jobs from their start to their end, as one run keeps them.

A start activity returns an operation; a watcher waits for its end by webhook (the gateway's
`complete_operation` Update) or by a polling activity, and past `expires_at` marks it expired
and has the external system cancel the job. Reports that beat the start's answer are held,
in order, until the start is confirmed.

Runs from HARDENED on also check a callback job's status every so often, in case its webhook
was lost, and every job's once more before its expiry acts (a job that finished is never
expired and cancelled); the model hears of an operation's end once its cancel was answered,
and is told the truth of it (a cancel that failed: the job may still run); and a question for
the model ends a wait for operations.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, RetryState
from temporalio.exceptions import TimeoutError as ActivityTimeoutError

from waitstate.schemas import Message, RunInput, RunState, ToolCall, ToolCallInput, ToolResult
from waitstate.schemas.builtin import MCP_SEPARATOR as SEPARATOR
from waitstate.schemas.builtin import GetOperationStatusArgs, WaitForOperationsArgs
from waitstate.schemas.errors import (
    OPERATION_NONCE_MISMATCH,
    OPERATION_RESOLVED,
    OPERATION_UNCHANGED,
    OPERATION_UNKNOWN,
)
from waitstate.schemas.operations import (
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
from waitstate.schemas.run import CALL_TOOL, CANCEL_OPERATION, POLL_OPERATION, ParkedCall
from workflows import ledger
from workflows.activity_calls import Failed, call
from workflows.board import StatusBoard
from workflows.continuation import Continuation
from workflows.inputs import InputDesk
from workflows.memory import Memory, Wait
from workflows.metrics import cancel_failed, operation_finished, operation_reconciled
from workflows.policies import (
    CANCEL_RETRY,
    CANCEL_TIMEOUT,
    FINAL_CHECK_RETRY,
    FINAL_CHECK_TIMEOUT,
    POLL_CHECK_TIMEOUT,
    RECONCILE_MIN,
    TOOL_RETRY,
    long_poll_retry,
    poll_heartbeat,
    poll_retry,
    reconcile_retry,
)
from workflows.versions import Versions

# What an ended operation's error says of its job's cancel, while it is asked and once answered.
CANCEL_ASKED = "; the job was asked to stop (a cancel was sent, not yet confirmed)"
CANCEL_SENT = "; the job was cancelled"


class _Starting(NamedTuple):
    """A long tool's start in flight: the tool, and the hash of the nonce its token carries."""

    tool: str
    nonce_hash: str | None


class OperationsBook:
    """Every operation of one run: started, watched, reported, expired and cancelled."""

    def __init__(
        self,
        input: RunInput,
        state: RunState,
        versions: Versions,
        board: StatusBoard,
        memory: Memory,
        continuation: Continuation,
        inputs: InputDesk,
    ) -> None:
        self._input = input
        self._state = state
        self._versions = versions
        self._board = board
        self._memory = memory
        self._continuation = continuation
        self._inputs = inputs
        self._watchers: dict[str, asyncio.Task[None]] = {}
        # A webhook can beat the start activity's answer (the job finished fast, or the worker
        # died after the external system accepted it): its reports wait here, in order, until
        # the start is confirmed; then each is applied.
        self._starting: dict[str, _Starting] = {}  # by operation id, while its start runs
        self._early: dict[str, list[CompleteOperation]] = {}
        # Cancels sent to jobs (by operation id): a run ends or continues only once they are.
        self._cancels: dict[str, asyncio.Task[None]] = {}

    # --- the run's life ------------------------------------------------------------------

    def take_over(self) -> None:
        """Watch the operations a previous run handed over, and send the cancels it owed."""
        for op in self.pending():
            self._watchers[op.operation_id] = asyncio.create_task(self._watch(op))
        for op in self._state.operations.values():
            if op.cancel == "owed":  # the previous run could not send it
                self._cancels[op.operation_id] = asyncio.create_task(self._send_cancel(op))
        self._inputs.take_over()

    async def hand_over(self) -> None:
        """Before continue-as-new: the next run watches the pending operations itself, and
        the cancels in flight are this run's to finish (their operations have ended, so the
        next run would not watch them; it sends one still `owed`, to be sure)."""
        await self._inputs.hand_over()
        for watcher in self._watchers.values():
            watcher.cancel()
        if self._versions.exactly_once:
            await self.cancels_sent()

    async def end_pending(self, status: str) -> None:
        """The run ends: every pending operation is cancelled, and its job sent a cancel."""
        await asyncio.gather(*(self._end(op, status) for op in self.pending()))
        if self._versions.exactly_once:
            await self.cancels_sent()

    async def cancels_sent(self) -> None:
        """Wait until every cancel the run owes a job has been answered (or given up on)."""
        await workflow.wait_condition(lambda: all(task.done() for task in self._cancels.values()))

    def pending(self) -> list[Operation]:
        return [op for op in self._state.operations.values() if not op.terminal]

    # --- completions (the gateway's Update, or the signal fallback) ------------------------

    def validate(self, update: CompleteOperation) -> None:
        """Refuse a completion that cannot apply. Rejections add nothing to the run's history
        (and validators do not run on replay, so they may refuse more than they used to)."""
        op = self._state.operations.get(update.operation_id)
        starting = self._starting.get(update.operation_id)
        if op is None and starting is not None:
            # The job reports before its start is confirmed: held, unless it cannot apply.
            if starting.nonce_hash is not None and starting.nonce_hash != ledger.nonce_hash(
                update.nonce
            ):
                raise ApplicationError(
                    "token was not issued for this operation", type=OPERATION_NONCE_MISMATCH
                )
            held = [early.completion for early in self._early.get(update.operation_id, [])]
            if any(completion.status in ("succeeded", "failed") for completion in held):
                raise ApplicationError("a final report is already held", type=OPERATION_RESOLVED)
            if held and ledger.same_report(held[-1].status, held[-1].progress, update.completion):
                raise ApplicationError("the same report is already held", type=OPERATION_UNCHANGED)
            return
        if op is None or op.completion != "callback":
            raise ApplicationError(
                f"no operation {update.operation_id} awaits a callback in this run",
                type=OPERATION_UNKNOWN,
            )
        if op.nonce_hash != ledger.nonce_hash(update.nonce):
            raise ApplicationError(
                "token was not issued for this operation", type=OPERATION_NONCE_MISMATCH
            )
        if op.terminal:
            # Expired or cancelled ones too: their jobs were told to stop.
            raise ApplicationError(f"operation already {op.status}", type=OPERATION_RESOLVED)
        if ledger.same_report(op.status, op.progress, update.completion) and not self._asks_anew(
            op, update.completion
        ):
            raise ApplicationError(
                f"operation already shows {op.status} {op.progress or ''}".rstrip(),
                type=OPERATION_UNCHANGED,
            )

    def accept(self, update: CompleteOperation) -> CompletionOutcome:
        """A verified completion: applied once, held until its start is confirmed, or (when
        replaying a history of runs that accepted them) recorded when too late."""
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

    # --- long tools ----------------------------------------------------------------------

    async def start(self, call: ToolCall, approved_by: str | None) -> tuple[ToolResult, str]:
        """Run the tool activity for `call`: a sync tool's result, or a long tool's start.

        Returns:
            The result, and the operation id the call had (should it start a job).
        """
        # Starts still in flight count too, since the calls of one turn start concurrently (sync
        # tools among them, conservatively: the workflow does not know a tool's kind).
        in_flight = [op.tool for op in self.pending()]
        in_flight += [start.tool for start in self._starting.values()]
        operation_id = f"op_{workflow.uuid4().hex[:16]}"
        # Chosen here, not derived from a signing key, so that every token minted for the
        # operation carries it whichever key signs it, and an early report can be checked.
        nonce = self._versions.nonce() if self._versions.exactly_once else None
        self._starting[operation_id] = _Starting(
            call.name, ledger.nonce_hash(nonce) if nonce else None
        )
        try:
            result = await call_activity_tool(
                self._input, self._versions, call, operation_id, in_flight, nonce, approved_by
            )
        finally:
            self._starting.pop(operation_id, None)
        if isinstance(result, Failed):
            return ledger.error_result(
                call, f"tool {call.name} failed: {result.reason}"
            ), operation_id
        if result.operation is None and (held := self._early.pop(operation_id, None)):
            # Reports for a job the start says it did not start: nothing to apply them to.
            ledger.step(
                self._state,
                "event",
                call.name,
                f"{operation_id}: {len(held)} early reports dropped, the start failed",
                is_error=True,
            )
        return result, operation_id

    async def track(
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
            reconcile_seconds=started.reconcile_seconds,
            nonce_hash=started.nonce_hash,
            input=started.input,
        )
        self._state.operations[op.operation_id] = op
        # Reports that beat the start's answer, in the order they came.
        for early in self._early.pop(op.operation_id, []):
            if op.nonce_hash != ledger.nonce_hash(early.nonce):
                workflow.logger.warning("dropped an early completion with the wrong nonce")
            elif not op.terminal:
                self._apply(op, early.completion)
        self._watchers[op.operation_id] = asyncio.create_task(self._watch(op))
        self._board.show()
        if op.mode == "handle":
            op.reported_status = op.status
            return ToolResult(
                tool_call_id=call.id, name=call.name, content=ledger.to_json(op.handle())
            )
        kind = "webhook" if op.completion == "callback" else "poll"
        label = f"{op.tool} ({op.operation_id})"
        checkpointed = await self._memory.before_wait(label, _expected(op))
        wait = self._board.waiting(
            kind,
            f"waiting for {op.tool} ({op.job_id})",
            label,
            until=op.expires_at,
            checkpointed=checkpointed,
        )
        return await self._await_operation(call, op, wait)

    async def resume(self, call: ToolCall, parked: ParkedCall) -> ToolResult | ParkedCall:
        """Take over a call the previous run was waiting on when it continued as new."""
        ops = [self._state.operations[i] for i in parked.operation_ids]
        if parked.kind == "operation":
            op = ops[0]
            kind = "webhook" if op.completion == "callback" else "poll"
            label = f"{op.tool} ({op.operation_id})"
            wait = self._board.waiting(
                kind,
                f"waiting for {op.tool} ({op.job_id})",
                label,
                until=op.expires_at,
                began=parked.since,
            )
            return await self._await_operation(call, op, wait)
        wait = self._board.waiting(
            ledger.wait_kind(ops),
            "waiting for operations",
            f"operations {', '.join(parked.operation_ids)}",
            began=parked.since,
        )
        return await self._await_operations(call, ops, parked.deadline, wait)

    async def _await_operation(
        self, call: ToolCall, op: Operation, waiting: contextlib.AbstractContextManager[Wait]
    ) -> ToolResult | ParkedCall:
        """The outcome of an await-mode operation, as its call's result, once it has ended."""
        with waiting as wait:
            parked = ParkedCall(kind="operation", operation_ids=[op.operation_id], since=wait.began)
            with self._continuation.parked(call.id):
                await workflow.wait_condition(
                    lambda: (
                        self._ended(op)
                        or self._inputs.asks_model(op)
                        or self._continuation.turn_must_continue()
                    )
                )
            if not (self._ended(op) or self._inputs.asks_model(op)):
                wait.parked = True  # the next run goes on waiting
                return parked
        self._told(op)
        if not op.terminal:
            # Its job asks the model a question: the call answers with it, and the operation
            # goes on as a handle (the model hears of its changes between turns).
            op.mode = "handle"
            return ToolResult(
                tool_call_id=call.id, name=call.name, content=ledger.to_json(op.outcome())
            )
        return ToolResult(
            tool_call_id=call.id,
            name=call.name,
            content=ledger.to_json(op.outcome()),
            is_error=op.status != "succeeded",
        )

    # --- the built-in tools -------------------------------------------------------------

    def get_status(self, call: ToolCall) -> ToolResult:
        """`get_operation_status`: answered from the run's own state."""
        try:
            args = GetOperationStatusArgs.model_validate_json(call.arguments or "{}")
        except ValueError as err:
            return ledger.error_result(call, f"invalid arguments for {call.name}: {err}")
        op = self._state.operations.get(args.operation_id)
        if op is None:
            return ledger.error_result(call, f"no operation {args.operation_id!r} in this run")
        self._told(op)
        return ToolResult(
            tool_call_id=call.id, name=call.name, content=ledger.to_json(op.outcome())
        )

    async def wait_for(self, call: ToolCall) -> ToolResult | ParkedCall:
        """`wait_for_operations`: every op's outcome once all ended, or at the call's timeout."""
        try:
            args = WaitForOperationsArgs.model_validate_json(call.arguments or "{}")
        except ValueError as err:
            return ledger.error_result(call, f"invalid arguments for {call.name}: {err}")
        ids = args.operation_ids or [op.operation_id for op in self.pending()]
        if unknown := [i for i in ids if i not in self._state.operations]:
            return ledger.error_result(
                call, f"no such operations in this run: {', '.join(unknown)}"
            )
        ops = [self._state.operations[i] for i in ids]
        timeout = timedelta(seconds=args.timeout_seconds) if args.timeout_seconds else None
        expected = max((_expected(op) for op in ops if not op.terminal), default=timedelta(0))
        label = f"operations {', '.join(ids)}"
        checkpointed = await self._memory.before_wait(
            label, min(expected, timeout) if timeout is not None else expected
        )
        wait = self._board.waiting(
            ledger.wait_kind(ops), "waiting for operations", label, checkpointed=checkpointed
        )
        deadline = workflow.now() + timeout if timeout is not None else None
        return await self._await_operations(call, ops, deadline, wait)

    async def _await_operations(
        self,
        call: ToolCall,
        ops: list[Operation],
        deadline: datetime | None,
        waiting: contextlib.AbstractContextManager[Wait],
    ) -> ToolResult | ParkedCall:
        def done() -> bool:
            if not self._versions.hardened:
                return all(op.terminal for op in ops)
            # A question for the model ends the wait: it is the model's to answer.
            return all(self._ended(op) for op in ops) or any(
                self._asks_model_anew(op) for op in ops
            )

        with waiting as wait:
            timeout = None if deadline is None else max(deadline - workflow.now(), timedelta(0))
            try:
                if timeout != timedelta(0):
                    with self._continuation.parked(call.id):
                        await workflow.wait_condition(
                            lambda: done() or self._continuation.turn_must_continue(),
                            timeout=timeout,
                        )
                    if not done():
                        wait.parked = True  # the next run goes on waiting
                        ids = [op.operation_id for op in ops]
                        return ParkedCall(
                            kind="operations",
                            operation_ids=ids,
                            deadline=deadline,
                            since=wait.began,
                        )
            except TimeoutError:
                pass
        for op in ops:
            self._told(op)
        return ToolResult(
            tool_call_id=call.id,
            name=call.name,
            content=ledger.to_json([op.outcome() for op in ops]),
        )

    # --- between turns: the loop waits, not the model ------------------------------------

    def to_report(self) -> bool:
        """Whether an operation changed unreported, or a handle-mode one may still change."""
        return bool(self._unreported()) or any(op.mode == "handle" for op in self.pending())

    async def report(self) -> bool:
        """The model has nothing left to do but operations run: wait for one to change, then
        tell the model. False if the history grew past its limit first (a chatty job's
        progress reports): the run must continue as new, and goes on waiting in the next."""
        label = "operations to change state"
        # A wait the previous run began (and checkpointed) goes on, measured from its start.
        began, self._continuation.waiting_since = self._continuation.waiting_since, None
        if began is None:
            expected = max((_expected(op) for op in self.pending()), default=timedelta(0))
            checkpointed = await self._memory.before_wait(label, expected)
            # What it waits for is read after the checkpoint: it may have changed meanwhile.
            kind = ledger.wait_kind(self.pending())
            waiting = self._board.waiting(
                kind, "waiting for operations", label, checkpointed=checkpointed
            )
        else:
            kind = ledger.wait_kind(self.pending())
            waiting = self._board.waiting(kind, "waiting for operations", label, began=began)
        with waiting as wait:
            await workflow.wait_condition(
                lambda: bool(self._unreported()) or self._continuation.due_while_waiting()
            )
            wait.parked = not self._unreported()
        if wait.parked:
            self._continuation.waiting_since = wait.began
            return False
        changed = self._unreported()
        for op in changed:
            self._told(op)
        update = "Operation update: " + ledger.to_json([op.outcome() for op in changed])
        if self._memory.long_wait is not None:
            await self._memory.rebuild(update)
        else:
            self._memory.unsent.append(Message(role="user", content=update))
        self._state.completed.extend(
            ledger.completed_line(f"{op.tool} ({op.operation_id})", ledger.to_json(op.outcome()))
            for op in changed
        )
        return True

    def _unreported(self) -> list[Operation]:
        if self._versions.hardened:
            # An end, once its cancel (if any) was answered; a question for the model it has not
            # been told of. A question for a person is theirs: no model turn is spent on it.
            return [
                op
                for op in self._state.operations.values()
                if op.mode == "handle"
                and (
                    (self._ended(op) and op.reported_status != op.status)
                    or self._asks_model_anew(op)
                )
            ]
        return [
            op
            for op in self._state.operations.values()
            if op.mode == "handle"
            and op.reported_status != op.status
            and op.status != "running"
            # A question for a person is theirs to answer: no model turn is spent on it.
            and not (
                op.status == "input_required" and op.asking and not self._inputs.asks_model(op)
            )
        ]

    def _told(self, op: Operation) -> None:
        """The model was just shown the operation's outcome (with its open questions)."""
        op.reported_status = op.status
        op.reported_questions = [str(question["question_id"]) for question in op.asking]

    def _ended(self, op: Operation) -> bool:
        """Whether the operation has ended, as the model is told of it: in runs from HARDENED
        on, once its job's cancel (if it was sent one) was answered, so what it is told of
        the job is true (cancelled, or the cancel failed and the job may still run)."""
        return op.terminal and not (self._versions.hardened and op.cancel == "owed")

    def _asks_model_anew(self, op: Operation) -> bool:
        """Whether the operation's job asks the model a question it has not been shown."""
        return any(
            r.open
            and r.policy.answered_by == "model"
            and r.question_id not in op.reported_questions
            for r in self._state.questions.values()
            if r.operation_id == op.operation_id
        )

    # --- watching, expiry and cancel ---------------------------------------------------------

    async def _watch(self, op: Operation) -> None:
        """Wait for the job's end by callback or poll; past `expires_at`, cancel it."""
        remaining = max(op.expires_at - workflow.now(), timedelta(seconds=1))
        if op.completion == "callback" and self._versions.hardened:
            await self._reconcile(op)
            return
        if op.completion == "callback":
            try:
                await workflow.wait_condition(lambda: op.terminal, timeout=remaining)
            except TimeoutError:
                await self._end(op, "expired")
            return
        while True:
            try:
                polled = await self._poll(op, remaining)
            except ActivityError:
                return  # cancelled: the run continues as new, or ends
            if isinstance(polled, Failed) or polled.status != "input_required":
                break
            # The job asks a question (runs from MID_FLIGHT_INPUT on): recorded and routed,
            # then the poll goes on.
            if op.terminal:
                return
            self._apply(op, polled)
            remaining = max(op.expires_at - workflow.now(), timedelta(seconds=1))
        if isinstance(polled, Failed):
            if op.terminal:
                return
            err = polled.error
            # Out of time: a timeout, or a retry policy that stopped at schedule-to-close.
            out_of_time = (
                isinstance(err.cause, ActivityTimeoutError) or workflow.now() >= op.expires_at
            )
            if self._versions.hardened and (out_of_time or err.retry_state == RetryState.TIMEOUT):
                # Also a long poll whose server stopped retrying because the next check would
                # come past the expiry (failing with that check's "still running"): the job has
                # not failed, the operation's time is up.
                await self._expire(op)
                return
            if out_of_time:
                await self._end(op, "expired")
                return
            polled = Completion(
                status="failed",
                error=OperationError(code="poll_failed", message=polled.reason, retryable=True),
            )
        if not op.terminal:
            self._apply(op, polled)

    async def _poll(self, op: Operation, remaining: timedelta) -> Completion | Failed:
        interval = timedelta(seconds=op.poll_interval_seconds)
        poll = PollOperationInput(
            operation_id=op.operation_id,
            tool=op.tool,
            job_id=op.job_id,
            poll_interval_seconds=op.poll_interval_seconds,
            known_questions=self._inputs.keys(op) if self._versions.mid_flight_input else None,
        )
        summary = f"poll {op.tool} {op.job_id}"
        if interval >= LONG_POLL_INTERVAL:
            return await call(
                POLL_OPERATION,
                poll,
                result_type=Completion,
                summary=summary,
                schedule_to_close_timeout=remaining,
                start_to_close_timeout=POLL_CHECK_TIMEOUT,
                retry_policy=long_poll_retry(interval),
            )
        return await call(
            POLL_OPERATION,
            poll,
            result_type=Completion,
            summary=summary,
            schedule_to_close_timeout=remaining,
            heartbeat_timeout=poll_heartbeat(interval),
            retry_policy=poll_retry(interval),
        )

    async def _reconcile(self, op: Operation) -> None:
        """A callback operation (runs from HARDENED on): it ends by its webhook; if none came
        within `reconcile_seconds`, its job's status is checked then and every
        `reconcile_seconds` after, in case a webhook was lost (the sender gave up, the gateway
        was down), so a lost webhook costs minutes, not the timeout. Whichever of a check and a
        webhook comes first applies; the other is refused as any report of an ended operation
        is. The first wait is the timer the watcher always had; the checks are attempts of one
        activity: a check that finds the job running adds nothing to the run's history."""
        if op.reconcile_seconds and not await self._ends_within(
            op, max(timedelta(seconds=op.reconcile_seconds), RECONCILE_MIN)
        ):
            while not op.terminal and workflow.now() < op.expires_at:
                checked = await self._unless_ended(op, self._check(op, reconcile=True))
                if checked is None or op.terminal:
                    return  # its webhook came first (or the run ends)
                if isinstance(checked, Failed):
                    break  # out of time, or the checks cannot be made: the expiry decides
                # Ended; or its job asks a question whose report was lost, and checks go on.
                self._found(op, checked, "a status check")
        if not op.terminal:
            await self._expire(op)

    async def _ends_within(self, op: Operation, wait: timedelta) -> bool:
        """Whether the operation ends within `wait` (or by its expiry, if sooner)."""
        remaining = op.expires_at - workflow.now()
        if not op.terminal and remaining > timedelta(0):
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(lambda: op.terminal, timeout=min(wait, remaining))
        return op.terminal

    async def _expire(self, op: Operation) -> None:
        """The operation's time is up (runs from HARDENED on): unless its job's status says
        it ended (its report was lost, or came after the last check), it expires and its job
        is sent a cancel. A job that finished is never expired and cancelled."""
        # Until the expiry itself: checks stop early (a retry would run past it), and a poll's
        # schedule-to-close may come a little before it.
        if await self._ends_within(op, op.expires_at - workflow.now()):
            return
        checked = await self._unless_ended(op, self._check(op, reconcile=False))
        if op.terminal:
            return
        if isinstance(checked, Completion) and checked.status in ("succeeded", "failed"):
            self._found(op, checked, "the status check before its expiry")
            return
        await self._end(op, "expired")

    def _found(self, op: Operation, checked: Completion, how: str) -> None:
        """Apply what a status check found; an end is noted in the ledger and counted
        (`operation_reconciled`)."""
        self._apply(op, checked)
        if not op.terminal:
            return
        ledger.step(
            self._state,
            "event",
            op.tool,
            f"{op.operation_id} {op.status}: found by {how} (no report came)",
        )
        operation_reconciled(op)

    async def _unless_ended(
        self, op: Operation, check: Coroutine[Any, Any, Completion | Failed | None]
    ) -> Completion | Failed | None:
        """The outcome of `check`, unless the operation ends first (its webhook came): the
        check is then cancelled, and None returned."""
        checking = asyncio.create_task(check)
        try:
            await workflow.wait_condition(lambda: op.terminal or checking.done())
        finally:
            if not checking.done():
                checking.cancel()  # the watcher itself may be cancelled: the check goes too
        return checking.result() if checking.done() else None

    async def _check(self, op: Operation, *, reconcile: bool) -> Completion | Failed | None:
        """Check the job's status: every `reconcile_seconds` until it ends or the operation
        expires (`reconcile`), or once, before the operation expires. Each check is one
        attempt of one activity: the job still running is a retryable error. None if the
        check was cancelled (the operation ended meanwhile)."""
        check = PollOperationInput(
            operation_id=op.operation_id,
            tool=op.tool,
            job_id=op.job_id,
            poll_interval_seconds=op.reconcile_seconds or RECONCILE_MIN.total_seconds(),
            once=True,
            known_questions=self._inputs.keys(op),
        )
        summary = f"check {op.tool} {op.job_id} before it expires"
        until, retry = FINAL_CHECK_TIMEOUT, FINAL_CHECK_RETRY
        if reconcile:
            every = max(timedelta(seconds=check.poll_interval_seconds), RECONCILE_MIN)
            summary = f"check {op.tool} {op.job_id} every {every}"
            until = max(op.expires_at - workflow.now(), RECONCILE_MIN)
            retry = reconcile_retry(every)
        try:
            return await call(
                POLL_OPERATION,
                check,
                result_type=Completion,
                summary=summary,
                schedule_to_close_timeout=until,
                start_to_close_timeout=POLL_CHECK_TIMEOUT,
                retry_policy=retry,
            )
        except ActivityError:
            return None  # cancelled: the operation ended meanwhile, or the run is going

    def _asks_anew(self, op: Operation, completion: Completion) -> bool:
        """Whether a report asks a question the job has not asked before."""
        asked = set(self._inputs.keys(op))
        return self._versions.mid_flight_input and any(
            q.key not in asked for q in completion.questions or ()
        )

    def _apply(self, op: Operation, completion: Completion) -> None:
        op.status = completion.status
        op.progress = completion.progress or op.progress
        if completion.status in ("succeeded", "failed"):
            op.result = completion.result
            op.result_ref = completion.result_ref
            op.error = completion.error
            op.resolved_at = workflow.now()
        ledger.step(
            self._state,
            "event",
            op.tool,
            f"{op.operation_id} {op.status}",
            is_error=op.status == "failed",
        )
        if op.terminal:
            operation_finished(op)
            if self._versions.mid_flight_input:
                self._inputs.operation_ended(op)
        elif self._versions.mid_flight_input and completion.questions:
            self._inputs.ask(op, completion.questions)
        self._board.show()

    async def end(self, op: Operation, why: str) -> None:
        """Cancel an operation for a reason of the run's (a question nobody answered)."""
        await self._end(op, "cancelled", why)

    async def _end(self, op: Operation, status: str, why: str | None = None) -> None:
        """Mark an operation expired or cancelled, then ask the external system to stop it."""
        if op.terminal:
            return
        op.status = "expired" if status == "expired" else "cancelled"
        op.resolved_at = workflow.now()
        if self._versions.hardened:
            # The truth so far: the cancel is asked for; `_send_cancel` says how it went.
            reason = why or (
                f"no completion by {op.expires_at.isoformat()}"
                if op.status == "expired"
                else "the run was cancelled"
            )
            message = reason + CANCEL_ASKED
        else:
            message = why or (
                f"no completion by {op.expires_at.isoformat()}; the job was cancelled"
                if op.status == "expired"
                else "the run was cancelled; the job was cancelled"
            )
        op.error = OperationError(code=op.status, message=message, retryable=op.status == "expired")
        ledger.step(self._state, "event", op.tool, f"{op.operation_id} {op.status}", is_error=True)
        operation_finished(op)
        if self._versions.mid_flight_input:
            self._inputs.operation_ended(op)
        self._board.show()
        watcher = self._watchers.get(op.operation_id)
        if watcher is not None and watcher is not asyncio.current_task():
            watcher.cancel()
        if self._versions.exactly_once:
            # A task of its own, not the watcher's: a watcher is cancelled when the run
            # continues as new, and the cancel must outlive it (`cancels_sent`).
            op.cancel = "owed"
            self._cancels[op.operation_id] = asyncio.create_task(self._send_cancel(op))
            return
        await self._send_cancel(op)

    async def _send_cancel(self, op: Operation) -> None:
        try:
            sent = await call(
                CANCEL_OPERATION,
                CancelOperationInput(
                    operation_id=op.operation_id,
                    tool=op.tool,
                    job_id=op.job_id,
                    reason="expired" if op.status == "expired" else "cancelled",
                ),
                result_type=type(None),
                summary=f"cancel {op.tool} {op.job_id}",
                start_to_close_timeout=CANCEL_TIMEOUT,
                retry_policy=CANCEL_RETRY,
            )
        except ActivityError as err:
            # Cancelled with its watcher: only runs from before EXACTLY_ONCE, whose cancels
            # their watchers sent, lose one this way (issue 11's second defect).
            sent = Failed(err)
        if isinstance(sent, Failed):
            # The job may run on with nobody waiting for it: an orphan risk, worth an alert.
            workflow.logger.warning("could not cancel job %s: %s", op.job_id, sent.reason)
            cancel_failed(op)
        if self._versions.hardened:
            self._cancel_answered(op, sent)
        if self._versions.exactly_once:
            op.cancel = "failed" if isinstance(sent, Failed) else "sent"

    def _cancel_answered(self, op: Operation, sent: Failed | None) -> None:
        """Say in the operation's error how its job's cancel went (runs from HARDENED on): the
        model reads it in the operation's outcome, the operator in `status`."""
        if op.error is None or not op.error.message.endswith(CANCEL_ASKED):
            return
        reason = op.error.message.removesuffix(CANCEL_ASKED)
        if sent is None:
            op.error.message = reason + CANCEL_SENT
            return
        failure = ledger.preview(sent.message, 300)
        op.error.message = f"{reason}; the cancel failed ({failure}): the job may still run"
        ledger.step(
            self._state,
            "event",
            op.tool,
            f"{op.operation_id}: the cancel of job {op.job_id} failed ({failure}); "
            "the job may still run",
            is_error=True,
        )
        if op.reported_status == op.status:
            op.reported_status = None  # told of the end before the cancel failed: told again


async def call_activity_tool(
    input: RunInput,
    versions: Versions,
    tool_call: ToolCall,
    operation_id: str,
    in_flight: list[str],
    nonce: str | None,
    approved_by: str | None,
) -> ToolResult | Failed:
    """The `call_tool` activity: a sync tool's result, or a long tool's start."""
    # Runs from CHECKPOINT_POLICY on let the activity read these from its own info (the
    # operation's id is the activity's, which the Web UI shows).
    recorded = not versions.checkpoint_policy
    return await call(
        CALL_TOOL,
        ToolCallInput(
            call=tool_call,
            workflow_id=workflow.info().workflow_id if recorded else None,
            operation_id=operation_id if recorded else None,
            started_at=workflow.now() if recorded else None,
            in_flight=in_flight.count(tool_call.name),
            run_in_flight=len(in_flight),
            run_max_in_flight=input.max_in_flight,
            approved_by=approved_by,
            operation_timeout=input.operation_timeout,
            operation_mode=input.operation_mode,
            nonce=nonce,
            mcp_listing=(
                input.mcp_listing.ref
                if input.mcp_listing is not None and SEPARATOR in tool_call.name
                else None
            ),
        ),
        result_type=ToolResult,
        summary=f"tool {tool_call.name}",
        start_to_close_timeout=input.tool_timeout,
        retry_policy=TOOL_RETRY,
        activity_id=None if recorded else operation_id,
    )


def _expected(op: Operation) -> timedelta:
    """How long an operation is expected to take: its eta, or else all the time it has."""
    if op.eta_seconds is not None:
        return timedelta(seconds=op.eta_seconds)
    return op.expires_at - op.started_at
