"""The enrichment pipeline: a long job that is polled (it sends no webhook)::

POST /pipelines/enrich          Idempotency-Key header; {dataset} -> as POST /exports
GET  /pipelines/jobs/{job_id}   progress "NN%" while running, then {dataset, enriched_rows}
POST /pipelines/jobs/{job_id}/cancel
"""

from __future__ import annotations

from fastapi import APIRouter, Response
from pydantic import BaseModel, field_validator

from examples.systems.common import IdempotencyKey, check_name, stable_number
from examples.systems.jobs import JobAccepted, JobRecord, JobView, LongJobs


class EnrichRequest(BaseModel):
    """`POST /pipelines/enrich`."""

    dataset: str

    @field_validator("dataset")
    @classmethod
    def _dataset(cls, value: str) -> str:
        return check_name(value, "dataset")


class Pipeline:
    """The enrichment pipeline: its jobs, kept by `long_jobs`."""

    def __init__(self, long_jobs: LongJobs) -> None:
        self.long_jobs = long_jobs

    def start(self, key: str | None, request: EnrichRequest) -> tuple[JobRecord, bool]:
        """Start an enrichment, or find the one already started under `key`
        (`LongJobs.start`)."""
        return self.long_jobs.start("enrich", key, {"dataset": request.dataset}, run=self._run)

    async def _run(self, job: JobRecord) -> None:
        if not await self.long_jobs.work(job):
            return
        if job.planned_error is not None:
            job.status, job.error = "failed", job.planned_error
        else:
            dataset = job.arguments["dataset"]
            rows = stable_number(f"enrich/{dataset}")
            job.status, job.result = "succeeded", {"dataset": dataset, "enriched_rows": rows}
        await self.long_jobs.report_end(job)


def router(pipeline: Pipeline) -> APIRouter:
    """The enrichment pipeline's routes."""
    routes = APIRouter()
    jobs = pipeline.long_jobs

    @routes.post("/pipelines/enrich", status_code=201)
    async def start_enrichment(
        request: EnrichRequest, response: Response, idempotency_key: IdempotencyKey = None
    ) -> JobAccepted:
        job, created = pipeline.start(idempotency_key, request)
        return await jobs.accepted(job, created, response)

    @routes.get("/pipelines/jobs/{job_id}", response_model_exclude_none=True)
    async def get_enrichment(job_id: str) -> JobView:
        return jobs.look("enrich", job_id)

    @routes.post("/pipelines/jobs/{job_id}/cancel", response_model_exclude_none=True)
    async def cancel_enrichment(job_id: str) -> JobView:
        return jobs.cancel("enrich", job_id).view(jobs.now())

    return routes
