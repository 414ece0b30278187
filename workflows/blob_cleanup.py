"""BlobCleanupWorkflow: delete the blobs of runs that ended more than a retention ago.

Run daily by the Temporal Schedule `waitstate-blob-cleanup` (`starter.py cleanup --schedule`),
or once (`starter.py cleanup`). Being a workflow, it runs on whichever worker of the fleet is
free, survives that worker's crash, and is seen in the Web UI with its result; the schedule
lives in Temporal, not in one machine's crontab.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from waitstate.names import BLOB_CLEANUP
    from waitstate.schemas.cleanup import (
        CLEAN_BLOBS,
        NAMESPACE_RETENTION,
        CleanInput,
        CleanResult,
        CleanupInput,
        NamespaceRetention,
    )

    from .policies import (
        CLEAN_HEARTBEAT,
        CLEAN_RETRY,
        CLEAN_TIMEOUT,
        RETENTION_TIMEOUT,
    )


@workflow.defn(name=BLOB_CLEANUP)
class BlobCleanupWorkflow:
    """One pass of the blob cleanup; returns what it deleted and kept."""

    @workflow.run
    async def run(self, input: CleanupInput) -> CleanResult:
        retention = input.retention
        if retention is None:
            retention = await self._namespace_retention()
        result: CleanResult = await workflow.execute_activity(
            CLEAN_BLOBS,
            CleanInput(now=workflow.now(), retention=retention),
            result_type=CleanResult,
            start_to_close_timeout=CLEAN_TIMEOUT,
            heartbeat_timeout=CLEAN_HEARTBEAT,
            retry_policy=CLEAN_RETRY,
            summary=f"clean blobs: runs ended over {retention} ago",
        )
        return result

    async def _namespace_retention(self) -> timedelta:
        """The namespace's workflow retention: a run's blobs live as long as its history."""
        found: NamespaceRetention = await workflow.execute_activity(
            NAMESPACE_RETENTION,
            result_type=NamespaceRetention,
            start_to_close_timeout=RETENTION_TIMEOUT,
            summary="the namespace's retention",
        )
        return found.retention
