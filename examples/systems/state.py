"""The demo systems' state: a part for each service, over one set of faults and one sender of
webhooks."""

from __future__ import annotations

from collections import Counter
from typing import Self

from examples.systems.approvals_outbox import Outbox, OutboxEntry
from examples.systems.exports import Exports
from examples.systems.faults import Faults
from examples.systems.folders import Folders
from examples.systems.jobs import JobRecord, KeyStats, LongJobs
from examples.systems.notifications import Notification, Notifications
from examples.systems.pipeline import Pipeline
from examples.systems.purges import Purges
from examples.systems.refunds import Refund, Refunds
from examples.systems.webhooks import WebhookRetry, Webhooks


class DemoSystems:
    """The systems' state and behaviour, a part for each service; the app's routes are thin
    wrappers around them. What tests look at is at hand here too: `jobs`, `keys`, `files`,
    `notifications`, `refunds`, `outbox`, `faults`, and `requests` (every call received).

    Use it as an async context manager (the app's lifespan does): on exit every job timer and
    webhook delivery is cancelled and the webhook client closed.
    """

    def __init__(
        self,
        *,
        export_seconds: float,
        pipeline_seconds: float,
        webhook_retry: WebhookRetry | None = None,
    ) -> None:
        self.faults = Faults()
        self.webhooks = Webhooks()
        self.long_jobs = LongJobs(
            self.faults,
            self.webhooks,
            export_seconds=export_seconds,
            pipeline_seconds=pipeline_seconds,
            webhook_retry=webhook_retry or WebhookRetry(),
        )
        self.export_service = Exports(self.long_jobs)
        self.pipeline_service = Pipeline(self.long_jobs)
        self.purge_service = Purges(self.long_jobs)
        self.folder_service = Folders(self.export_service)
        self.notification_service = Notifications()
        self.refund_service = Refunds(self.faults)
        self.outbox_service = Outbox()
        # Every request the systems received but the test hooks', by method and path.
        self.requests: Counter[str] = Counter()

    async def __aenter__(self) -> Self:
        self.webhooks.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.long_jobs.cancel_tasks()
        await self.webhooks.aclose()

    @property
    def jobs(self) -> dict[str, JobRecord]:
        """Every long job (exports, enrichments, purges), by id."""
        return self.long_jobs.jobs

    @property
    def keys(self) -> dict[str, KeyStats]:
        """What happened under each idempotency key of a long job's start."""
        return self.long_jobs.keys

    @property
    def files(self) -> dict[str, int]:
        """The files finished exports produced, and their rows."""
        return self.export_service.files

    @property
    def notifications(self) -> list[Notification]:
        """The notifications sent, oldest first."""
        return self.notification_service.sent

    @property
    def refunds(self) -> list[Refund]:
        """The refunds issued, oldest first."""
        return self.refund_service.refunds

    @property
    def outbox(self) -> list[OutboxEntry]:
        """The approval requests runs posted, oldest first."""
        return self.outbox_service.entries

    async def reset(self) -> None:
        """Forget every job, file, folder, notification, refund, outbox entry, request count and
        fault (the seeded claims stay)."""
        self.requests.clear()
        await self.long_jobs.reset()
        self.faults.clear()
        self.export_service.reset()
        self.purge_service.reset()
        self.folder_service.reset()
        self.notification_service.reset()
        self.refund_service.reset()
        self.outbox_service.reset()
