"""The blob cleanup's activities: the namespace's retention, and deleting the blobs of runs that
ended more than a retention ago (never one that a run still open, or ended since, wrote)."""

from __future__ import annotations

from datetime import datetime

from temporalio import activity
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from waitstate.blobs import BlobStore
from waitstate.schemas.cleanup import (
    CLEAN_BLOBS,
    NAMESPACE_RETENTION,
    CleanInput,
    CleanResult,
    NamespaceRetention,
)
from waitstate.schemas.errors import RETENTION_UNKNOWN

# Why a blob is kept, as counted (and as the `reason` label of waitstate_blobs_kept).
OPEN = "open"
RECENT = "recent"
UNOWNED = "unowned"


class CleanupActivities:
    """The cleanup, given the Temporal client it asks about runs and the fleet's blob store."""

    def __init__(self, client: Client, blobs: BlobStore) -> None:
        self._client = client
        self._blobs = blobs

    @activity.defn(name=NAMESPACE_RETENTION)
    async def namespace_retention(self) -> NamespaceRetention:
        """The namespace's workflow retention: how long Temporal keeps a closed run's history.

        Raises:
            ApplicationError: non-retryable when the namespace reports no retention.
        """
        namespace = self._client.namespace
        described = await self._client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace=namespace)
        )
        config = described.config
        if not config.HasField("workflow_execution_retention_ttl"):
            raise _no_retention(namespace)
        retention = config.workflow_execution_retention_ttl.ToTimedelta()
        if retention.total_seconds() <= 0:
            raise _no_retention(namespace)
        return NamespaceRetention(namespace=namespace, retention=retention)

    @activity.defn(name=CLEAN_BLOBS)
    async def clean_blobs(self, input: CleanInput) -> CleanResult:
        """Delete every blob all of whose owners ended before `input.now - input.retention`.

        A blob is kept when it was written within the retention, when a run that owns it is
        open or ended within the retention, or when no run is recorded as its owner. A run
        Temporal no longer knows was removed by the namespace's retention: it ended long ago.

        Heartbeats once per blob. Idempotent: a retried attempt finds what an earlier one
        deleted gone, settles what it had set aside (`BlobStore.recover`), and carries its
        deletions over from its last heartbeat into the counts it returns.
        """
        cutoff = input.now - input.retention
        judge = _Judge(self._client, cutoff)
        counts = CleanResult(retention=input.retention)
        details = activity.info().heartbeat_details
        if details:  # a retry: what the earlier attempts deleted stays counted
            earlier = CleanResult.model_validate(details[0])
            counts.deleted, counts.bytes_deleted = earlier.deleted, earlier.bytes_deleted
        meter = activity.metric_meter()
        deleted = meter.create_counter(
            "waitstate_blobs_deleted", "Blobs deleted by the cleanup: their runs ended long ago"
        )
        freed_bytes = meter.create_counter(
            "waitstate_blob_bytes_deleted", "Bytes of blobs deleted by the cleanup", "By"
        )
        counts.restored = await self._blobs.recover(judge.keep)
        async for ref, modified in self._blobs.refs():
            activity.heartbeat(counts)
            counts.examined += 1
            if modified > cutoff:
                counts.kept_recent += 1
                continue
            freed = await self._blobs.delete_unless_owned(ref, judge.keep)
            if freed is None:
                # No reason given: a put for a new owner raced the delete (the blob is in use).
                reason = judge.reason or OPEN
                counts.kept_open += reason == OPEN
                counts.kept_recent += reason == RECENT
                counts.unowned += reason == UNOWNED
                continue
            counts.deleted += 1
            counts.bytes_deleted += freed
            deleted.add(1)
            freed_bytes.add(freed)
        # The kept counts once, when the pass is complete (a retried pass counts again).
        kept = meter.create_counter("waitstate_blobs_kept", "Blobs the cleanup examined and kept")
        for reason, number in (
            (OPEN, counts.kept_open),
            (RECENT, counts.kept_recent),
            (UNOWNED, counts.unowned),
        ):
            if number:
                kept.add(number, {"reason": reason})
        activity.logger.info(
            "blob cleanup: %d examined, %d deleted (%d bytes), kept %d open, %d recent, %d unowned",
            counts.examined,
            counts.deleted,
            counts.bytes_deleted,
            counts.kept_open,
            counts.kept_recent,
            counts.unowned,
        )
        return counts


class _Judge:
    """Whether a blob's owners still need it, asked of Temporal.

    A verdict to keep is remembered for the pass (keeping is always safe); a verdict that lets
    a blob go is asked afresh for each blob, after its owners were read: a run started since
    under the same workflow id, which may have written this blob, is then seen open.
    """

    def __init__(self, client: Client, cutoff: datetime) -> None:
        self._client = client
        self._cutoff = cutoff
        self._kept: dict[str, str] = {}
        self.reason: str | None = None  # the last `keep`'s reason to keep, if any

    async def keep(self, owners: list[str]) -> bool:
        """Whether any of `owners` (workflow ids) still needs their blob; sets `reason`."""
        self.reason = UNOWNED if not owners else None
        for owner in owners:
            reason = self._kept.get(owner) or await self._ask(owner)
            if reason is None:
                continue
            self._kept[owner] = reason
            self.reason = reason
            if reason == OPEN:
                break
        return self.reason is not None

    async def _ask(self, owner: str) -> str | None:
        try:
            # The id's latest run: a continue-as-new chain is one owner, open until it ends.
            described = await self._client.get_workflow_handle(owner).describe()
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return None  # removed by the namespace's retention: ended long ago
            raise
        if described.close_time is None:
            return OPEN
        return RECENT if described.close_time > self._cutoff else None


def _no_retention(namespace: str) -> ApplicationError:
    return ApplicationError(
        f"namespace {namespace!r} reports no workflow retention; give the cleanup one "
        "(waitstate cleanup --retention 7d)",
        type=RETENTION_UNKNOWN,
        non_retryable=True,
    )
