"""Blob store outages: a call that meets one is tried again by the run, at a backoff of its own,
until the store is back; never charged to the call's own retries, never the end of the run.

A read-only or full directory, or object storage out of reach, is an infrastructure fault:
what the run had (an accepted completion, the model's reply) is not lost, only not stored yet.
The run calls the activities that keep the conversation (the model's, the MCP listing's)
through `StoreOutages`. In runs from HARDENED on, their retry policy leaves
`BLOB_STORE_UNAVAILABLE` to the run, which counts the attempts that failed otherwise against
the policy's budget; earlier runs call them as they did.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError

from waitstate.schemas import RunState
from waitstate.schemas.errors import BLOB_STORE_UNAVAILABLE
from waitstate.schemas.run import StoreFailure, StoreOutage
from workflows import ledger
from workflows.activity_calls import Failed, call
from workflows.policies import (
    STORE_RETRY_FIRST,
    STORE_RETRY_MAX,
    leaving_outages,
    patient,
)
from workflows.versions import Versions

T = TypeVar("T")
A = TypeVar("A")


class StoreOutages:
    """Calls that wait blob store outages out, shown in the run's state and steps meanwhile."""

    def __init__(self, state: RunState, versions: Versions, show: Callable[[], None]) -> None:
        self._state = state
        self._versions = versions
        self._show = show  # brings the Web UI's details up to date

    async def call(
        self,
        activity: str,
        arg: A,
        *,
        result_type: type[T],
        summary: str,
        what: str,
        start_to_close_timeout: timedelta,
        retry_policy: RetryPolicy,
        again: Callable[[A, StoreFailure], A] | None = None,
        on_outage: Callable[[A], Awaitable[None]] | None = None,
    ) -> T | Failed:
        """`activity`'s result, or `Failed` for any failure but the store's (runs before
        HARDENED: for any failure, the store's spending the call's retries as before).

        Args:
            what: What waits, for people (`model call`).
            retry_policy: The call's own; its attempts that failed otherwise before an outage
                are spent, whichever activity spent them.
            again: The argument of the next try, given the outage's details (e.g. with the
                model's reply, which it gave before the store failed). Once a failure hands
                back such work, the next try is one activity that Temporal itself retries
                until the store takes it: the history holds that work once, not once a try.
            on_outage: Called with the next try's argument before each wait (e.g. to
                continue as new when the history grew too long meanwhile).
        """
        if not self._versions.hardened:
            return await call(
                activity,
                arg,
                result_type=result_type,
                summary=summary,
                start_to_close_timeout=start_to_close_timeout,
                retry_policy=retry_policy,
            )
        spent = 0
        tries = 0
        handed_back = False
        while True:
            result: T | Failed = await call(
                activity,
                arg,
                result_type=result_type,
                summary=summary,
                start_to_close_timeout=start_to_close_timeout,
                retry_policy=(
                    patient(retry_policy) if handed_back else leaving_outages(retry_policy, spent)
                ),
            )
            failure = _store_failure(result)
            if failure is None:
                if self._state.store_outage is not None:  # (begun here, or before a continue)
                    self._over()
                return result
            details = _details(failure)
            tries += 1
            spent += details.attempt - 1
            if again is not None:
                arg = again(arg, details)
                handed_back = details.answered is not None
            delay = min(STORE_RETRY_FIRST * 2 ** (tries - 1), STORE_RETRY_MAX)
            self._note(what, failure.message, delay)
            if on_outage is not None:
                await on_outage(arg)
            await workflow.sleep(delay)

    def _note(self, what: str, error: str, delay: timedelta) -> None:
        now = workflow.now()
        outage = self._state.store_outage
        if outage is None:
            ledger.step(
                self._state,
                "event",
                "blob store",
                f"unavailable: {ledger.preview(error)}; the {what} waits for it",
                is_error=True,
            )
        self._state.store_outage = StoreOutage(
            call=what,
            since=outage.since if outage is not None else now,
            tries=outage.tries + 1 if outage is not None else 1,
            error=ledger.preview(error, ledger.FAILURE_CHARS),
            next_try_at=now + delay,
        )
        self._show()

    def _over(self) -> None:
        outage = self._state.store_outage
        if outage is not None:
            lasted = workflow.now() - outage.since
            ledger.step(
                self._state,
                "event",
                "blob store",
                f"back after {lasted} ({outage.tries} tries of the {outage.call} met the outage)",
            )
        self._state.store_outage = None
        self._show()


def _store_failure(result: object) -> ApplicationError | None:
    if not isinstance(result, Failed):
        return None
    cause = result.error.cause
    if isinstance(cause, ApplicationError) and cause.type == BLOB_STORE_UNAVAILABLE:
        return cause
    return None


def _details(failure: ApplicationError) -> StoreFailure:
    """What the activity said of the outage. One that let the store's error through says
    nothing: taken as its first attempt (any failed before it are not counted)."""
    details: Sequence[Any] = failure.details
    if details and isinstance(details[0], dict):
        return StoreFailure.model_validate(details[0])
    return StoreFailure(attempt=1)
