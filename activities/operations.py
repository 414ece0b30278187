"""Operation activities: check a long tool's job until it ends (or once), and cancel it."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from waitstate.blobs import BlobStore
from waitstate.cancelling import keep_cancellation
from waitstate.mcp import McpConfigError, McpServers, is_mcp_name, split_name
from waitstate.mcp.sampling import Sampler
from waitstate.mcp.tasks import McpTaskBackend
from waitstate.providers import Providers, UnknownModelError
from waitstate.schemas.errors import (
    ANSWER_REFUSED,
    CANCEL_REFUSED,
    OPERATION_STILL_RUNNING,
    RUN_INPUT_INVALID,
)
from waitstate.schemas.operations import (
    LONG_POLL_INTERVAL,
    CancelOperationInput,
    Completion,
    OperationError,
    PolledCompletion,
    PollHeartbeat,
    PollOperationInput,
    non_finite_at,
)
from waitstate.schemas.questions import DeliverAnswer
from waitstate.schemas.run import ANSWER_OPERATION, CANCEL_OPERATION, POLL_OPERATION
from waitstate.tools import LongSpec, ToolError, ToolRegistry
from waitstate.tools.spec import JobAnswer

_TERMINAL = ("succeeded", "failed")


class OperationActivities:
    """Polls and cancels the jobs that the worker's long tools started, and the tasks of its
    MCP servers and their calls that ask for input in rounds (kept in `blobs`)."""

    def __init__(
        self,
        tools: ToolRegistry,
        mcp: McpServers | None = None,
        blobs: BlobStore | None = None,
        providers: Providers | None = None,
    ) -> None:
        self._tools = tools
        self._mcp = mcp or McpServers()
        # Where the MCP calls that ask for input in rounds are recorded (`mrtr:` jobs).
        self._blobs = blobs
        # The runs' models, for the MCP servers whose sampling requests they answer.
        self._providers = providers

    @activity.defn(name=POLL_OPERATION)
    async def poll_operation(self, input: PollOperationInput) -> Completion:
        """Check a job's status until it ends, heartbeating each check.

        With an interval of a minute or more this makes one check per attempt and raises a
        retryable error while the job runs: the retry policy is the poller, and no worker
        slot is held between checks. A worker that takes over after a crash resumes counting
        from the last heartbeat; the job itself is never restarted.
        """
        long = self._long(input.tool, input.model)
        try:
            polled = await self._poll(input, long)
            sampler = getattr(long.backend, "sampler", None)
            if sampler is None or not sampler.usage.model_calls:
                return polled
            # What the run's model spent answering the job's requests: for the run's usage.
            return PolledCompletion(**polled.model_dump(), usage=sampler.usage)
        finally:
            # An MCP server's backend is made for this poll: its session ends with it.
            if is_mcp_name(input.tool) and isinstance(long.backend, McpTaskBackend):
                await long.backend.aclose()

    async def _poll(self, input: PollOperationInput, long: LongSpec) -> Completion:
        if input.once:
            return await self._check(input, long)
        details = activity.info().heartbeat_details
        polls = int(details[0]) if details else 0
        interval = input.poll_interval_seconds
        while True:
            polls += 1
            try:
                status = await _status(long, input.job_id)
            except Exception as err:
                # Transient (unreachable, 5xx): keep checking and heartbeating; the
                # operation's expiry, not an outage, decides when to give up. It comes as
                # this poll's cancellation, which a backend's library may have handed back
                # as its failure: the poll ends then, or it would hold the worker's shutdown.
                keep_cancellation(err)
                activity.logger.warning("status check of %s failed: %s", input.job_id, err)
                status = None
            if status is not None and _answers(status, input):
                return status
            progress = status.progress if status else None
            state = status.status if status else "unknown"
            # Where `status` and `watch` read the job's progress (PollHeartbeat's layout).
            activity.heartbeat(*PollHeartbeat(polls, state, progress, input.job_id).details())
            if timedelta(seconds=interval) >= LONG_POLL_INTERVAL:
                raise _still_running(input.job_id, progress, interval)
            # The next check at the interval, or sooner if the job's system says it changed.
            changed = getattr(long.backend, "changed", None)
            if changed is None:
                await asyncio.sleep(interval)
            else:
                await changed(input.job_id, interval)

    async def _check(self, input: PollOperationInput, long: LongSpec) -> Completion:
        """One check (`once`): the job's end, or a question it asks anew; a job still running,
        or a system that could not answer, is a retryable error (the retry policy checks
        again)."""
        try:
            status = await _status(long, input.job_id)
        except Exception as err:
            keep_cancellation(err)  # as in `_poll`
            activity.logger.warning("status check of %s failed: %s", input.job_id, err)
            raise ApplicationError(
                f"could not check {input.job_id}: {str(err)[:500] or type(err).__name__}"
            ) from None
        if _answers(status, input):
            return status
        raise _still_running(input.job_id, status.progress, input.poll_interval_seconds)

    @activity.defn(name=ANSWER_OPERATION)
    async def answer_operation(self, input: DeliverAnswer) -> None:
        """Give a job the answer to one of its questions (`tasks/update` for an MCP task; the
        tool's `answer` for our own long tools).

        Raises:
            ApplicationError: non-retryable when the job's system refused the answer, or the
                tool takes no answers; a transport failure is retried.
        """
        long = self._long(input.tool)
        answer = getattr(long.backend, "answer", None)
        if answer is None:
            raise ApplicationError(
                f"{input.tool} takes no answers (its backend has no answer method)",
                type=ANSWER_REFUSED,
                non_retryable=True,
            )
        activity.logger.info(
            "answering %s (%s) %s: %s", input.job_id, input.tool, input.key, input.action
        )
        try:
            await answer(
                input.job_id,
                JobAnswer(
                    key=input.key,
                    action=input.action,
                    content=input.content,
                    responder=input.responder,
                    reason=input.reason,
                ),
            )
        except ToolError as err:
            raise ApplicationError(str(err), type=ANSWER_REFUSED, non_retryable=True) from None
        finally:
            if is_mcp_name(input.tool) and isinstance(long.backend, McpTaskBackend):
                await long.backend.aclose()

    @activity.defn(name=CANCEL_OPERATION)
    async def cancel_operation(self, input: CancelOperationInput) -> None:
        """Ask the external system to stop a job that expired or whose run was cancelled."""
        activity.logger.info("cancelling %s (%s): %s", input.job_id, input.tool, input.reason)
        try:
            await self._long(input.tool).backend.cancel(input.job_id)
        except ToolError as err:
            # The system refuses to stop the job: asking again would not change its mind.
            raise ApplicationError(str(err), type=CANCEL_REFUSED, non_retryable=True) from None

    def _long(self, name: str, model: str | None = None) -> LongSpec:
        """The long tool `name`; an MCP server's, made for this call, its sampling requests
        answered by `model` (the run's) where the server's policy allows it."""
        if is_mcp_name(name):  # a task of an MCP server: polled and cancelled on that server
            try:
                server = self._mcp.get(split_name(name)[0])
            except McpConfigError as err:
                raise ApplicationError(
                    str(err), type=RUN_INPUT_INVALID, non_retryable=True
                ) from None
            sampler = None
            if server.sampling is not None and model is not None and self._providers is not None:
                try:
                    provider, model_name = self._providers.resolve(model)
                except UnknownModelError as err:
                    activity.logger.warning("%s: sampling not answered: %s", name, err)
                else:
                    sampler = Sampler(provider, model_name, server.sampling, server.name)
            backend = McpTaskBackend(server, self._blobs, sampler)
            return LongSpec(backend=backend, completion="poll")
        spec = self._tools.get(name)
        if spec is None or spec.long is None:
            raise ApplicationError(
                f"{name} is not a long tool on this worker",
                type=RUN_INPUT_INVALID,
                non_retryable=True,
            )
        return spec.long


async def _status(long: LongSpec, job_id: str) -> Completion:
    """The job's status as its system reports it; a job the system says does not exist (any
    more) has failed, which is its outcome. Other errors (unreachable, 5xx) are raised."""
    try:
        return _faithful(await long.backend.status(job_id))
    except ToolError as err:
        return Completion(
            status="failed",
            error=OperationError(code="job_unknown", message=str(err), retryable=False),
        )


def _answers(status: Completion, input: PollOperationInput) -> bool:
    """Whether a status is the run's to hear now: the job's end, or a question it asks anew
    (the run records the question, routes it, and polls again)."""
    return status.status in _TERMINAL or _asks_anew(status, input.known_questions)


def _still_running(job_id: str, progress: str | None, interval: float) -> ApplicationError:
    """A check that found the job running: retried one interval later (the retry policy is
    the poller). Benign: the worker logs it at debug level, the SDK's failure metrics leave
    it out."""
    return ApplicationError(
        f"{job_id} still running ({progress or 'no progress reported'})",
        type=OPERATION_STILL_RUNNING,
        next_retry_delay=timedelta(seconds=interval),
        category=ApplicationErrorCategory.BENIGN,
    )


def _faithful(status: Completion) -> Completion:
    """A job's report as it is, or, when its result holds a number JSON cannot carry (NaN,
    Infinity), a failure saying where: stored, the number would silently become null."""
    if (where := non_finite_at(status.result, "result")) is None:
        return status
    return Completion(
        status="failed",
        error=OperationError(
            code="non_finite_number",
            message=f"the job's report has a number JSON cannot carry at {where} (NaN or "
            "Infinity): its result was not taken",
            retryable=False,
        ),
    )


def _asks_anew(status: Completion, known: list[str] | None) -> bool:
    """Whether the job asks a question its run has not recorded (only runs that take
    questions send `known`)."""
    return (
        known is not None
        and status.status == "input_required"
        and any(question.key not in known for question in status.questions or ())
    )
