"""Following a run to its end: a look as soon as its history grows, and at an interval, each
with what is new (steps, retries, jobs' reports); the last with how it ended."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from temporalio.client import WorkflowExecutionDescription

from waitstate.client._errors import ClientError, NotAnswered
from waitstate.client._events import Retry, RunEvent, growth, retries_of
from waitstate.client._runs import PROGRESS_CHARS, RunCalls
from waitstate.schemas import RunState, Step

FOLLOW_INTERVAL = timedelta(seconds=0.25)
# The last look at a followed run that has ended asks for its steps with these timeouts, one
# after another, before it goes without them: a closed run is answered by a worker that replays
# it, which a busy worker may not do within the first.
FINAL_LOOK_TIMEOUTS = (timedelta(seconds=5), timedelta(seconds=10), timedelta(seconds=20))
SERVED_LATELY = timedelta(minutes=1)


@dataclass(frozen=True)
class Report:
    """A job's report of its progress to its operation (a webhook's), as its history has it."""

    operation_id: str
    status: str
    progress: str


@dataclass(frozen=True)
class Progress:
    """One look at a run being followed: what is new since the last look."""

    steps: list[Step]
    retries: list[Retry]
    state: RunState | None  # the run's answer to its status query; None if nobody answered
    outcome: RunState | None  # set on the last look, once the run has ended
    # Each report of a job's progress since the last look, in order (its state shows only the
    # latest, which a second report can replace before the next look).
    reports: list[Report] = field(default_factory=list)


class FollowCalls(RunCalls):
    """Following a run (`follow`), beside the calls on one run."""

    async def follow(
        self,
        run_id: str,
        *,
        retries: bool = True,
        interval: timedelta = FOLLOW_INTERVAL,
        wake: bool = True,
    ) -> AsyncIterator[Progress]:
        """Look at the run as soon as its history grows (with `wake`), and every `interval`,
        until it ends: its new steps, each report of progress its jobs sent since (with
        `wake`: from its history), and (with `retries`) each new attempt of a failing model or
        tool call and the progress its polled jobs report (in the state's operations: what no
        history event says). The last look carries the outcome, with the steps the run
        recorded.

        Raises:
            RunNotFound: no such run.
            TemporalFailed: the outcome could not be read.
        """
        # A run that has ended already: its outcome is at hand, and the first look is the
        # last (its history's growth, read at once, must not make it an earlier one).
        ended = (await self.describe(run_id)).close_time is not None
        shown = 0
        retries_shown: set[tuple[str, int]] = set()  # (activity id, attempt)
        answered = False  # a worker answered a look
        result = asyncio.create_task(self.outcome(run_id))
        grew = asyncio.Event()
        reported: list[RunEvent] = []
        growing = (
            asyncio.create_task(growth(self._client, run_id, grew, reported)) if wake else None
        )
        try:
            while True:
                woken = asyncio.create_task(grew.wait())
                done, _ = await asyncio.wait(
                    {result} if ended else {result, woken},
                    timeout=None if ended else interval.total_seconds(),
                    return_when="FIRST_COMPLETED",
                )
                woken.cancel()
                grew.clear()
                done &= {result}
                # The last look is the only one that can show the run's final steps: it waits
                # for a worker that served the run lately (one looked at or it just ended).
                patient = bool(done) and (answered or await self._served_lately(run_id))
                state = await self._look_at_steps(run_id, patient=patient)
                answered = answered or state is not None
                steps: list[Step] = []
                if state is not None:
                    steps, shown = state.steps[shown:], len(state.steps)
                new_retries = []
                if retries and not done:
                    description = await self._look(run_id)
                    if description is not None:
                        new_retries = _new_retries(description, retries_shown)
                        if state is not None:
                            state = await self._with_progress(state, description)
                reports, reported[:] = [_report(event) for event in reported], []
                if not done:
                    yield Progress(steps, new_retries, state, None, reports)
                    continue
                yield Progress(steps, new_retries, state, _ended(state, result.result()), reports)
                return
        finally:
            result.cancel()
            if growing is not None:
                growing.cancel()

    async def _look_at_steps(self, run_id: str, *, patient: bool) -> RunState | None:
        """The run's state, as its worker answers; None if no worker answers. A `patient` look
        asks again, each time waiting longer, before it goes without (`FINAL_LOOK_TIMEOUTS`)."""
        timeouts = FINAL_LOOK_TIMEOUTS if patient else FINAL_LOOK_TIMEOUTS[:1]
        for timeout in timeouts:
            try:
                return await self.query(run_id, rpc_timeout=timeout)
            except NotAnswered:
                continue
            except ClientError:
                return None
        return None

    async def _served_lately(self, run_id: str) -> bool:
        """Whether a worker served the run lately: it is running, or closed within
        `SERVED_LATELY` (a run that ended long ago may have no worker left to answer)."""
        description = await self._look(run_id)
        if description is None or description.close_time is None:
            return True
        return datetime.now(UTC) - description.close_time < SERVED_LATELY


def _ended(state: RunState | None, outcome: RunState) -> RunState:
    """A followed run's final state: the query's has the steps; the outcome knows how it
    ended."""
    if state is None:
        return outcome
    update: dict[str, object] = {"status": outcome.status, "error": outcome.error}
    if outcome.rejected_output is not None:
        update["rejected_output"] = outcome.rejected_output
    return state.model_copy(update={**update, "final_output": outcome.final_output})


def _report(event: RunEvent) -> Report:
    """A job's report, from its `operation.reported` event."""
    detail = event.detail
    progress = str(detail.get("progress", ""))[:PROGRESS_CHARS]
    return Report(str(detail.get("operation_id", "")), str(detail.get("status", "")), progress)


def _new_retries(
    description: WorkflowExecutionDescription, shown: set[tuple[str, int]]
) -> list[Retry]:
    """Attempts of failing calls not in `shown` yet, then added to it."""
    new = [r for r in retries_of(description) if (r.activity_id, r.attempt) not in shown]
    shown.update((retry.activity_id, retry.attempt) for retry in new)
    return new
