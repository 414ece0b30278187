"""What reaches a run's long operations from outside: a job's completion or progress report,
sent as the run's `complete_operation` Update (what the gateway's webhooks deliver); a request
to check a job now, as its `check_operation` Update (the gateway's, when a job's system said it
ended without its result); and an A2A client's push configurations, sent as its `push_config`
Update."""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta

from waitstate.client._errors import CompletionRefused, UpdateRefused
from waitstate.client._updates import UpdateCalls, refuse_copy
from waitstate.names import CHECK_OPERATION_UPDATE, COMPLETE_OPERATION_UPDATE, PUSH_CONFIG_UPDATE
from waitstate.schemas.operations import (
    CheckOperation,
    CheckOutcome,
    CompleteOperation,
    CompletionOutcome,
)
from waitstate.schemas.pushes import PushConfigChange, PushConfigs

# How long `complete_operation` waits for the run to take a report. A run whose worker is down
# never answers; the report may still be applied once one runs.
COMPLETE_TIMEOUT = timedelta(seconds=20)
PUSH_CONFIG_TIMEOUT = timedelta(seconds=20)


def push_config_update_id(change: PushConfigChange) -> str:
    """The Update id of a change of a run's push configurations: its config's id and a digest
    of the change, so the same change sent again (its answer lost) is one Update."""
    text = json.dumps(change.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    name = change.config.id if change.config is not None else change.delete
    return f"push/{name}/{hashlib.sha256(text.encode()).hexdigest()[:16]}"


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

    async def check_operation(
        self,
        run_id: str,
        ask: CheckOperation,
        *,
        update_id: str,
        answer_within: timedelta = COMPLETE_TIMEOUT,
    ) -> CheckOutcome:
        """Ask the run to check one of its operations' jobs now (its `check_operation`
        Update): its system said the job ended without saying its result. Asks sent under one
        `update_id` are one Update, checked once.

        Raises:
            CompletionRefused: the run refused it (unknown operation, a nonce that is not the
                operation's, already resolved, a check asked already or too often, a job the
                run does not check), with the refusal's `error_type`.
            RunEnded, RunNotFound, RunUnavailable, OutcomeUnknown, Unreachable, TemporalFailed:
                as for `complete_operation`.
        """
        return await self._send_update(
            run_id,
            CHECK_OPERATION_UPDATE,
            ask,
            CheckOutcome,
            update_id=update_id,
            what="check",
            answer_within=answer_within,
            refused=CompletionRefused,
        )

    async def push_config(
        self,
        run_id: str,
        change: PushConfigChange,
        *,
        answer_within: timedelta = PUSH_CONFIG_TIMEOUT,
    ) -> PushConfigs:
        """Set or delete one of an A2A task run's push configurations (its `push_config`
        Update, under `push_config_update_id`): the run's configurations after it.

        Raises:
            UpdateRefused: the run refused it (too many configurations, a thread).
            RunEnded, RunNotFound, RunUnavailable, OutcomeUnknown, Unreachable, TemporalFailed:
                as for `complete_operation`.
        """
        return await self._send_update(
            run_id,
            PUSH_CONFIG_UPDATE,
            change,
            PushConfigs,
            update_id=push_config_update_id(change),
            what="push config",
            answer_within=answer_within,
            refused=UpdateRefused,
        )
