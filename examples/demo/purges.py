"""The purge service: a long tool whose job asks a person to confirm mid-flight (`input_required`
by callback), takes the answer through `answer`, then completes by callback."""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel, Field

from examples.demo.services import JobService, check_answer, error_message, job_url
from waitstate import (
    InputPolicy,
    Job,
    JobAnswer,
    LongSpec,
    LongTool,
    ResultMode,
    StartContext,
    ToolError,
    ToolSpec,
)

# A purge cannot be undone: a person confirms it, never the model, and silence is a no.
PURGE_CONFIRMATION = InputPolicy(
    answered_by="person", timeout=timedelta(minutes=30), on_timeout="decline"
)


class PurgeArgs(BaseModel):
    dataset: str = Field(
        description="The dataset to purge (every row is deleted), lowercase, e.g. 'staging_events'."
    )


class PurgeService(JobService, LongTool):
    """Starts, checks, answers and cancels purges on the purge service."""

    service = "purge service"
    jobs_path = "/purges"

    async def start(self, args: PurgeArgs, context: StartContext) -> Job:
        """Start a purge, or find the one already started under the idempotency key.

        Raises:
            ToolError: the service refused the purge (bad dataset name, no callback...).
            ServiceError, httpx.TransportError: the service is unavailable; retry.
        """
        # Its question and its result come only by callback: declared without one (not
        # `purge_tool`), the service refuses the purge, and the model reads why.
        return await self._start("/purges", {"dataset": args.dataset}, context, calls_back=True)

    async def answer(self, job_id: str, answer: JobAnswer) -> None:
        """Give the purge job an answer. The service applies the first answer to a question
        and keeps out its repeats, so a retried delivery is safe.

        Raises:
            ToolError: the service refused the answer (unknown job, the job has ended, a key it
                did not ask, content that does not fit).
            ServiceError, httpx.TransportError: the service is unavailable; retry.
        """
        response = await self._http.post(
            f"{job_url(self._base_url, self.jobs_path, job_id)}/answers",
            json={
                "key": answer.key,
                "action": answer.action,
                "content": answer.content,
                "responder": answer.responder,
            },
        )
        if response.status_code == 409:
            # The job has ended: final, unlike the in-flight conflict `check_answer` retries.
            raise ToolError(f"{self.service}: {error_message(response)}")
        check_answer(response, self.service)


def purge_tool(
    backend: LongTool,
    *,
    input: InputPolicy = PURGE_CONFIRMATION,
    timeout: timedelta = timedelta(hours=1),
    mode: ResultMode = "await",
) -> ToolSpec:
    """`purge_dataset`: delete every row of a dataset, once a person confirms; completes by
    callback.

    Args:
        backend: Usually a `PurgeService` (it must answer questions: `answer(job_id, answer)`).
        input: Who confirms, how long they have, and what silence means.
        timeout: After this the purge is cancelled and the operation expires.
        mode: `await` (the result is the tool's return value) or `handle`.
    """
    return ToolSpec(
        name="purge_dataset",
        description=(
            "Purge a dataset: delete every row of it, permanently. Before deleting anything "
            "the purge service asks a person to confirm, mid-flight; the purge waits for that "
            "answer. The result is {dataset, purged_rows, confirmed_by}; a purge nobody "
            "confirms fails with code not_confirmed."
        ),
        args=PurgeArgs,
        long=LongSpec(
            backend=backend, completion="callback", mode=mode, timeout=timeout, input=input
        ),
    )
