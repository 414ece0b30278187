"""Long jobs, as the export service, the enrichment pipeline and the purge service run them:
started once per idempotency key, looked at, cancelled, each run by a task of its own that
reports by webhook when the job was given a callback. What a job does while it runs is its
service's (`exports`, `pipeline`, `purges`). A job's statuses are those of a `Completion`
plus `cancelled`."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import uuid
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

from fastapi import APIRouter, HTTPException, Response
from pydantic import BaseModel, Field

from examples.systems.common import IdempotencyKey
from examples.systems.faults import Faults
from examples.systems.webhooks import WebhookAttempt, WebhookRetry, Webhooks
from waitstate import Completion, OperationError

logger = logging.getLogger(__name__)

JobKind = Literal["export", "enrich", "purge"]
JobStatus = Literal["running", "input_required", "succeeded", "failed", "cancelled"]
AnswerAction = Literal["accept", "decline"]

StartRequest = TypeVar("StartRequest", bound=BaseModel)
_Request = TypeVar("_Request", bound=BaseModel, contravariant=True)

ENDED: tuple[JobStatus, ...] = ("succeeded", "failed", "cancelled")
_SERVICE_NAMES: dict[JobKind, str] = {
    "export": "export service",
    "enrich": "enrichment pipeline",
    "purge": "purge service",
}
_JOB_ID_PREFIXES: dict[JobKind, str] = {"export": "exp", "enrich": "enr", "purge": "prg"}


class AnswerRequest(BaseModel):
    """`POST /purges/{job_id}/answers`: an answer to one question the job asked."""

    key: str = Field(min_length=1, max_length=200)
    action: AnswerAction
    content: dict[str, Any] | None = None
    responder: str = Field(default="unknown", max_length=200)


class ReceivedAnswer(BaseModel):
    """One answer a job received, and whether it was applied."""

    key: str
    action: AnswerAction
    responder: str
    applied: bool = False
    reason: str | None = Field(
        default=None, description="Why it was not: 'already answered', or the refusal."
    )


class JobAccepted(BaseModel):
    """The answer to a start: the job, new or found by its idempotency key."""

    job_id: str
    status: JobStatus
    eta_seconds: int


class JobView(BaseModel):
    """A job's state: a `Completion` plus the job id (and the extra status `cancelled`)."""

    job_id: str
    status: JobStatus
    result: dict[str, Any] | None = None
    error: OperationError | None = None
    progress: str | None = None
    questions: list[dict[str, Any]] | None = Field(
        default=None, description="With `input_required`: what the job asks."
    )


class KeyStats(BaseModel):
    """What happened under one idempotency key."""

    kind: JobKind
    starts: int = 0
    jobs_created: int = 0
    cancels: int = 0
    job_id: str | None = None


@dataclass
class JobRecord:
    """A job as the systems keep it (the caller sees a `JobView`)."""

    job_id: str
    kind: JobKind
    key: str
    arguments: dict[str, str]
    seconds: float
    started_at: float  # event loop time
    completes: bool
    planned_error: OperationError | None
    deliveries: int
    # What a purge asks in (its usual question, or `Faults.purge_schemas`'s), and whether it
    # waits to be told to ask (`Faults.held_purges`).
    question_schema: Mapping[str, Any] = field(default_factory=dict)
    held: bool = False
    retry: WebhookRetry = field(default_factory=WebhookRetry)
    progress_reports: int = 0
    callback_url: str | None = None
    callback_token: str | None = field(default=None, repr=False)
    status: JobStatus = "running"
    result: dict[str, Any] | None = None
    error: OperationError | None = None
    webhooks: list[WebhookAttempt] = field(default_factory=list)
    status_checks: int = 0
    timer: asyncio.Task[None] | None = field(default=None, repr=False)
    # What a job whose progress is no percentage is doing (a purge: "waiting for confirmation").
    stage: str | None = None
    asking: Completion | None = None  # the `input_required` report, once the job has asked
    answers: dict[str, AnswerRequest] = field(default_factory=dict)  # applied, by key
    received: list[ReceivedAnswer] = field(default_factory=list)
    answered: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    def progress(self, now: float) -> str:
        if self.status == "succeeded":
            return "100%"
        if self.stage is not None:
            return self.stage
        done = 1.0 if self.seconds <= 0 else (now - self.started_at) / self.seconds
        # Never 100% before it has succeeded (a never-completing job sits at 99%).
        return f"{min(99, int(done * 100))}%"

    def asked(self, key: str) -> bool:
        """Whether the job has asked a question under `key`."""
        questions = self.asking.questions if self.asking is not None else None
        return any(question.key == key for question in questions or [])

    def eta_seconds(self, now: float) -> int:
        if self.status != "running":
            return 0
        return math.ceil(max(0.0, self.seconds - (now - self.started_at)))

    def view(self, now: float) -> JobView:
        asking = self.asking if self.status == "input_required" else None
        return JobView(
            job_id=self.job_id,
            status=self.status,
            result=self.result,
            error=self.error,
            progress=self.progress(now)
            if self.status in ("running", "input_required", "succeeded")
            else None,
            questions=[q.model_dump(mode="json") for q in asking.questions or []]
            if asking is not None
            else None,
        )


# What a job does once started, as a task of its own: its service's.
Run = Callable[[JobRecord], Coroutine[Any, Any, None]]


class LongJobs:
    """The jobs of the export service, the enrichment pipeline and the purge service, and the
    tasks that run them.

    Args:
        faults: The systems' faults, read as each job starts.
        webhooks: What sends the jobs' reports.
        export_seconds: How long an export runs; also each step of a purge.
        pipeline_seconds: How long an enrichment runs.
        webhook_retry: How a report that was not taken is sent again.
    """

    def __init__(
        self,
        faults: Faults,
        webhooks: Webhooks,
        *,
        export_seconds: float,
        pipeline_seconds: float,
        webhook_retry: WebhookRetry,
    ) -> None:
        self.faults = faults
        self.export_seconds = export_seconds
        self.pipeline_seconds = pipeline_seconds
        self.webhook_retry = webhook_retry
        self.keys: dict[str, KeyStats] = {}
        self.jobs: dict[str, JobRecord] = {}
        self.tasks: set[asyncio.Task[None]] = set()  # the jobs' timers and deliveries
        self._webhooks = webhooks

    def start(
        self,
        kind: JobKind,
        key: str | None,
        arguments: dict[str, str],
        callback_url: str | None = None,
        callback_token: str | None = None,
        *,
        run: Run,
        stage: str | None = None,
        question_schema: Mapping[str, Any] | None = None,
        held: bool = False,
    ) -> tuple[JobRecord, bool]:
        """Start a job, or find the one already started under `key`.

        Args:
            run: What the job does, in a task of its own, if this request creates it (and it
                completes at all: `Faults.never_complete`).
            stage, question_schema, held: What a job that asks starts with (a purge's: see
                `JobRecord`).

        Returns:
            The job, and whether this request created it.

        Raises:
            HTTPException: 400 without a key, 422 for a key used for another request, 503 for
                an injected fault.
        """
        service = _SERVICE_NAMES[kind]
        if not key:
            raise HTTPException(400, "the Idempotency-Key header is required")
        stats = self.keys.setdefault(key, KeyStats(kind=kind))
        stats.starts += 1
        if self.faults.fail_next_starts:
            self.faults.fail_next_starts -= 1
            raise HTTPException(503, f"the {service} is temporarily unavailable; try again")
        # Nothing awaits between the lookup and the creation, so concurrent requests with one
        # key cannot both create a job.
        job = self.jobs.get(stats.job_id) if stats.job_id else None
        created = job is None
        if job is None:
            job = self._create(
                kind,
                key,
                arguments,
                callback_url,
                callback_token,
                run,
                stage=stage,
                question_schema=question_schema or {},
                held=held,
            )
            stats.job_id = job.job_id
            stats.jobs_created += 1
        elif (job.kind, job.arguments) != (kind, arguments):
            raise HTTPException(
                422,
                f"Idempotency-Key {key!r} was already used for a different request; "
                "use a new key for a new job",
            )
        if self.faults.accept_then_fail_next_starts:
            self.faults.accept_then_fail_next_starts -= 1
            raise HTTPException(503, f"the {service} is temporarily unavailable; try again")
        return job, created

    async def accepted(self, job: JobRecord, created: bool, response: Response) -> JobAccepted:
        """The answer to a start, once the `hold_start_answers_seconds` fault has been waited
        out: 201 for a job the start created, 200 for one found by its key."""
        await self.hold_start_answer()
        if not created:
            response.status_code = 200
        return JobAccepted(
            job_id=job.job_id, status=job.status, eta_seconds=job.eta_seconds(self.now())
        )

    async def hold_start_answer(self) -> None:
        """Wait before answering a start, if the `hold_start_answers_seconds` fault says so."""
        if self.faults.hold_start_answers_seconds:
            await asyncio.sleep(self.faults.hold_start_answers_seconds)

    def job(self, kind: JobKind, job_id: str) -> JobRecord:
        """The job, or a 404."""
        job = self.jobs.get(job_id)
        if job is None or job.kind != kind:
            raise HTTPException(404, f"the {_SERVICE_NAMES[kind]} has no job {job_id!r}")
        return job

    def look(self, kind: JobKind, job_id: str) -> JobView:
        """The job's state, for `GET` (counted: a test sees how often a job was checked)."""
        job = self.job(kind, job_id)
        job.status_checks += 1
        return job.view(self.now())

    def cancel(self, kind: JobKind, job_id: str) -> JobRecord:
        """Cancel a running job; a finished one stays as it is (no error either way).

        Raises:
            HTTPException: 404 for an unknown job, 503 for an injected fault (`fail_cancels`).
        """
        job = self.job(kind, job_id)
        self.keys[job.key].cancels += 1
        if self.faults.fail_cancels:
            self.faults.fail_cancels -= 1
            raise HTTPException(
                503, f"the {_SERVICE_NAMES[kind]} cannot cancel now; the job goes on"
            )
        if job.status not in ENDED:
            job.status = "cancelled"
            logger.info("%s job %s cancelled", kind, job_id)
            # The task is asleep or waiting for an answer, or sending a progress report or a
            # question: cut short, that report was about a job that no longer runs. A final
            # report is never cut short (the job has ended by then).
            if job.timer is not None:
                job.timer.cancel()
        return job

    def now(self) -> float:
        """Event-loop time, what job progress is measured in."""
        return asyncio.get_running_loop().time()

    async def run_to_end(
        self, job: JobRecord, produce: Callable[[JobRecord], dict[str, Any]]
    ) -> None:
        """Run a job that only works (an export, an enrichment): its time (`work`), then,
        unless it was cancelled meanwhile, its end: failed as `Faults.fail_jobs` planned, else
        succeeded with what `produce` makes of it; reported when it calls back."""
        if not await self.work(job):
            return
        if job.planned_error is not None:
            job.status, job.error = "failed", job.planned_error
        else:
            job.status, job.result = "succeeded", produce(job)
        await self.report_end(job)

    async def work(self, job: JobRecord) -> bool:
        """Let the job run its time, in `progress_reports + 1` steps, each but the last
        reported by webhook when the job calls back; whether it is still running then (not
        cancelled)."""
        steps = job.progress_reports + 1
        for step in range(1, steps):
            await asyncio.sleep(job.seconds / steps)
            if job.status != "running":
                return False
            report = Completion(status="running", progress=f"{step * 100 // steps}%")
            if job.callback_url is not None:
                await self.deliver(job, job.callback_url, report)
        await asyncio.sleep(job.seconds / steps)
        return job.status == "running"

    async def report_end(self, job: JobRecord) -> None:
        """Log how the job ended and, when it calls back, report it."""
        logger.info("%s job %s %s", job.kind, job.job_id, job.status)
        if job.callback_url is not None:
            # The job has finished (succeeded or failed), so its state is a valid Completion.
            final = Completion.model_validate(
                {"status": job.status, "result": job.result, "error": job.error}
            )
            await self.deliver(job, job.callback_url, final)

    async def deliver(
        self, job: JobRecord, url: str, completion: Completion
    ) -> WebhookAttempt | None:
        """POST a report of the job (`duplicate_webhooks` times), each copy retried while it is
        not taken; returns the last attempt (None if the job was set to send none)."""
        return await self._webhooks.deliver(
            url,
            completion,
            token=job.callback_token,
            copies=job.deliveries,
            retry=job.retry,
            attempts=job.webhooks,
            about=f"{job.kind} job {job.job_id}",
        )

    async def cancel_tasks(self) -> None:
        """Cancel every job's task, and wait for them to end."""
        tasks = list(self.tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def reset(self) -> None:
        """Stop every job, and forget every job and key."""
        await self.cancel_tasks()
        self.keys.clear()
        self.jobs.clear()

    def _create(
        self,
        kind: JobKind,
        key: str,
        arguments: dict[str, str],
        callback_url: str | None,
        callback_token: str | None,
        run: Run,
        *,
        stage: str | None,
        question_schema: Mapping[str, Any],
        held: bool,
    ) -> JobRecord:
        faults = self.faults
        if kind in ("export", "purge"):
            seconds = (
                self.export_seconds if faults.export_seconds is None else faults.export_seconds
            )
        else:
            seconds = (
                self.pipeline_seconds
                if faults.pipeline_seconds is None
                else faults.pipeline_seconds
            )
        job = JobRecord(
            job_id=f"{_JOB_ID_PREFIXES[kind]}_{uuid.uuid4().hex[:12]}",
            kind=kind,
            key=key,
            arguments=arguments,
            seconds=seconds,
            started_at=self.now(),
            completes=not faults.never_complete,
            planned_error=faults.fail_jobs,
            deliveries=faults.duplicate_webhooks,
            retry=self.webhook_retry
            if faults.webhook_give_up_seconds is None
            else dataclasses.replace(
                self.webhook_retry, give_up_after=faults.webhook_give_up_seconds
            ),
            progress_reports=faults.progress_reports if callback_url and kind == "export" else 0,
            callback_url=callback_url,
            callback_token=callback_token,
            stage=stage,
            question_schema=question_schema,
            held=held,
        )
        self.jobs[job.job_id] = job
        if job.completes:
            job.timer = asyncio.create_task(run(job), name=f"job {job.job_id}")
            self.tasks.add(job.timer)
            job.timer.add_done_callback(self.tasks.discard)
        logger.info("%s job %s started: %s", kind, job.job_id, arguments)
        return job


class JobStarter(Protocol[_Request]):
    """A service of long jobs (exports, the pipeline, purges), as its routes see it."""

    long_jobs: LongJobs

    def start(self, key: str | None, request: _Request) -> tuple[JobRecord, bool]:
        """Start a job, or find the one already started under `key` (`LongJobs.start`)."""
        ...


def add_job_routes(
    routes: APIRouter,
    service: JobStarter[StartRequest],
    start_request: type[StartRequest],
    kind: JobKind,
    path: str,
    noun: str,
    start_path: str | None = None,
) -> None:
    """Add a service's job routes to `routes`: `POST {start_path}` (`path` unless given: a
    `start_request` body and the Idempotency-Key header, given to `service.start`; 201, or 200
    for a job found by its key), `GET {path}/{job_id}` (the job's state, counted) and `POST
    {path}/{job_id}/cancel`, named `start_{noun}`, `get_{noun}` and `cancel_{noun}`."""
    jobs = service.long_jobs

    async def start_job(
        request: StartRequest, response: Response, idempotency_key: IdempotencyKey = None
    ) -> JobAccepted:
        job, created = service.start(idempotency_key, request)
        return await jobs.accepted(job, created, response)

    # FastAPI reads the body's model from the parameter's annotation, which here is the
    # service's request model, not the type variable it stands for.
    start_job.__annotations__["request"] = start_request

    async def look(job_id: str) -> JobView:
        return jobs.look(kind, job_id)

    async def cancel(job_id: str) -> JobView:
        return jobs.cancel(kind, job_id).view(jobs.now())

    routes.add_api_route(
        start_path or path, start_job, methods=["POST"], name=f"start_{noun}", status_code=201
    )
    for suffix, endpoint, method, name in (
        ("", look, "GET", f"get_{noun}"),
        ("/cancel", cancel, "POST", f"cancel_{noun}"),
    ):
        routes.add_api_route(
            f"{path}/{{job_id}}{suffix}",
            endpoint,
            methods=[method],
            name=name,
            response_model_exclude_none=True,
        )
