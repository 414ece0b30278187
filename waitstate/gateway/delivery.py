"""Delivering verified completions, decisions and answers to the runs they are for: an adapter
over `WaitstateClient` (`complete_operation`, `decide`, `answer`, `recall`), which sends them as
Updates, with the client's errors said in HTTP in one place (`refusal`, which the thread routes use too).

Every request is answered truthfully: with the run's outcome; with a refusal that recorded
nothing; or, when the run did not answer in time after Temporal took the Update in, as unknown
(504 `outcome_unknown`): Temporal holds an admitted Update until the run's worker takes it, so
it may yet be applied. A retry is the same Update (its id comes from the request), so it is
applied once and answered with what became of the first. A request whose token has expired
since its first delivery learns what became of that delivery, and applies nothing
(`WaitstateClient.recall` reads the run's Update under the request's id).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Protocol, TypeVar
from uuid import uuid4

from temporalio.client import Client

from waitstate.auth.tokens import ResumeClaims
from waitstate.client import (
    AlreadyApplied,
    ClientError,
    MessageRefused,
    NotAnswered,
    OutcomeUnknown,
    RunEnded,
    RunNotFound,
    RunUnavailable,
    TemporalFailed,
    ThreadClosed,
    UpdateNotFound,
    UpdateRefused,
    WaitstateClient,
    answer_update_id,
    completion_update_id,
    decision_update_id,
    refuse_copy,
)
from waitstate.gateway.refusals import REQUEST_LOG, Refused, code_for
from waitstate.schemas.approvals import DecideInput, DecideOutcome, DecisionBody
from waitstate.schemas.errors import (
    APPROVAL_DECIDED,
    APPROVAL_NONCE_MISMATCH,
    APPROVAL_UNKNOWN,
    OPERATION_NONCE_MISMATCH,
    OPERATION_NOT_CHECKED,
    OPERATION_RESOLVED,
    OPERATION_UNCHANGED,
    OPERATION_UNKNOWN,
    QUESTION_CLOSED,
    QUESTION_INVALID_ANSWER,
    QUESTION_NONCE_MISMATCH,
    QUESTION_NOT_YOURS,
    QUESTION_UNKNOWN,
)
from waitstate.schemas.operations import (
    CheckOperation,
    CheckOutcome,
    CompleteOperation,
    Completion,
    CompletionOutcome,
)
from waitstate.schemas.questions import AnswerBody, AnswerInput, AnswerOutcome
from waitstate.schemas.threads import (
    NOT_A_THREAD,
    THREAD_BUSY,
    THREAD_CLOSING,
    THREAD_EXISTS,
    THREAD_FULL,
)

log = logging.getLogger(REQUEST_LOG)

# How long one webhook call may wait for the run to take its completion, decision or answer
# (an answer's Update returns once the job has it). A run whose worker is down never answers;
# past this the caller gets a 504 `outcome_unknown` (Temporal holds the Update for the worker)
# and retries later: a retried completion, decision or answer is the same Update, so it cannot
# be applied twice (a decision's or a completion's copy is answered 409, already applied; an
# answer's gets the first one's outcome).
DELIVERY_TIMEOUT = timedelta(seconds=20)

# The refusals of the runs' Update validators, by `ApplicationError` type (a `ClientError`'s
# `error_type`, a `MessageRefused`'s `code`) -> (HTTP status, error code). The type names of
# the Updates are distinct, so one table serves them all.
_REJECTIONS = {
    OPERATION_UNKNOWN: (404, "operation_unknown"),
    OPERATION_NONCE_MISMATCH: (401, "nonce_mismatch"),
    OPERATION_RESOLVED: (409, "operation_resolved"),
    OPERATION_UNCHANGED: (409, "duplicate_report"),
    OPERATION_NOT_CHECKED: (409, "check_refused"),
    APPROVAL_UNKNOWN: (404, "approval_unknown"),
    APPROVAL_NONCE_MISMATCH: (401, "nonce_mismatch"),
    APPROVAL_DECIDED: (409, "approval_decided"),
    QUESTION_UNKNOWN: (404, "question_unknown"),
    QUESTION_NONCE_MISMATCH: (401, "nonce_mismatch"),
    QUESTION_CLOSED: (409, "question_closed"),
    QUESTION_NOT_YOURS: (403, "question_not_yours"),
    QUESTION_INVALID_ANSWER: (422, "invalid_answer"),
    # A thread's refusals of a message (its `send_message` validator's types).
    THREAD_BUSY: (409, THREAD_BUSY),
    NOT_A_THREAD: (409, NOT_A_THREAD),
    THREAD_FULL: (429, THREAD_FULL),
    THREAD_CLOSING: (410, THREAD_CLOSING),
    THREAD_EXISTS: (409, THREAD_EXISTS),
}


_Outcome = TypeVar("_Outcome", CompletionOutcome, DecideOutcome, AnswerOutcome)


class DeliveryRefused(Refused):
    """The run did not take the completion, decision or answer, or did not answer in time
    (`outcome_unknown`): a refusal the routes answer as it is, its `status` the HTTP answer
    (`code`, if not given, its status's: `code_for`), `retry_with` what a retry must carry
    (`key`, a start's `thread_id`)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        retry_with: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(status, code or code_for(status), message, retry_with)


class Deliverer(Protocol):
    """Hands completions, decisions and answers to the runs they are for.

    Each method raises `DeliveryRefused` if the run refused what it was handed, or could not be
    reached.
    """

    async def complete(
        self,
        claims: ResumeClaims,
        completion: Completion,
        delivery_id: str,
        report_id: str | None = None,
    ) -> CompletionOutcome:
        """Deliver `completion` for the operation `claims` names and report what the run did.

        Args:
            claims: The verified token's claims.
            completion: The report.
            delivery_id: Unique to this HTTP request.
            report_id: The sender's id for the report (its `Webhook-Id` or `Idempotency-Key`),
                kept by the report's retries and copies.
        """
        ...

    async def check(self, claims: ResumeClaims, report_id: str) -> CheckOutcome:
        """Ask the run `claims` names to check its operation's job now: its system said the
        job ended without saying its result. `report_id` names what said so; its copies are
        one ask."""
        ...

    async def decide(
        self, claims: ResumeClaims, request_id: str, body: DecisionBody
    ) -> DecideOutcome:
        """Deliver a decision on approval request `request_id` of the run `claims` names.

        Returns:
            What the run did; `accepted` is False if it recorded the decision without
            applying it.
        """
        ...

    async def answer(
        self, claims: ResumeClaims, question_id: str, body: AnswerBody
    ) -> AnswerOutcome:
        """Deliver an answer to question `question_id` of the run `claims` names.

        Returns:
            What the run did, once the job that asked has the answer; `delivered` is False
            (and `reason` says why) if the job did not take it.
        """
        ...


# The Update id of one report on an operation (the client's; its tests and the bench call it
# by this name).
update_id = completion_update_id


class TemporalDeliverer:
    """Delivers completions, decisions and answers through `WaitstateClient`
    (`complete_operation`, `decide`, `answer`: the runs' Updates), and says what the client
    raises in HTTP (`refusal`).

    Given the claims of a token past its expiry (the gateway admits them for this deliverer
    only), each sends nothing: it answers what became of the same request delivered earlier,
    while the token was valid (`WaitstateClient.recall`), or refuses it as expired (410) if
    none was.

    Args:
        client: What it delivers with: a `WaitstateClient`, or the Temporal client for one.
        timeout: How long each delivery waits for the run's answer.
    """

    def __init__(
        self, client: Client | WaitstateClient, *, timeout: timedelta = DELIVERY_TIMEOUT
    ) -> None:
        self._runs = client if isinstance(client, WaitstateClient) else WaitstateClient(client)
        self._timeout = timeout

    @property
    def runs(self) -> WaitstateClient:
        """The client it delivers with (the pages and the inbox read runs with it)."""
        return self._runs

    @property
    def client(self) -> Client:
        """The Temporal client underneath."""
        return self._runs.temporal

    async def complete(
        self,
        claims: ResumeClaims,
        completion: Completion,
        delivery_id: str,
        report_id: str | None = None,
    ) -> CompletionOutcome:
        """Send the completion as the run's `complete_operation` Update and wait for the run's
        outcome.

        Raises:
            DeliveryRefused: 404 unknown run or operation, 401 nonce mismatch, 409 already
                resolved (expired and cancelled included), not applied, a duplicate or the
                run has ended, 410 the token has expired (and no earlier delivery of this
                report was taken), 503 Temporal could not be reached, 504 the run did not
                answer in time (with the report's key: `report_id`, else `delivery_id`).
        """
        id = update_id(claims.operation_id, completion, delivery_id, report_id)
        key = report_id or delivery_id
        run_id, recalled = claims.workflow_id, _expired(claims)
        try:
            if recalled:
                outcome = await self._recall(run_id, id, CompletionOutcome)
                if outcome.applied:
                    refuse_copy(run_id, "completion", delivery_id, outcome.delivery_id)
            else:
                update = CompleteOperation(
                    operation_id=claims.operation_id,
                    nonce=claims.nonce,
                    delivery_id=delivery_id,
                    completion=completion,
                )
                outcome = await self._runs.complete_operation(
                    run_id, update, update_id=id, key=key, answer_within=self._timeout
                )
        except ClientError as err:
            raise refusal(err, expired_at=_expiry(claims, recalled), key=key) from err
        if not outcome.applied:
            # The run recorded it without applying it (e.g. the operation expired or was
            # cancelled first): it will never apply, so retrying cannot help.
            raise DeliveryRefused(409, outcome.reason or "not applied", code="not_applied")
        return outcome

    async def check(self, claims: ResumeClaims, report_id: str) -> CheckOutcome:
        """Send the ask as the run's `check_operation` Update.

        Raises:
            DeliveryRefused: as `complete` does; 409 also for a check asked already or too
                often, or a job the run does not check; 410 the token has expired (an ask
                needs a valid one: asking late has nothing to recall).
        """
        if _expired(claims):
            raise DeliveryRefused(410, "the token has expired", code="token_expired")
        ask = CheckOperation(operation_id=claims.operation_id, nonce=claims.nonce)
        id = f"check/{claims.operation_id}/{report_id}"
        try:
            return await self._runs.check_operation(
                claims.workflow_id, ask, update_id=id, answer_within=self._timeout
            )
        except ClientError as err:
            raise refusal(err, key=report_id) from err

    async def decide(
        self, claims: ResumeClaims, request_id: str, body: DecisionBody
    ) -> DecideOutcome:
        """Send the decision as the run's `decide` Update and wait for the run's outcome.

        Raises:
            DeliveryRefused: 404 unknown run or request, 401 nonce mismatch, 409 already
                decided or expired, a duplicate of a decision already applied, or the run has
                ended, 410 the token has expired (and no earlier delivery of this decision was
                taken), 503 Temporal could not be reached, 504 the run did not answer in time.
        """
        delivery_id = uuid4().hex
        id = decision_update_id(request_id, body)
        run_id, recalled = claims.workflow_id, _expired(claims)
        try:
            if recalled:
                outcome = await self._recall(run_id, id, DecideOutcome)
                refuse_copy(run_id, "decision", delivery_id, outcome.delivery_id)
                return outcome
            update = DecideInput(
                **body.model_dump(),
                request_id=request_id,
                nonce=claims.nonce,
                delivery_id=delivery_id,
            )
            return await self._runs.decide(
                run_id, update, update_id=id, answer_within=self._timeout
            )
        except ClientError as err:
            raise refusal(err, expired_at=_expiry(claims, recalled)) from err

    async def answer(
        self, claims: ResumeClaims, question_id: str, body: AnswerBody
    ) -> AnswerOutcome:
        """Send the answer as the run's `answer` Update and wait for the run's outcome, which
        comes once the job that asked has the answer (or refused it). Copies of an answer share
        its Update, and get its outcome (see `WaitstateClient.answer`).

        Raises:
            DeliveryRefused: 404 unknown run or question, 401 nonce mismatch, 403 the question
                is the model's to answer, 409 already answered, declined, expired or
                cancelled, or the run has ended, 410 the token has expired (and no earlier
                delivery of this answer was taken), 422 content that does not match the
                question's schema, 503 Temporal could not be reached, 504 the run did not
                answer in time.
        """
        id = answer_update_id(question_id, body)
        run_id, recalled = claims.workflow_id, _expired(claims)
        try:
            if recalled:
                return await self._recall(run_id, id, AnswerOutcome)
            update = AnswerInput(
                **body.model_dump(),
                question_id=question_id,
                nonce=claims.nonce,
                delivery_id=uuid4().hex,
            )
            return await self._runs.answer(
                run_id, update, update_id=id, answer_within=self._timeout
            )
        except ClientError as err:
            raise refusal(err, expired_at=_expiry(claims, recalled)) from err

    async def _recall(self, run_id: str, update_id: str, result_type: type[_Outcome]) -> _Outcome:
        """The outcome of an earlier delivery of this request, while its token was valid."""
        return await self._runs.recall(run_id, update_id, result_type, answer_within=self._timeout)


def _expiry(claims: ResumeClaims, recalled: bool) -> datetime | None:
    """When the request's token expired, if it had (so it was answered by `recall`)."""
    return claims.expires_at if recalled else None


def _expired(claims: ResumeClaims) -> bool:
    """Whether the token the claims are of has expired (the gateway admitted it for `recall`)."""
    return claims.expires_at <= datetime.now(UTC)


def refusal(
    err: ClientError,
    *,
    thread_id: str | None = None,
    start: bool = False,
    expired_at: datetime | None = None,
    key: str | None = None,
) -> DeliveryRefused:
    """What a `WaitstateClient` error means to whoever sent the gateway a request, in HTTP: the
    one mapping of the gateway's deliveries (completions, decisions, answers) and of its
    threads' messages and reads.

    Args:
        err: What the client raised.
        thread_id: The thread the request was for (its messages' refusals are said as the
            thread's); None for a delivery to a run.
        start: The request was a thread's start: a retry must carry its `thread_id` too.
        expired_at: The request's token had expired then, so it was answered from an earlier
            delivery (`recall`), and is told so.
        key: The request's idempotency key where it has one its body is not (a report's),
            told with an unknown outcome.
    """
    if isinstance(err, UpdateRefused):
        # The run's validator refused it (or the run failed it): nothing was recorded. One of
        # no known type: e.g. the run completed while the Update was in flight.
        status, code = _REJECTIONS.get(err.error_type or "", (409, "refused"))
        return DeliveryRefused(status, err.detail or "the run refused the update", code=code)
    if isinstance(err, MessageRefused):
        status, code = _REJECTIONS.get(err.code or "", (409, "message_refused"))
        return DeliveryRefused(status, err.reason, code=code)
    if isinstance(err, ThreadClosed):
        return thread_closed(err.thread_id)
    if isinstance(err, AlreadyApplied):
        # Temporal answered it, as it reused the Update id of the first, with the first one's
        # outcome.
        return DeliveryRefused(
            409, f"duplicate {err.what}: already applied", code=f"duplicate_{err.what}"
        )
    if isinstance(err, UpdateNotFound):
        when = f" at {expired_at.isoformat()}" if expired_at is not None else ""
        return DeliveryRefused(
            410,
            f"the token expired{when}, and the run took no earlier delivery of this request",
            code="token_expired",
        )
    if isinstance(err, OutcomeUnknown) and expired_at is not None:
        return DeliveryRefused(
            504,
            "the token has expired, and an earlier delivery of this request, taken in while it "
            "was valid, has no outcome yet: it may yet be applied; send it again later to learn "
            "what became of it",
            code="outcome_unknown",
        )
    if isinstance(err, OutcomeUnknown):
        if thread_id is not None:
            return _unknown_message(thread_id, err.key, start)
        return _unknown(key)
    if isinstance(err, RunEnded):
        return DeliveryRefused(409, "the run has ended", code="run_ended")
    if isinstance(err, RunNotFound):
        if thread_id is not None:
            return DeliveryRefused(404, f"no thread {thread_id}", code="unknown_thread")
        return DeliveryRefused(404, "unknown run", code="unknown_run")
    if isinstance(err, RunUnavailable):
        return DeliveryRefused(503, "the run did not take it; retry later", code="run_unavailable")
    if isinstance(err, NotAnswered) and thread_id is not None:
        # Nothing was recorded (an unknown outcome is said above): no worker answered a
        # query, or the thread refused the message for now all that time.
        return DeliveryRefused(
            503,
            f"thread {thread_id} did not answer in time; nothing was recorded: retry later",
            code="thread_unavailable",
        )
    if isinstance(err, TemporalFailed):
        # Temporal refused the call (overload, permissions...): said in the log, not to the
        # sender.
        log.warning("%s", err)
    # Unreachable, TemporalFailed: the sender should retry later.
    return temporal_unavailable()


def thread_closed(thread_id: str) -> DeliveryRefused:
    """The answer to a message for a thread that has ended."""
    return DeliveryRefused(
        410,
        f"thread {thread_id} is closed: it takes no message; start a new thread",
        code="thread_closed",
    )


def temporal_unavailable() -> DeliveryRefused:
    """The answer to a request Temporal could not take for now: nothing was recorded."""
    return DeliveryRefused(503, "Temporal is unavailable; retry later", code="temporal_unavailable")


def _unknown_message(thread_id: str, key: str, start: bool) -> DeliveryRefused:
    """The answer to a message the thread did not answer in time: Temporal may hold it for the
    thread's worker. Sent again with its key (and, a start, its thread id), it is the same
    message, never a second one."""
    again = f'`"thread_id": "{thread_id}"` and `"key": "{key}"`' if start else f'`"key": "{key}"`'
    return DeliveryRefused(
        504,
        f"thread {thread_id} did not answer in time, so whether it took the message is not "
        "known: Temporal holds it until the thread's worker takes it, and it may yet be taken; "
        f"send it again with {again} to learn what became of it (it is taken once)",
        code="outcome_unknown",
        retry_with={"thread_id": thread_id, "key": key} if start else {"key": key},
    )


def _unknown(key: str | None) -> DeliveryRefused:
    """The answer to a request the run did not answer in time after Temporal took it in."""
    again = f"send it again with `Idempotency-Key: {key}`" if key is not None else "send it again"
    return DeliveryRefused(
        504,
        "the run did not answer in time, so whether it took this is not known: Temporal holds "
        f"it until the run's worker takes it, and it may yet be applied; {again} to learn what "
        "became of it (it is applied once)",
        code="outcome_unknown",
        retry_with={"key": key} if key is not None else None,
    )
