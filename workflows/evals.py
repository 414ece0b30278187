"""EvalWorkflow: fork recorded runs with another model, prompt or agent, and score each fork
against its original (docs/forks.md).

Each fork is a child of the evaluation (`<eval id>/<n>`), started with the input the
`prepare_fork` activity read from the recorded run's histories, at most `concurrency` at once.
Once it ends, the `score_fork` activity sets it beside its original where the app's scorers are
(the worker's apps). The report is the evaluation's result; the `report` query gives its rows so
far. A run that cannot be forked or scored is a failed row saying why, never the evaluation's
failure; cancelling the evaluation cancels its forks (`REQUEST_CANCEL`).
"""

from __future__ import annotations

import asyncio
import contextlib

from temporalio import workflow
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.exceptions import ChildWorkflowError, WorkflowAlreadyStartedError

with workflow.unsafe.imports_passed_through():
    from waitstate.names import AGENT_NAME, AGENT_RUN, AGENT_STATUS, EVAL_RUN, FORK_OF
    from waitstate.schemas import RunInput, RunResult
    from waitstate.schemas.evals import (
        PREPARE_FORK,
        SCORE_FORK,
        TASK_CHARS,
        EvalInput,
        EvalReport,
        EvalRow,
        ScoreInput,
    )

    from .activity_calls import Failed, call
    from .policies import HISTORY_CALL


@workflow.defn(name=EVAL_RUN)
class EvalWorkflow:
    """Forks each run of its input, waits for the forks, scores them: its report."""

    @workflow.init
    def __init__(self, input: EvalInput) -> None:
        self._report = EvalReport(eval_id=workflow.info().workflow_id, input=input)

    @workflow.run
    async def run(self, input: EvalInput) -> EvalReport:
        slots = asyncio.Semaphore(input.concurrency)
        rows = await asyncio.gather(
            *(self._one(slots, number, run_id) for number, run_id in enumerate(input.runs, 1))
        )
        self._report.rows = list(rows)  # in the input's order
        self._report.done = True
        return self._report

    @workflow.query
    def report(self) -> EvalReport:
        """The report so far: the rows of the forks scored (in the order they were)."""
        return self._report

    async def _one(self, slots: asyncio.Semaphore, number: int, run_id: str) -> EvalRow:
        async with slots:
            row = await self._fork_and_score(number, run_id)
        self._report.rows.append(row)
        return row

    async def _fork_and_score(self, number: int, run_id: str) -> EvalRow:
        input = self._report.input
        fork_id = f"{workflow.info().workflow_id}/{number}"
        prepared = await call(
            PREPARE_FORK,
            input.fork_request(run_id),
            result_type=RunInput,
            summary=f"fork {run_id}",
            **HISTORY_CALL,
        )
        if isinstance(prepared, Failed):
            return EvalRow(run_id=run_id, fork_id="", task="", error=prepared.message)
        attributes = [
            SearchAttributePair(AGENT_STATUS, "running"),
            SearchAttributePair(FORK_OF, run_id),
        ]
        if prepared.agent is not None:
            attributes.append(SearchAttributePair(AGENT_NAME, prepared.agent))
        # A fork that failed is scored as it ended.
        with contextlib.suppress(ChildWorkflowError, WorkflowAlreadyStartedError):
            await workflow.execute_child_workflow(
                AGENT_RUN,
                prepared,
                id=fork_id,
                result_type=RunResult,
                parent_close_policy=workflow.ParentClosePolicy.REQUEST_CANCEL,
                search_attributes=TypedSearchAttributes(attributes),
                static_summary=f"fork of {run_id}: {prepared.task[:TASK_CHARS]}",
            )
        scored = await call(
            SCORE_FORK,
            ScoreInput(
                run_id=run_id,
                fork_id=fork_id,
                at=input.at,
                scorers=input.scorers,
                prices=input.prices,
            ),
            result_type=EvalRow,
            summary=f"score {fork_id}",
            **HISTORY_CALL,
        )
        if isinstance(scored, Failed):
            return EvalRow(run_id=run_id, fork_id=fork_id, task="", error=scored.message)
        return scored
