"""The enrichment pipeline: a long tool that completes by polling (it has no webhook)."""

from __future__ import annotations

from datetime import timedelta

import httpx
from pydantic import BaseModel, Field

from schemas.operations import Completion, ResultMode
from tools.exports import check_answer, error_message, job_completion, job_url, unknown_job
from tools.spec import Job, LongSpec, LongTool, StartContext, ToolSpec

ENRICH_ETA = timedelta(minutes=10)


class EnrichArgs(BaseModel):
    dataset: str = Field(
        description="The dataset to enrich with reference data, lowercase, e.g. 'transactions'."
    )


class EnrichmentPipeline(LongTool):
    """Starts, checks and cancels jobs on the enrichment pipeline.

    Args:
        http: The client to call the pipeline with (its owner closes it).
        base_url: The pipeline's root, e.g. `http://127.0.0.1:8790`.
    """

    service = "enrichment pipeline"

    def __init__(self, http: httpx.AsyncClient, base_url: str) -> None:
        self._http = http
        self._base_url = base_url.rstrip("/")

    async def start(self, args: EnrichArgs, context: StartContext) -> Job:
        """Start an enrichment job, or find the one already started under the idempotency key.

        The pipeline has no webhook, so a callback URL in the context is not sent.

        Raises:
            ToolError: the pipeline refused the job (bad dataset name...).
            ServiceError, httpx.TransportError: the pipeline is unavailable; retry.
        """
        response = await self._http.post(
            f"{self._base_url}/pipelines/enrich",
            json={"dataset": args.dataset},
            headers={"Idempotency-Key": context.idempotency_key},
        )
        accepted = check_answer(response, self.service)
        return Job(job_id=accepted["job_id"], eta_seconds=accepted.get("eta_seconds"))

    async def status(self, job_id: str) -> Completion:
        """The job's state, with progress ("40%") while it runs."""
        response = await self._http.get(job_url(self._base_url, "/pipelines/jobs", job_id))
        if response.status_code == 404:
            return unknown_job(self.service, job_id, error_message(response))
        return job_completion(check_answer(response, self.service), self.service)

    async def cancel(self, job_id: str) -> None:
        """Cancel the job; one the pipeline does not know has nothing left to cancel."""
        url = f"{job_url(self._base_url, '/pipelines/jobs', job_id)}/cancel"
        response = await self._http.post(url)
        if response.status_code != 404:
            check_answer(response, self.service)


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
