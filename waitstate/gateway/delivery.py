"""Delivering verified completions, decisions and answers to the runs they are for, as Temporal
Updates.

Every request is answered truthfully: with the run's outcome; with a refusal that recorded
nothing; or, when the run did not answer in time after Temporal took the Update in, as unknown
(504 `outcome_unknown`): Temporal holds an admitted Update until the run's worker takes it, so
it may yet be applied. A retry is the same Update (its id comes from the request), so it is
applied once and answered with what became of the first. A request whose token has expired
since its first delivery learns what became of that delivery, and applies nothing
(`TemporalDeliverer` reads the run's Update under the request's id: `recall`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, TypeVar
from uuid import uuid4

from pydantic import BaseModel
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import UpdateWorkflowExecutionLifecycleStage
from temporalio.api.update.v1 import UpdateRef, WaitPolicy
from temporalio.api.workflowservice.v1 import PollWorkflowExecutionUpdateRequest
from temporalio.client import (
    Client,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.exceptions import ApplicationError, TemporalError
from temporalio.service import RPCError, RPCStatusCode

from waitstate.auth.tokens import ResumeClaims
from waitstate.client._updates import (
    DESCRIBE_TIMEOUT,
    RpcRefusal,
    answer_update_id,
    decision_update_id,
    rpc_refusal,
)
from waitstate.names import ANSWER_UPDATE, COMPLETE_OPERATION_UPDATE, DECIDE_UPDATE
from waitstate.schemas.approvals import DecideInput, DecideOutcome, DecisionBody
from waitstate.schemas.errors import (
    APPROVAL_DECIDED,
    APPROVAL_NONCE_MISMATCH,
    APPROVAL_NOT_READY,
    APPROVAL_UNKNOWN,
    OPERATION_NONCE_MISMATCH,
    OPERATION_RESOLVED,
    OPERATION_UNCHANGED,
    OPERATION_UNKNOWN,
    QUESTION_CLOSED,
    QUESTION_INVALID_ANSWER,
    QUESTION_NONCE_MISMATCH,
    QUESTION_NOT_YOURS,
    QUESTION_UNKNOWN,
)
from waitstate.schemas.operations import CompleteOperation, Completion, CompletionOutcome
from waitstate.schemas.questions import AnswerBody, AnswerInput, AnswerOutcome

# How long one webhook call may wait for the run to take its completion, decision or answer
# (an answer's Update returns once the job has it). A run whose worker is down never answers;
# past this the caller gets a 504 `outcome_unknown` (Temporal holds the Update for the worker)
# and retries later: a retried completion, decision or answer is the same Update, so it cannot
# be applied twice (a decision's or a completion's copy is answered 409, already applied; an
# answer's gets the first one's outcome).
DELIVERY_TIMEOUT = timedelta(seconds=20)
# How long a decision through a link not yet confirmed by its run is retried before a 503
# (with the run's worker up, confirmation takes milliseconds).
NOT_READY_PATIENCE = timedelta(seconds=5)
NOT_READY_RETRY = timedelta(milliseconds=200)
# How many runs of a chain (a run and those it continued as, newest first) a request whose
# token has expired looks in for its earlier delivery's Update: Temporal keeps an Update's
# outcome in the run that took it.
RECALL_RUNS = 20
_ADMITTED = UpdateWorkflowExecutionLifecycleStage.UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_ADMITTED

_Outcome = TypeVar("_Outcome", CompletionOutcome, DecideOutcome, AnswerOutcome)

# What an Update's RPC failure (`rpc_refusal`) tells its sender, but Temporal unavailable
# (`_unavailable`): (HTTP status, message); its error code is the refusal's name.
_RPC_REFUSALS: dict[RpcRefusal, tuple[int, str]] = {
    "unknown_run": (404, "unknown run"),
    "run_ended": (409, "the run has ended"),
    "run_unavailable": (503, "the run did not take it; retry later"),
}

# ApplicationError types of the Update validators -> (HTTP status, error code). The type names
# of the Updates are distinct, so one table serves them all.
_REJECTIONS = {
    OPERATION_UNKNOWN: (404, "operation_unknown"),
    OPERATION_NONCE_MISMATCH: (401, "nonce_mismatch"),
    OPERATION_RESOLVED: (409, "operation_resolved"),
    OPERATION_UNCHANGED: (409, "duplicate_report"),
    APPROVAL_UNKNOWN: (404, "approval_unknown"),
    APPROVAL_NONCE_MISMATCH: (401, "nonce_mismatch"),
    APPROVAL_DECIDED: (409, "approval_decided"),
    APPROVAL_NOT_READY: (503, "approval_not_ready"),
    QUESTION_UNKNOWN: (404, "question_unknown"),
    QUESTION_NONCE_MISMATCH: (401, "nonce_mismatch"),
    QUESTION_CLOSED: (409, "question_closed"),
    QUESTION_NOT_YOURS: (403, "question_not_yours"),
    QUESTION_INVALID_ANSWER: (422, "invalid_answer"),
}


class DeliveryRefused(Exception):
    """The run did not take the completion, decision or answer, or did not answer in time
    (`outcome_unknown`); `status_code` is the HTTP answer, `retry_with` what a retry must
    carry (`key`, a start's `thread_id`)."""

    def __init__(
        self,
        status_code: int,
        message: str,
        *,
        code: str | None = None,
        retry_with: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.code = code
        self.retry_with = dict(retry_with or {})


class Deliverer(Protocol):
    """Hands completions, decisions and answers to the runs they are for."""

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

        Raises:
            DeliveryRefused: the run refused it, or could not be reached.
        """
        ...

    async def decide(
        self, claims: ResumeClaims, request_id: str, body: DecisionBody
    ) -> DecideOutcome:
        """Deliver a decision on approval request `request_id` of the run `claims` names.

        Returns:
            What the run did; `accepted` is False if it recorded the decision without
            applying it.

        Raises:
            DeliveryRefused: the run refused it, or could not be reached.
        """
        ...

    async def answer(
        self, claims: ResumeClaims, question_id: str, body: AnswerBody
    ) -> AnswerOutcome:
        """Deliver an answer to question `question_id` of the run `claims` names.

        Returns:
            What the run did, once the job that asked has the answer; `delivered` is False
            (and `reason` says why) if the job did not take it.

        Raises:
            DeliveryRefused: the run refused it, or could not be reached.
        """
        ...


def update_id(
    operation_id: str, completion: Completion, delivery_id: str, report_id: str | None = None
) -> str:
    """The Update id for one report on an operation.

    Temporal answers every Update that reuses an id with the first one's outcome, so copies of
    one report sent concurrently or retried collapse into one Update (and stay under the run's
    cap on Updates in flight).

    - A final report (`succeeded`, `failed`) is known by its body: an operation ends once, so
      two identical final reports are one, whatever the sender calls them.
    - A progress report (`running`, `input_required`) is known by the sender's id for it
      (`report_id`), else by this request alone (its `delivery_id`, which the gateway hands a
      sender whose outcome is unknown as the key to send again, as `Idempotency-Key`): two
      reports with the same body (`running` 50%, `input_required`, `running` 50% again) are
      two reports, and neither may be answered with the other's outcome. A copy that would
      change nothing the operation shows is refused by the run (`duplicate_report`) before it
      reaches its history.
    """
    if completion.status in ("succeeded", "failed"):
        text = json.dumps(completion.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        key = f"final\x00{text}"
    else:
        key = f"report\x00{report_id or delivery_id}"
    return f"complete/{operation_id}/{hashlib.sha256(key.encode()).hexdigest()[:16]}"


class TemporalDeliverer:
    """Delivers completions with the run's `complete_operation` Update, decisions with its
    `decide` Update and answers with its `answer` Update.

    Given the claims of a token past its expiry (the gateway admits them for this deliverer
    only), each sends nothing: it answers what became of the same request delivered earlier,
    while the token was valid (`recall`), or refuses it as expired (410) if none was.
    """

    def __init__(self, client: Client, *, timeout: timedelta = DELIVERY_TIMEOUT) -> None:
        self._client = client
        self._timeout = timeout
        # Whether Temporal has answered a call of this deliverer's yet: until then, a client
        # connected lazily may fail a call for having no connection (see `_refusals`).
        self._reached = False

    @property
    def client(self) -> Client:
        """The Temporal client it delivers with (the pages read the runs they show with it)."""
        return self._client

    async def complete(
        self,
        claims: ResumeClaims,
        completion: Completion,
        delivery_id: str,
        report_id: str | None = None,
    ) -> CompletionOutcome:
        """Send the completion as an Update and wait for the run's outcome.

        Raises:
            DeliveryRefused: 404 unknown run or operation, 401 nonce mismatch, 409 already
                resolved (expired and cancelled included), not applied, a duplicate or the
                run has ended, 410 the token has expired (and no earlier delivery of this
                report was taken), 503 Temporal could not be reached, 504 the run did not
                answer in time (with the report's key: `report_id`, else `delivery_id`).
        """
        id = update_id(claims.operation_id, completion, delivery_id, report_id)
        if _expired(claims):
            outcome = await self.recall(claims, id, CompletionOutcome)
        else:
            update = CompleteOperation(
                operation_id=claims.operation_id,
                nonce=claims.nonce,
                delivery_id=delivery_id,
                completion=completion,
            )
            outcome = await self._update(
                claims,
                COMPLETE_OPERATION_UPDATE,
                update,
                id=id,
                result_type=CompletionOutcome,
                key=report_id or delivery_id,
            )
        if not outcome.applied:
            # The run recorded it without applying it (e.g. the operation expired or was
            # cancelled first): it will never apply, so retrying cannot help.
            raise DeliveryRefused(409, outcome.reason or "not applied", code="not_applied")
        if outcome.delivery_id != delivery_id:
            # Another request with the same body got there first; this one shares its Update.
            raise _copy_refused("completion")
        return outcome

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
        update = DecideInput(
            **body.model_dump(), request_id=request_id, nonce=claims.nonce, delivery_id=delivery_id
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + NOT_READY_PATIENCE.total_seconds()
        while True:
            try:
                if _expired(claims):
                    outcome = await self.recall(claims, id, DecideOutcome)
                else:
                    outcome = await self._update(
                        claims, DECIDE_UPDATE, update, id=id, result_type=DecideOutcome
                    )
                break
            except DeliveryRefused as refused:
                # A link used the moment it was posted: the run confirms it within moments,
                # or after a worker restart. Rejected Updates leave no trace, so asking again
                # (same Update id) is safe.
                if refused.code != "approval_not_ready" or loop.time() >= deadline:
                    raise
                await asyncio.sleep(NOT_READY_RETRY.total_seconds())
        if outcome.delivery_id and outcome.delivery_id != delivery_id:
            # The same decision got there first (Temporal answered this request, which reused
            # its Update id, with its outcome): a copy, not applied.
            raise _copy_refused("decision")
        return outcome

    async def answer(
        self, claims: ResumeClaims, question_id: str, body: AnswerBody
    ) -> AnswerOutcome:
        """Send the answer as the run's `answer` Update and wait for the run's outcome, which
        comes once the job that asked has the answer (or refused it).

        Copies of an answer (a link used twice, a retry) share its Update, so it is applied
        once, and they get its outcome: unlike a decision's copy, an answer's is not refused,
        because the Update lasts until the job has the answer, long enough for a sender to
        time out and retry, and the retry must learn what became of its answer.

        Raises:
            DeliveryRefused: 404 unknown run or question, 401 nonce mismatch, 403 the question
                is the model's to answer, 409 already answered, declined, expired or
                cancelled, or the run has ended, 410 the token has expired (and no earlier
                delivery of this answer was taken), 422 content that does not match the
                question's schema, 503 Temporal could not be reached, 504 the run did not
                answer in time.
        """
        id = answer_update_id(question_id, body)
        if _expired(claims):
            return await self.recall(claims, id, AnswerOutcome)
        delivery_id = uuid4().hex
        update = AnswerInput(
            **body.model_dump(),
            question_id=question_id,
            nonce=claims.nonce,
            delivery_id=delivery_id,
        )
        return await self._update(claims, ANSWER_UPDATE, update, id=id, result_type=AnswerOutcome)

    async def recall(
        self, claims: ResumeClaims, update_id: str, result_type: type[_Outcome]
    ) -> _Outcome:
        """The outcome of the Update `update_id` that an earlier delivery of a request sent to
        the run `claims` names, while the request's token was valid: what the request is
        answered with once its token has expired. Nothing is sent to the run.

        Sound where judging the token against the request's first delivery would not be: the
        Update id is the request's identity (its body, or its sender's id for it), and the run
        keeps its outcome, so the answer is the run's own record; and an expired token can only
        read that record, never add to it.

        Raises:
            DeliveryRefused: 410 the token has expired and no run of the chain has the Update
                (it never reached one, or a validator refused it: refusals leave none); 504 the
                Update was taken in but has no outcome yet; the run's failure of the Update;
                503 Temporal could not be reached.
        """
        workflow_id = claims.workflow_id
        try:
            async with asyncio.timeout(self._timeout.total_seconds()):
                found = await self._find_update(workflow_id, update_id)
                if found is None:
                    raise DeliveryRefused(
                        410,
                        f"the token expired at {claims.expires_at.isoformat()}, and the run took "
                        "no earlier delivery of this request",
                        code="token_expired",
                    )
                run_id, completed = found
                if not completed:
                    raise DeliveryRefused(
                        504,
                        "the token has expired, and an earlier delivery of this request, taken "
                        "in while it was valid, has no outcome yet: it may yet be applied; send "
                        "it again later to learn what became of it",
                        code="outcome_unknown",
                    )
                handle = self._client.get_workflow_handle(workflow_id, run_id=run_id or None)
                update = handle.get_update_handle(update_id, result_type=result_type)
                outcome: _Outcome = await update.result(rpc_timeout=DESCRIBE_TIMEOUT)
        except WorkflowUpdateFailedError as err:
            raise _rejected(err.cause) from err
        except (RPCError, TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError) as err:
            raise _unavailable() from err
        return outcome

    async def _find_update(self, workflow_id: str, update_id: str) -> tuple[str, bool] | None:
        """Which run of the chain `workflow_id` names holds the Update `update_id` (its run id,
        "" for the latest), and whether it has its outcome; None if none does, of the chain's
        newest `RECALL_RUNS`."""
        completed = await self._update_stage(workflow_id, "", update_id)
        if completed is not None:
            return "", completed
        escaped = workflow_id.replace("\\", "\\\\").replace('"', '\\"')
        runs = self._client.list_workflows(f'WorkflowId = "{escaped}"', limit=RECALL_RUNS)
        async for run in runs:
            completed = await self._update_stage(workflow_id, run.run_id, update_id)
            if completed is not None:
                return run.run_id, completed
        return None

    async def _update_stage(self, workflow_id: str, run_id: str, update_id: str) -> bool | None:
        """Whether the run (its latest, for "") has the Update `update_id`'s outcome: None if it
        has no such Update, False if it has taken it in only."""
        request = PollWorkflowExecutionUpdateRequest(
            namespace=self._client.namespace,
            update_ref=UpdateRef(
                workflow_execution=WorkflowExecution(workflow_id=workflow_id, run_id=run_id),
                update_id=update_id,
            ),
            identity=self._client.identity,
            # Answered at once: an Update is past this stage as soon as Temporal has it.
            wait_policy=WaitPolicy(lifecycle_stage=_ADMITTED),
        )
        try:
            polled = await self._client.workflow_service.poll_workflow_execution_update(
                request, timeout=DESCRIBE_TIMEOUT
            )
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return None
            raise
        return polled.HasField("outcome")

    async def _update(
        self,
        claims: ResumeClaims,
        update: str,
        arg: BaseModel,
        *,
        id: str,
        result_type: type[_Outcome],
        key: str | None = None,
    ) -> _Outcome:
        """The outcome of the Update `update` of the run `claims` names, with `arg` and Update
        id `id`, bounded by the timeout; its failures raised as `DeliveryRefused` (an unknown
        outcome's with `key`, the request's idempotency key, if it has one the body is not)."""
        handle = self._client.get_workflow_handle(claims.workflow_id)
        async with self._refusals(handle, key):
            outcome: _Outcome = await handle.execute_update(
                update, arg, id=id, result_type=result_type
            )
        return outcome

    @contextlib.asynccontextmanager
    async def _refusals(
        self, handle: WorkflowHandle[Any, Any], key: str | None = None
    ) -> AsyncIterator[None]:
        """Bound an Update call to the run `handle` names by the timeout, and turn its failures
        into `DeliveryRefused` (an unknown outcome's with `key`)."""
        try:
            async with asyncio.timeout(self._timeout.total_seconds()):
                yield
            self._reached = True
        except WorkflowUpdateFailedError as err:
            self._reached = True
            raise _rejected(err.cause) from err
        except RPCError as err:
            self._reached = True
            raise await _rpc_refused(err, handle) from err
        except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError) as err:
            # Not a refusal: Temporal may have admitted the Update, and holds it for the run's
            # worker, which may yet apply it.
            raise _unknown(key) from err
        except TemporalError as err:
            raise DeliveryRefused(
                503, f"could not deliver: {err}", code="temporal_unavailable"
            ) from err
        except RuntimeError as err:
            # A client connected lazily connects on its first call, and fails it with a bare
            # RuntimeError when Temporal cannot be reached; once Temporal has answered, a
            # RuntimeError is not that.
            if self._reached or not self._client.service_client.config.lazy:
                raise
            raise _unavailable() from err


def _expired(claims: ResumeClaims) -> bool:
    """Whether the token the claims are of has expired (the gateway admitted it for `recall`)."""
    return claims.expires_at <= datetime.now(UTC)


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


def _copy_refused(what: str) -> DeliveryRefused:
    """The refusal of a copy of a completion or decision already applied: Temporal answered it,
    as it reused the Update id of the first, with the first one's outcome."""
    return DeliveryRefused(409, f"duplicate {what}: already applied", code=f"duplicate_{what}")


def _rejected(cause: BaseException) -> DeliveryRefused:
    if isinstance(cause, ApplicationError) and cause.type in _REJECTIONS:
        status, code = _REJECTIONS[cause.type]
        return DeliveryRefused(status, cause.message, code=code)
    # E.g. the run completed while the Update was in flight.
    message = cause.message if isinstance(cause, ApplicationError) else str(cause)
    return DeliveryRefused(409, message or "the run refused the update", code="refused")


async def _rpc_refused(err: RPCError, handle: WorkflowHandle[Any, Any]) -> DeliveryRefused:
    """What an RPC failure of an Update to the run `handle` names means to its sender (the
    client's `rpc_refusal`), in HTTP: the run has ended (409), there is no such run (404), the
    run did not take it for now, or Temporal is unavailable (503)."""
    refusal = await rpc_refusal(err, handle)
    if refusal == "temporal_unavailable":
        return _unavailable()
    status, message = _RPC_REFUSALS[refusal]
    return DeliveryRefused(status, message, code=refusal)


def _unavailable() -> DeliveryRefused:
    return DeliveryRefused(503, "Temporal is unavailable; retry later", code="temporal_unavailable")
