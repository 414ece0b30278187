"""An operation's job, as the run deals with its system: started (the tool activity), watched
until it ends (webhook, poll, status checks), expired, and sent a cancel.

A watcher waits for a job's end by webhook (the gateway's `complete_operation` Update, applied
by the operations book) or by a polling activity, and past `expires_at` marks the operation
expired and has the external system cancel the job. A callback job's status is also checked
every so often, in case its webhook was lost, and every job's once more before its expiry acts
(a job that finished is never expired and cancelled); the model hears of an operation's end
once its cancel was answered, and is told the truth of it (a cancel that failed: the job may
still run).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, RetryState
from temporalio.exceptions import TimeoutError as ActivityTimeoutError

from waitstate.schemas import RunInput, RunState, ToolCall, ToolCallInput, ToolResult
from waitstate.schemas.builtin import MCP_SEPARATOR as SEPARATOR
from waitstate.schemas.errors import OPERATION_NOT_CHECKED
from waitstate.schemas.operations import (
    LONG_POLL_INTERVAL,
    CancelOperationInput,
    Completion,
    Operation,
    OperationError,
    PolledCompletion,
    PollOperationInput,
)
from waitstate.schemas.questions import QuestionRequest
from waitstate.schemas.run import CALL_TOOL, CANCEL_OPERATION, POLL_OPERATION

from . import ledger
from .activity_calls import Failed, call
from .board import StatusBoard
from .metrics import cancel_failed, operation_finished, operation_reconciled
from .policies import (
    CANCEL_RETRY,
    CANCEL_TIMEOUT,
    FINAL_CHECK_RETRY,
    FINAL_CHECK_TIMEOUT,
    POLL_CHECK_TIMEOUT,
    RECONCILE_CHECK_TIMEOUT,
    RECONCILE_MIN,
    TOOL_HEARTBEAT,
    TOOL_RETRY,
    long_poll_retry,
    poll_heartbeat,
    poll_retry,
    reconcile_retry,
)
from .questions import QuestionDesk

# What an ended operation's error says of its job's cancel, while it is asked and once answered.
CANCEL_ASKED = "; the job was asked to stop (a cancel was sent, not yet confirmed)"
CANCEL_SENT = "; the job was cancelled"
# How many times one run checks an operation's job when asked to (`Jobs.ask`), besides its
# reconcile checks: each ask adds an Update and a check to the run's history.
MAX_CHECK_ASKS = 10
ASKED_CHECK = "a status check its system's report asked for"


class Jobs:
    """The jobs of one run's operations: watched, ended and cancelled. What their systems
    report is applied here to the operations in the run's state; the operations book reads
    that state (it never hands this part anything but operations)."""

    def __init__(self, state: RunState, board: StatusBoard, desk: QuestionDesk) -> None:
        self._state = state
        self._board = board
        self._desk = desk
        self._watchers: dict[str, asyncio.Task[None]] = {}
        # The questions the jobs asked, each attended to until answered (by question id).
        self._questions: dict[str, asyncio.Task[None]] = {}
        # Cancels sent to jobs (by operation id): a run ends or continues only once they are.
        self._cancels: dict[str, asyncio.Task[None]] = {}
        # Checks asked for (`ask`) and not yet begun, and how many each operation was asked.
        self._asked: set[str] = set()
        self._asks: dict[str, int] = {}

    def take_over(self) -> None:
        """Watch the operations a previous run handed over, send the cancels it owed, and
        attend to its questions."""
        for op in self._state.operations.values():
            if not op.terminal:
                self.watch(op)
        for op in self._state.operations.values():
            if op.cancel == "owed":  # the previous run could not send it
                self._cancels[op.operation_id] = asyncio.create_task(self._send_cancel(op))
        for request in self._desk.taken_over():
            self._attend(self._state.operations[request.operation_id], [request])

    def watch(self, op: Operation) -> None:
        """Watch a started job until it ends (or its operation expires)."""
        self._watchers[op.operation_id] = asyncio.create_task(self._watch(op))

    def stop_watching(self) -> None:
        """Before continue-as-new: the next run attends to the open questions and watches the
        pending operations itself."""
        for attendant in self._questions.values():
            attendant.cancel()
        for watcher in self._watchers.values():
            watcher.cancel()

    def ended(self, op: Operation) -> bool:
        """Whether the operation has ended, as the model is told of it: once
        its job's cancel (if it was sent one) was answered, so what it is told of
        the job is true (cancelled, or the cancel failed and the job may still run)."""
        return op.terminal and op.cancel != "owed"

    async def cancels_sent(self) -> None:
        """Wait until every cancel the run owes a job has been answered (or given up on)."""
        await workflow.wait_condition(lambda: all(task.done() for task in self._cancels.values()))

    def may_ask(self, operation_id: str) -> None:
        """Refuse a check asked for while one is (its watcher has not begun it yet), or past
        `MAX_CHECK_ASKS` in this run: a sender, even one holding the token, bounds what its
        pushes add to the run's history."""
        if operation_id in self._asked:
            raise ApplicationError(
                "a check of its job is asked already", type=OPERATION_NOT_CHECKED
            )
        if self._asks.get(operation_id, 0) >= MAX_CHECK_ASKS:
            raise ApplicationError(
                f"its job's status was asked to be checked {MAX_CHECK_ASKS} times already; "
                "it is checked every reconcile interval",
                type=OPERATION_NOT_CHECKED,
            )

    def ask(self, operation_id: str) -> None:
        """Check the operation's job now (`may_ask` said it may be asked)."""
        self._asked.add(operation_id)
        self._asks[operation_id] = self._asks.get(operation_id, 0) + 1

    async def _watch(self, op: Operation) -> None:
        """Wait for the job's end by callback or poll; past `expires_at`, cancel it."""
        remaining = max(op.expires_at - workflow.now(), timedelta(seconds=1))
        if op.completion == "callback":
            await self._reconcile(op)
            return
        while True:
            try:
                polled = await self._poll(op, remaining)
            except ActivityError:
                return  # cancelled: the run continues as new, or ends
            if isinstance(polled, Failed) or polled.status != "input_required":
                break
            # The job asks a question: recorded and routed,
            # then the poll goes on.
            if op.terminal:
                return
            self.apply(op, polled)
            remaining = max(op.expires_at - workflow.now(), timedelta(seconds=1))
        if isinstance(polled, Failed):
            if op.terminal:
                return
            err = polled.error
            # Out of time: a timeout, or a retry policy that stopped at schedule-to-close.
            out_of_time = (
                isinstance(err.cause, ActivityTimeoutError) or workflow.now() >= op.expires_at
            )
            if out_of_time or err.retry_state == RetryState.TIMEOUT:
                # Also a long poll whose server stopped retrying because the next check would
                # come past the expiry (failing with that check's "still running"): the job has
                # not failed, the operation's time is up.
                await self._expire(op)
                return
            if out_of_time:
                await self.end(op, "expired")
                return
            polled = Completion(
                status="failed",
                error=OperationError(code="poll_failed", message=polled.reason, retryable=True),
            )
        if not op.terminal:
            self.apply(op, polled)

    async def _poll(self, op: Operation, remaining: timedelta) -> Completion | Failed:
        interval = timedelta(seconds=op.poll_interval_seconds)
        poll = PollOperationInput(
            **ledger.job_of(op),
            poll_interval_seconds=op.poll_interval_seconds,
            known_questions=self._desk.keys(op),
            model=self._state.model or None,  # answers an MCP server's sampling, if allowed
        )
        # A long interval: each check one attempt; a short one: a heartbeating loop.
        timing: dict[str, Any] = (
            {
                "start_to_close_timeout": POLL_CHECK_TIMEOUT,
                "retry_policy": long_poll_retry(interval),
            }
            if interval >= LONG_POLL_INTERVAL
            else {
                "heartbeat_timeout": poll_heartbeat(interval),
                "retry_policy": poll_retry(interval),
            }
        )
        polled = await call(
            POLL_OPERATION,
            poll,
            result_type=PolledCompletion,
            summary=f"poll {op.tool} {op.job_id}",
            schedule_to_close_timeout=remaining,
            **timing,
        )
        if isinstance(polled, PolledCompletion) and polled.usage is not None:
            ledger.spent(self._state, polled.usage)  # the run's model, answering the job
        return polled

    async def _reconcile(self, op: Operation) -> None:
        """A callback operation: it ends by its webhook; if none came
        within `reconcile_seconds`, its job's status is checked then and every
        `reconcile_seconds` after, in case a webhook was lost (the sender gave up, the gateway
        was down), so a lost webhook costs minutes, not the timeout. Whichever of a check and a
        webhook comes first applies; the other is refused as any report of an ended operation
        is. The first wait is the timer the watcher always had; the checks are attempts of one
        activity: a check that finds the job running adds nothing to the run's history."""
        if op.reconcile_seconds and not await self._ends_within(
            op, max(timedelta(seconds=op.reconcile_seconds), RECONCILE_MIN), or_asked=True
        ):
            while not op.terminal and workflow.now() < op.expires_at:
                checked, asked = await self._checked(op)
                if checked is None or op.terminal:
                    return  # its webhook came first (or the run ends)
                if isinstance(checked, Failed):
                    break  # out of time, or the checks cannot be made: the expiry decides
                # Ended; or its job asks a question whose report was lost, and checks go on.
                self._found(op, checked, ASKED_CHECK if asked else "a status check")
        if not op.terminal:
            await self._expire(op)

    async def _ends_within(self, op: Operation, wait: timedelta, *, or_asked: bool = False) -> bool:
        """Whether the operation ends within `wait` (or by its expiry, if sooner); with
        `or_asked`, the wait also ends once a check is asked for (`ask`)."""
        remaining = op.expires_at - workflow.now()
        if not op.terminal and remaining > timedelta(0):
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(
                    lambda: op.terminal or (or_asked and op.operation_id in self._asked),
                    timeout=min(wait, remaining),
                )
        return op.terminal

    async def _checked(self, op: Operation) -> tuple[Completion | Failed | None, bool]:
        """What the reconcile checks find (as `_unless_ended`), and whether a check asked for
        found it: an ask (the job's system said it ended, without its result) cancels the
        checks waiting to try again and begins them anew, the first at once. With no ask, the
        commands are as before asks were possible: those runs' histories replay as they ran."""
        asked = op.operation_id in self._asked
        while True:
            self._asked.discard(op.operation_id)
            checking = self._check(op, reconcile=True)
            checked = await self._unless_ended(op, checking, or_asked=True)
            if checked is not None or op.terminal or op.operation_id not in self._asked:
                return checked, asked
            asked = True

    async def _expire(self, op: Operation) -> None:
        """The operation's time is up: unless its job's status says
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
        await self.end(op, "expired")

    def _found(self, op: Operation, checked: Completion, how: str) -> None:
        """Apply what a status check found; an end is noted in the ledger and counted
        (`operation_reconciled`)."""
        self.apply(op, checked)
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
        self,
        op: Operation,
        check: Coroutine[Any, Any, Completion | Failed | None],
        *,
        or_asked: bool = False,
    ) -> Completion | Failed | None:
        """The outcome of `check`, unless the operation ends first (its webhook came), or
        (`or_asked`) a check is asked for: the check is then cancelled, and None returned."""
        checking = asyncio.create_task(check)
        asked = self._asked
        try:
            await workflow.wait_condition(
                lambda: op.terminal or checking.done() or (or_asked and op.operation_id in asked)
            )
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
            **ledger.job_of(op),
            poll_interval_seconds=op.reconcile_seconds or RECONCILE_MIN.total_seconds(),
            once=True,
            known_questions=self._desk.keys(op),
        )
        summary = f"check {op.tool} {op.job_id} before it expires"
        until, retry, each = FINAL_CHECK_TIMEOUT, FINAL_CHECK_RETRY, POLL_CHECK_TIMEOUT
        if reconcile:
            each = RECONCILE_CHECK_TIMEOUT
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
                start_to_close_timeout=each,
                retry_policy=retry,
            )
        except ActivityError:
            return None  # cancelled: the operation ended meanwhile, or the run is going

    def apply(self, op: Operation, completion: Completion) -> None:
        """Apply a report of the job (a webhook's, a poll's or a status check's)."""
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
            self._desk.operation_ended(op)
        elif completion.questions:
            self._attend(op, self._desk.ask(op, completion.questions))
        self._board.show()

    def _attend(self, op: Operation, requests: list[QuestionRequest]) -> None:
        """Attend to the questions of an operation, each in a task of its own (the question desk
        waits for its answer and delivers it); one nobody answered may cancel the operation."""
        for request in requests:
            self._questions[request.question_id] = asyncio.create_task(
                self._attend_one(op, request)
            )

    async def _attend_one(self, op: Operation, request: QuestionRequest) -> None:
        async for why in self._desk.attend(op, request):
            await self.end(op, "cancelled", why)

    async def end(self, op: Operation, status: str, why: str | None = None) -> None:
        """Mark an operation expired or cancelled, then ask the external system to stop it."""
        if op.terminal:
            return
        op.status = "expired" if status == "expired" else "cancelled"
        op.resolved_at = workflow.now()
        # The truth so far: the cancel is asked for; `_send_cancel` says how it went.
        reason = why or (
            f"no completion by {op.expires_at.isoformat()}"
            if op.status == "expired"
            else "the run was cancelled"
        )
        message = reason + CANCEL_ASKED
        op.error = OperationError(code=op.status, message=message, retryable=op.status == "expired")
        ledger.step(self._state, "event", op.tool, f"{op.operation_id} {op.status}", is_error=True)
        operation_finished(op)
        self._desk.operation_ended(op)
        self._board.show()
        watcher = self._watchers.get(op.operation_id)
        if watcher is not None and watcher is not asyncio.current_task():
            watcher.cancel()
        # A task of its own, not the watcher's: a watcher is cancelled when the run
        # continues as new, and the cancel must outlive it (`cancels_sent`).
        op.cancel = "owed"
        self._cancels[op.operation_id] = asyncio.create_task(self._send_cancel(op))

    async def _send_cancel(self, op: Operation) -> None:
        try:
            sent = await call(
                CANCEL_OPERATION,
                CancelOperationInput(
                    **ledger.job_of(op),
                    reason="expired" if op.status == "expired" else "cancelled",
                ),
                result_type=type(None),
                summary=f"cancel {op.tool} {op.job_id}",
                start_to_close_timeout=CANCEL_TIMEOUT,
                retry_policy=CANCEL_RETRY,
            )
        except ActivityError as err:
            # Cancelled (the run ended meanwhile): the cancel is given up on.
            sent = Failed(err)
        if isinstance(sent, Failed):
            # The job may run on with nobody waiting for it: an orphan risk, worth an alert.
            workflow.logger.warning("could not cancel job %s: %s", op.job_id, sent.reason)
            cancel_failed(op)
        self._cancel_answered(op, sent)
        op.cancel = "failed" if isinstance(sent, Failed) else "sent"

    def _cancel_answered(self, op: Operation, sent: Failed | None) -> None:
        """Say in the operation's error how its job's cancel went: the
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
    tool_call: ToolCall,
    operation_id: str,
    in_flight: list[str],
    nonce: str,
    approved_by: str | None,
) -> ToolResult | Failed:
    """The `call_tool` activity: a sync tool's result, or a long tool's start (named after
    `tool_call`, which the activity leaves to the run)."""
    result = await call(
        CALL_TOOL,
        ToolCallInput(
            call=tool_call,
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
        heartbeat_timeout=TOOL_HEARTBEAT,
        retry_policy=TOOL_RETRY,
        # The activity reads the workflow id and its start from its own info; the operation's
        # id is the activity's, which the Web UI shows.
        activity_id=operation_id,
    )
    if isinstance(result, Failed):
        return result
    return result.model_copy(update={"tool_call_id": tool_call.id, "name": tool_call.name})


def expected_duration(op: Operation) -> timedelta:
    """How long an operation is expected to take: its eta, or else all the time it has."""
    if op.eta_seconds is not None:
        return timedelta(seconds=op.eta_seconds)
    return op.expires_at - op.started_at
