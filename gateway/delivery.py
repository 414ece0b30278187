"""Delivering a verified completion to the run that owns the operation, as a Temporal Update."""

from __future__ import annotations

import asyncio
import hashlib
import json
from datetime import timedelta
from typing import Protocol

from temporalio.client import (
    Client,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.exceptions import ApplicationError, TemporalError
from temporalio.service import RPCError, RPCStatusCode

from gateway.tokens import ResumeClaims
from schemas.errors import OPERATION_NONCE_MISMATCH, OPERATION_RESOLVED, OPERATION_UNKNOWN
from schemas.operations import CompleteOperation, Completion, CompletionOutcome
from workflows.agent_run import AgentRunWorkflow

# How long one webhook call may wait for the run to take its completion. A run whose worker is
# down never answers; past this the caller gets a 503 and retries later (a retry of the same
# body is the same Update, so it cannot be applied twice).
DELIVERY_TIMEOUT = timedelta(seconds=20)

# ApplicationError types of the Update validator -> (HTTP status, error code).
_REJECTIONS = {
    OPERATION_UNKNOWN: (404, "operation_unknown"),
    OPERATION_NONCE_MISMATCH: (401, "nonce_mismatch"),
    OPERATION_RESOLVED: (409, "operation_resolved"),
}


class DeliveryRefused(Exception):
    """The completion was not applied; `status_code` is the HTTP answer to the caller."""

    def __init__(self, status_code: int, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.code = code


class Deliverer(Protocol):
    """Hands a completion to the run that owns the operation."""

    async def complete(
        self, claims: ResumeClaims, completion: Completion, delivery_id: str
    ) -> CompletionOutcome:
        """Deliver `completion` for the operation `claims` names and report what the run did.

        Raises:
            DeliveryRefused: the run refused it, or could not be reached.
        """
        ...


def update_id(operation_id: str, completion: Completion) -> str:
    """The Update id for one report on an operation: the same report always gets the same id.

    Temporal answers every Update that reuses an id with the first one's outcome, so identical
    webhooks sent concurrently or retried collapse into one Update. The body is part of the id
    because an operation may receive several different reports (`running` 40%, `running` 80%,
    then `succeeded`): an id per operation alone would answer each later report with the first
    one's outcome and never apply it.
    """
    body = json.dumps(completion.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return f"complete/{operation_id}/{hashlib.sha256(body.encode()).hexdigest()[:16]}"


class TemporalDeliverer:
    """Delivers completions with the run's `complete_operation` Update."""

    def __init__(self, client: Client, *, timeout: timedelta = DELIVERY_TIMEOUT) -> None:
        self._client = client
        self._timeout = timeout

    async def complete(
        self, claims: ResumeClaims, completion: Completion, delivery_id: str
    ) -> CompletionOutcome:
        """Send the completion as an Update and wait for the run's outcome.

        Raises:
            DeliveryRefused: 404 unknown run or operation, 401 nonce mismatch, 409 already
                resolved, not applied, a duplicate or the run has ended, 503 Temporal could
                not be reached or the run did not answer in time.
        """
        handle = self._client.get_workflow_handle(claims.workflow_id)
        update = CompleteOperation(
            operation_id=claims.operation_id,
            nonce=claims.nonce,
            delivery_id=delivery_id,
            completion=completion,
        )
        try:
            async with asyncio.timeout(self._timeout.total_seconds()):
                outcome = await handle.execute_update(
                    AgentRunWorkflow.complete_operation,
                    update,
                    id=update_id(claims.operation_id, completion),
                )
        except WorkflowUpdateFailedError as err:
            raise _rejected(err.cause) from err
        except RPCError as err:
            raise _rpc_refusal(err) from err
        except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError) as err:
            raise DeliveryRefused(
                503, "the run did not answer in time; retry later", code="run_unavailable"
            ) from err
        except TemporalError as err:
            raise DeliveryRefused(
                503, f"could not deliver: {err}", code="temporal_unavailable"
            ) from err
        if not outcome.applied:
            # The run recorded it without applying it (e.g. the operation expired or was
            # cancelled first): it will never apply, so retrying cannot help.
            raise DeliveryRefused(409, outcome.reason or "not applied", code="not_applied")
        if outcome.delivery_id != delivery_id:
            # Another request with the same body got there first; this one shares its Update.
            raise DeliveryRefused(
                409, "duplicate completion: already applied", code="duplicate_completion"
            )
        return outcome


def _rejected(cause: BaseException) -> DeliveryRefused:
    if isinstance(cause, ApplicationError) and cause.type in _REJECTIONS:
        status, code = _REJECTIONS[cause.type]
        return DeliveryRefused(status, cause.message, code=code)
    # E.g. the run completed while the Update was in flight.
    message = cause.message if isinstance(cause, ApplicationError) else str(cause)
    return DeliveryRefused(409, message or "the run refused the completion", code="refused")


def _rpc_refusal(err: RPCError) -> DeliveryRefused:
    ended = err.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.FAILED_PRECONDITION)
    if ended and "already completed" in err.message.lower():
        return DeliveryRefused(409, "the run has ended", code="run_ended")
    if err.status == RPCStatusCode.NOT_FOUND:
        return DeliveryRefused(404, "unknown run", code="unknown_run")
    # Unreachable server, overload, auth to Temporal...: the caller should try again later.
    return DeliveryRefused(503, "Temporal is unavailable; retry later", code="temporal_unavailable")
