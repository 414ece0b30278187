"""The question desk: questions that operations' jobs ask mid-flight, routed to whoever the tool's
policy names (a person: notice with a signed link, and the CLI; or the model: the built-in
`answer_question`), each with a timer and a declared outcome, and the answers delivered to
the jobs by an activity.

A question is asked once per key its job minted (a key reported again is the same question),
closed once (answered, declined, expired or cancelled), and its answer delivered once: a
duplicate or late answer is refused before it reaches the run's history.

A job's schema and a link holder's answer are untrusted: both are checked by
`waitstate.elicitation`, in bounded time. A question whose schema no answer could fit is refused when asked (recorded, counted, and the job told no with the reason)
instead of staying open; an answer that cannot be checked is refused, never raised.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    # Questions' schemas and answers are checked by it (jsonschema, RE2): loaded with the
    # workflow, once per worker, not in the middle of a run.
    from waitstate.elicitation import answer_problem, schema_problem

from waitstate.schemas import ToolCall, ToolResult
from waitstate.schemas.errors import (
    QUESTION_CLOSED,
    QUESTION_INVALID_ANSWER,
    QUESTION_NONCE_MISMATCH,
    QUESTION_NOT_YOURS,
    QUESTION_UNKNOWN,
)
from waitstate.schemas.operations import Operation
from waitstate.schemas.questions import (
    Answer,
    AnswerInput,
    AnswerOutcome,
    AnswerQuestionArgs,
    DeliverAnswer,
    Question,
    QuestionNotice,
    QuestionPolicy,
    QuestionRequest,
    QuestionStatus,
)
from waitstate.schemas.run import ANSWER_OPERATION, NOTIFY_QUESTION

from . import ledger
from .activity_calls import Failed, call
from .desk import Desk, Notifying, Refusals, new_nonce, window
from .metrics import question_asked, question_closed
from .parts import RunParts
from .policies import DELIVER_RETRY, DELIVER_TIMEOUT


class QuestionDesk(Desk[QuestionRequest]):
    """Every question of one run's operations, from the job's asking to the answer's delivery.

    The jobs' part attends to each question this desk records (`attend`, in a task of its own),
    and cancels the operation when `attend` says to; this desk never reaches back.
    """

    called = "question"
    refusals = Refusals(QUESTION_UNKNOWN, QUESTION_NONCE_MISMATCH, QUESTION_CLOSED)
    notifying = Notifying(NOTIFY_QUESTION, QuestionNotice, type(None), "question of")
    shows_escalation_once_told = False

    def __init__(self, run: RunParts) -> None:
        super().__init__(run)
        # Answers that came while the run continues as new (their attendants had stopped).
        self._late: list[asyncio.Task[None]] = []
        self._handed_over = False

    # --- the run's life ------------------------------------------------------------------

    def taken_over(self) -> list[QuestionRequest]:
        """The questions a previous run handed over that need attending: the open ones, and
        answers it recorded but had not delivered."""
        return [r for r in self._state.questions.values() if r.open or _undelivered(r)]

    async def hand_over(self) -> None:
        """Before continue-as-new: answers on their way are delivered first; then the next run
        attends to the open questions itself (their attendants here are stopped)."""
        await workflow.wait_condition(
            lambda: not any(_undelivered(r) for r in self._state.questions.values())
        )
        self._handed_over = True

    def asks_model(self, op: Operation) -> bool:
        """Whether the operation waits for the model to answer one of its questions."""
        return any(
            r.open and r.policy.answered_by == "model"
            for r in self._state.questions.values()
            if r.operation_id == op.operation_id
        )

    def model_answers(self) -> bool:
        """Whether the model has been asked anything in this run (it is then offered
        `answer_question`); a question refused when asked was asked of nobody."""
        return any(
            r.policy.answered_by == "model" and r.status != "refused"
            for r in self._state.questions.values()
        )

    def keys(self, op: Operation) -> list[str]:
        """The keys of every question the operation's job asked."""
        return [r.key for r in self._state.questions.values() if r.operation_id == op.operation_id]

    # --- asking --------------------------------------------------------------------------

    def ask(self, op: Operation, questions: list[Question]) -> list[QuestionRequest]:
        """The job asks: each question not asked before is recorded and routed per the
        tool's policy. Returns the questions to attend to, in the order asked."""
        recorded: list[QuestionRequest] = []
        asked = set(self.keys(op))
        policy = op.input or QuestionPolicy()
        now = workflow.now()
        for question in questions:
            if question.key in asked:
                continue
            asked.add(question.key)
            if problem := schema_problem(question.requested_schema):
                recorded.append(self._refuse(op, question, policy, problem))
                continue
            nonce = new_nonce()  # before the question's id: both are random draws
            request = _request(
                op,
                question,
                policy,
                now,
                requested_schema=question.requested_schema,
                expires_at=now + policy.timeout,
                sent_to=[policy.recipients if policy.answered_by == "person" else "model"],
                link_nonce=nonce,
                nonce_hash=ledger.nonce_hash(nonce),
            )
            self._state.questions[request.question_id] = request
            ledger.step(
                self._state,
                "event",
                op.tool,
                f"{op.operation_id} asks {request.question_id} of {request.sent_to[0]}: "
                f"{ledger.preview(question.message)}",
            )
            question_asked(request)
            recorded.append(request)
        self._refresh(op)
        return recorded

    def _refuse(
        self, op: Operation, question: Question, policy: QuestionPolicy, problem: str
    ) -> QuestionRequest:
        """A question no answer could fit (its schema): never open, so nothing waits on it; the
        job is told no, with the reason, as a decline by the policy."""
        now = workflow.now()
        request = _request(
            op,
            question,
            policy,
            now,
            requested_schema={},  # the job's is not kept: it may be anything, of any size
            expires_at=now,
            refusal=f"its requested_schema takes no answer: {problem}",
            answer=Answer(action="decline", responder="policy", answered_at=now, by_policy=True),
        )
        self._state.questions[request.question_id] = request
        ledger.step(
            self._state,
            "event",
            op.tool,
            f"{op.operation_id} asks {request.question_id}: {ledger.preview(question.message)}",
        )
        question_asked(request)
        self._close(request, "refused", f"refused ({request.refusal}); the job is told no")
        return request

    def operation_ended(self, op: Operation) -> None:
        """The operation ended (or was cancelled): its open questions need no answer now."""
        for request in self._state.questions.values():
            if request.operation_id == op.operation_id and request.open:
                self._close(request, "cancelled", f"{op.operation_id} {op.status}")
        self._refresh(op)

    async def attend(self, op: Operation, request: QuestionRequest) -> AsyncIterator[str]:
        """Wait for the answer (or the timeout policy), then deliver it to the job.

        Yields, once at most, why the operation is to be cancelled (nobody answered, and the
        policy says `cancel`): the caller cancels it before this goes on, while the question's
        wait is still on, as runs have always done it (their histories replay that order).
        """
        if request.open:
            async for cancel in self._wait_for_answer(op, request):
                yield cancel
        if request.answer is not None and request.delivery != "sent":
            await self._deliver(op, request)

    async def _wait_for_answer(self, op: Operation, request: QuestionRequest) -> AsyncIterator[str]:
        if request.policy.answered_by == "model":
            if not await self._window(request) and (cancel := self._time_out(request)):
                yield cancel
            return
        details = f"waiting for an answer: {ledger.preview(request.message)}"
        label = f"answer to {request.question_id} ({op.tool})"
        with self._waiting(request, "input", details, label) as notices:
            if not await self._windows(request, notices) and (cancel := self._time_out(request)):
                yield cancel

    async def _window(self, request: QuestionRequest, *, mirror: bool = False) -> bool:
        """`window` for the question, which its operation's end closes too (at once if its
        deadline has passed)."""
        op = self._state.operations[request.operation_id]
        await window(request, op=op, mirror=mirror)
        if request.open and op.terminal:
            self.operation_ended(op)
        return not request.open

    def _time_out(self, request: QuestionRequest) -> str | None:
        """Nobody answered in time: the job is told no (`decline`, and after an escalation's
        second window), or the operation is to be cancelled (`cancel`: returns why)."""
        until = request.expires_at.isoformat()
        if request.policy.on_timeout == "cancel":
            self._close(request, "expired", f"no answer by {until}; operation cancelled")
            return f"question {request.question_id} had no answer by {until}"
        request.answer = Answer(
            action="decline", responder="policy", answered_at=workflow.now(), by_policy=True
        )
        self._close(request, "expired", f"no answer by {until}; the job is told no")
        return None

    # --- answers -------------------------------------------------------------------------

    def validate(self, input: AnswerInput) -> None:
        """Refuse an answer that cannot apply (nothing is written to the run's history)."""
        request = self._reply_to(input.question_id, input.nonce)
        if problem := answer_problems(request.requested_schema, input):
            raise ApplicationError(f"invalid answer: {problem}", type=QUESTION_INVALID_ANSWER)

    async def answer(self, input: AnswerInput) -> AnswerOutcome:
        """Apply a validated answer; return once the job has it (or refused it)."""
        request = self._state.questions[input.question_id]
        answer = Answer(
            action=input.action,
            content=input.content,
            responder=input.responder,
            answered_at=workflow.now(),
        )
        self._apply(request, answer)
        if self._handed_over:
            # The question's attendant is gone (the run is continuing as new, which waits for
            # this Update): the answer is delivered here.
            op = self._state.operations[request.operation_id]
            self._late.append(asyncio.create_task(self._deliver(op, request)))
        await workflow.wait_condition(lambda: not _undelivered(request))
        return _outcome(request, input.delivery_id)

    async def answer_by_model(self, call: ToolCall) -> ToolResult:
        """The built-in `answer_question`: the model answers a question its policy gives it."""
        named = ledger.named(call, AnswerQuestionArgs, self._state.questions, "question")
        if isinstance(named, ToolResult):
            return named
        args, request = named
        if request.policy.answered_by != "model":
            return ledger.error_result(
                call, f"question {request.question_id} is for a person to answer, not you"
            )
        if not request.open:
            return ledger.error_result(call, f"question {request.question_id} is {request.status}")
        if problem := answer_problems(request.requested_schema, args):
            return ledger.error_result(call, f"invalid answer: {problem}")
        answer = Answer(
            action=args.action, content=args.content, responder="model", answered_at=workflow.now()
        )
        self._apply(request, answer)
        await workflow.wait_condition(lambda: not _undelivered(request))
        outcome = _outcome(request, "")
        return ToolResult(
            tool_call_id=call.id,
            name=call.name,
            content=ledger.to_json(
                {"question_id": request.question_id, **outcome.model_dump(exclude={"delivery_id"})}
            ),
            is_error=not outcome.delivered,
        )

    def _apply(self, request: QuestionRequest, answer: Answer) -> None:
        request.answer = answer
        status: QuestionStatus = "answered" if answer.action == "accept" else "declined"
        self._close(request, status, f"{status} by {answer.responder}")

    def _close(self, request: QuestionRequest, status: QuestionStatus, why: str) -> None:
        request.status = status
        ledger.step(
            self._state,
            "event",
            request.tool,
            f"{request.question_id} {why}",
            is_error=status in ("expired", "cancelled", "refused"),
        )
        question_closed(request)
        self._refresh(self._state.operations[request.operation_id])

    async def _deliver(self, op: Operation, request: QuestionRequest) -> None:
        """The `answer_operation` activity: the answer, to the job that asked."""
        assert request.answer is not None
        request.delivery = "sending"
        sent = await call(
            ANSWER_OPERATION,
            DeliverAnswer(
                **ledger.job_of(op),
                key=request.key,
                action=request.answer.action,
                content=request.answer.content,
                responder=request.answer.responder,
                reason=request.refusal,
            ),
            result_type=type(None),
            summary=f"answer {op.tool} {op.job_id}: {request.answer.action}",
            start_to_close_timeout=DELIVER_TIMEOUT,
            retry_policy=DELIVER_RETRY,
        )
        if isinstance(sent, Failed):
            request.delivery, request.delivery_error = "failed", sent.message
            ledger.step(
                self._state,
                "event",
                op.tool,
                f"{request.question_id}: the job did not take the answer: {sent.message}",
                is_error=True,
            )
        else:
            request.delivery = "sent"
        self._refresh(op)

    def _refresh(self, op: Operation) -> None:
        """What the operation shows of its questions: the open ones, and `input_required`
        while there are any."""
        op.asking = [
            r.view()
            for r in self._state.questions.values()
            if r.operation_id == op.operation_id and r.open
        ]
        if not op.terminal:
            if op.asking:
                op.status = "input_required"
            elif op.status == "input_required":
                op.status = "running"
        self._board.show()

    # --- telling people ------------------------------------------------------------------

    def _requests(self) -> dict[str, QuestionRequest]:
        return self._state.questions

    def _named(self, request: QuestionRequest) -> str:
        return request.question_id

    def _link_nonce(self, request: QuestionRequest) -> str | None:
        return request.link_nonce

    def _told(self, request: QuestionRequest) -> list[str]:
        return request.told

    def _also_refuse(self, request: QuestionRequest) -> None:
        """Refuse a person's answer to a question its tool's policy gives to the model."""
        if request.policy.answered_by != "person":
            raise ApplicationError(
                f"question {request.question_id} is the model's to answer (the tool's policy)",
                type=QUESTION_NOT_YOURS,
            )


def answer_problems(schema: dict[str, Any], answer: AnswerInput | AnswerQuestionArgs) -> str | None:
    """Why an answer does not fit its question (None if it does): an accept must carry content
    valid against the requested schema; a decline carries none. Checked in bounded time (RE2
    for patterns, limits on sizes), never raising (a raise in the model's answer would fail
    the workflow task), and in all runs (a validator is not replayed, so it may refuse more
    than it did)."""
    if answer.action == "decline":
        return "a decline carries no content" if answer.content else None
    if answer.content is None:
        return "an accept needs content matching the question's requested_schema"
    return answer_problem(schema, answer.content)


def _request(
    op: Operation, question: Question, policy: QuestionPolicy, now: datetime, **fields: Any
) -> QuestionRequest:
    """The record of a question `op`'s job asks `now`, under `policy`, with a new id."""
    return QuestionRequest(
        question_id=f"q_{workflow.uuid4().hex[:12]}",
        operation_id=op.operation_id,
        tool=op.tool,
        key=question.key,
        message=question.message,
        asked_at=now,
        policy=policy,
        **fields,
    )


def _undelivered(request: QuestionRequest) -> bool:
    """An answer (or the policy's decline) the job has not been given yet."""
    return request.answer is not None and request.delivery not in ("sent", "failed")


def _outcome(request: QuestionRequest, delivery_id: str) -> AnswerOutcome:
    return AnswerOutcome(
        accepted=True,
        status=request.status,
        delivered=request.delivery == "sent",
        reason=request.delivery_error or "",
        delivery_id=delivery_id,
    )
