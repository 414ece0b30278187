"""The operation activities: a poll checks a job until it ends, heartbeating each check (past
the long-poll threshold, once per attempt, the retry policy being the poller); a cancel reaches
the job's system. Run in an ActivityEnvironment, with the demo systems over real HTTP as the
external system."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import httpx
import pytest
from pydantic import BaseModel
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from examples.demo.pipeline import EnrichArgs, EnrichmentPipeline, enrich_tool
from tests.helpers import EVENTUALLY_WITHIN, eventually
from tests.one_question_job import OneQuestionJob
from tests.rigs import Systems
from waitstate.activities import OperationActivities
from waitstate.schemas.errors import ANSWER_REFUSED, OPERATION_STILL_RUNNING, RUN_INPUT_INVALID
from waitstate.schemas.operations import (
    LONG_POLL_INTERVAL,
    CancelOperationInput,
    Completion,
    OperationError,
    PollOperationInput,
)
from waitstate.schemas.questions import DeliverAnswer, Question
from waitstate.tools import Job, LongSpec, StartContext, ToolError, ToolRegistry, ToolSpec
from waitstate.tools.builtin import builtin_tools
from waitstate.tools.spec import JobAnswer, LongTool

FAILED = OperationError(code="bad_rows", message="row 12 is malformed", retryable=False)


def _activities(systems: Systems) -> OperationActivities:
    return _activities_at(systems.http, systems.url)


def _activities_at(http: httpx.AsyncClient, url: str) -> OperationActivities:
    """The worker's operation activities, with the enrichment pipeline at `url` (and the
    built-in tools, which are not long)."""
    pipeline = EnrichmentPipeline(http, url)
    return OperationActivities(ToolRegistry([enrich_tool(pipeline), *builtin_tools()]))


async def _start(systems: Systems, dataset: str = "transactions") -> str:
    """Start an enrichment job on the pipeline, as the tool activity did; its id."""
    pipeline = EnrichmentPipeline(systems.http, systems.url)
    context = StartContext(idempotency_key=f"run-1/{dataset}", operation_id="op_1")
    return (await pipeline.start(EnrichArgs(dataset=dataset), context)).job_id


def _poll(job_id: str, interval: float, tool: str = "enrich_dataset") -> PollOperationInput:
    return PollOperationInput(
        operation_id="op_1", tool=tool, job_id=job_id, poll_interval_seconds=interval
    )


async def _polled(
    activities: OperationActivities,
    poll: PollOperationInput,
    env: ActivityEnvironment | None = None,
) -> Completion:
    """One attempt of the poll activity, bounded: a poll that would wait on (a long interval
    taken for a short one) fails the test instead of hanging it."""
    async with asyncio.timeout(EVENTUALLY_WITHIN):
        return await (env or ActivityEnvironment()).run(activities.poll_operation, poll)


def _cancel(job_id: str, tool: str = "enrich_dataset") -> CancelOperationInput:
    return CancelOperationInput(operation_id="op_1", tool=tool, job_id=job_id, reason="expired")


async def _ended(systems: Systems, job_id: str) -> None:
    async def ended() -> bool:
        return systems.state.jobs[job_id].status != "running"

    await eventually(ended, f"job {job_id} to end")


def _recording(env: ActivityEnvironment) -> list[tuple[Any, ...]]:
    beats: list[tuple[Any, ...]] = []
    env.on_heartbeat = lambda *details: beats.append(details)
    return beats


# --- a short interval: one attempt checks until the job ends ---------------------------------


async def test_a_short_interval_checks_in_one_attempt_heartbeating_each_check(
    systems: Systems,
) -> None:
    await systems.faults(pipeline_seconds=0.5)
    job_id = await _start(systems)
    env = ActivityEnvironment()
    beats = _recording(env)

    result = await _polled(_activities(systems), _poll(job_id, 0.05), env)

    job = systems.state.jobs[job_id]
    assert result == Completion(status="succeeded", result=job.result, progress="100%")
    assert job.result is not None and job.result["dataset"] == "transactions"
    # One heartbeat per check that found the job running: numbered, with its progress and
    # the job's id (where `status` and `watch` read a job's progress).
    assert len(beats) >= 2
    assert [beat[0] for beat in beats] == list(range(1, len(beats) + 1))
    assert all(s == "running" and p.endswith("%") and j == job_id for _, s, p, j in beats)
    progress = [int(p.removesuffix("%")) for _, _, p, _ in beats]
    assert progress == sorted(progress) and progress[-1] > progress[0]


async def test_a_job_that_failed_is_the_polls_answer(systems: Systems) -> None:
    await systems.faults(fail_jobs=FAILED.model_dump())
    job_id = await _start(systems)

    result = await _polled(_activities(systems), _poll(job_id, 0.05))

    assert result == Completion(status="failed", error=FAILED)


async def test_a_job_cancelled_at_its_system_ends_the_poll_as_failed(systems: Systems) -> None:
    await systems.faults(never_complete=True)
    job_id = await _start(systems)
    systems.state.long_jobs.cancel("enrich", job_id)

    result = await _polled(_activities(systems), _poll(job_id, 0.05))

    assert result.status == "failed" and result.error is not None
    assert result.error.code == "cancelled"


async def test_a_job_its_system_does_not_know_ends_the_poll_as_failed(systems: Systems) -> None:
    result = await _polled(_activities(systems), _poll("enr_lost", 0.05))

    assert result.status == "failed" and result.error is not None
    assert result.error.code == "job_unknown" and "enr_lost" in result.error.message


# --- a long interval: one check per attempt, the retry policy is the poller -------------------


async def test_a_long_interval_checks_once_and_asks_to_be_retried_after_it(
    systems: Systems,
) -> None:
    await systems.faults(never_complete=True)
    job_id = await _start(systems)
    env = ActivityEnvironment()
    beats = _recording(env)
    interval = LONG_POLL_INTERVAL * 10

    with pytest.raises(ApplicationError) as raised:
        await _polled(_activities(systems), _poll(job_id, interval.total_seconds()), env)

    assert (raised.value.type, raised.value.non_retryable) == (OPERATION_STILL_RUNNING, False)
    assert raised.value.next_retry_delay == interval
    [(polls, status, progress, polled)] = beats
    assert (polls, status, polled) == (1, "running", job_id) and progress.endswith("%")
    assert raised.value.message == f"{job_id} still running ({progress})"


async def test_the_threshold_itself_is_a_long_interval(systems: Systems) -> None:
    await systems.faults(never_complete=True)
    job_id = await _start(systems)
    interval = LONG_POLL_INTERVAL.total_seconds()

    with pytest.raises(ApplicationError) as raised:
        await _polled(_activities(systems), _poll(job_id, interval))

    assert raised.value.next_retry_delay == LONG_POLL_INTERVAL


async def test_an_attempt_counts_on_from_the_last_heartbeat(systems: Systems) -> None:
    # What a worker taking over after a crash, or the next attempt, resumes from.
    await systems.faults(never_complete=True)
    job_id = await _start(systems)
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, heartbeat_details=[4, "running", "10%"])
    beats = _recording(env)
    interval = LONG_POLL_INTERVAL.total_seconds()

    with pytest.raises(ApplicationError):
        await _polled(_activities(systems), _poll(job_id, interval), env)

    assert [beat[0] for beat in beats] == [5]


async def test_a_long_interval_returns_a_job_that_has_ended(systems: Systems) -> None:
    await systems.faults(pipeline_seconds=0)
    job_id = await _start(systems)
    await _ended(systems, job_id)
    interval = LONG_POLL_INTERVAL.total_seconds()

    result = await _polled(_activities(systems), _poll(job_id, interval))

    job = systems.state.jobs[job_id]
    assert result == Completion(status="succeeded", result=job.result, progress="100%")


async def test_an_unreachable_system_is_not_the_jobs_end(closed_port: int) -> None:
    # An outage is not an outcome: the poll keeps heartbeating (status unknown) and asks to be
    # retried; the operation's expiry, not the outage, decides when the run gives up.
    env = ActivityEnvironment()
    beats = _recording(env)
    interval = LONG_POLL_INTERVAL.total_seconds()

    async with httpx.AsyncClient() as http:
        activities = _activities_at(http, f"http://127.0.0.1:{closed_port}")
        with pytest.raises(ApplicationError) as raised:
            await _polled(activities, _poll("enr_1", interval), env)

    assert raised.value.type == OPERATION_STILL_RUNNING and not raised.value.non_retryable
    assert raised.value.message == "enr_1 still running (no progress reported)"
    assert beats == [(1, "unknown", None, "enr_1")]


class _Args(BaseModel):
    pass


class _Forgetful:
    """A system that says, with a 4xx its adapter reads as final, that a job is not its own.
    (The demo systems answer 404 for that, which their adapter reports as an outcome itself.)"""

    async def start(self, args: Any, context: StartContext) -> Job:
        return Job(job_id="job-1")

    async def status(self, job_id: str) -> Completion:
        raise ToolError(f"no job {job_id} here")

    async def cancel(self, job_id: str) -> None:
        raise ToolError(f"no job {job_id} here")


async def test_a_system_that_refuses_the_check_ends_the_poll_for_good() -> None:
    spec = ToolSpec(name="forgetful", description="d", args=_Args, long=LongSpec(_Forgetful()))
    activities = OperationActivities(ToolRegistry([spec]))

    result = await _polled(activities, _poll("job-1", 0.05, tool="forgetful"))

    assert result == Completion(
        status="failed",
        error=OperationError(code="job_unknown", message="no job job-1 here", retryable=False),
    )


# --- cancel -----------------------------------------------------------------------------------


async def test_cancel_stops_the_job_at_its_system(systems: Systems) -> None:
    await systems.faults(never_complete=True)
    job_id = await _start(systems)

    await ActivityEnvironment().run(_activities(systems).cancel_operation, _cancel(job_id))

    job = systems.state.jobs[job_id]
    assert job.status == "cancelled"
    assert systems.state.keys[job.key].cancels == 1


async def test_cancelling_a_finished_or_unknown_job_is_no_error(systems: Systems) -> None:
    await systems.faults(pipeline_seconds=0)
    job_id = await _start(systems)
    await _ended(systems, job_id)
    activities = _activities(systems)

    await ActivityEnvironment().run(activities.cancel_operation, _cancel(job_id))
    await ActivityEnvironment().run(activities.cancel_operation, _cancel("enr_lost"))

    job = systems.state.jobs[job_id]
    assert job.status == "succeeded"
    assert systems.state.keys[job.key].cancels == 1


@pytest.mark.parametrize("tool", ["wait_for_operations", "missing"])
async def test_a_tool_that_is_not_long_on_this_worker_fails_the_call_for_good(
    systems: Systems, tool: str
) -> None:
    activities = _activities(systems)
    env = ActivityEnvironment()

    with pytest.raises(ApplicationError) as cancelling:
        await env.run(activities.cancel_operation, _cancel("enr_1", tool=tool))
    with pytest.raises(ApplicationError) as polling:
        await _polled(activities, _poll("enr_1", 0.05, tool=tool), env)

    for raised in (cancelling.value, polling.value):
        assert (raised.type, raised.non_retryable) == (RUN_INPUT_INVALID, True)
        assert raised.message == f"{tool} is not a long tool on this worker"


# --- questions ----------------------------------------------------------------------------------


CONFIRM = Question(key="confirm", message="Purge it?")


def _asking_job() -> OneQuestionJob:
    """`job-1`, which asks one question (`confirm`) and, once answered, asks nothing more: it
    goes on purging."""
    return OneQuestionJob("job-1", CONFIRM, Completion(status="running", progress="purging"))


def _asking(backend: LongTool) -> OperationActivities:
    spec = ToolSpec(name="asking", description="d", args=_Args, long=LongSpec(backend))
    return OperationActivities(ToolRegistry([spec]))


def _poll_known(known: list[str] | None) -> PollOperationInput:
    return _poll("job-1", 0.05, tool="asking").model_copy(update={"known_questions": known})


async def test_a_poll_returns_when_the_job_asks_a_question_its_run_has_not_recorded() -> None:
    result = await _polled(_asking(_asking_job()), _poll_known([]))

    assert result == Completion(status="input_required", questions=[CONFIRM])


@pytest.mark.parametrize("known", [["confirm"], None])
async def test_a_poll_goes_on_through_a_question_already_recorded_or_when_the_run_takes_none(
    known: list[str] | None,
) -> None:
    # Runs from before questions send no keys: the poll goes on as it always did.
    env = ActivityEnvironment()
    beats: list[Any] = []
    env.on_heartbeat = lambda *details: beats.append(details)
    poll = asyncio.create_task(env.run(_asking(_asking_job()).poll_operation, _poll_known(known)))

    await eventually(lambda: asyncio.sleep(0, len(beats) >= 3), "three checks")
    poll.cancel()
    with pytest.raises(asyncio.CancelledError):
        await poll
    assert {beat[1] for beat in beats} == {"input_required"}


async def test_an_answer_reaches_the_jobs_backend_once_and_a_refusal_is_final() -> None:
    backend = _asking_job()
    activities = _asking(backend)
    env = ActivityEnvironment()
    answer = DeliverAnswer(
        operation_id="op_1", tool="asking", job_id="job-1", key="confirm",
        action="accept", content={"confirm": True}, responder="ana",
    )  # fmt: skip

    await env.run(activities.answer_operation, answer)
    await env.run(activities.answer_operation, answer)  # a retried delivery
    with pytest.raises(ApplicationError) as refused:
        await env.run(activities.answer_operation, answer.model_copy(update={"job_id": "job-9"}))

    assert backend.answers == [
        JobAnswer(key="confirm", action="accept", content={"confirm": True}, responder="ana")
    ]
    assert (refused.value.type, refused.value.non_retryable) == (ANSWER_REFUSED, True)
    assert refused.value.message == "no job job-9"


async def test_a_tool_whose_backend_takes_no_answers_refuses_them_for_good() -> None:
    activities = _asking(_Forgetful())
    answer = DeliverAnswer(
        operation_id="op_1", tool="asking", job_id="job-1", key="k", action="decline"
    )

    with pytest.raises(ApplicationError) as refused:
        await ActivityEnvironment().run(activities.answer_operation, answer)

    assert (refused.value.type, refused.value.non_retryable) == (ANSWER_REFUSED, True)
    assert "takes no answers" in refused.value.message
