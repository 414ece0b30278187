"""How the client sends Updates to runs, and reads back one sent earlier: the Update ids that
make identical completions, decisions and answers one Update, what an Update's failure means
(the run's refusal, a run that has ended, no such run, a run that did not take it for now,
Temporal unavailable, no answer in time), copies told apart by their delivery id, and the
outcome of an earlier Update read back across a run's chain (`recall`).

Every Update to a run is sent here: the client's `decide`, `answer` and `complete_operation`,
and through them the gateway, which says their errors in HTTP.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Literal, TypeVar

from pydantic import BaseModel
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import UpdateWorkflowExecutionLifecycleStage
from temporalio.api.update.v1 import UpdateRef, WaitPolicy
from temporalio.api.workflowservice.v1 import PollWorkflowExecutionUpdateRequest
from temporalio.client import (
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.exceptions import ApplicationError, FailureError, TemporalError
from temporalio.service import RPCError, RPCStatusCode

from waitstate.client._base import ClientBase
from waitstate.client._errors import (
    AlreadyApplied,
    OutcomeUnknown,
    RunEnded,
    RunNotFound,
    RunUnavailable,
    TemporalFailed,
    Unreachable,
    UpdateNotFound,
    UpdateRefused,
    first_line,
)
from waitstate.schemas.approvals import DecisionBody
from waitstate.schemas.operations import Completion
from waitstate.schemas.questions import AnswerBody

# How long the run's description may take, asked for when Temporal refused an Update without
# saying why in anything but words (see `rpc_refusal`); one look for an Update (`recall`) is
# bounded by it too.
DESCRIBE_TIMEOUT = timedelta(seconds=5)
# How long `recall` may take, its looks across the chain together.
RECALL_TIMEOUT = timedelta(seconds=20)
# How many runs of a chain (a run and those it continued as, newest first) `recall` looks in
# for an Update: Temporal keeps an Update's outcome in the run that took it.
RECALL_RUNS = 20
_ADMITTED = UpdateWorkflowExecutionLifecycleStage.UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_ADMITTED

# What an Update's RPC failure means (`rpc_refusal`); the gateway answers each with the error
# code of the same name.
RpcRefusal = Literal["temporal_unavailable", "unknown_run", "run_ended", "run_unavailable"]

_Result = TypeVar("_Result")


def completion_update_id(
    operation_id: str, completion: Completion, delivery_id: str, report_id: str | None = None
) -> str:
    """The Update id for one report on an operation.

    Temporal answers every Update that reuses an id with the first one's outcome, so copies of
    one report sent concurrently or retried collapse into one Update (and stay under the run's
    cap on Updates in flight).

    - A final report (`succeeded`, `failed`) is known by its body: an operation ends once, so
      two identical final reports are one, whatever the sender calls them.
    - A progress report (`running`, `input_required`) is known by the sender's id for it
      (`report_id`), else by this request alone (its `delivery_id`, which the gateway hands a
      sender whose outcome is unknown as the key to send again, as `Idempotency-Key`): two
      reports with the same body (`running` 50%, `input_required`, `running` 50% again) are
      two reports, and neither may be answered with the other's outcome. A copy that would
      change nothing the operation shows is refused by the run (`duplicate_report`) before it
      reaches its history.
    """
    if completion.status in ("succeeded", "failed"):
        text = json.dumps(completion.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        key = f"final\x00{text}"
    else:
        key = f"report\x00{report_id or delivery_id}"
    return f"complete/{operation_id}/{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def decision_update_id(request_id: str, body: DecisionBody) -> str:
    """The Update id for one decision on an approval request: identical decisions share it.

    So a burst of them (a double click, a link opened twice, a retry) is one Update, not one
    each: Temporal caps a run's in-flight Updates (10 by default) and refuses the excess with
    RESOURCE_EXHAUSTED, which would reach the sender as a 503. The copies get the first one's
    outcome, which carries its delivery id (see `refuse_copy`).
    """
    return f"decide/{request_id}/{_digest(body)}"


def answer_update_id(question_id: str, body: AnswerBody) -> str:
    """The Update id for one answer to a question: identical answers share it, as identical
    decisions do (see `decision_update_id`), and get its one outcome (an answer's copy is not
    refused: see `PeopleCalls.answer`)."""
    return f"answer/{question_id}/{_digest(body)}"


def _digest(body: BaseModel) -> str:
    """A short hash of a body's canonical JSON: equal bodies, equal digests."""
    text = json.dumps(body.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def refuse_copy(run_id: str, what: str, delivery_id: str, applied_by: str) -> None:
    """Refuse a copy: a delivery (`delivery_id`) answered with the outcome of another one
    (`applied_by`, the delivery id its outcome carries), whose Update id it shared.

    A delivery without an id, or an outcome without one (runs from before delivery ids), is
    not told apart.

    Raises:
        AlreadyApplied: the outcome is another delivery's.
    """
    if delivery_id and applied_by and applied_by != delivery_id:
        raise AlreadyApplied(run_id, what)


async def rpc_refusal(err: RPCError, handle: WorkflowHandle[Any, Any]) -> RpcRefusal:
    """What an RPC failure of an Update to the run `handle` names means to its sender: the run
    has ended (`run_ended`), there is no such run (`unknown_run`), the run did not take it for
    now (`run_unavailable`), or Temporal is unavailable (`temporal_unavailable`).

    Temporal refuses an Update with NOT_FOUND (or FAILED_PRECONDITION) alike when the run had
    ended before it arrived, when the run ended while it was in flight (a second decision racing
    the first, which let the run finish), and when no such run exists; only its message, in
    words that are Temporal's to change, tells them apart. So the run is described instead.
    """
    if err.status not in (RPCStatusCode.NOT_FOUND, RPCStatusCode.FAILED_PRECONDITION):
        # Unreachable server, overload, auth to Temporal...: the caller should try again later.
        return "temporal_unavailable"
    try:
        description = await handle.describe(rpc_timeout=DESCRIBE_TIMEOUT)
    except RPCError as described:
        if described.status == RPCStatusCode.NOT_FOUND:
            return "unknown_run"
        return "temporal_unavailable"
    if description.status not in (None, WorkflowExecutionStatus.RUNNING):
        return "run_ended"
    # Open (the Update met the run as it continued as new, and the next run did not get it):
    # sent again, it reaches the run.
    return "run_unavailable"


def _detail(cause: BaseException | None) -> str:
    """The whole of a refusal's message ("" if it has none)."""
    if cause is None:
        return ""
    return cause.message if isinstance(cause, FailureError) else str(cause)


class UpdateCalls(ClientBase):
    """How `WaitstateClient` sends an Update to a run and reads back one sent earlier."""

    async def _send_update(
        self,
        run_id: str,
        update: str,
        arg: BaseModel,
        result_type: type[_Result],
        *,
        update_id: str,
        what: str,
        answer_within: timedelta,
        refused: Callable[..., UpdateRefused] = UpdateRefused,
        key: str | None = None,
    ) -> _Result:
        """The run's result of its Update `update` with `arg` under `update_id`, within
        `answer_within`; its failures raised as `ClientError`s.

        Raises:
            UpdateRefused: the run's validator refused it (`refused(run_id, reason,
                error_type, detail=...)`, a kind of it), or the run failed it.
            RunEnded: the run has ended.
            RunNotFound: no such run.
            RunUnavailable: the run did not take it for now; send it again.
            OutcomeUnknown: no answer within `answer_within`, with `key` (default: the Update
                id): Temporal may hold the Update for the run's worker.
            Unreachable: Temporal could not be reached.
            TemporalFailed: Temporal refused the call (e.g. permission denied).
        """
        handle = self.handle(run_id)
        try:
            async with asyncio.timeout(answer_within.total_seconds()):
                result: _Result = await handle.execute_update(
                    update, arg, id=update_id, result_type=result_type
                )
            self._reached = True
            return result
        except WorkflowUpdateFailedError as err:
            # The run's validator refused it: nothing was recorded.
            self._reached = True
            cause = err.cause
            error_type = cause.type if isinstance(cause, ApplicationError) else None
            raise refused(run_id, first_line(cause), error_type, detail=_detail(cause)) from err
        except RPCError as err:
            self._reached = True
            if err.status in (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED):
                raise Unreachable(f"cannot reach Temporal: {first_line(err)}") from err
            refusal = await rpc_refusal(err, handle)
            if refusal == "run_ended":
                raise RunEnded(run_id) from err
            if refusal == "unknown_run":
                raise RunNotFound(run_id) from err
            if refusal == "run_unavailable":
                raise RunUnavailable(run_id, what) from err
            raise TemporalFailed(f"Temporal refused the {what}", first_line(err)) from err
        except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError) as err:
            # Not a refusal: Temporal may have admitted the Update, and holds it for the run's
            # worker, which may yet apply it.
            seconds = f"no answer within {answer_within.total_seconds():g} s"
            raise OutcomeUnknown(run_id, seconds, key or update_id) from err
        except TemporalError as err:
            raise TemporalFailed(f"could not send the {what}", first_line(err)) from err
        except RuntimeError as err:
            # A Temporal client connected lazily connects on its first call, and fails it with
            # a bare RuntimeError when Temporal cannot be reached; once Temporal has answered,
            # a RuntimeError is not that.
            if self._reached or not self._client.service_client.config.lazy:
                raise
            raise Unreachable(f"cannot reach Temporal: {first_line(err)}") from err

    async def recall(
        self,
        run_id: str,
        update_id: str,
        result_type: type[_Result],
        *,
        answer_within: timedelta = RECALL_TIMEOUT,
    ) -> _Result:
        """The outcome of the Update `update_id` sent to the run `run_id` earlier, in whichever
        run of its chain took it (of the newest `RECALL_RUNS`). Nothing is sent to the run.

        The gateway answers a request whose token has expired with it: the Update id is the
        request's identity, and the run keeps its outcome, so the answer is the run's own
        record, which an expired token can read but never add to.

        Raises:
            UpdateNotFound: no run of the chain has the Update (it never reached one, or a
                validator refused it: refusals leave none).
            OutcomeUnknown: a run took the Update in, and it has no outcome yet (`key` is
                `update_id`).
            UpdateRefused: the run failed the Update.
            Unreachable: Temporal could not be reached, or did not answer within
                `answer_within`.
        """
        try:
            async with asyncio.timeout(answer_within.total_seconds()):
                found = await self._find_update(run_id, update_id)
                if found is None:
                    raise UpdateNotFound(run_id, update_id)
                chain_run, completed = found
                if not completed:
                    raise OutcomeUnknown(run_id, "it took the Update in, no outcome yet", update_id)
                handle = self._client.get_workflow_handle(run_id, run_id=chain_run or None)
                update = handle.get_update_handle(update_id, result_type=result_type)
                outcome: _Result = await update.result(rpc_timeout=DESCRIBE_TIMEOUT)
        except WorkflowUpdateFailedError as err:
            cause = err.cause
            error_type = cause.type if isinstance(cause, ApplicationError) else None
            raise UpdateRefused(
                run_id, first_line(cause), error_type, detail=_detail(cause)
            ) from err
        except (RPCError, TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError) as err:
            raise Unreachable(f"cannot reach Temporal: {first_line(err)}") from err
        return outcome

    async def _find_update(self, workflow_id: str, update_id: str) -> tuple[str, bool] | None:
        """Which run of the chain `workflow_id` names holds the Update `update_id` (its run id,
        "" for the latest), and whether it has its outcome; None if none does, of the chain's
        newest `RECALL_RUNS`."""
        completed = await self._update_stage(workflow_id, "", update_id)
        if completed is not None:
            return "", completed
        escaped = workflow_id.replace("\\", "\\\\").replace('"', '\\"')
        runs = self._client.list_workflows(f'WorkflowId = "{escaped}"', limit=RECALL_RUNS)
        async for run in runs:
            completed = await self._update_stage(workflow_id, run.run_id, update_id)
            if completed is not None:
                return run.run_id, completed
        return None

    async def _update_stage(self, workflow_id: str, run_id: str, update_id: str) -> bool | None:
        """Whether the run (its latest, for "") has the Update `update_id`'s outcome: None if it
        has no such Update, False if it has taken it in only."""
        request = PollWorkflowExecutionUpdateRequest(
            namespace=self._client.namespace,
            update_ref=UpdateRef(
                workflow_execution=WorkflowExecution(workflow_id=workflow_id, run_id=run_id),
                update_id=update_id,
            ),
            identity=self._client.identity,
            # Answered at once: an Update is past this stage as soon as Temporal has it.
            wait_policy=WaitPolicy(lifecycle_stage=_ADMITTED),
        )
        try:
            polled = await self._client.workflow_service.poll_workflow_execution_update(
                request, timeout=DESCRIBE_TIMEOUT
            )
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return None
            raise
        return polled.HasField("outcome")
