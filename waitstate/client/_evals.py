"""Evaluations: recorded runs forked and scored by an `EvalWorkflow`, started here, and its
report read back, while it runs or once it ended (docs/forks.md)."""

from __future__ import annotations

import heapq
import uuid

from temporalio.client import WorkflowFailureError
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from waitstate.client._base import AGENT_RUNS, GOING_STATUSES, QUERY_TIMEOUT, ClientBase
from waitstate.client._errors import (
    ClientError,
    RunNotFound,
    StartFailed,
    TemporalFailed,
    first_line,
)
from waitstate.names import AGENT_STATUS, EVAL_REPORT_QUERY, EVAL_RUN, FORK_OF, THREAD_ID
from waitstate.schemas.evals import MAX_EVAL_RUNS, EvalInput, EvalReport

_GOING = ", ".join(f"'{status}'" for status in GOING_STATUSES)
# The runs an evaluation can fork: agent runs that completed (by their AgentStatus, or, from
# revision 1, which upserts none as a run completes, by Temporal's), neither forks themselves
# nor threads (a thread cannot be forked).
EVALUABLE_RUNS = (
    f"{AGENT_RUNS} AND {FORK_OF.name} IS NULL AND {THREAD_ID.name} IS NULL"
    f" AND ({AGENT_STATUS.name} = 'completed'"
    f" OR (ExecutionStatus = 'Completed' AND {AGENT_STATUS.name} IN ({_GOING})))"
)


def new_eval_id() -> str:
    """A fresh evaluation's id."""
    return f"eval-{uuid.uuid4().hex[:12]}"


class EvalCalls(ClientBase):
    """What `WaitstateClient` does with evaluations: start one, read its report."""

    async def runs_to_evaluate(self, query: str, limit: int = 50) -> list[str]:
        """The ids of the `limit` newest runs (by start) that `query`, a visibility filter,
        lists among those an evaluation can fork (`EVALUABLE_RUNS`), newest first.

        Visibility stores list in no order of ours (SQL ones take no ORDER BY): every run the
        query lists is read, and the newest `limit` kept.

        Raises:
            ClientError: Temporal refused the query.
            TemporalFailed: the listing failed.
            ValueError: `query` is empty, or `limit` is not 1 to `MAX_EVAL_RUNS`.
        """
        if not 1 <= limit <= MAX_EVAL_RUNS:
            raise ValueError(f"limit must be 1 to {MAX_EVAL_RUNS}, got {limit}")
        if not query.strip():
            raise ValueError("the query is empty")
        newest: list[tuple[float, str]] = []  # a heap of the newest, the oldest of them on top
        seen: set[str] = set()
        try:
            async for execution in self._client.list_workflows(f"({query}) AND {EVALUABLE_RUNS}"):
                if execution.id in seen:
                    continue  # one workflow id, listed again by another of its runs
                seen.add(execution.id)
                run = (execution.start_time.timestamp(), execution.id)
                if len(newest) < limit:
                    heapq.heappush(newest, run)
                elif run > newest[0]:
                    heapq.heapreplace(newest, run)
        except RPCError as err:
            if err.status == RPCStatusCode.INVALID_ARGUMENT:
                raise ClientError(f"the query is refused: {first_line(err)}") from err
            raise TemporalFailed("listing the runs to evaluate", first_line(err)) from err
        return [run_id for _, run_id in sorted(newest, reverse=True)]

    async def evaluate(self, input: EvalInput, *, eval_id: str | None = None) -> str:
        """Start an evaluation of `input` (or find the one started under `eval_id`): its id.

        Raises:
            StartFailed: Temporal refused the start.
        """
        eval_id = eval_id or new_eval_id()
        try:
            await self._client.start_workflow(
                EVAL_RUN,
                input,
                id=eval_id,
                task_queue=self._task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                static_summary=f"evaluate {len(input.runs)} runs",
            )
        except WorkflowAlreadyStartedError:
            pass  # one id, one evaluation: its report is the one asked for
        except RPCError as err:
            raise StartFailed(eval_id, err.message) from err
        return eval_id

    async def eval_report(self, eval_id: str, *, wait: bool = False) -> EvalReport:
        """The evaluation's report: once it ended (waiting for its end if `wait`), else its
        rows so far (from its `report` query: a worker must answer).

        Raises:
            RunNotFound: no such evaluation.
            TemporalFailed: it failed, or Temporal could not answer.
        """
        handle = self._client.get_workflow_handle(eval_id, result_type=EvalReport)
        try:
            if not wait:
                description = await handle.describe()
                if description.close_time is None:
                    report: EvalReport = await handle.query(
                        EVAL_REPORT_QUERY, result_type=EvalReport, rpc_timeout=QUERY_TIMEOUT
                    )
                    return report
            ended: EvalReport = await handle.result()
            return ended
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                raise RunNotFound(eval_id) from err
            raise TemporalFailed(f"reading evaluation {eval_id}", err.message) from err
        except WorkflowFailureError as err:
            raise TemporalFailed(f"evaluation {eval_id}", str(err.cause or err)) from err
