"""The fleet at a glance (runs by status and by what they wait for, overdue waits, recent
failures), and the blob cleanup, once or on a schedule."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import FailureError
from temporalio.service import RPCError

from waitstate.cleanup import DEFAULT_EVERY, clean_blobs, schedule_blob_cleanup
from waitstate.client._base import AGENT_RUNS, ClientBase, run_status
from waitstate.client._errors import CleanupFailed, first_line
from waitstate.names import AGENT_STATUS, PENDING_OPERATIONS, WAIT_EXPIRES_AT, WAITING_FOR
from waitstate.schemas.cleanup import CleanResult

# `fleet` reads at most this many runs per visibility query.
FLEET_LIMIT = 1000
# `fleet` reports runs that failed within this window.
FAILURE_WINDOW = timedelta(hours=24)
FAILED_STATUSES = ("failed", "approval_expired", "output_invalid", "budget_exceeded")
FAILED_EXECUTIONS = (
    WorkflowExecutionStatus.FAILED,
    WorkflowExecutionStatus.TIMED_OUT,
    WorkflowExecutionStatus.TERMINATED,
)


@dataclass(frozen=True)
class FleetRun:
    """A running run, as its search attributes show it."""

    run_id: str
    started: datetime
    agent_status: str | None
    waiting_for: str | None
    pending_operations: int | None
    wait_expires_at: datetime | None


@dataclass(frozen=True)
class ClosedRun:
    """A run that closed within the failure window."""

    run_id: str
    closed: datetime | None
    agent_status: str | None
    execution_status: WorkflowExecutionStatus | None


@dataclass(frozen=True)
class Fleet:
    """What visibility knew of the runs at `read_at`."""

    read_at: datetime
    running: list[FleetRun]
    closed: list[ClosedRun]


@dataclass(frozen=True)
class Wait:
    """A running run that waits for something."""

    run_id: str
    waiting_for: str
    pending_operations: int
    started: datetime
    expires_at: datetime | None
    overdue: bool  # past its expiry and still open: is a worker down?


@dataclass(frozen=True)
class FailedRun:
    """A run that failed within the failure window."""

    run_id: str
    status: str
    closed: datetime | None


@dataclass(frozen=True)
class FleetReport:
    """The fleet at a glance."""

    running_by_status: dict[str, int]
    waiting_for: dict[str, int]
    oldest_wait: Wait | None
    overdue: list[Wait]
    recent_failures: list[FailedRun]


def fleet_report(fleet: Fleet) -> FleetReport:
    """Aggregate what `WaitstateClient.fleet` read: running runs by status and by what they
    wait for, the oldest wait, waits past their expiry, and failures."""
    by_status: dict[str, int] = {}
    by_wait: dict[str, int] = {}
    waits: list[Wait] = []
    for run in fleet.running:
        status = run.agent_status or "running"
        by_status[status] = by_status.get(status, 0) + 1
        waiting_for = run.waiting_for or "none"
        if waiting_for == "none":
            continue
        by_wait[waiting_for] = by_wait.get(waiting_for, 0) + 1
        expires = run.wait_expires_at
        overdue = expires is not None and expires < fleet.read_at
        waits.append(
            Wait(
                run.run_id, waiting_for, run.pending_operations or 0, run.started, expires, overdue
            )
        )
    waits.sort(key=lambda wait: wait.started)
    failures = [
        FailedRun(run.run_id, status, run.closed)
        for run in fleet.closed
        if (status := run_status(run.agent_status, run.execution_status)) in FAILED_STATUSES
        or run.execution_status in FAILED_EXECUTIONS
    ]
    return FleetReport(
        running_by_status=by_status,
        waiting_for=by_wait,
        oldest_wait=waits[0] if waits else None,
        overdue=[wait for wait in waits if wait.overdue],
        recent_failures=failures,
    )


class FleetCalls(ClientBase):
    """What `WaitstateClient` does for the fleet: take it in at a glance, clean its blobs."""

    async def clean_blobs(self, *, retention: timedelta | None = None) -> CleanResult:
        """Run the blob cleanup once, on the fleet's workers, and return what it did.

        Args:
            retention: How long after a run ends its blobs are kept (None: the namespace's
                workflow retention).

        Raises:
            CleanupFailed: the cleanup failed (its reason is the message).
            TemporalFailed: Temporal refused to start it.
        """
        try:
            return await clean_blobs(self._client, self._task_queue, retention=retention)
        except WorkflowFailureError as err:
            cause: BaseException | None = err.cause
            while isinstance(cause, FailureError) and cause.cause is not None:
                cause = cause.cause  # the activity's own error, under Temporal's wrapping
            raise CleanupFailed(f"the blob cleanup failed: {first_line(cause)}") from err
        except RPCError as err:
            self._raise(err, None, "could not run the blob cleanup")

    async def schedule_blob_cleanup(
        self, *, every: timedelta = DEFAULT_EVERY, retention: timedelta | None = None
    ) -> str:
        """Create or update the Temporal Schedule that runs the blob cleanup every `every`:
        `"created"` or `"updated"`.

        Raises:
            TemporalFailed: Temporal refused it.
        """
        try:
            return await schedule_blob_cleanup(
                self._client, self._task_queue, every=every, retention=retention
            )
        except RPCError as err:
            self._raise(err, None, "could not schedule the blob cleanup")

    async def fleet(self, *, now: datetime | None = None) -> Fleet:
        """What visibility knows of the running runs, and of the runs closed within the
        failure window (at most `FLEET_LIMIT` of each); `fleet_report` aggregates it.

        Raises:
            TemporalFailed: a listing failed.
        """
        now = now or datetime.now(UTC)
        running: list[FleetRun] = []
        closed: list[ClosedRun] = []
        since = (now - FAILURE_WINDOW).strftime("%Y-%m-%dT%H:%M:%SZ")
        try:
            async for run in self._client.list_workflows(
                f'{AGENT_RUNS} AND ExecutionStatus = "Running"', limit=FLEET_LIMIT
            ):
                attributes = run.typed_search_attributes
                running.append(
                    FleetRun(
                        run.id,
                        run.start_time,
                        attributes.get(AGENT_STATUS),
                        attributes.get(WAITING_FOR),
                        attributes.get(PENDING_OPERATIONS),
                        attributes.get(WAIT_EXPIRES_AT),
                    )
                )
            async for run in self._client.list_workflows(
                f'{AGENT_RUNS} AND CloseTime > "{since}" AND ExecutionStatus != "Running"',
                limit=FLEET_LIMIT,
            ):
                agent_status = run.typed_search_attributes.get(AGENT_STATUS)
                closed.append(ClosedRun(run.id, run.close_time, agent_status, run.status))
        except RPCError as err:
            self._raise(err, None, "could not list the fleet")
        return Fleet(now, running, closed)
