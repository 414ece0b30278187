"""The purge service: a long job that asks by webhook for a person's confirmation, then
completes by webhook::

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
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException
from pydantic import AfterValidator, BaseModel, Field

from examples.systems.common import DatasetName, check_callback_url, stable_number
from examples.systems.jobs import (
    ENDED,
    AnswerRequest,
    JobRecord,
    LongJobs,
    ReceivedAnswer,
    add_job_routes,
)
from waitstate import Completion, OperationError

logger = logging.getLogger(__name__)

# A purge's question, and what is answered to a repeat of an answer already applied.
PURGE_QUESTION_KEY = "confirm"
PURGE_ANSWER_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {"confirm": {"type": "boolean"}},
    "required": ["confirm"],
}
ALREADY_ANSWERED = "already answered"


class PurgeRequest(BaseModel):
    """`POST /purges`: a purge always calls back, since that is how its question comes."""

    dataset: DatasetName
    callback_url: Annotated[str, AfterValidator(check_callback_url)] = Field(max_length=2000)
    callback_token: str = Field(max_length=4000, repr=False)


class AnswerApplied(BaseModel):
    """The answer to `POST /purges/{job_id}/answers`."""

    applied: bool
    reason: str | None = Field(default=None, description="Why the answer was not applied.")


class PurgeStats(BaseModel):
    """What the purge service did, over all its jobs."""

    started: int = Field(default=0, description="Purge jobs created.")
    questions_asked: int = 0
    answers_received: int = Field(
        default=0, description="Answers to a purge job it knows, applied or not."
    )
    answers_applied: int = 0
    cancels: int = Field(default=0, description="Cancel requests for purge jobs.")


class Purges:
    """The purge service: its jobs (kept by `long_jobs`), their questions and answers."""

    def __init__(self, long_jobs: LongJobs) -> None:
        self.long_jobs = long_jobs
        self._ask_now: dict[str, asyncio.Event] = {}

    def start(self, key: str | None, request: PurgeRequest) -> tuple[JobRecord, bool]:
        """Start a purge, or find the one already started under `key` (`LongJobs.start`): it
        asks in the schema `Faults.purge_schemas` names for its dataset, else its usual one,
        and only once told to if `Faults.held_purges` names its dataset."""
        faults = self.long_jobs.faults
        return self.long_jobs.start(
            "purge",
            key,
            {"dataset": request.dataset},
            request.callback_url,
            request.callback_token,
            run=self._run,
            stage="counting rows",
            question_schema=faults.purge_schemas.get(request.dataset) or PURGE_ANSWER_SCHEMA,
            held=request.dataset in faults.held_purges,
        )

    def ask_now(self, dataset: str) -> asyncio.Event:
        """Set once a held purge of `dataset` may ask its question (`Faults.held_purges`)."""
        return self._ask_now.setdefault(dataset, asyncio.Event())

    def answer(self, job_id: str, answer: AnswerRequest) -> AnswerApplied:
        """Apply the first answer to a question a purge asked; keep later ones out.

        A repeat of an applied answer is answered as such even once the job has ended: a
        caller that retries a delivery whose outcome it did not hear learns the first counted.

        Raises:
            HTTPException: 404 for an unknown job, 409 for one that has ended, 422 for a key
                the job has not asked or an accept without content `{confirm: true|false}`.
        """
        job = self.long_jobs.job("purge", job_id)
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

    def stats(self) -> PurgeStats:
        """What the purge service did, over all its jobs."""
        purges = [job for job in self.long_jobs.jobs.values() if job.kind == "purge"]
        received = [answer for job in purges for answer in job.received]
        keys = self.long_jobs.keys.values()
        return PurgeStats(
            started=len(purges),
            questions_asked=sum(job.asking is not None for job in purges),
            answers_received=len(received),
            answers_applied=sum(answer.applied for answer in received),
            cancels=sum(stats.cancels for stats in keys if stats.kind == "purge"),
        )

    def reset(self) -> None:
        """Forget which held purges were told to ask (the jobs are `long_jobs`' to forget)."""
        self._ask_now.clear()

    async def _run(self, job: JobRecord) -> None:
        # Count the rows, ask for confirmation, wait for the first answer, then purge or not.
        assert job.callback_url is not None, "a purge always calls back (PurgeRequest)"
        dataset = job.arguments["dataset"]
        rows = stable_number(f"purge/{dataset}")
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
        await self.long_jobs.report_end(job)

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
        answered = await self.long_jobs.deliver(job, job.callback_url, job.asking)
        if answered is None or answered.status_code != 422 or job.status in ENDED:
            return None
        said = _error_message(answered.answer) or "the question was refused"
        return OperationError(
            code="question_refused",
            message=f"the purge's question was refused: {said}",
            retryable=False,
        )


def router(purges: Purges) -> APIRouter:
    """The purge service's routes."""
    routes = APIRouter()
    add_job_routes(routes, purges, PurgeRequest, "purge", "/purges", "purge")

    @routes.post("/purges/{job_id}/answers", response_model_exclude_none=True)
    async def answer_purge(job_id: str, answer: AnswerRequest) -> AnswerApplied:
        return purges.answer(job_id, answer)

    return routes


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
    if job.status in ENDED:
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
