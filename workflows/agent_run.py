"""AgentRunWorkflow: one agent run, from task to answer, as a Temporal workflow."""

from __future__ import annotations

import asyncio
from typing import NoReturn

from temporalio import workflow
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    RetryState,
    is_cancelled_exception,
)

with workflow.unsafe.imports_passed_through():
    # Everything but this story is passed through: loaded once per worker, not once per run.
    from waitstate.names import AGENT_RUN
    from waitstate.schemas import (
        Message,
        ModelCallInput,
        ModelResponse,
        RunInput,
        RunResult,
        RunState,
        RunStatus,
        ToolCall,
        ToolResult,
    )
    from waitstate.schemas.approvals import DecideInput, DecideOutcome, DecisionSignal
    from waitstate.schemas.builtin import (
        ANSWER_QUESTION,
        GET_OPERATION_STATUS,
        READ_REF,
        REF_PREFIX,
        REQUEST_APPROVAL,
        WAIT_FOR_OPERATIONS,
    )
    from waitstate.schemas.builtin import MCP_SEPARATOR as SEPARATOR
    from waitstate.schemas.errors import RUN_FAILED
    from waitstate.schemas.operations import (
        CheckOperation,
        CheckOutcome,
        CompleteOperation,
        CompletionOutcome,
    )
    from waitstate.schemas.pushes import PushConfigChange, PushConfigs
    from waitstate.schemas.questions import AnswerInput, AnswerOutcome
    from waitstate.schemas.run import CALL_MODEL, OUTPUT_INVALID, CarriedTurn, ParkedCall
    from waitstate.schemas.threads import MessageAccepted, SendMessage
    from waitstate.schemas.tree import BudgetAnswer, BudgetAsk

    from . import ledger
    from .activity_calls import Failed
    from .approvals import ApprovalDesk, ApprovalExpired
    from .asides import ApprovalAsides
    from .background import BackgroundReplies
    from .board import StatusBoard
    from .budgets import BudgetExceeded, Budgets
    from .continuation import Continuation
    from .forks import Fork
    from .memory import Memory
    from .opening import Opening
    from .operations import OperationsBook
    from .outages import StoreDown, StoreOutages
    from .parts import RunParts
    from .plan import Plan
    from .policies import MODEL_RETRY, model_call
    from .pushes import Pushes
    from .questions import QuestionDesk
    from .thread import Conversation, Interrupted, MessageFailed
    from .tree import SubAgents


@workflow.defn(name=AGENT_RUN)
class AgentRunWorkflow:
    """Calls the model, runs the tools it asks for, and repeats until an answer or max_turns:
    a long tool's job (a webhook, a poll) and a sub-agent's run are waited for holding no
    worker, never by the model."""

    # Every run gets its handlers after its resolutions (the worker's runner,
    # waitstate/activation_order.py).
    handlers_last = True

    @workflow.init
    def __init__(self, input: RunInput) -> None:
        self._plan = Plan(input)  # resolved once, by the opening
        # Continued as new: the ledger, the conversation and pending operations go on.
        self._state = input.carry.state if input.carry else ledger.first_state(input)
        self._memory = Memory(self._plan, self._state)
        self._board = StatusBoard(self._state, self._memory)
        self._continuation = Continuation(self._plan, self._state, self._memory)
        run = RunParts(self._plan, self._state, self._memory, self._board)
        self._questions = QuestionDesk(run)
        self._thread = Conversation(run)
        self._ops = OperationsBook(run, self._continuation, self._questions, self._thread)
        self._asides = ApprovalAsides(run, self._thread)
        self._approvals = ApprovalDesk(run, self._asides)
        self._fork = Fork(run, self._approvals)
        self._budget = Budgets(self._plan, self._state, self._approvals)
        self._outages = StoreOutages(self._state, self._board)
        self._opening = Opening(self._plan, self._state, self._board, self._outages, self._memory)
        self._background = BackgroundReplies(self._plan, self._state)
        self._tree = SubAgents(run)
        self._pushes = Pushes(self._plan, self._state)  # an A2A task's webhooks, if it has any

    @property
    def _input(self) -> RunInput:
        """The run's input, as resolved (see `Plan`)."""
        return self._plan.input

    @workflow.run
    async def run(self, input: RunInput) -> RunResult:
        self._board.set_status("running")
        self._ops.take_over()  # what a previous run handed over
        self._pushes.start()
        # A run continued while it waited for operations goes back to waiting, not to the model.
        answer = input.carry.answer if input.carry else None
        try:
            await self._opening.open()
            if input.carry and input.carry.turn:  # continued in the middle of a turn
                await self._run_tools(input.carry.turn.calls, input.carry.turn)
            while True:  # a task is answered once; a thread answers each message in turn
                if self._thread.on and not await self._thread.begin():  # closed: no message
                    return await self._finish("completed", self._state.final_output)
                result = await self._answer(answer)
                if result is not None:
                    return result
                answer = None
                if self._continuation.due() or self._thread.run_is_full():
                    await self._continue_as_new()
        except (asyncio.CancelledError, ActivityError) as err:
            if is_cancelled_exception(err):
                await self._ops.end_pending("cancelled")
                self._board.set_status("cancelled")
                await self._pushes.last()
            raise
        except ApplicationError:  # it fails (its status says so): its client is told
            await self._pushes.last()
            raise

    async def _answer(self, answer: str | None) -> RunResult | None:
        """The turns to an answer (`answer`: one given before the run continued as new): the
        run's result, or None once a thread's message is answered or ended without one."""
        try:
            while self._state.turns < self._thread.turn_limit():
                if answer is None:
                    if self._continuation.due():
                        await self._continue_as_new()
                    try:
                        reply = await self._call_model()
                    except Interrupted:  # a thread's message joined the turn: call again
                        continue
                    if reply.tool_calls:
                        await self._run_tools(reply.tool_calls)
                        continue
                    if self._memory.unsent:  # the answer went back to the model to be corrected
                        continue
                    answer = reply.content
                if not self._ops.to_report():
                    if not self._thread.on:
                        return await self._finish("completed", answer)
                    self._thread.replied(answer)
                    return None
                if self._continuation.due() or not await self._ops.report():
                    await self._continue_as_new(answer)
                if self._thread.steering():  # a message came meanwhile: answered, the wait on
                    await self._aside()
                    continue
                answer = None
            if not self._thread.on:
                return await self._finish(ledger.out_of_turns(self._state), None)
            self._thread.out_of_turns()
            return None
        except (ApprovalExpired, BudgetExceeded) as ended:  # the run ends (a message fails)
            if not self._thread.on:
                ledger.failed(self._state, str(ended))
                return await self._finish(ended.status, None)
            self._thread.replied(None, "failed", str(ended))
            return None
        except MessageFailed:
            return None

    async def _aside(self) -> None:
        """Steering: a thread's message that came while the turn waits for operations gets a turn
        of its own, whose answer is its reply; the wait, and the earlier message's, go on."""
        self._thread.take_aside()
        try:
            while self._state.turns < self._thread.turn_limit():
                reply = await self._call_model()
                if reply.tool_calls:
                    await self._run_tools(reply.tool_calls)
                elif not self._memory.unsent:
                    return self._thread.replied(reply.content)
            self._thread.out_of_turns()
        except (ApprovalExpired, BudgetExceeded, MessageFailed) as err:
            self._thread.replied(None, "failed", str(err))
        finally:
            self._thread.end_aside()

    # --- handlers: what people and external systems send the run ------------------------

    @workflow.query
    def status(self) -> RunState:
        """Where the run is: status, turns, tool calls, usage, steps and operations."""
        return self._state

    @workflow.update
    def complete_operation(self, update: CompleteOperation) -> CompletionOutcome:
        """A verified completion from the gateway: applied once, or held until its start."""
        return self._ops.accept(update)

    @complete_operation.validator
    def _validate_completion(self, update: CompleteOperation) -> None:
        self._ops.validate(update)

    @workflow.update
    def check_operation(self, ask: CheckOperation) -> CheckOutcome:
        """The gateway, when a job's system said it ended without its result: check now."""
        return self._ops.ask_check(ask)

    @check_operation.validator
    def _validate_check(self, ask: CheckOperation) -> None:
        self._ops.validate_check(ask)

    @workflow.signal
    def operation_completed(self, update: CompleteOperation) -> None:
        """Fallback for senders that cannot use Updates: same checks, invalid ones ignored."""
        try:
            self._ops.validate(update)
        except ApplicationError as err:
            workflow.logger.info("ignored completion signal: %s", err.message)
            return
        self._ops.accept(update)

    @workflow.signal
    def approve(self, decision: DecisionSignal) -> None:
        """A person approves a request; unknown or already decided ones are recorded, ignored."""
        self._approvals.decide_by_signal("approve", decision)

    @workflow.signal
    def reject(self, decision: DecisionSignal) -> None:
        """A person rejects a request, with a reason in `comment`."""
        self._approvals.decide_by_signal("reject", decision)

    @workflow.update
    def decide(self, input: DecideInput) -> DecideOutcome:
        """Approve or reject, with a synchronous answer (the CLI, approval links)."""
        return self._approvals.decide(input)

    @decide.validator
    def _validate_decision(self, input: DecideInput) -> None:
        self._approvals.validate(input)

    @workflow.update
    def send_message(self, send: SendMessage) -> MessageAccepted:
        """A person's message to a thread: queued for its turn, or refused saying why."""
        return self._thread.accept(send)

    @send_message.validator
    def _validate_message(self, send: SendMessage) -> None:
        self._thread.validate(send)

    @workflow.update
    async def tree_budget(self, ask: BudgetAsk) -> BudgetAnswer:
        """A node of this run's tree reserves its next model call from this run's budget."""
        return await self._budget.grant(ask)

    @workflow.update
    async def answer(self, input: AnswerInput) -> AnswerOutcome:
        """A person answers an operation's question (the CLI, a question's link): applied
        once, and answered once the job has it."""
        return await self._questions.answer(input)

    @answer.validator
    def _validate_answer(self, input: AnswerInput) -> None:
        self._questions.validate(input)

    @workflow.update
    def push_config(self, change: PushConfigChange) -> PushConfigs:
        """An A2A client's push configuration for this task, set or deleted (waitstate/a2a)."""
        return self._pushes.change(change)

    @push_config.validator
    def _validate_push_config(self, change: PushConfigChange) -> None:
        self._pushes.validate(change)

    # --- the model --------------------------------------------------------------------------

    async def _call_model(self) -> Message:
        model = await self._budget.check()  # before the call: from what is spent already
        turn = self._state.turns + 1
        request = ModelCallInput(
            model=model,
            system_prompt=self._input.system_prompt,
            transcript_ref=self._memory.transcript_ref,
            new_messages=self._memory.unsent,
            tools=self._model_tools(),
            agent=self._input.agent,
            mcp_listing=self._input.mcp_listing.ref if self._input.mcp_listing else None,
            later_models=self._budget.later(),
        )
        # A blob store outage is waited out.
        tries = self._outages.tries("model call", MODEL_RETRY)
        while True:
            calling = tries.call(
                CALL_MODEL,
                request,
                result_type=ModelResponse,
                summary=f"model {model} turn {turn}",
                hands_back=True,
                **model_call(self._input),
            )
            if self._thread.interruptible():
                response = await self._thread.unless_interrupted(calling)
            else:
                response = await calling
            response = await self._background.awaited(request, response)  # `?background`
            if not isinstance(response, StoreDown):
                break
            # The model's reply, if it gave one before the store failed, is handed back to be
            # stored rather than asked for again.
            answered = response.failure.answered or request.answered
            request = request.model_copy(update={"answered": answered})
            # Each try grows the history: past its limit the run goes on in a new one, which
            # calls the model again (not once the model has replied: that reply is handed back
            # in this run).
            if request.answered is None and self._continuation.due():
                await self._continue_as_new()
            await workflow.sleep(response.delay)
        if isinstance(response, Failed):
            await self._fail(turn, model, response.error)
        self._state.turns = turn
        ledger.add_usage(self._state, response.usage)
        self._budget.charge(model)
        reply = response.message
        self._memory.new_turn(response.transcript_ref)
        names = ", ".join(call.name for call in reply.tool_calls)
        detail = f"calls {names}" if reply.tool_calls else ledger.preview(reply.content)
        if response.output_error is not None:
            detail = f"answer sent back: {ledger.preview(response.output_error)}"
            self._memory.unsent.append(
                Message(role="user", content=OUTPUT_INVALID.format(errors=response.output_error))
            )
            self._state.rejected_output = ledger.rejected_output(
                turn, reply.content, response.output_error
            )
        elif not reply.tool_calls:
            self._state.rejected_output = None  # an answer that validated
        ledger.step(self._state, "model", model, detail)
        return reply

    async def _fail(self, turn: int, model: str, err: ActivityError) -> NoReturn:
        """The `model` the call asked could not be called: the run ends failed, saying why."""
        attempts = ""
        if err.retry_state == RetryState.MAXIMUM_ATTEMPTS_REACHED:
            attempts = f"gave up after {MODEL_RETRY.maximum_attempts} attempts"
        elif err.retry_state == RetryState.NON_RETRYABLE_FAILURE:
            attempts = "not retried: the request itself was refused"
        limit = self._input.model_timeout.total_seconds()
        reason = ledger.model_failure(model, err.cause or err, limit, attempts)
        message = f"model call failed on turn {turn}: {reason}"
        if self._thread.on:  # the message fails, not the thread
            self._thread.replied(None, "failed", message)
            raise MessageFailed(message)
        ledger.failed(self._state, reason)
        await self._ops.end_pending("cancelled")
        self._board.set_status("failed")
        # The reason says it all; the chained causes would carry their tracebacks into a
        # failure Temporal could refuse as too large.
        raise ApplicationError(message, type=RUN_FAILED, non_retryable=True) from None

    def _model_tools(self) -> list[str]:
        """The run's tools (its MCP grants as the tools listed for them), plus `read_ref` once
        a result was passed by reference."""
        tools = list(self._input.tools)
        if self._input.mcp_listing is not None:
            tools = [n for n in tools if SEPARATOR not in n] + self._input.mcp_listing.names
        if self._state.references and READ_REF not in tools:
            tools.append(READ_REF)
        if self._questions.model_answers() and ANSWER_QUESTION not in tools:
            tools.append(ANSWER_QUESTION)
        return tools

    # --- tools ----------------------------------------------------------------------------

    async def _run_tools(self, calls: list[ToolCall], carried: CarriedTurn | None = None) -> None:
        """Run one turn's tool calls concurrently (the model issued them together, so they are
        independent), then hand every result to the model at once. A turn `carried` over by
        continue-as-new keeps its results and waits on for the rest."""

        self._asides.turn(calls, self._model_tools())

        async def one(index: int, call: ToolCall) -> ToolResult | ParkedCall:
            self._continuation.call_began(call.id)
            try:
                if carried is None:
                    return await self._run_tool(call)
                done = carried.results[index]
                if done is not None:
                    return done
                return await self._ops.resume(call, carried.parked[call.id])
            except (asyncio.CancelledError, ActivityError) as err:
                await self._tree.settled_if_cancelled(err)  # cancelled: once they all have
                raise
            finally:
                self._continuation.call_ended(call.id)

        outcomes = await asyncio.gather(*(one(index, call) for index, call in enumerate(calls)))
        if any(isinstance(outcome, ParkedCall) for outcome in outcomes):
            # The history grew past its limit while every unfinished call waited.
            parked = {
                call.id: o
                for call, o in zip(calls, outcomes, strict=True)
                if isinstance(o, ParkedCall)
            }
            done = [o if isinstance(o, ToolResult) else None for o in outcomes]
            await self._continue_as_new(turn=CarriedTurn(calls=calls, results=done, parked=parked))
        results = [o for o in outcomes if isinstance(o, ToolResult)]
        lines = []
        for result in results:
            ledger.step(
                self._state,
                "tool",
                result.name,
                ledger.preview(result.content),
                is_error=result.is_error,
            )
            lines.append(ledger.completed_line(result.name, result.content))
            if REF_PREFIX in result.content:
                self._state.references += 1
        self._state.tool_calls += len(calls)
        if self._memory.long_wait is not None:
            # The turn waited long: its results become the Event of a rebuilt context, since
            # the tool calls they answer are in the transcript being left behind.
            await self._memory.rebuild("; ".join(lines + [m.content for m in self._asides.told()]))
            ledger.add_completed(self._state, lines)
            return
        ledger.add_completed(self._state, lines)
        self._memory.unsent.extend(
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
        self._memory.unsent.extend(self._asides.told())  # what was said while they ran

    async def _run_tool(self, call: ToolCall) -> ToolResult | ParkedCall:
        if self._fork.on and (forked := await self._fork.answer(call, self._model_tools())):
            return forked  # a fork's call, answered from the recording
        if call.name == GET_OPERATION_STATUS:
            return self._ops.get_status(call)
        if call.name == WAIT_FOR_OPERATIONS:
            return await self._ops.wait_for(call)
        if call.name not in self._model_tools():
            # The run decides which tools exist for it, not the model.
            allowed = ", ".join(self._input.tools) or "none"
            return ledger.error_result(call, f"unknown tool {call.name!r}; available: {allowed}")
        if call.name == REQUEST_APPROVAL:
            return await self._approvals.request_approval(call)
        if call.name == ANSWER_QUESTION:
            return await self._questions.answer_by_model(call)
        if self._tree.owns(call.name):
            return await self._tree.run(call)
        result, operation_id = await self._ops.start(call, approved_by=None)
        if result.approval_needed is not None:
            # The tool declared that this call needs a person's approval: it has not run.
            needed = result.approval_needed
            request = await self._approvals.ask(call, needed.reason, needed.policy)
            if request.status != "approved":
                outcome = {"ran": False, **ledger.approval_outcome(request)}
                return ledger.error_result(call, ledger.to_json(outcome))
            result, operation_id = await self._ops.start(call, approved_by=request.request_id)
        if result.operation is None:
            return result
        return await self._ops.track(call, operation_id, result.operation)

    # --- the end: an answer, or a new run to go on in ---------------------------------------

    async def _finish(self, status: RunStatus, output: str | None) -> RunResult:
        await self._ops.end_pending("cancelled")
        await workflow.wait_condition(workflow.all_handlers_finished)
        ledger.answered(self._state, output)
        await self._budget.report_final()  # a node under its root's budget: its last spend
        output = await self._tree.answer_for_parent(output)  # a sub-agent's: by reference
        self._board.end(status, self._input.recorded_revision())
        await self._pushes.last()  # after `end`: its final state is pushed
        return RunResult(
            status=status,
            final_output=output,
            turns=self._state.turns,
            tool_calls=self._state.tool_calls,
            usage=self._tree.usage(),
            error=self._state.error,
            rejected_output=self._state.rejected_output if status == "output_invalid" else None,
        )

    async def _continue_as_new(
        self, answer: str | None = None, turn: CarriedTurn | None = None
    ) -> NoReturn:
        await self._ops.hand_over()
        await workflow.wait_condition(workflow.all_handlers_finished)
        self._ops.trim(turn)
        self._approvals.trim()
        self._continuation.continue_as_new(answer, turn)
