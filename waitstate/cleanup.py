"""The blob cleanup, run once or on a Temporal Schedule: the blobs of runs that ended more than a
retention ago are deleted (`workflows/blob_cleanup.py`, `activities/cleanup.py`).

    result = await clean_blobs(client, "waitstate-agents", retention=timedelta(days=7))
    done = await schedule_blob_cleanup(client, "waitstate-agents", every=timedelta(days=1))

The schedule lives in Temporal, so the fleet's cleanup runs once a day whichever machines are
up, on whichever worker polls the queue; creating it again updates it.
"""

from __future__ import annotations

import re
import uuid
from datetime import timedelta
from typing import Literal

from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleUpdate,
    ScheduleUpdateInput,
)

from waitstate.names import BLOB_CLEANUP
from waitstate.schemas.cleanup import CleanResult, CleanupInput

SCHEDULE_ID = "waitstate-blob-cleanup"
DEFAULT_EVERY = timedelta(days=1)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"(?:(\d+)([smhd]))+")


def parse_duration(text: str) -> timedelta:
    """`90s`, `30m`, `24h`, `7d` or a sum like `1d12h`, as a timedelta.

    Raises:
        ValueError: not such a duration, or zero.
    """
    compact = text.strip().lower()
    if not _DURATION.fullmatch(compact):
        raise ValueError(f"not a duration: {text!r}; expected e.g. 90s, 30m, 24h, 7d or 1d12h")
    seconds = sum(int(n) * _UNITS[unit] for n, unit in re.findall(r"(\d+)([smhd])", compact))
    if seconds <= 0:
        raise ValueError(f"a duration must be more than 0, got {text!r}")
    return timedelta(seconds=seconds)


async def clean_blobs(
    client: Client, task_queue: str, *, retention: timedelta | None = None
) -> CleanResult:
    """Run one cleanup on the fleet's workers (polling `task_queue`) and return what it did.

    Args:
        retention: How long after a run ends its blobs are kept (None: the namespace's
            workflow retention).

    Raises:
        WorkflowFailureError: the cleanup failed (e.g. no retention given and the namespace
            reports none).
    """
    result: CleanResult = await client.execute_workflow(
        BLOB_CLEANUP,
        CleanupInput(retention=retention),
        id=f"{SCHEDULE_ID}-once-{uuid.uuid4().hex[:12]}",
        task_queue=task_queue,
        result_type=CleanResult,
    )
    return result


async def schedule_blob_cleanup(
    client: Client,
    task_queue: str,
    *,
    every: timedelta = DEFAULT_EVERY,
    retention: timedelta | None = None,
) -> Literal["created", "updated"]:
    """Create the schedule `waitstate-blob-cleanup` (a cleanup every `every`), or update it to
    these settings if it exists. A pass still running when the next is due makes that one
    skip.

    Args:
        retention: As for `clean_blobs`; None reads the namespace's at each pass.
    """
    schedule = Schedule(
        action=ScheduleActionStartWorkflow(
            BLOB_CLEANUP,
            CleanupInput(retention=retention),
            # Temporal appends each pass's time to this id.
            id=SCHEDULE_ID,
            task_queue=task_queue,
        ),
        spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=every)]),
        policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
    )
    try:
        await client.create_schedule(SCHEDULE_ID, schedule)
        return "created"
    except ScheduleAlreadyRunningError:
        pass

    def replace(_: ScheduleUpdateInput) -> ScheduleUpdate:
        return ScheduleUpdate(schedule=schedule)

    await client.get_schedule_handle(SCHEDULE_ID).update(replace)
    return "updated"
