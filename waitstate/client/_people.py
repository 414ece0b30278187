"""What runs wait for people to do: the open approval requests and questions, and the
decisions and answers sent to them as Updates (through `_updates`), for the CLI, the MCP server
and the gateway's links, pages and inbox alike."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from pydantic import BaseModel
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError

from waitstate.client._base import closed_status
from waitstate.client._errors import (
    AnswerRefused,
    ClientError,
    DecisionRefused,
    RunEnded,
    UpdateRefused,
)
from waitstate.client._updates import (
    UpdateCalls,
    answer_update_id,
    decision_update_id,
    refuse_copy,
)
from waitstate.names import ANSWER_UPDATE, DECIDE_UPDATE, WAITING_FOR
from waitstate.schemas import RunState
from waitstate.schemas.approvals import ApprovalRequest, DecideInput, DecideOutcome, DecisionBody
from waitstate.schemas.errors import APPROVAL_UNKNOWN, QUESTION_UNKNOWN
from waitstate.schemas.questions import AnswerBody, AnswerInput, AnswerOutcome, QuestionRequest

# How long `decide` waits for the run to answer its `decide` Update. A run whose worker is down
# never answers; the decision may still be applied once one runs.
DECIDE_TIMEOUT = timedelta(seconds=20)
# How long `answer` waits for the run's `answer` Update, which returns once the job that asked
# has the answer: the run's delivery to the job (retried) comes on top of a decision's round trip.
ANSWER_TIMEOUT = timedelta(seconds=60)
# What the Update ids the client gives decisions and answers sent without one begin with: its
# own, so that they never share one with the gateway's (a link's decision and the CLI's are two
# sends, and the second is refused as a second decision, as it always was).
CLIENT_UPDATES = "client/"
# What a run's `WaitingFor` says while a person's decision or answer is open.
WAITING_FOR_PEOPLE = ("approval", "input")
# How many runs `pending` queries at once.
PENDING_QUERIES_AT_ONCE = 8
# A tree's nodes waiting for a person that its root's inbox reads at most (a tree holds at most
# max_children ** max_depth of them; the listing is bounded however it grew).
ASKING_BELOW_LIMIT = 2_000


@dataclass(frozen=True)
class PendingRequest:
    """An open approval request of a run that waits for a person."""

    run_id: str
    request: ApprovalRequest


@dataclass(frozen=True)
class PendingQuestion:
    """An open question of a run's operation that waits for a person's answer."""

    run_id: str
    question: QuestionRequest


@dataclass(frozen=True)
class Pending:
    """What runs wait for people to do: decide on approval requests, answer questions."""

    approvals: list[PendingRequest]
    questions: list[PendingQuestion]


_Outcome = TypeVar("_Outcome", DecideOutcome, AnswerOutcome)


@dataclass(frozen=True)
class _Reply:
    """A person's reply to a request (a decision, an answer), as the client sends it: the run's
    Update for it, what it is called, its refusal, and its key when the sender gives none."""

    update: str
    what: str
    refused: Callable[..., UpdateRefused]
    key: Callable[[Any], str]
    ref: Callable[[Any], str]  # the request's or question's id
    unknown: str  # the run's refusal of an id it does not have


def _decision_key(decision: DecideInput) -> str:
    body = DecisionBody.model_validate(decision.model_dump(include=set(DecisionBody.model_fields)))
    return decision_update_id(decision.request_id, body)


def _answer_key(answer: AnswerInput) -> str:
    body = AnswerBody.model_validate(answer.model_dump(include=set(AnswerBody.model_fields)))
    return answer_update_id(answer.question_id, body)


_DECISIONS = _Reply(
    DECIDE_UPDATE,
    "decision",
    DecisionRefused,
    _decision_key,
    lambda decision: decision.request_id,
    APPROVAL_UNKNOWN,
)
_ANSWERS = _Reply(
    ANSWER_UPDATE,
    "answer",
    AnswerRefused,
    _answer_key,
    lambda answer: answer.question_id,
    QUESTION_UNKNOWN,
)


class PeopleCalls(UpdateCalls):
    """What `WaitstateClient` does for people: find what runs wait for them to decide or
    answer, and send their decisions and answers."""

    async def pending(self) -> list[PendingRequest]:
        """The open approval requests of runs waiting for a person (`waiting_for_people` lists
        their open questions too); runs whose worker does not answer are left out.

        Raises:
            TemporalFailed: the listing failed.
        """
        return (await self.waiting_for_people()).approvals

    async def waiting_for_people(self) -> Pending:
        """The open approval requests, and the open questions for a person, of runs waiting
        for one (`WaitingFor` is `approval` or `input`: a person's question or approval
        outranks a job's webhook or poll); runs whose worker does
        not answer are left out.

        Raises:
            TemporalFailed: the listing failed.
        """
        kinds = ", ".join(f'"{kind}"' for kind in WAITING_FOR_PEOPLE)
        query = f'{WAITING_FOR.name} IN ({kinds}) AND ExecutionStatus = "Running"'
        pending = Pending(approvals=[], questions=[])
        try:
            ids = [execution.id async for execution in self._client.list_workflows(query)]
        except RPCError as err:
            self._raise(err, None, "could not list the runs waiting for people")

        async def state_of(run_id: str) -> RunState | None:
            try:
                return await self.query(run_id)
            except ClientError:
                return None

        # Asked together, a few at a time: one run whose worker is slow to answer (killed,
        # restarting) costs the listing one query's timeout, not one per run behind it.
        gate = asyncio.Semaphore(PENDING_QUERIES_AT_ONCE)

        async def gated(run_id: str) -> RunState | None:
            async with gate:
                return await state_of(run_id)

        states = await asyncio.gather(*(gated(run_id) for run_id in ids))
        for run_id, state in zip(ids, states, strict=True):
            if state is None:
                continue
            pending.approvals.extend(
                PendingRequest(run_id, request)
                for request in state.approvals.values()
                if request.open
            )
            pending.questions.extend(
                PendingQuestion(run_id, question) for question in _for_people(state)
            )
        return pending

    async def open_requests(self, run_id: str) -> list[ApprovalRequest]:
        """The run's open approval requests, and those of its sub-agents' runs below it (each
        reason led by the asking node's path, `[team-1/researcher-2]`), decided at the run.

        Raises:
            RunNotFound: no such run.
            RunEnded: the run has ended.
            NotAnswered: no worker answered.
        """
        state = await self.with_requests_below(run_id, await self._running_state(run_id))
        return [request for request in state.approvals.values() if request.open]

    async def open_questions(self, run_id: str) -> list[QuestionRequest]:
        """The run's open questions that its tools' policies give to a person, and those of its
        sub-agents' runs below it (each message led by the asking node's path), answered at the
        run.

        Raises:
            RunNotFound: no such run.
            RunEnded: the run has ended.
            NotAnswered: no worker answered.
        """
        return _for_people(
            await self.with_requests_below(run_id, await self._running_state(run_id))
        )

    async def with_requests_below(self, run_id: str, state: RunState) -> RunState:
        """`state` (the run's) with the open approval requests and questions of the runs of its
        tree below it besides its own, each led by the asking node's path: what a person
        deciding at the run sees (a decision or answer sent to the run goes to the node that
        asked, see `decide`)."""
        if state.tree is None:
            return state
        approvals = dict(state.approvals)
        questions = dict(state.questions)
        for path, below in await self._asking_below(run_id):
            for request in below.approvals.values():
                if request.open:
                    reason = f"[{path}] {request.reason}"
                    approvals[request.request_id] = request.model_copy(update={"reason": reason})
            for question in _for_people(below):
                message = f"[{path}] {question.message}"
                questions[question.question_id] = question.model_copy(update={"message": message})
        return state.model_copy(update={"approvals": approvals, "questions": questions})

    async def _asking_below(self, run_id: str) -> list[tuple[str, RunState]]:
        """The runs of the tree below `run_id` that wait for a person, by path, with their
        states (those whose worker does not answer are left out)."""
        if '"' in run_id or "\\" in run_id:
            return []
        kinds = ", ".join(f'"{kind}"' for kind in WAITING_FOR_PEOPLE)
        query = (
            f'WorkflowId STARTS_WITH "{run_id}/" AND {WAITING_FOR.name} IN ({kinds}) '
            'AND ExecutionStatus = "Running"'
        )
        try:
            listed = self._client.list_workflows(query, limit=ASKING_BELOW_LIMIT)
            ids = [execution.id async for execution in listed]
        except RPCError as err:
            self._raise(err, None, f"could not list the runs below {run_id}")
        gate = asyncio.Semaphore(PENDING_QUERIES_AT_ONCE)

        async def asking(below: str) -> tuple[str, RunState] | None:
            async with gate:
                try:
                    return below.removeprefix(f"{run_id}/"), await self.query(below)
                except ClientError:
                    return None

        found = await asyncio.gather(*(asking(below) for below in ids))
        return [each for each in found if each is not None]

    async def _running_state(self, run_id: str) -> RunState:
        """The state of a run that is still running (RunEnded otherwise)."""
        description = await self.describe(run_id)
        if description.status != WorkflowExecutionStatus.RUNNING:
            raise RunEnded(run_id, closed_status(description.status))
        return await self.query(run_id)

    async def decide(
        self,
        run_id: str,
        decision: DecideInput,
        *,
        update_id: str | None = None,
        answer_within: timedelta = DECIDE_TIMEOUT,
    ) -> DecideOutcome:
        """Send a decision as the run's `decide` Update and return what the run did with it
        (`accepted` is False if it recorded the decision without applying it).

        A decision with a `delivery_id` is told apart from its copies: one answered with
        another delivery's outcome is refused (`AlreadyApplied`).

        Args:
            update_id: The decision's idempotency key: asking again under the same id gets the
                first answer, never a second application. Without one, the decision's own
                content is its key (the request, the decision, the reviewer and the comment),
                so the same decision sent again is the same Update.

        Raises:
            DecisionRefused: the run refused it (unknown request, already decided or expired,
                a link's nonce that is not the request's), with the refusal's `error_type`.
            AlreadyApplied: a copy of a decision with another `delivery_id`, already applied.
            RunEnded: the run has ended.
            RunNotFound: no such run.
            RunUnavailable: the run did not take it for now; send it again.
            OutcomeUnknown: the run did not answer within `answer_within`; the decision may
                still be applied once its worker runs: sent again with the error's `key` as
                `update_id` (or, without one, the same decision), the retry gets its outcome.
            Unreachable: Temporal could not be reached.
            TemporalFailed: Temporal refused the call (e.g. permission denied).
        """
        outcome = await self._reply(
            _DECISIONS, DecideOutcome, run_id, decision, update_id, answer_within
        )
        # The same decision got there first (Temporal answered this one, which reused its
        # Update id, with its outcome): a copy, not applied.
        refuse_copy(run_id, "decision", decision.delivery_id, outcome.delivery_id)
        return outcome

    async def answer(
        self,
        run_id: str,
        answer: AnswerInput,
        *,
        update_id: str | None = None,
        answer_within: timedelta = ANSWER_TIMEOUT,
    ) -> AnswerOutcome:
        """Send an answer to one of the run's questions as its `answer` Update, and return what
        the run did with it once the job that asked has it (`delivered` is False, and `reason`
        says why, if the job did not take it).

        Copies of an answer (a link used twice, a retry) share its Update, so it is applied
        once, and they get its outcome: unlike a decision's copy, an answer's is not refused,
        because the Update lasts until the job has the answer, long enough for a sender to
        time out and retry, and the retry must learn what became of its answer.

        Args:
            update_id: The answer's idempotency key: sending again under the same id gets the
                first one's outcome, never a second application. Without one, the answer's own
                content is its key (the question, the action, the content and the responder).

        Raises:
            AnswerRefused: the run refused it (unknown question, already answered, declined,
                expired or cancelled, the model's to answer, a link's nonce that is not the
                question's, or content that does not match the question's schema), with the
                refusal's `error_type`.
            RunEnded: the run has ended.
            RunNotFound: no such run.
            RunUnavailable: the run did not take it for now; send it again.
            OutcomeUnknown: the run did not answer within `answer_within`; the answer may
                still be applied (and delivered) once its worker runs: sent again with the
                error's `key` as `update_id` (or, without one, the same answer), the retry
                gets its outcome.
            Unreachable: Temporal could not be reached.
            TemporalFailed: Temporal refused the call (e.g. permission denied).
        """
        return await self._reply(_ANSWERS, AnswerOutcome, run_id, answer, update_id, answer_within)

    async def _reply(
        self,
        reply: _Reply,
        outcome: type[_Outcome],
        run_id: str,
        sent: BaseModel,
        update_id: str | None,
        answer_within: timedelta,
    ) -> _Outcome:
        """Send a person's reply (`sent`) as the run's Update for `reply`; without an
        `update_id`, the reply's own content is its key (see `decide` and `answer`). A reply to
        a request the run does not have, which a run of its tree below it has, goes there:
        a tree's requests are decided at its root."""

        async def send(to: str) -> _Outcome:
            return await self._send_update(
                to,
                reply.update,
                sent,
                outcome,
                update_id=update_id or CLIENT_UPDATES + reply.key(sent),
                what=reply.what,
                answer_within=answer_within,
                refused=reply.refused,
            )

        try:
            return await send(run_id)
        except UpdateRefused as err:
            if err.error_type != reply.unknown:
                raise
            ref = reply.ref(sent)
            for path, state in await self._asking_below(run_id):
                if ref in state.approvals or ref in state.questions:
                    return await send(f"{run_id}/{path}")
            raise


def _for_people(state: RunState) -> list[QuestionRequest]:
    """The run's open questions that its tools' policies give to a person."""
    return [
        question
        for question in state.questions.values()
        if question.open and question.policy.answered_by == "person"
    ]
