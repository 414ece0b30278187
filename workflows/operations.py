"""The operations book: long tools' operations from their start to their end, as one run keeps
them and tells the model of them.

A start activity returns an operation, whose job `Jobs` (workflows/jobs.py) watches until it
ends. The book holds reports that beat the start's answer, in order, until the start is
confirmed; answers `get_operation_status` and `wait_for_operations`; and between turns waits
for an operation to change and tells the model (a question for the model ends a wait for operations too).
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime, timedelta
from typing import NamedTuple

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from waitstate.schemas import Message, ToolCall, ToolResult
from waitstate.schemas.builtin import GetOperationStatusArgs, WaitForOperationsArgs
from waitstate.schemas.errors import (
    OPERATION_NONCE_MISMATCH,
    OPERATION_NOT_CHECKED,
    OPERATION_RESOLVED,
    OPERATION_UNCHANGED,
    OPERATION_UNKNOWN,
)
from waitstate.schemas.operations import (
    CheckOperation,
    CheckOutcome,
    CompleteOperation,
    Completion,
    CompletionOutcome,
    Operation,
    OperationStarted,
)
from waitstate.schemas.run import CarriedTurn, ParkedCall

from . import ledger
from .activity_calls import Failed
from .continuation import KEEP_CLOSED, Continuation
from .desk import new_nonce
from .jobs import Jobs, call_activity_tool, expected_duration
from .memory import Wait
from .parts import Part, RunParts
from .questions import QuestionDesk
from .thread import Conversation


class _Starting(NamedTuple):
    """A long tool's start in flight: the tool, and the hash of the nonce its token carries."""

    tool: str
    nonce_hash: str


class OperationsBook(Part):
    """Every operation of one run: started, watched (by `Jobs`), reported, ended."""

    def __init__(
        self,
        run: RunParts,
        continuation: Continuation,
        questions: QuestionDesk,
        thread: Conversation,
    ) -> None:
        super().__init__(run)
        self._continuation = continuation
        self._questions = questions
        self._thread = thread
        self._jobs = Jobs(run.state, run.board, questions)
        # A webhook can beat the start activity's answer (the job finished fast, or the worker
        # died after the external system accepted it): its reports wait here, in order, until
        # the start is confirmed; then each is applied.
        self._starting: dict[str, _Starting] = {}  # by operation id, while its start runs
        self._early: dict[str, list[CompleteOperation]] = {}

    # --- the run's life ------------------------------------------------------------------

    def take_over(self) -> None:
        """Watch the operations a previous run handed over, send the cancels it owed, and take
        over its questions."""
        self._jobs.take_over()

    async def hand_over(self) -> None:
        """Before continue-as-new: the next run watches the pending operations itself, and
        the cancels in flight are this run's to finish (their operations have ended, so the
        next run would not watch them; it sends one still `owed`, to be sure)."""
        await self._questions.hand_over()
        self._jobs.stop_watching()
        await self._jobs.cancels_sent()

    def trim(self, turn: CarriedTurn | None) -> None:
        """Bound what continue-as-new carries of the operations: every open one, the ones an
        unfinished turn waits on, and the latest `KEEP_CLOSED` closed ones."""
        parked = turn.parked.values() if turn else []
        keep = {i for call in parked for i in call.operation_ids}
        ops = self._state.operations
        closed = [k for k, op in ops.items() if op.terminal and k not in keep][:-KEEP_CLOSED]
        for key in closed:
            del ops[key]

    async def end_pending(self, status: str) -> None:
        """The run ends: every pending operation is cancelled, and its job sent a cancel."""
        await asyncio.gather(*(self._jobs.end(op, status) for op in self.pending()))
        await self._jobs.cancels_sent()

    def pending(self) -> list[Operation]:
        return [op for op in self._state.operations.values() if not op.terminal]

    # --- completions (the gateway's Update, or the signal fallback) ------------------------

    def validate(self, update: CompleteOperation) -> None:
        """Refuse a completion that cannot apply. Rejections add nothing to the run's history
        (and validators do not run on replay, so they may refuse more than they used to)."""
        op = self._addressed(update.operation_id, update.nonce)
        if op is None:
            # The job reports before its start is confirmed: held, unless it cannot apply.
            held = [early.completion for early in self._early.get(update.operation_id, [])]
            if any(completion.status in ("succeeded", "failed") for completion in held):
                raise ApplicationError("a final report is already held", type=OPERATION_RESOLVED)
            if held and ledger.same_report(held[-1].status, held[-1].progress, update.completion):
                raise ApplicationError("the same report is already held", type=OPERATION_UNCHANGED)
            return
        if ledger.same_report(op.status, op.progress, update.completion) and not self._asks_anew(
            op, update.completion
        ):
            raise ApplicationError(
                f"operation already shows {op.status} {op.progress or ''}".rstrip(),
                type=OPERATION_UNCHANGED,
            )

    def _addressed(self, operation_id: str, nonce: str) -> Operation | None:
        """The callback operation a token's report or ask is for (None while its start is in
        flight), refused if the run has none such, the token's nonce is not its, or it ended
        (expired or cancelled too: its job was told to stop)."""
        op = self._state.operations.get(operation_id)
        starting = self._starting.get(operation_id)
        nonce_hash: str | None
        if op is None and starting is not None:
            nonce_hash = starting.nonce_hash
        elif op is not None and op.completion == "callback":
            nonce_hash = op.nonce_hash
        else:
            raise ApplicationError(
                f"no operation {operation_id} awaits a callback in this run",
                type=OPERATION_UNKNOWN,
            )
        if nonce_hash != ledger.nonce_hash(nonce):
            raise ApplicationError(
                "token was not issued for this operation", type=OPERATION_NONCE_MISMATCH
            )
        if op is not None and op.terminal:
            raise ApplicationError(f"operation already {op.status}", type=OPERATION_RESOLVED)
        return op

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
        self._jobs.apply(op, update.completion)
        return CompletionOutcome(applied=True, status=op.status, delivery_id=update.delivery_id)

    # --- checks asked for (the gateway's Update, when a job said it ended without its result)

    def validate_check(self, ask: CheckOperation) -> None:
        """Refuse a request to check an operation's job now that cannot apply (as a completion
        would be refused), or that the run would not act on: its job is polled or never
        checked before its expiry, a check is asked already, or it was asked too often."""
        op = self._addressed(ask.operation_id, ask.nonce)
        if op is not None and not op.reconcile_seconds:
            raise ApplicationError(
                "its tool checks its job only before the operation expires",
                type=OPERATION_NOT_CHECKED,
            )
        self._jobs.may_ask(ask.operation_id)

    def ask_check(self, ask: CheckOperation) -> CheckOutcome:
        """A verified request to check an operation's job now: its watcher checks at once (a
        check it was waiting to retry begins again), or, before its start is confirmed, as
        soon as it watches."""
        self._jobs.ask(ask.operation_id)
        return CheckOutcome(operation_id=ask.operation_id, checking=True)

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
        nonce = new_nonce()
        self._starting[operation_id] = _Starting(call.name, ledger.nonce_hash(nonce))
        try:
            result = await call_activity_tool(
                self._input, call, operation_id, in_flight, nonce, approved_by
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
        # Everything the start said of the job, as it said it, and the run's own bookkeeping.
        op = Operation(
            **dict(started),
            operation_id=operation_id,
            tool=call.name,
            tool_call_id=call.id,
            turn=self._state.turns,
            started_at=workflow.now(),
        )
        self._state.operations[op.operation_id] = op
        # Reports that beat the start's answer, in the order they came.
        for early in self._early.pop(op.operation_id, []):
            if op.nonce_hash != ledger.nonce_hash(early.nonce):
                workflow.logger.warning("dropped an early completion with the wrong nonce")
            elif not op.terminal:
                self._jobs.apply(op, early.completion)
        self._jobs.watch(op)
        self._board.show()
        if op.mode == "handle":
            op.reported_status = op.status
            return ToolResult(
                tool_call_id=call.id, name=call.name, content=ledger.to_json(op.handle())
            )
        kind = "webhook" if op.completion == "callback" else "poll"
        label = f"{op.tool} ({op.operation_id})"
        checkpointed = await self._memory.before_wait(label, expected_duration(op))
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
                        self._jobs.ended(op)
                        or self._questions.asks_model(op)
                        or self._thread.wakes()
                        or self._continuation.turn_must_continue()
                    )
                )
            if not (self._jobs.ended(op) or self._questions.asks_model(op) or self._thread.wakes()):
                wait.parked = True  # the next run goes on waiting
                return parked
            self._thread.woke()
        self._told(op)
        if not op.terminal:
            # A question for the model, or a thread's message: the call answers with where the
            # job stands, and it goes on as a handle (the model hears of it between turns).
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
        named = ledger.named(call, GetOperationStatusArgs, self._state.operations, "operation")
        if isinstance(named, ToolResult):
            return named
        _, op = named
        self._told(op)
        return ToolResult(
            tool_call_id=call.id, name=call.name, content=ledger.to_json(op.outcome())
        )

    async def wait_for(self, call: ToolCall) -> ToolResult | ParkedCall:
        """`wait_for_operations`: every op's outcome once all ended, or at the call's timeout."""
        args = ledger.arguments(call, WaitForOperationsArgs)
        if isinstance(args, ToolResult):
            return args
        ids = args.operation_ids or [op.operation_id for op in self.pending()]
        if unknown := [i for i in ids if i not in self._state.operations]:
            return ledger.error_result(
                call, f"no such operations in this run: {', '.join(unknown)}"
            )
        ops = [self._state.operations[i] for i in ids]
        timeout = timedelta(seconds=args.timeout_seconds) if args.timeout_seconds else None
        expected = max(
            (expected_duration(op) for op in ops if not op.terminal), default=timedelta(0)
        )
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
            # A question for the model ends the wait: it is the model's to answer.
            return (
                all(self._jobs.ended(op) for op in ops)
                or any(self._asks_model_anew(op) for op in ops)
                or self._thread.wakes()
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
        self._thread.woke()
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
            expected = max((expected_duration(op) for op in self.pending()), default=timedelta(0))
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
                lambda: (
                    bool(self._unreported())
                    or self._continuation.due_while_waiting()
                    or self._thread.steering()
                )
            )
            wait.parked = not (self._unreported() or self._thread.steering())
        if wait.parked:
            self._continuation.waiting_since = wait.began
            return False
        if self._thread.steering():  # a thread's message first (the caller answers it aside)
            return True
        changed = self._unreported()
        for op in changed:
            self._told(op)
        update = "Operation update: " + ledger.to_json([op.outcome() for op in changed])
        if self._memory.long_wait is not None:
            await self._memory.rebuild(update)
        else:
            self._memory.unsent.append(Message(role="user", content=update))
        ledger.add_completed(
            self._state,
            (
                ledger.completed_line(
                    f"{op.tool} ({op.operation_id})", ledger.to_json(op.outcome())
                )
                for op in changed
            ),
        )
        return True

    def _unreported(self) -> list[Operation]:
        # An end, once its cancel (if any) was answered; a question for the model it has not
        # been told of. A question for a person is theirs: no model turn is spent on it.
        return [
            op
            for op in self._state.operations.values()
            if op.mode == "handle"
            and (
                (self._jobs.ended(op) and op.reported_status != op.status)
                or self._asks_model_anew(op)
            )
        ]

    def _told(self, op: Operation) -> None:
        """The model was just shown the operation's outcome (with its open questions)."""
        op.reported_status = op.status
        op.reported_questions = [str(question["question_id"]) for question in op.asking]

    def _asks_model_anew(self, op: Operation) -> bool:
        """Whether the operation's job asks the model a question it has not been shown."""
        return any(
            r.open
            and r.policy.answered_by == "model"
            and r.question_id not in op.reported_questions
            for r in self._state.questions.values()
            if r.operation_id == op.operation_id
        )

    def _asks_anew(self, op: Operation, completion: Completion) -> bool:
        """Whether a report asks a question the job has not asked before."""
        asked = set(self._questions.keys(op))
        return any(q.key not in asked for q in completion.questions or ())
