"""Test hooks, so tests can prove exactly what happened and inject failures::

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
"""

from __future__ import annotations

import logging

from fastapi import APIRouter
from pydantic import BaseModel, Field

from examples.systems.faults import Faults
from examples.systems.jobs import JobKind, JobStatus, KeyStats, ReceivedAnswer
from examples.systems.purges import PurgeStats
from examples.systems.refunds import RefundKeyStats
from examples.systems.state import DemoSystems
from examples.systems.webhooks import WebhookAttempt

logger = logging.getLogger(__name__)


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


class Stats(BaseModel):
    """`GET /_test/stats`."""

    keys: dict[str, KeyStats]
    jobs: dict[str, JobStats]
    refund_keys: dict[str, RefundKeyStats] = Field(default_factory=dict)
    outbox: int = Field(default=0, description="Entries in the approvals outbox.")
    purges: PurgeStats = Field(default_factory=PurgeStats)
    faults: Faults


def stats(systems: DemoSystems) -> Stats:
    """What happened, for tests to assert on."""
    return Stats(
        keys={key: stats.model_copy() for key, stats in systems.keys.items()},
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
            for job in systems.jobs.values()
        },
        refund_keys={key: stats.model_copy() for key, stats in systems.refund_service.keys.items()},
        outbox=len(systems.outbox),
        purges=systems.purge_service.stats(),
        faults=systems.faults.model_copy(),
    )


def router(systems: DemoSystems) -> APIRouter:
    """The test hooks' routes."""
    routes = APIRouter()

    @routes.get("/_test/stats")
    async def get_stats() -> Stats:
        return stats(systems)

    @routes.post("/_test/faults")
    async def set_faults(update: Faults) -> Faults:
        systems.faults.apply(update)
        logger.info("faults: %s", systems.faults.model_dump(exclude_defaults=True))
        return systems.faults

    @routes.post("/_test/purges/{dataset}/ask", status_code=204)
    async def let_purge_ask(dataset: str) -> None:
        systems.purge_service.ask_now(dataset).set()

    @routes.post("/_test/reset", status_code=204)
    async def reset() -> None:
        await systems.reset()

    return routes
