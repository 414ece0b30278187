"""The operation activities: a poll checks a job until it ends (or, past the long-poll
threshold, once per attempt, the retry policy being the poller); a cancel reaches the job's
system. Run in an ActivityEnvironment against a scripted backend."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from pydantic import BaseModel
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities import OperationActivities
from schemas.errors import OPERATION_STILL_RUNNING, RUN_INPUT_INVALID
from schemas.operations import (
    LONG_POLL_INTERVAL,
    CancelOperationInput,
    Completion,
    PollOperationInput,
)
from tools import Job, LongSpec, StartContext, ToolRegistry, ToolSpec


class _Args(BaseModel):
    pass


class _Backend:
    """Answers each status check with the next of `statuses`; records cancels."""

    def __init__(self, *statuses: Completion) -> None:
        self._statuses = list(statuses)
        self.checks = 0
        self.cancelled: list[str] = []

    async def start(self, args: Any, context: StartContext) -> Job:
        return Job(job_id="job-1")

    async def status(self, job_id: str) -> Completion:
        self.checks += 1
        return self._statuses.pop(0)

    async def cancel(self, job_id: str) -> None:
        self.cancelled.append(job_id)


def _activities(backend: _Backend) -> OperationActivities:
    long = ToolSpec(name="slow", description="d", args=_Args, long=LongSpec(backend=backend))
    sync = ToolSpec(name="quick", description="d", args=_Args, handler=_quick)
    return OperationActivities(ToolRegistry([long, sync]))


async def _quick(args: _Args) -> str:
    return "done"


def _poll(interval: float) -> PollOperationInput:
    return PollOperationInput(
        operation_id="op_1", tool="slow", job_id="job-1", poll_interval_seconds=interval
    )


RUNNING = Completion(status="running", progress="40%")
DONE = Completion(status="succeeded", result={"rows": 3})


async def test_a_short_interval_checks_in_one_attempt_until_the_job_ends() -> None:
    backend = _Backend(RUNNING, RUNNING, DONE)
    env = ActivityEnvironment()
    beats: list[tuple[Any, ...]] = []
    env.on_heartbeat = lambda *details: beats.append(details)

    result = await env.run(_activities(backend).poll_operation, _poll(0.001))

    assert result == DONE
    assert backend.checks == 3
    assert beats == [(1, "running", "40%"), (2, "running", "40%")]


async def test_a_long_interval_checks_once_per_attempt_and_counts_from_the_last_heartbeat() -> None:
    backend = _Backend(RUNNING)
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, heartbeat_details=[4])
    beats: list[tuple[Any, ...]] = []
    env.on_heartbeat = lambda *details: beats.append(details)
    interval = LONG_POLL_INTERVAL.total_seconds()

    with pytest.raises(ApplicationError) as raised:
        await env.run(_activities(backend).poll_operation, _poll(interval))

    assert raised.value.type == OPERATION_STILL_RUNNING
    assert not raised.value.non_retryable
    assert raised.value.next_retry_delay == LONG_POLL_INTERVAL
    assert backend.checks == 1
    assert beats == [(5, "running", "40%")]


async def test_cancel_reaches_the_jobs_system() -> None:
    backend = _Backend()
    cancel = CancelOperationInput(
        operation_id="op_1", tool="slow", job_id="job-1", reason="expired"
    )

    await ActivityEnvironment().run(_activities(backend).cancel_operation, cancel)

    assert backend.cancelled == ["job-1"]


@pytest.mark.parametrize("tool", ["quick", "missing"])
async def test_a_tool_that_is_not_long_on_this_worker_fails_the_call(tool: str) -> None:
    cancel = CancelOperationInput(operation_id="op_1", tool=tool, job_id="job-1", reason="expired")

    with pytest.raises(ApplicationError) as raised:
        await ActivityEnvironment().run(_activities(_Backend()).cancel_operation, cancel)

    assert raised.value.type == RUN_INPUT_INVALID
    assert raised.value.non_retryable
