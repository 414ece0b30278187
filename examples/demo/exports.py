"""The export service: a long tool that completes by callback (the service POSTs the result)."""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel, Field

from examples.demo.services import JobService
from waitstate import Job, LongSpec, LongTool, ResultMode, StartContext, ToolSpec

EXPORT_ETA = timedelta(minutes=15)
# A lost webhook (the gateway was down past the service's retries) costs at most this long.
RECONCILE_EVERY = timedelta(minutes=5)


class ExportArgs(BaseModel):
    dataset: str = Field(
        description="The dataset to export, lowercase, e.g. 'transactions' or 'customers'."
    )
    period: str = Field(description="A quarter like '2025-Q3' or a month like '2025-07'.")


class ExportService(JobService, LongTool):
    """Starts, checks and cancels exports on the export service."""

    service = "export service"
    jobs_path = "/exports"

    async def start(self, args: ExportArgs, context: StartContext) -> Job:
        """Start an export, or find the one already started under the idempotency key.

        Raises:
            ToolError: the service refused the export (bad dataset or period...).
            ServiceError, httpx.TransportError: the service is unavailable; retry.
        """
        body = {"dataset": args.dataset, "period": args.period}
        return await self._start("/exports", body, context, calls_back=True)


def export_tool(
    backend: LongTool,
    *,
    mode: ResultMode = "await",
    timeout: timedelta = timedelta(hours=1),
    max_in_flight: int | None = None,
    reconcile_every: timedelta | None = RECONCILE_EVERY,
) -> ToolSpec:
    """`start_export`: export a dataset for a period to a CSV file; completes by callback.

    Args:
        backend: Usually an `ExportService`.
        mode: `await` (the result is the tool's return value) or `handle`.
        timeout: After this the export is cancelled and the operation expires.
        max_in_flight: Pending exports one run may have at once.
        reconcile_every: How often the export's status is checked in case its webhook was
            lost (None: only before it would expire).
    """
    return ToolSpec(
        name="start_export",
        description=(
            "Export a dataset for one period to a CSV file. Exports take minutes; the result "
            "is {file, rows}: the file's path and how many rows it holds."
        ),
        args=ExportArgs,
        long=LongSpec(
            backend=backend,
            completion="callback",
            mode=mode,
            timeout=timeout,
            max_in_flight=max_in_flight,
            eta=EXPORT_ETA,
            reconcile_every=reconcile_every,
        ),
    )
