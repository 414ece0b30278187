"""The enrichment pipeline: a long job that is polled (it sends no webhook)::

POST /pipelines/enrich          Idempotency-Key header; {dataset} -> as POST /exports
GET  /pipelines/jobs/{job_id}   progress "NN%" while running, then {dataset, enriched_rows}
POST /pipelines/jobs/{job_id}/cancel
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel

from examples.systems.common import DatasetName, stable_number
from examples.systems.jobs import JobRecord, LongJobs, add_job_routes


class EnrichRequest(BaseModel):
    """`POST /pipelines/enrich`."""

    dataset: DatasetName


class Pipeline:
    """The enrichment pipeline: its jobs, kept by `long_jobs`."""

    def __init__(self, long_jobs: LongJobs) -> None:
        self.long_jobs = long_jobs

    def start(self, key: str | None, request: EnrichRequest) -> tuple[JobRecord, bool]:
        """Start an enrichment, or find the one already started under `key`
        (`LongJobs.start`)."""
        return self.long_jobs.start("enrich", key, {"dataset": request.dataset}, run=self._run)

    async def _run(self, job: JobRecord) -> None:
        await self.long_jobs.run_to_end(job, _enriched)


def router(pipeline: Pipeline) -> APIRouter:
    """The enrichment pipeline's routes."""
    routes = APIRouter()
    add_job_routes(
        routes,
        pipeline,
        EnrichRequest,
        "enrich",
        "/pipelines/jobs",
        "enrichment",
        start_path="/pipelines/enrich",
    )
    return routes


def _enriched(job: JobRecord) -> dict[str, Any]:
    dataset = job.arguments["dataset"]
    return {"dataset": dataset, "enriched_rows": stable_number(f"enrich/{dataset}")}
