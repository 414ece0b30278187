"""The demo's external systems, in one FastAPI app: what the long and sync demo tools call.

Export service (completes by webhook)::

    POST /exports                   Idempotency-Key header; {dataset, period, callback_url?,
                                    callback_token?} -> 201 {job_id, status, eta_seconds}
                                    (200 and the same job for a key seen before)
    GET  /exports/{job_id}          {job_id, status, result?, error?, progress?}
    POST /exports/{job_id}/cancel   idempotent; a finished job stays as it is
    GET  /exports/files/{file}      {file, rows} for a file a finished export produced

Enrichment pipeline (polled, no webhook)::

    POST /pipelines/enrich          Idempotency-Key header; {dataset} -> as POST /exports
    GET  /pipelines/jobs/{job_id}   progress "NN%" while running, then {dataset, enriched_rows}
    POST /pipelines/jobs/{job_id}/cancel

Purge service (asks by webhook for a person's confirmation, then completes by webhook)::

    POST /purges                    Idempotency-Key header; {dataset, callback_url,
                                    callback_token} -> as POST /exports
    GET  /purges/{job_id}           as GET /exports/{job_id}; while it waits for an answer,
                                    status input_required with its questions
    POST /purges/{job_id}/answers   {key, action: accept|decline, content?, responder?} ->
                                    {applied: true}; {applied: false, reason: "already
                                    answered"} for a key answered before (even once the job
                                    has ended); 404 unknown job, 409 the job has ended or was
                                    cancelled, 422 a key it has not asked or an accept without
                                    content {confirm: true|false}
    POST /purges/{job_id}/cancel    as POST /exports/{job_id}/cancel

A purge counts the dataset's rows (`export_seconds`), then POSTs to its callback::

    {"status": "input_required", "progress": "waiting for confirmation", "questions": [{"key":
     "confirm", "message": "Purge dataset <dataset> (<rows> rows)? This cannot be undone.",
     "requested_schema": {"type": "object", "properties": {"confirm": {"type": "boolean"}},
     "required": ["confirm"]}}]}

and waits for the first answer. Confirmed (accept with `confirm: true`), it purges
(`export_seconds` again) and POSTs `{"status": "succeeded", "result": {"dataset", "purged_rows",
"confirmed_by": <responder>}}`; otherwise it POSTs `{"status": "failed", "error": {"code":
"not_confirmed", "message": "purge of <dataset> not confirmed (declined by <responder>)",
"retryable": false}}`. A question its callback refuses as malformed (422) is one nobody can
answer: the purge POSTs `{"status": "failed", "error": {"code": "question_refused", "message":
<the refusal>}}` at once.

Compliance folder and notifications (answer at once)::

    PUT  /folders/{folder}/files    {file} -> {path: "<folder>/<basename>"}
    GET  /folders/{folder}/files    what the folder holds
    POST /notifications             {team, message} -> {id}
    GET  /notifications             every notification sent, oldest first

Claims and refunds (answer at once; the claims are seeded, see `CLAIMS`)::

    GET  /claims/{claim_id}         {claim_id, valid, amount, customer, reason?} (reason when
                                    invalid); 404 for an unknown claim
    POST /refunds                   Idempotency-Key header; {claim_id, amount} -> 201 {refund_id,
                                    claim_id, amount} (200 and the same refund for a key seen
                                    before); 422 for an unknown or invalid claim, or more than
                                    is left to refund on the claim
    GET  /refunds                   every refund issued, oldest first

Approvals outbox (where runs post approval requests for people to read)::

    POST /approvals/outbox          any JSON object -> 201 {id}
    GET  /approvals/outbox          [{id, index, received_at, body}], oldest first

Test hooks, so tests can prove exactly what happened and inject failures::

    GET  /_test/stats               per idempotency key: starts, jobs_created, cancels; per job:
                                    status, every webhook attempt with its HTTP answer, how
                                    often its status was checked, the questions asked and
                                    every answer received; per refund key:
                                    requests and the refund; the outbox's size; purges: started,
                                    questions_asked, answers_received, answers_applied, cancels
    POST /_test/faults              set some of: fail_next_starts, accept_then_fail_next_starts,
                                    hold_start_answers_seconds, never_complete, fail_jobs,
                                    progress_reports, duplicate_webhooks,
                                    webhook_give_up_seconds, fail_cancels, export_seconds,
                                    pipeline_seconds, purge_schemas, held_purges,
                                    accept_then_fail_next_refunds (see `Faults`)
    POST /_test/purges/{dataset}/ask
                                    a purge of the dataset held by `held_purges` asks now
                                    (or as soon as it has counted its rows)
    POST /_test/reset               forget every job, file, notification, refund, outbox entry
                                    and fault (the seeded claims stay)

Everything is kept in memory on the app (`app.state.systems`). A job's statuses are those of a
`Completion` plus `cancelled`.

Webhooks are sent as real senders send them: one that was not taken (no answer, a 5xx, 408 or
429) is sent again with backoff (0.5 s doubling up to 30 s) for 10 minutes (`WebhookRetry`); any
other answer is the receiver's final word. Every attempt is in `GET /_test/stats`.

Usage::

    python -m examples.systems --port 8790 [--export-seconds 2] [--pipeline-seconds 3]
        [--webhook-give-up-seconds 600] [--webhook-max-backoff-seconds 30]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import hashlib
import itertools
import json
import logging
import math
import posixpath
import re
import signal
import socket
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import FrameType, TracebackType
from typing import Annotated, Any, Literal, Self

import httpx
import uvicorn
from fastapi import FastAPI, Header, HTTPException, Response
from pydantic import BaseModel, Field, field_validator, model_validator

from waitstate import Completion, OperationError

logger = logging.getLogger(__name__)

DEFAULT_PORT = 8790
WEBHOOK_TIMEOUT = httpx.Timeout(5.0)
# Answers after which a webhook is sent again (besides no answer at all): the receiver is busy
# or unwell. Any other 4xx is its final word, recorded and not retried.
WEBHOOK_RETRYABLE = frozenset({408, 429})


@dataclass(frozen=True)
class WebhookRetry:
    """How the systems send a webhook again when it was not taken (no answer, a 5xx, 408 or
    429), as real senders do (Stripe, GitHub, Standard Webhooks retry for hours): backoff from
    `first` seconds, doubled after each attempt up to `cap`, until `give_up_after` seconds
    have passed since the report's first attempt. A gateway that is down for a restart or a
    deploy gets the report once it is back.
    """

    first: float = 0.5
    cap: float = 30.0
    give_up_after: float = 600.0

    def delays(self) -> Iterator[float]:
        """The waits between attempts, for as long as the report may still be sent."""
        delay, waited = self.first, 0.0
        while waited + delay <= self.give_up_after:
            yield delay
            waited += delay
            delay = min(delay * 2, self.cap)


# A purge's question, and what is answered to a repeat of an answer already applied.
PURGE_QUESTION_KEY = "confirm"
PURGE_ANSWER_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {"confirm": {"type": "boolean"}},
    "required": ["confirm"],
}
ALREADY_ANSWERED = "already answered"

JobKind = Literal["export", "enrich", "purge"]
JobStatus = Literal["running", "input_required", "succeeded", "failed", "cancelled"]
AnswerAction = Literal["accept", "decline"]

_SERVICE_NAMES: dict[JobKind, str] = {
    "export": "export service",
    "enrich": "enrichment pipeline",
    "purge": "purge service",
}
_JOB_ID_PREFIXES: dict[JobKind, str] = {"export": "exp", "enrich": "enr", "purge": "prg"}
_ENDED: tuple[JobStatus, ...] = ("succeeded", "failed", "cancelled")
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,99}")
_PERIOD = re.compile(r"\d{4}-(Q[1-4]|0[1-9]|1[0-2])")


def _check_name(value: str, what: str) -> str:
    if not _NAME.fullmatch(value):
        raise ValueError(
            f"{what} must be 1-100 lowercase letters, digits, '_' or '-', e.g. 'transactions'"
        )
    return value


# --- HTTP bodies ---------------------------------------------------------------------------


class ExportRequest(BaseModel):
    """`POST /exports`."""

    dataset: str
    period: str
    callback_url: str | None = Field(default=None, max_length=2000)
    callback_token: str | None = Field(default=None, max_length=4000, repr=False)

    @field_validator("dataset")
    @classmethod
    def _dataset(cls, value: str) -> str:
        return _check_name(value, "dataset")

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
        if self.callback_url is not None and not self.callback_url.startswith(
            ("http://", "https://")
        ):
            raise ValueError("callback_url must be an http:// or https:// URL")
        return self


class EnrichRequest(BaseModel):
    """`POST /pipelines/enrich`."""

    dataset: str

    @field_validator("dataset")
    @classmethod
    def _dataset(cls, value: str) -> str:
        return _check_name(value, "dataset")


class PurgeRequest(BaseModel):
    """`POST /purges`: a purge always calls back, since that is how its question comes."""

    dataset: str
    callback_url: str = Field(max_length=2000)
    callback_token: str = Field(max_length=4000, repr=False)

    @field_validator("dataset")
    @classmethod
    def _dataset(cls, value: str) -> str:
        return _check_name(value, "dataset")

    @field_validator("callback_url")
    @classmethod
    def _callback_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("callback_url must be an http:// or https:// URL")
        return value


class AnswerRequest(BaseModel):
    """`POST /purges/{job_id}/answers`: an answer to one question the job asked."""

    key: str = Field(min_length=1, max_length=200)
    action: AnswerAction
    content: dict[str, Any] | None = None
    responder: str = Field(default="unknown", max_length=200)


class AnswerApplied(BaseModel):
    """The answer to `POST /purges/{job_id}/answers`."""

    applied: bool
    reason: str | None = Field(default=None, description="Why the answer was not applied.")


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


class ExportFile(BaseModel):
    """A file a finished export produced."""

    file: str
    rows: int


class FileUpload(BaseModel):
    """`PUT /folders/{folder}/files`."""

    file: str = Field(min_length=1, max_length=500)


class StoredFile(BaseModel):
    """A file in a folder."""

    path: str
    file: str
    rows: int


class NotificationRequest(BaseModel):
    """`POST /notifications`."""

    team: str = Field(min_length=1, max_length=100)
    message: str = Field(min_length=1, max_length=10_000)


class Notification(BaseModel):
    """A notification that was sent."""

    id: str
    team: str
    message: str


class NotificationSent(BaseModel):
    """The answer to `POST /notifications`."""

    id: str


class Claim(BaseModel):
    """An insurance claim: whether it is valid, and what it is for."""

    claim_id: str
    valid: bool
    amount: float
    customer: str
    reason: str | None = Field(default=None, description="Why the claim is invalid.")


class RefundRequest(BaseModel):
    """`POST /refunds`."""

    claim_id: str = Field(min_length=1, max_length=100)
    amount: float = Field(gt=0, allow_inf_nan=False)


class Refund(BaseModel):
    """A refund that was issued."""

    refund_id: str
    claim_id: str
    amount: float


class OutboxPosted(BaseModel):
    """The answer to `POST /approvals/outbox`."""

    id: str


class OutboxEntry(BaseModel):
    """An approval request a run posted, as the outbox received it."""

    id: str
    index: int = Field(description="1 for the first entry received, then 2...")
    received_at: datetime
    body: dict[str, Any]


class Faults(BaseModel):
    """Failures to inject. `POST /_test/faults` changes only the fields it sends.

    Job faults (`never_complete`, `fail_jobs`, `duplicate_webhooks` and the durations) apply
    to the jobs started after they are set, so a job behaves the same from start to end.
    """

    fail_next_starts: int = Field(
        default=0, ge=0, description="Answer 503 to the next n starts, before creating a job."
    )
    accept_then_fail_next_starts: int = Field(
        default=0,
        ge=0,
        description="Create (or find) the job, then answer 503: the caller never sees it.",
    )
    never_complete: bool = Field(default=False, description="Jobs stay running forever.")
    fail_jobs: OperationError | None = Field(
        default=None, description="Jobs end failed with this error."
    )
    duplicate_webhooks: int = Field(
        default=1, ge=1, description="Send each webhook this many times."
    )
    webhook_give_up_seconds: float | None = Field(
        default=None,
        ge=0,
        description="Stop sending a webhook that was not taken this long after its first "
        "attempt (the app's `WebhookRetry.give_up_after` by default; 0: one attempt only).",
    )
    fail_cancels: int = Field(
        default=0,
        ge=0,
        description="Answer 503 to the next n cancels, leaving their jobs running.",
    )
    progress_reports: int = Field(
        default=0,
        ge=0,
        le=20,
        description="Callback jobs post this many `running` reports (progress 'NN%'), evenly "
        "spread over the job, before the final one. With `hold_start_answers_seconds` longer "
        "than the job, every report reaches the gateway before the start is answered.",
    )
    hold_start_answers_seconds: float = Field(
        default=0,
        ge=0,
        description="Create the job, then wait this long before answering the start: a "
        "window in which a test can kill the caller after the job was accepted.",
    )
    export_seconds: float | None = Field(
        default=None, ge=0, description="Export duration; also each step of a purge."
    )
    pipeline_seconds: float | None = Field(default=None, ge=0, description="Pipeline duration.")
    purge_schemas: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="The purges of these datasets ask in the schema given (by dataset) instead "
        "of {confirm: boolean}: a hostile job, to test what receives its question (a "
        "backtracking pattern, a malformed schema).",
    )
    held_purges: list[str] = Field(
        default_factory=list,
        description="The purges of these datasets ask only once told to (`POST "
        "/_test/purges/{dataset}/ask`): a test decides when the question comes.",
    )
    accept_then_fail_next_refunds: int = Field(
        default=0,
        ge=0,
        description="Issue (or find) the refund, then answer 503: the caller never sees it.",
    )


class WebhookAttempt(BaseModel):
    """One POST of a webhook, and what the receiver answered."""

    report: str = Field(default="", description="What was reported: 'running 50%', 'succeeded'.")
    webhook_id: str = Field(
        default="", description="The Webhook-Id header: one per report, kept by its copies."
    )
    delivery: int = Field(description="1, then 2... when `duplicate_webhooks` repeats it.")
    attempt: int = Field(description="1, then 2... when a failed attempt is retried.")
    after_seconds: float = Field(
        default=0.0, description="When it was sent, in seconds after the report's first attempt."
    )
    status_code: int | None = None
    answer: str | None = Field(default=None, description="The answer's body (truncated).")
    error: str | None = Field(default=None, description="Why no answer came (connection...).")


class ReceivedAnswer(BaseModel):
    """One answer a job received, and whether it was applied."""

    key: str
    action: AnswerAction
    responder: str
    applied: bool = False
    reason: str | None = Field(
        default=None, description="Why it was not: 'already answered', or the refusal."
    )


class KeyStats(BaseModel):
    """What happened under one idempotency key."""

    kind: JobKind
    starts: int = 0
    jobs_created: int = 0
    cancels: int = 0
    job_id: str | None = None


class JobStats(BaseModel):
    """What happened to one job."""

    kind: JobKind
    idempotency_key: str
    arguments: dict[str, str]
    status: JobStatus
    callback_url: str | None
    webhooks: list[WebhookAttempt]
    status_checks: int = Field(default=0, description="`GET`s of the job's status.")
    questions: list[str] = Field(
        default_factory=list, description="The keys of the questions the job asked."
    )
    answers: list[ReceivedAnswer] = Field(
        default_factory=list, description="Every answer the job received, oldest first."
    )


class RefundKeyStats(BaseModel):
    """What happened under one refund idempotency key."""

    requests: int
    refund_id: str


class PurgeStats(BaseModel):
    """What the purge service did, over all its jobs."""

    started: int = Field(default=0, description="Purge jobs created.")
    questions_asked: int = 0
    answers_received: int = Field(
        default=0, description="Answers to a purge job it knows, applied or not."
    )
    answers_applied: int = 0
    cancels: int = Field(default=0, description="Cancel requests for purge jobs.")


class Stats(BaseModel):
    """`GET /_test/stats`."""

    keys: dict[str, KeyStats]
    jobs: dict[str, JobStats]
    refund_keys: dict[str, RefundKeyStats] = Field(default_factory=dict)
    outbox: int = Field(default=0, description="Entries in the approvals outbox.")
    purges: PurgeStats = Field(default_factory=PurgeStats)
    faults: Faults


# Seeded and never changed: what `GET /claims/{claim_id}` answers and refunds are checked against.
CLAIMS: Mapping[str, Claim] = {
    claim.claim_id: claim
    for claim in (
        Claim(claim_id="C-118", valid=True, amount=420.0, customer="Dana Whitfield"),
        Claim(claim_id="C-200", valid=True, amount=80.0, customer="Omar Haddad"),
        Claim(claim_id="C-305", valid=True, amount=1250.0, customer="Mei Tanaka"),
        Claim(
            claim_id="C-999",
            valid=False,
            amount=300.0,
            customer="Lena Vogt",
            reason="policy lapsed",
        ),
    )
}


# --- State ---------------------------------------------------------------------------------


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
    # What a purge asks in (`Faults.purge_schemas`; its usual question by default), and whether
    # it waits to be told to ask (`Faults.held_purges`).
    question_schema: Mapping[str, Any] = field(default_factory=lambda: PURGE_ANSWER_SCHEMA)
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


class DemoSystems:
    """The systems' state and behaviour; the app's routes are thin wrappers around it.

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
        self.export_seconds = export_seconds
        self.pipeline_seconds = pipeline_seconds
        self.webhook_retry = webhook_retry or WebhookRetry()
        self.faults = Faults()
        self.keys: dict[str, KeyStats] = {}
        self.jobs: dict[str, JobRecord] = {}
        self.files: dict[str, int] = {}
        self.folders: dict[str, dict[str, str]] = {}
        self.notifications: list[Notification] = []
        self.refunds: list[Refund] = []
        self.refund_keys: dict[str, RefundKeyStats] = {}
        self.outbox: list[OutboxEntry] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._ask_now: dict[str, asyncio.Event] = {}
        self._http: httpx.AsyncClient | None = None
        self._notification_ids = itertools.count(1)
        self._refund_ids = itertools.count(1)

    async def __aenter__(self) -> Self:
        self._http = httpx.AsyncClient(timeout=WEBHOOK_TIMEOUT)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._cancel_tasks()
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    # -- long jobs --

    def start(
        self,
        kind: JobKind,
        key: str | None,
        arguments: dict[str, str],
        callback_url: str | None = None,
        callback_token: str | None = None,
    ) -> tuple[JobRecord, bool]:
        """Start a job, or find the one already started under `key`.

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
            job = self._create(kind, key, arguments, callback_url, callback_token)
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

    def ask_now(self, dataset: str) -> asyncio.Event:
        """Set once a held purge of `dataset` may ask its question (`Faults.held_purges`)."""
        return self._ask_now.setdefault(dataset, asyncio.Event())

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
        if job.status not in _ENDED:
            job.status = "cancelled"
            logger.info("%s job %s cancelled", kind, job_id)
            # The task is asleep or waiting for an answer, or sending a progress report or a
            # question: cut short, that report was about a job that no longer runs. A final
            # report is never cut short (the job has ended by then).
            if job.timer is not None:
                job.timer.cancel()
        return job

    def answer(self, job_id: str, answer: AnswerRequest) -> AnswerApplied:
        """Apply the first answer to a question a purge asked; keep later ones out.

        A repeat of an applied answer is answered as such even once the job has ended: a
        caller that retries a delivery whose outcome it did not hear learns the first counted.

        Raises:
            HTTPException: 404 for an unknown job, 409 for one that has ended, 422 for a key
                the job has not asked or an accept without content `{confirm: true|false}`.
        """
        job = self.job("purge", job_id)
        received = ReceivedAnswer(key=answer.key, action=answer.action, responder=answer.responder)
        job.received.append(received)
        # Nothing awaits between the checks and the record, so of concurrent answers to one
        # question only one is applied.
        if answer.key in job.answers:
            received.reason = ALREADY_ANSWERED
            return AnswerApplied(applied=False, reason=ALREADY_ANSWERED)
        refusal = _refuse_answer(job, answer)
        if refusal is not None:
            received.reason = str(refusal.detail)
            raise refusal
        received.applied = True
        job.answers[answer.key] = answer
        job.status, job.stage = "running", "purging" if _confirms(answer) else "not confirmed"
        job.answered.set()
        logger.info("purge job %s answered %s by %s", job_id, answer.action, answer.responder)
        return AnswerApplied(applied=True)

    def now(self) -> float:
        """Event-loop time, what job progress is measured in."""
        return asyncio.get_running_loop().time()

    def _create(
        self,
        kind: JobKind,
        key: str,
        arguments: dict[str, str],
        callback_url: str | None,
        callback_token: str | None,
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
            stage="counting rows" if kind == "purge" else None,
            question_schema=faults.purge_schemas.get(arguments.get("dataset", ""))
            or PURGE_ANSWER_SCHEMA,
            held=kind == "purge" and arguments.get("dataset") in faults.held_purges,
        )
        self.jobs[job.job_id] = job
        if job.completes:
            run = self._run_purge(job) if kind == "purge" else self._run(job)
            job.timer = asyncio.create_task(run, name=f"job {job.job_id}")
            self._tasks.add(job.timer)
            job.timer.add_done_callback(self._tasks.discard)
        logger.info("%s job %s started: %s", kind, job.job_id, arguments)
        return job

    async def _run(self, job: JobRecord) -> None:
        steps = job.progress_reports + 1
        for step in range(1, steps):
            await asyncio.sleep(job.seconds / steps)
            if job.status != "running":
                return
            report = Completion(status="running", progress=f"{step * 100 // steps}%")
            if job.callback_url is not None:
                await self._deliver(job, job.callback_url, report)
        await asyncio.sleep(job.seconds / steps)
        if job.status != "running":
            return
        if job.planned_error is not None:
            job.status, job.error = "failed", job.planned_error
        elif job.kind == "export":
            file = f"exports/{job.arguments['dataset']}-{job.arguments['period']}.csv"
            rows = _stable_number(f"export/{job.arguments['dataset']}/{job.arguments['period']}")
            self.files[file] = rows
            job.status, job.result = "succeeded", {"file": file, "rows": rows}
        else:
            dataset = job.arguments["dataset"]
            rows = _stable_number(f"enrich/{dataset}")
            job.status, job.result = "succeeded", {"dataset": dataset, "enriched_rows": rows}
        logger.info("%s job %s %s", job.kind, job.job_id, job.status)
        if job.callback_url is not None:
            # The job has finished (succeeded or failed), so its state is a valid Completion.
            final = Completion.model_validate(
                {"status": job.status, "result": job.result, "error": job.error}
            )
            await self._deliver(job, job.callback_url, final)

    async def _run_purge(self, job: JobRecord) -> None:
        # Count the rows, ask for confirmation, wait for the first answer, then purge or not.
        assert job.callback_url is not None, "a purge always calls back (PurgeRequest)"
        dataset = job.arguments["dataset"]
        rows = _stable_number(f"purge/{dataset}")
        await asyncio.sleep(job.seconds)
        if job.held:
            await self.ask_now(dataset).wait()
        if job.status != "running":
            return
        refusal = await self._ask(
            job, f"Purge dataset {dataset} ({rows} rows)? This cannot be undone."
        )
        if refusal is not None:
            # A question its receiver refused as malformed: nobody can answer it, the job ends.
            job.status, job.stage, job.error = "failed", None, refusal
        else:
            await job.answered.wait()
            answer = job.answers[PURGE_QUESTION_KEY]
            if not _confirms(answer):
                job.status, job.error = "failed", _not_confirmed(dataset, answer.responder)
            else:
                await asyncio.sleep(job.seconds)
                if job.status != "running":
                    return
                if job.planned_error is not None:
                    job.status, job.error = "failed", job.planned_error
                else:
                    job.status, job.result = (
                        "succeeded",
                        {"dataset": dataset, "purged_rows": rows, "confirmed_by": answer.responder},
                    )
        logger.info("purge job %s %s", job.job_id, job.status)
        final = Completion.model_validate(
            {"status": job.status, "result": job.result, "error": job.error}
        )
        await self._deliver(job, job.callback_url, final)

    async def _ask(self, job: JobRecord, message: str) -> OperationError | None:
        """Ask the purge's question by its callback; returns why the job cannot go on if the
        receiver refused the question as malformed (422), else None."""
        assert job.callback_url is not None, "a purge always calls back (PurgeRequest)"
        question = {
            "key": PURGE_QUESTION_KEY,
            "message": message,
            "requested_schema": dict(job.question_schema),
        }
        # Recorded before it is sent: the receiver may answer before its POST returns.
        job.status, job.stage = "input_required", "waiting for confirmation"
        job.asking = Completion.model_validate(
            {"status": job.status, "progress": job.stage, "questions": [question]}
        )
        logger.info("purge job %s asks: %s", job.job_id, message)
        answered = await self._deliver(job, job.callback_url, job.asking)
        if answered is None or answered.status_code != 422 or job.status in _ENDED:
            return None
        said = _error_message(answered.answer) or "the question was refused"
        return OperationError(
            code="question_refused",
            message=f"the purge's question was refused: {said}",
            retryable=False,
        )

    async def _deliver(
        self, job: JobRecord, url: str, completion: Completion
    ) -> WebhookAttempt | None:
        """POST the report (`duplicate_webhooks` times), each copy retried while it is not
        taken; returns the last attempt (None if the job was set to send none)."""
        assert self._http is not None, "DemoSystems is used outside its `async with`"
        body = completion.model_dump(mode="json", exclude_none=True)
        report = " ".join(filter(None, [completion.status, completion.progress]))
        # One id per report, kept by its retries and copies (as Standard Webhooks' webhook-id):
        # the receiver tells a copy of this report from another report with the same body.
        webhook_id = f"whk_{uuid.uuid4().hex[:16]}"
        headers = {"Authorization": f"Bearer {job.callback_token}", "Webhook-Id": webhook_id}
        last: WebhookAttempt | None = None
        for delivery in range(1, job.deliveries + 1):
            first = self.now()
            delays = job.retry.delays()
            for attempt in itertools.count(1):
                record = WebhookAttempt(
                    report=report,
                    webhook_id=webhook_id,
                    delivery=delivery,
                    attempt=attempt,
                    after_seconds=round(self.now() - first, 3),
                )
                job.webhooks.append(record)
                try:
                    response = await self._http.post(url, json=body, headers=headers)
                except httpx.TransportError as err:
                    record.error = f"{type(err).__name__}: {err}"
                else:
                    record.status_code = response.status_code
                    record.answer = response.text[:1000]
                    if response.status_code < 500 and response.status_code not in WEBHOOK_RETRYABLE:
                        break
                delay = next(delays, None)
                if delay is None:
                    break  # given up: the job's status still tells its outcome
                await asyncio.sleep(delay)
            logger.info(
                "%s job %s webhook %d: %s",
                job.kind,
                job.job_id,
                delivery,
                record.status_code or record.error,
            )
            last = record
        return last

    async def _cancel_tasks(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- compliance folder and notifications --

    def export_file(self, file: str) -> ExportFile:
        """The file a finished export produced, or a 404."""
        if file not in self.files:
            raise HTTPException(404, f"no export produced {file!r}")
        return ExportFile(file=file, rows=self.files[file])

    def upload(self, folder: str, file: str) -> StoredFile:
        """Put an exported file in a folder (again: no change)."""
        try:
            _check_name(folder, "folder")
        except ValueError as err:
            raise HTTPException(422, str(err)) from err
        rows = self.export_file(file).rows
        name = posixpath.basename(file)
        self.folders.setdefault(folder, {})[name] = file
        return StoredFile(path=f"{folder}/{name}", file=file, rows=rows)

    def folder(self, folder: str) -> list[StoredFile]:
        """What a folder holds (nothing for a folder never written to)."""
        return [
            StoredFile(path=f"{folder}/{name}", file=file, rows=self.files[file])
            for name, file in sorted(self.folders.get(folder, {}).items())
        ]

    def notify(self, request: NotificationRequest) -> Notification:
        """Record a notification."""
        notification = Notification(
            id=f"ntf_{next(self._notification_ids)}", team=request.team, message=request.message
        )
        self.notifications.append(notification)
        return notification

    # -- claims and refunds --

    def claim(self, claim_id: str) -> Claim:
        """The claim, or a 404."""
        claim = CLAIMS.get(claim_id)
        if claim is None:
            raise HTTPException(404, f"no claim {claim_id}")
        return claim

    def refund(self, key: str | None, request: RefundRequest) -> tuple[Refund, bool]:
        """Issue a refund, or find the one already issued under `key`.

        Returns:
            The refund, and whether this request issued it.

        Raises:
            HTTPException: 400 without a key; 422 for a key used for another request, an
                unknown or invalid claim, or more than is left to refund; 503 for an injected
                fault.
        """
        if not key:
            raise HTTPException(400, "the Idempotency-Key header is required")
        stats = self.refund_keys.get(key)
        if stats is not None:
            stats.requests += 1
            refund = self._refund_by_id(stats.refund_id)
            if (refund.claim_id, refund.amount) != (request.claim_id, request.amount):
                raise HTTPException(
                    422,
                    f"Idempotency-Key {key!r} was already used for a different refund; "
                    "use a new key for a new refund",
                )
            created = False
        else:
            # Nothing awaits between the checks and the record, so concurrent requests can
            # neither both use one key nor together refund more than the claim.
            self._check_refundable(request)
            refund = Refund(
                refund_id=f"rfd_{next(self._refund_ids)}",
                claim_id=request.claim_id,
                amount=request.amount,
            )
            self.refunds.append(refund)
            self.refund_keys[key] = RefundKeyStats(requests=1, refund_id=refund.refund_id)
            logger.info("refund %s issued: %s", refund.refund_id, request)
            created = True
        if self.faults.accept_then_fail_next_refunds:
            self.faults.accept_then_fail_next_refunds -= 1
            raise HTTPException(503, "the refund service is temporarily unavailable; try again")
        return refund, created

    def _check_refundable(self, request: RefundRequest) -> None:
        claim = CLAIMS.get(request.claim_id)
        if claim is None:
            raise HTTPException(422, f"no claim {request.claim_id}; nothing to refund")
        if not claim.valid:
            raise HTTPException(
                422, f"claim {claim.claim_id} is not valid ({claim.reason}); no refund allowed"
            )
        refunded = sum(r.amount for r in self.refunds if r.claim_id == claim.claim_id)
        left = round(claim.amount - refunded, 2)
        # Compared in cents, so float noise (0.1 + 0.2) never refuses an exact refund.
        if round(request.amount, 2) > left:
            already = f" ({refunded:.2f} already refunded)" if refunded else ""
            raise HTTPException(
                422,
                f"refund of {request.amount:.2f} exceeds what is left on claim "
                f"{claim.claim_id}: {left:.2f} of {claim.amount:.2f}{already}",
            )

    def _refund_by_id(self, refund_id: str) -> Refund:
        return next(r for r in self.refunds if r.refund_id == refund_id)

    # -- approvals outbox --

    def post_to_outbox(self, body: dict[str, Any]) -> OutboxEntry:
        """Record an approval request a run posted for people to read."""
        index = len(self.outbox) + 1
        entry = OutboxEntry(
            id=f"out_{index}", index=index, received_at=datetime.now(UTC), body=body
        )
        self.outbox.append(entry)
        return entry

    # -- test hooks --

    def stats(self) -> Stats:
        """What happened, for tests to assert on."""
        return Stats(
            keys={key: stats.model_copy() for key, stats in self.keys.items()},
            jobs={
                job.job_id: JobStats(
                    kind=job.kind,
                    idempotency_key=job.key,
                    arguments=job.arguments,
                    status=job.status,
                    callback_url=job.callback_url,
                    webhooks=[attempt.model_copy() for attempt in job.webhooks],
                    status_checks=job.status_checks,
                    questions=[q.key for q in job.asking.questions or []] if job.asking else [],
                    answers=[answer.model_copy() for answer in job.received],
                )
                for job in self.jobs.values()
            },
            refund_keys={key: stats.model_copy() for key, stats in self.refund_keys.items()},
            outbox=len(self.outbox),
            purges=self._purge_stats(),
            faults=self.faults.model_copy(),
        )

    def _purge_stats(self) -> PurgeStats:
        purges = [job for job in self.jobs.values() if job.kind == "purge"]
        received = [answer for job in purges for answer in job.received]
        return PurgeStats(
            started=len(purges),
            questions_asked=sum(job.asking is not None for job in purges),
            answers_received=len(received),
            answers_applied=sum(answer.applied for answer in received),
            cancels=sum(stats.cancels for stats in self.keys.values() if stats.kind == "purge"),
        )

    def set_faults(self, update: Faults) -> Faults:
        """Change the faults named in `update` (the fields it was given), keep the others."""
        changed = update.model_dump(include=update.model_fields_set)
        self.faults = Faults.model_validate({**self.faults.model_dump(), **changed})
        logger.info("faults: %s", self.faults.model_dump(exclude_defaults=True))
        return self.faults

    async def reset(self) -> None:
        """Forget every job, file, folder, notification, refund, outbox entry and fault."""
        await self._cancel_tasks()
        self.faults = Faults()
        self.keys.clear()
        self.jobs.clear()
        self.files.clear()
        self.folders.clear()
        self.notifications.clear()
        self._notification_ids = itertools.count(1)
        self.refunds.clear()
        self.refund_keys.clear()
        self._refund_ids = itertools.count(1)
        self.outbox.clear()
        self._ask_now.clear()


def _confirms(answer: AnswerRequest) -> bool:
    return answer.action == "accept" and (answer.content or {}).get("confirm") is True


def _not_confirmed(dataset: str, responder: str) -> OperationError:
    return OperationError(
        code="not_confirmed",
        message=f"purge of {dataset} not confirmed (declined by {responder})",
        retryable=False,
    )


def _refuse_answer(job: JobRecord, answer: AnswerRequest) -> HTTPException | None:
    """The refusal of an answer to a key not answered before (None: the job takes it)."""
    if job.status in _ENDED:
        return HTTPException(
            409, f"purge job {job.job_id} has ended ({job.status}); it takes no answers"
        )
    if not job.asked(answer.key):
        return HTTPException(422, f"purge job {job.job_id} has asked no question {answer.key!r}")
    if answer.action == "accept" and not isinstance((answer.content or {}).get("confirm"), bool):
        return HTTPException(422, 'an accept carries content {"confirm": true or false}')
    return None


def _error_message(answer: str | None) -> str | None:
    """The message of a JSON error answer (`{"error": {"message": ...}}`), if it is one."""
    try:
        message = json.loads(answer or "")["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return None
    return message if isinstance(message, str) else None


def _stable_number(text: str) -> int:
    # A row count that looks real and is the same for the same request, in every process.
    digest = hashlib.sha256(text.encode()).digest()
    return 100_000 + int.from_bytes(digest[:8], "big") % 900_000


# --- The app -------------------------------------------------------------------------------

IdempotencyKey = Annotated[str | None, Header(alias="Idempotency-Key", max_length=1000)]


def create_app(
    *,
    export_seconds: float = 2.0,
    pipeline_seconds: float = 3.0,
    webhook_retry: WebhookRetry | None = None,
) -> FastAPI:
    """The demo systems as one ASGI app; its state is `app.state.systems` (a `DemoSystems`).

    Args:
        export_seconds: How long an export runs before it succeeds and calls back; also how
            long a purge takes to ask for confirmation, and to purge once confirmed.
        pipeline_seconds: How long an enrichment job runs.
        webhook_retry: How webhooks that were not taken are sent again (`WebhookRetry()`:
            from half a second, capped at 30 s, for 10 minutes).
    """
    systems = DemoSystems(
        export_seconds=export_seconds,
        pipeline_seconds=pipeline_seconds,
        webhook_retry=webhook_retry,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with systems:
            yield

    app = FastAPI(title="waitstate demo systems", lifespan=lifespan)
    app.state.systems = systems

    async def accepted(job: JobRecord, created: bool, response: Response) -> JobAccepted:
        await systems.hold_start_answer()
        if not created:
            response.status_code = 200
        return JobAccepted(
            job_id=job.job_id, status=job.status, eta_seconds=job.eta_seconds(systems.now())
        )

    @app.post("/exports", status_code=201)
    async def start_export(
        request: ExportRequest, response: Response, idempotency_key: IdempotencyKey = None
    ) -> JobAccepted:
        arguments = {"dataset": request.dataset, "period": request.period}
        job, created = systems.start(
            "export", idempotency_key, arguments, request.callback_url, request.callback_token
        )
        return await accepted(job, created, response)

    # Before `/exports/{job_id}`-shaped routes, though a file path has more segments anyway.
    @app.get("/exports/files/{file:path}")
    async def get_export_file(file: str) -> ExportFile:
        return systems.export_file(file)

    @app.get("/exports/{job_id}", response_model_exclude_none=True)
    async def get_export(job_id: str) -> JobView:
        return systems.look("export", job_id)

    @app.post("/exports/{job_id}/cancel", response_model_exclude_none=True)
    async def cancel_export(job_id: str) -> JobView:
        return systems.cancel("export", job_id).view(systems.now())

    @app.post("/pipelines/enrich", status_code=201)
    async def start_enrichment(
        request: EnrichRequest, response: Response, idempotency_key: IdempotencyKey = None
    ) -> JobAccepted:
        job, created = systems.start("enrich", idempotency_key, {"dataset": request.dataset})
        return await accepted(job, created, response)

    @app.get("/pipelines/jobs/{job_id}", response_model_exclude_none=True)
    async def get_enrichment(job_id: str) -> JobView:
        return systems.look("enrich", job_id)

    @app.post("/pipelines/jobs/{job_id}/cancel", response_model_exclude_none=True)
    async def cancel_enrichment(job_id: str) -> JobView:
        return systems.cancel("enrich", job_id).view(systems.now())

    @app.post("/purges", status_code=201)
    async def start_purge(
        request: PurgeRequest, response: Response, idempotency_key: IdempotencyKey = None
    ) -> JobAccepted:
        job, created = systems.start(
            "purge",
            idempotency_key,
            {"dataset": request.dataset},
            request.callback_url,
            request.callback_token,
        )
        return await accepted(job, created, response)

    @app.get("/purges/{job_id}", response_model_exclude_none=True)
    async def get_purge(job_id: str) -> JobView:
        return systems.look("purge", job_id)

    @app.post("/purges/{job_id}/answers", response_model_exclude_none=True)
    async def answer_purge(job_id: str, answer: AnswerRequest) -> AnswerApplied:
        return systems.answer(job_id, answer)

    @app.post("/purges/{job_id}/cancel", response_model_exclude_none=True)
    async def cancel_purge(job_id: str) -> JobView:
        return systems.cancel("purge", job_id).view(systems.now())

    @app.put("/folders/{folder}/files")
    async def upload_file(folder: str, upload: FileUpload) -> StoredFile:
        return systems.upload(folder, upload.file)

    @app.get("/folders/{folder}/files")
    async def list_folder(folder: str) -> list[StoredFile]:
        return systems.folder(folder)

    @app.post("/notifications", status_code=201)
    async def send_notification(request: NotificationRequest) -> NotificationSent:
        return NotificationSent(id=systems.notify(request).id)

    @app.get("/notifications")
    async def list_notifications() -> list[Notification]:
        return list(systems.notifications)

    @app.get("/claims/{claim_id}", response_model_exclude_none=True)
    async def get_claim(claim_id: str) -> Claim:
        return systems.claim(claim_id)

    @app.post("/refunds", status_code=201)
    async def issue_refund(
        request: RefundRequest, response: Response, idempotency_key: IdempotencyKey = None
    ) -> Refund:
        refund, created = systems.refund(idempotency_key, request)
        if not created:
            response.status_code = 200
        return refund

    @app.get("/refunds")
    async def list_refunds() -> list[Refund]:
        return list(systems.refunds)

    @app.post("/approvals/outbox", status_code=201)
    async def post_to_outbox(body: dict[str, Any]) -> OutboxPosted:
        return OutboxPosted(id=systems.post_to_outbox(body).id)

    @app.get("/approvals/outbox")
    async def list_outbox() -> list[OutboxEntry]:
        return list(systems.outbox)

    @app.get("/_test/stats")
    async def get_stats() -> Stats:
        return systems.stats()

    @app.post("/_test/faults")
    async def set_faults(update: Faults) -> Faults:
        return systems.set_faults(update)

    @app.post("/_test/purges/{dataset}/ask", status_code=204)
    async def let_purge_ask(dataset: str) -> None:
        systems.ask_now(dataset).set()

    @app.post("/_test/reset", status_code=204)
    async def reset() -> None:
        await systems.reset()

    return app


# --- Serving -------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def serving(app: Any, *, host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[str]:
    """Serve an ASGI app with uvicorn in the running event loop, for tests and embedding.

    Args:
        app: The ASGI app; its lifespan runs on entry and exit.
        host: The address to listen on.
        port: The port; 0 picks a free one.

    Yields:
        The server's root URL, e.g. `http://127.0.0.1:41234`.
    """
    server, task, url = await _start(app, host, port, log_level="warning")
    try:
        yield url
    finally:
        server.should_exit = True
        await task


async def _start(
    app: Any, host: str, port: int, *, log_level: str
) -> tuple[uvicorn.Server, asyncio.Task[None], str]:
    sock = _listen(host, port)
    server = uvicorn.Server(uvicorn.Config(app, host=host, log_level=log_level))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            sock.close()
            await task
            raise RuntimeError("the server stopped while starting")
        await asyncio.sleep(0.01)
    return server, task, f"http://{host}:{sock.getsockname()[1]}"


def _listen(host: str, port: int) -> socket.socket:
    # Bound here rather than by uvicorn: a busy port is an OSError to the caller (uvicorn would
    # call sys.exit inside the task), and port 0 tells us which port it got. The protocol comes
    # from getaddrinfo, as when asyncio binds: asyncio sets TCP_NODELAY only on sockets whose
    # `proto` says TCP, and without it every answer waits ~40 ms for a delayed ACK.
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


def _already_stopping(signum: int, frame: FrameType | None) -> None:
    """Ignore a signal: uvicorn re-raises the one that stopped it once shutdown is done."""


async def _serve(app: FastAPI, host: str, port: int) -> None:
    # uvicorn handles SIGINT/SIGTERM with a graceful shutdown (the lifespan cancels every job),
    # then raises the signal again under the previous handler so the default action still
    # happens. The shutdown is complete by then, so the process exits 0 instead of dying.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _already_stopping)
    _, task, url = await _start(app, host, port, log_level="warning")
    logger.info("demo systems listening on %s", url)
    await task
    logger.info("demo systems stopped")


def main(argv: list[str] | None = None) -> None:
    """Entry point: `python -m examples.systems`."""
    parser = argparse.ArgumentParser(description="The demo's external systems (one HTTP app).")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="0 picks a free port")
    parser.add_argument("--export-seconds", type=float, default=2.0)
    parser.add_argument("--pipeline-seconds", type=float, default=3.0)
    parser.add_argument(
        "--webhook-give-up-seconds",
        type=float,
        default=WebhookRetry.give_up_after,
        help="how long a webhook that was not taken is sent again (default 600)",
    )
    parser.add_argument(
        "--webhook-max-backoff-seconds",
        type=float,
        default=WebhookRetry.cap,
        help="the longest wait between two attempts of a webhook (default 30)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    retry = WebhookRetry(
        cap=args.webhook_max_backoff_seconds, give_up_after=args.webhook_give_up_seconds
    )
    app = create_app(
        export_seconds=args.export_seconds,
        pipeline_seconds=args.pipeline_seconds,
        webhook_retry=retry,
    )
    asyncio.run(_serve(app, args.host, args.port))


if __name__ == "__main__":
    main()
