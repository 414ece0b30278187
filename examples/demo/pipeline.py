"""The enrichment pipeline: a long tool that completes by polling (it has no webhook)."""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel, Field

from examples.demo.services import JobService
from waitstate import Job, LongSpec, LongTool, ResultMode, StartContext, ToolSpec

ENRICH_ETA = timedelta(minutes=10)


class EnrichArgs(BaseModel):
    dataset: str = Field(
        description="The dataset to enrich with reference data, lowercase, e.g. 'transactions'."
    )


class EnrichmentPipeline(JobService, LongTool):
    """Starts, checks and cancels jobs on the enrichment pipeline."""

    service = "enrichment pipeline"
    jobs_path = "/pipelines/jobs"

    async def start(self, args: EnrichArgs, context: StartContext) -> Job:
        """Start an enrichment job, or find the one already started under the idempotency key.

        The pipeline has no webhook, so a callback URL in the context is not sent.

        Raises:
            ToolError: the pipeline refused the job (bad dataset name...).
            ServiceError, httpx.TransportError: the pipeline is unavailable; retry.
        """
        return await self._start("/pipelines/enrich", {"dataset": args.dataset}, context)


def enrich_tool(
    backend: LongTool,
    *,
    mode: ResultMode = "await",
    timeout: timedelta = timedelta(hours=1),
    poll_interval: timedelta = timedelta(seconds=1),
    max_in_flight: int | None = None,
) -> ToolSpec:
    """`enrich_dataset`: enrich a dataset with reference data; completes by polling.

    Args:
        backend: Usually an `EnrichmentPipeline`.
        mode: `await` (the result is the tool's return value) or `handle`.
        timeout: After this the job is cancelled and the operation expires.
        poll_interval: Time between status checks.
        max_in_flight: Pending enrichment jobs one run may have at once.
    """
    return ToolSpec(
        name="enrich_dataset",
        description=(
            "Enrich a dataset with reference data (merchant names, categories, countries). "
            "Takes minutes; the result is {dataset, enriched_rows}."
        ),
        args=EnrichArgs,
        long=LongSpec(
            backend=backend,
            completion="poll",
            mode=mode,
            timeout=timeout,
            poll_interval=poll_interval,
            max_in_flight=max_in_flight,
            eta=ENRICH_ETA,
        ),
    )
