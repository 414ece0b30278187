"""Blob store outages: a call that meets one is tried again by the run, at a backoff of its own,
until the store is back; never charged to the call's own retries, never the end of the run.

A read-only or full directory, or object storage out of reach, is an infrastructure fault:
what the run had (an accepted completion, the model's reply) is not lost, only not stored yet.
The run calls the activities that keep the conversation (the model's, the MCP listing's)
through `StoreOutages`: their retry policy leaves `BLOB_STORE_UNAVAILABLE` to the run, which
counts the attempts that failed otherwise against the policy's budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError

from waitstate.schemas import RunState
from waitstate.schemas.errors import BLOB_STORE_UNAVAILABLE
from waitstate.schemas.run import StoreFailure, StoreOutage

from . import ledger
from .activity_calls import RUN_QUEUE, Failed, Placement, call
from .board import StatusBoard
from .policies import (
    STORE_RETRY_FIRST,
    STORE_RETRY_MAX,
    leaving_outages,
    patient,
)

T = TypeVar("T")
A = TypeVar("A")


@dataclass(frozen=True)
class StoreDown:
    """A try that met a blob store outage: what the activity said of it (`failure.answered`:
    the model's reply, given before the store failed, to hand back in the next try), and how
    long to wait before that try."""

    failure: StoreFailure
    delay: timedelta


class StoreOutages:
    """Calls that wait blob store outages out, shown in the run's state and steps meanwhile.

    The caller writes the loop: `tries(...)` gives a call that returns `StoreDown` while the
    store is out; the caller decides the next try's argument (and whether to continue as new
    first), sleeps `delay`, and tries again.
    """

    def __init__(self, state: RunState, board: StatusBoard) -> None:
        self._state = state
        self._board = board

    def tries(self, what: str, retry_policy: RetryPolicy) -> StoreTries:
        """The tries of one call, for people `what` (`model call`), under its own
        `retry_policy`: its attempts that failed otherwise before an outage are spent,
        whichever activity spent them."""
        return StoreTries(self, what, retry_policy)

    def note(self, what: str, error: str, delay: timedelta) -> None:
        """A try of `what` met the outage: it is shown, with when the next try comes."""
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
        self._board.show()

    def over(self) -> None:
        """A call went through: an outage shown (begun here, or before a continue) is over."""
        outage = self._state.store_outage
        if outage is None:
            return
        lasted = workflow.now() - outage.since
        ledger.step(
            self._state,
            "event",
            "blob store",
            f"back after {lasted} ({outage.tries} tries of the {outage.call} met the outage)",
        )
        self._state.store_outage = None
        self._board.show()


class StoreTries:
    """One call's tries through an outage (see `StoreOutages.tries`)."""

    def __init__(self, outages: StoreOutages, what: str, retry_policy: RetryPolicy) -> None:
        self._outages = outages
        self._what = what
        self._retry_policy = retry_policy
        self._spent = 0
        self._tries = 0
        # Once a failure hands back work (the model's reply), the next try is one activity that
        # Temporal itself retries until the store takes it: the history holds that work once.
        self._handed_back = False

    async def call(
        self,
        activity: str,
        arg: A,
        *,
        result_type: type[T],
        summary: str,
        start_to_close_timeout: timedelta,
        heartbeat_timeout: timedelta | None = None,
        hands_back: bool = False,
        placement: Placement = RUN_QUEUE,
    ) -> T | Failed | StoreDown:
        """`activity`'s result, `Failed` for any failure but the store's, or `StoreDown`.
        `hands_back`: the activity may hand back work it did before the
        store failed (`StoreFailure.answered`). `placement`: its queue and priority."""
        result: T | Failed = await call(
            activity,
            arg,
            result_type=result_type,
            summary=summary,
            start_to_close_timeout=start_to_close_timeout,
            heartbeat_timeout=heartbeat_timeout,
            retry_policy=(
                patient(self._retry_policy)
                if self._handed_back
                else leaving_outages(self._retry_policy, self._spent)
            ),
            placement=placement,
        )
        failure = _store_failure(result)
        if failure is None:
            self._outages.over()
            return result
        details = _details(failure)
        self._tries += 1
        self._spent += details.attempt - 1
        if hands_back:
            self._handed_back = details.answered is not None
        delay = min(STORE_RETRY_FIRST * 2 ** (self._tries - 1), STORE_RETRY_MAX)
        self._outages.note(self._what, failure.message, delay)
        return StoreDown(details, delay)


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
