"""The export service: a long job that completes by webhook, and the files it produces::

    POST /exports                   Idempotency-Key header; {dataset, period, callback_url?,
                                    callback_token?} -> 201 {job_id, status, eta_seconds}
                                    (200 and the same job for a key seen before)
    GET  /exports/{job_id}          {job_id, status, result?, error?, progress?}
    POST /exports/{job_id}/cancel   idempotent; a finished job stays as it is
    GET  /exports/files/{file}      {file, rows} for a file a finished export produced

An export runs `export_seconds`, then produces `exports/<dataset>-<period>.csv` and succeeds
with `{file, rows}` (or fails as `Faults.fail_jobs` says), and POSTs that to its callback.
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, Field, field_validator, model_validator

from examples.systems.common import DatasetName, check_callback_url, stable_number
from examples.systems.jobs import JobRecord, LongJobs, add_job_routes

_PERIOD = re.compile(r"\d{4}-(Q[1-4]|0[1-9]|1[0-2])")


class ExportRequest(BaseModel):
    """`POST /exports`."""

    dataset: DatasetName
    period: str
    callback_url: str | None = Field(default=None, max_length=2000)
    callback_token: str | None = Field(default=None, max_length=4000, repr=False)

    @field_validator("period")
    @classmethod
    def _period(cls, value: str) -> str:
        if not _PERIOD.fullmatch(value):
            raise ValueError("period must be a quarter like '2025-Q3' or a month like '2025-07'")
        return value

    @model_validator(mode="after")
    def _callback(self) -> ExportRequest:
        if (self.callback_url is None) != (self.callback_token is None):
            raise ValueError("send callback_url and callback_token together, or neither")
        if self.callback_url is not None:
            check_callback_url(self.callback_url)
        return self


class ExportFile(BaseModel):
    """A file a finished export produced."""

    file: str
    rows: int


class Exports:
    """The export service: its jobs (kept by `long_jobs`) and the files they produced."""

    def __init__(self, long_jobs: LongJobs) -> None:
        self.long_jobs = long_jobs
        self.files: dict[str, int] = {}  # file -> rows

    def start(self, key: str | None, request: ExportRequest) -> tuple[JobRecord, bool]:
        """Start an export, or find the one already started under `key` (`LongJobs.start`)."""
        arguments = {"dataset": request.dataset, "period": request.period}
        return self.long_jobs.start(
            "export",
            key,
            arguments,
            request.callback_url,
            request.callback_token,
            run=self._run,
        )

    def file(self, file: str) -> ExportFile:
        """The file a finished export produced, or a 404."""
        if file not in self.files:
            raise HTTPException(404, f"no export produced {file!r}")
        return ExportFile(file=file, rows=self.files[file])

    def reset(self) -> None:
        """Forget every file (the jobs are `long_jobs`' to forget)."""
        self.files.clear()

    async def _run(self, job: JobRecord) -> None:
        await self.long_jobs.run_to_end(job, self._produce)

    def _produce(self, job: JobRecord) -> dict[str, Any]:
        # The file of a finished export, which the folder takes from then on.
        file = f"exports/{job.arguments['dataset']}-{job.arguments['period']}.csv"
        rows = stable_number(f"export/{job.arguments['dataset']}/{job.arguments['period']}")
        self.files[file] = rows
        return {"file": file, "rows": rows}


def router(exports: Exports) -> APIRouter:
    """The export service's routes."""
    routes = APIRouter()

    # Before `/exports/{job_id}`-shaped routes, though a file path has more segments anyway.
    @routes.get("/exports/files/{file:path}")
    async def get_export_file(file: str) -> ExportFile:
        return exports.file(file)

    add_job_routes(routes, exports, ExportRequest, "export", "/exports", "export")
    return routes
