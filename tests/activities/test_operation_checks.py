"""The operation activities' one-check mode and refused cancels (issue 22, defects 3 and 9): a
check of a job's status (a callback operation's reconcile, the check before an expiry) is one
status call per attempt, whatever the interval; a cancel the job's system refuses is final.
Run in an ActivityEnvironment, with the demo systems over real HTTP."""

from __future__ import annotations

from datetime import timedelta

import pytest
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory
from temporalio.testing import ActivityEnvironment

from examples.demo.pipeline import EnrichArgs, EnrichmentPipeline, enrich_tool
from tests.helpers import eventually
from tests.rigs import Systems
from waitstate.activities import OperationActivities
from waitstate.schemas.errors import CANCEL_REFUSED, OPERATION_STILL_RUNNING
from waitstate.schemas.operations import CancelOperationInput, Completion, PollOperationInput
from waitstate.tools import Job, LongSpec, StartContext, ToolError, ToolRegistry, ToolSpec
from waitstate.tools.spec import LongTool


def _activities(systems: Systems) -> OperationActivities:
    return OperationActivities(
        ToolRegistry([enrich_tool(EnrichmentPipeline(systems.http, systems.url))])
    )


async def _start(systems: Systems) -> str:
    pipeline = EnrichmentPipeline(systems.http, systems.url)
    context = StartContext(idempotency_key="run-1/call-1", operation_id="op_1")
    return (await pipeline.start(EnrichArgs(dataset="transactions"), context)).job_id


def _check(job_id: str, every: float = 300.0) -> PollOperationInput:
    return PollOperationInput(
        operation_id="op_1",
        tool="enrich_dataset",
        job_id=job_id,
        poll_interval_seconds=every,
        once=True,
        known_questions=[],
    )


async def test_a_check_of_a_running_job_is_one_status_call_and_a_retry_one_interval_later(
    systems: Systems,
) -> None:
    await systems.faults(never_complete=True)
    job_id = await _start(systems)

    # A short interval too: a check never loops (only a poll does).
    for every in (300.0, 0.05):
        with pytest.raises(ApplicationError) as running:
            await ActivityEnvironment().run(
                _activities(systems).poll_operation, _check(job_id, every)
            )
        assert running.value.type == OPERATION_STILL_RUNNING
        assert not running.value.non_retryable
        assert running.value.next_retry_delay == timedelta(seconds=every)
    assert systems.state.jobs[job_id].status_checks == 2


async def test_a_check_of_a_finished_job_returns_its_outcome(systems: Systems) -> None:
    job_id = await _start(systems)

    async def ended() -> bool:
        return systems.state.jobs[job_id].status == "succeeded"

    await eventually(ended, "the job to succeed")
    found = await ActivityEnvironment().run(_activities(systems).poll_operation, _check(job_id))

    assert found.status == "succeeded" and found.result == systems.state.jobs[job_id].result


async def test_a_check_that_cannot_reach_the_system_is_a_retryable_error(
    systems: Systems, closed_port: int
) -> None:
    activities = OperationActivities(
        ToolRegistry(
            [enrich_tool(EnrichmentPipeline(systems.http, f"http://127.0.0.1:{closed_port}"))]
        )
    )

    with pytest.raises(ApplicationError) as unreachable:
        await ActivityEnvironment().run(activities.poll_operation, _check("enr_1"))

    assert unreachable.value.type != OPERATION_STILL_RUNNING
    assert not unreachable.value.non_retryable
    assert "could not check enr_1" in unreachable.value.message


class _Refusing:
    """A job system that will not cancel its jobs."""

    async def start(self, args: object, context: StartContext) -> Job:
        return Job(job_id="job_1")

    async def status(self, job_id: str) -> object:
        raise NotImplementedError

    async def cancel(self, job_id: str) -> None:
        raise ToolError("job_1 is past the point of no return")


async def test_a_cancel_the_system_refuses_is_final_not_retried() -> None:
    backend: LongTool = _Refusing()  # type: ignore[assignment]
    spec = ToolSpec(
        name="refusing", description="d", args=EnrichArgs, long=LongSpec(backend=backend)
    )
    activities = OperationActivities(ToolRegistry([spec]))
    cancel = CancelOperationInput(
        operation_id="op_1", tool="refusing", job_id="job_1", reason="expired"
    )

    with pytest.raises(ApplicationError) as refused:
        await ActivityEnvironment().run(activities.cancel_operation, cancel)

    assert refused.value.type == CANCEL_REFUSED and refused.value.non_retryable
    assert "past the point of no return" in refused.value.message


def test_reconcile_every_is_at_least_a_second_and_for_callback_tools_only() -> None:
    backend: LongTool = _Refusing()  # type: ignore[assignment]

    assert LongSpec(backend=backend).reconcile_seconds() == 300.0  # every 5 minutes by default
    assert LongSpec(backend=backend, reconcile_every=None).reconcile_seconds() is None
    assert LongSpec(backend=backend, reconcile_every=timedelta(0)).reconcile_seconds() is None
    assert LongSpec(backend=backend, completion="poll").reconcile_seconds() is None
    with pytest.raises(ValueError, match="at least 1 s"):
        LongSpec(backend=backend, reconcile_every=timedelta(milliseconds=10))


class _NotANumber:
    """A job system whose finished job's result holds numbers JSON cannot carry."""

    def __init__(self, result: object) -> None:
        self._result = result

    async def start(self, args: object, context: StartContext) -> Job:
        return Job(job_id="job_1")

    async def status(self, job_id: str) -> Completion:
        return Completion(status="succeeded", result=self._result)

    async def cancel(self, job_id: str) -> None:
        return None


async def _poll_reporting(result: object, *, once: bool) -> Completion:
    """What polling (or checking, `once`) a finished job whose result is `result` returns."""
    backend: LongTool = _NotANumber(result)  # type: ignore[assignment]
    spec = ToolSpec(
        name="nan_job", description="d", args=EnrichArgs, long=LongSpec(backend=backend)
    )
    poll = PollOperationInput(
        operation_id="op_1",
        tool="nan_job",
        job_id="job_1",
        poll_interval_seconds=0.05,
        once=once,
        known_questions=[],
    )
    return await ActivityEnvironment().run(
        OperationActivities(ToolRegistry([spec])).poll_operation, poll
    )


@pytest.mark.parametrize("once", [True, False])
@pytest.mark.parametrize(
    ("result", "where"),
    [
        ({"rows": float("nan")}, "result.rows"),
        ({"totals": [1.0, float("inf")]}, "result.totals.1"),
        (float("-inf"), "result"),
    ],
)
async def test_a_result_with_a_number_json_cannot_carry_is_refused_not_stored_as_null(
    once: bool, result: object, where: str
) -> None:
    found = await _poll_reporting(result, once=once)

    assert found.status == "failed" and found.result is None
    assert found.error is not None and found.error.code == "non_finite_number"
    assert where in found.error.message


async def test_a_finite_result_is_taken_as_it_is() -> None:
    found = await _poll_reporting({"rows": 1.5, "ok": [1, 2]}, once=True)

    assert found.status == "succeeded" and found.result == {"rows": 1.5, "ok": [1, 2]}


async def test_a_check_of_a_running_job_is_no_failure_to_log(systems: Systems) -> None:
    await systems.faults(never_complete=True)
    job_id = await _start(systems)

    with pytest.raises(ApplicationError) as running:
        await ActivityEnvironment().run(_activities(systems).poll_operation, _check(job_id))

    # Benign: the worker logs it at debug level and the SDK's failure metrics leave it out.
    assert running.value.category == ApplicationErrorCategory.BENIGN
