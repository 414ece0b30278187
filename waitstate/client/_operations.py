"""What reaches a run's long operations from outside: a job's completion or progress report,
sent as the run's `complete_operation` Update (what the gateway's webhooks deliver)."""

from __future__ import annotations

from datetime import timedelta

from waitstate.client._errors import CompletionRefused
from waitstate.client._updates import UpdateCalls, refuse_copy
from waitstate.names import COMPLETE_OPERATION_UPDATE
from waitstate.schemas.operations import CompleteOperation, CompletionOutcome

# How long `complete_operation` waits for the run to take a report. A run whose worker is down
# never answers; the report may still be applied once one runs.
COMPLETE_TIMEOUT = timedelta(seconds=20)


class OperationCalls(UpdateCalls):
    """What `WaitstateClient` sends to a run's operations."""

    async def complete_operation(
        self,
        run_id: str,
        completion: CompleteOperation,
        *,
        update_id: str,
        key: str | None = None,
        answer_within: timedelta = COMPLETE_TIMEOUT,
    ) -> CompletionOutcome:
        """Send a report on one of the run's operations (its completion, or progress) as the
        run's `complete_operation` Update, and return what the run did with it (`applied` is
        False, and `reason` says why, if it recorded the report without applying it: e.g. the
        operation expired or was cancelled first).

        Args:
            completion: The report, with the resume token's nonce and this delivery's id: a
                report answered with another delivery's applied outcome is a copy.
            update_id: The report's Update id (`completion_update_id`): reports sent under the
                same id are one Update, applied once.
            key: What the sender must send again to reach the same Update, told with an
                unknown outcome (default: `update_id`).

        Raises:
            CompletionRefused: the run refused it (unknown operation, a nonce that is not the
                operation's, already resolved, a report that changes nothing), with the
                refusal's `error_type`.
            AlreadyApplied: a copy of a report another delivery got applied.
            RunEnded: the run has ended.
            RunNotFound: no such run.
            RunUnavailable: the run did not take it for now; send it again.
            OutcomeUnknown: the run did not answer within `answer_within` (with `key`); the
                report may still be applied once its worker runs.
            Unreachable: Temporal could not be reached.
            TemporalFailed: Temporal refused the call (e.g. permission denied).
        """
        outcome = await self._send_update(
            run_id,
            COMPLETE_OPERATION_UPDATE,
            completion,
            CompletionOutcome,
            update_id=update_id,
            what="completion",
            answer_within=answer_within,
            refused=CompletionRefused,
            key=key,
        )
        if outcome.applied:
            # Another request with the same Update id got there first; this one shares its
            # outcome. (One the run did not apply is the same answer to both: never applied.)
            refuse_copy(run_id, "completion", completion.delivery_id, outcome.delivery_id)
        return outcome
