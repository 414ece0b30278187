"""Evaluations: recorded runs forked and scored by an `EvalWorkflow`, started here, and its
report read back, while it runs or once it ended (docs/forks.md)."""

from __future__ import annotations

import uuid

from temporalio.client import WorkflowFailureError
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from waitstate.client._base import QUERY_TIMEOUT, ClientBase
from waitstate.client._errors import RunNotFound, StartFailed, TemporalFailed
from waitstate.names import EVAL_REPORT_QUERY, EVAL_RUN
from waitstate.schemas.evals import EvalInput, EvalReport


def new_eval_id() -> str:
    """A fresh evaluation's id."""
    return f"eval-{uuid.uuid4().hex[:12]}"


class EvalCalls(ClientBase):
    """What `WaitstateClient` does with evaluations: start one, read its report."""

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
