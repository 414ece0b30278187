"""Calling an activity from the run: its result, or a failure the run decides what to do with.

Cancellation is not a failure: it means the run itself is being cancelled (or a wait it no
longer needs was), so it propagates to whoever can act on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypedDict, TypeVar, Unpack

from temporalio import workflow
from temporalio.common import Priority, RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, is_cancelled_exception

T = TypeVar("T")


@dataclass(frozen=True)
class Failed:
    """An activity that failed for good: its retries are spent, or its error is final."""

    error: ActivityError

    @property
    def reason(self) -> str:
        """The activity's own error, without Temporal's wrapping."""
        return str(self.error.cause or self.error)

    @property
    def message(self) -> str:
        """The activity's own message: its `ApplicationError`'s, without the error's type."""
        cause = self.error.cause
        return cause.message if isinstance(cause, ApplicationError) else self.reason


@dataclass(frozen=True)
class Placement:
    """Where an activity is scheduled, and how the server weighs it there."""

    task_queue: str | None = None  # None: the run's own
    priority: Priority = Priority.default


# Where every activity went before model queues: the run's own queue, no priority of its own.
RUN_QUEUE = Placement()


class CallOptions(TypedDict, total=False):
    """What `call` passes on to `workflow.execute_activity` as it is (each None if not given,
    as there)."""

    start_to_close_timeout: timedelta | None
    schedule_to_close_timeout: timedelta | None
    heartbeat_timeout: timedelta | None
    retry_policy: RetryPolicy | None
    activity_id: str | None


async def call(
    activity: str,
    arg: Any,
    *,
    result_type: type[T],
    summary: str,
    placement: Placement = RUN_QUEUE,
    local: bool = False,
    **options: Unpack[CallOptions],
) -> T | Failed:
    """Run `activity` with `arg`: its result, or `Failed`. A `local` one runs in the worker
    that runs the workflow, recorded as one marker (no task of its own, no placement).

    Raises:
        ActivityError: the activity was cancelled (the run is being cancelled).
    """
    try:
        if local:
            result: T = await workflow.execute_local_activity(
                activity,
                arg,
                result_type=result_type,
                summary=summary,
                start_to_close_timeout=options.get("start_to_close_timeout"),
                schedule_to_close_timeout=options.get("schedule_to_close_timeout"),
                retry_policy=options.get("retry_policy"),
                activity_id=options.get("activity_id"),
            )
        else:
            result = await workflow.execute_activity(
                activity,
                arg,
                result_type=result_type,
                summary=summary,
                task_queue=placement.task_queue,
                priority=placement.priority,
                **options,
            )
    except ActivityError as err:
        if is_cancelled_exception(err):
            raise
        return Failed(err)
    return result
