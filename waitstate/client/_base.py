"""What every part of the client stands on: the Temporal client, a run's handle, its status
query, its description."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn, Self

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryReverseRequest
from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowQueryFailedError,
)
from temporalio.service import RPCError, RPCStatusCode

from waitstate.client._errors import (
    NotAnswered,
    RunNotFound,
    TemporalFailed,
    Unreachable,
    first_line,
)
from waitstate.names import AGENT_RUN, STATUS_QUERY
from waitstate.schemas import RunInput, RunResult, RunState
from waitstate.settings import DEFAULT_TASK_QUEUE, Settings, connect
from waitstate.tracing import Tracing

log = logging.getLogger("waitstate.client")

QUERY_TIMEOUT = timedelta(seconds=5)
AGENT_RUNS = f'WorkflowType = "{AGENT_RUN}"'


class ClientBase:
    """A Temporal client, and what the client's calls about runs, people and the fleet share."""

    def __init__(
        self,
        client: Client,
        *,
        task_queue: str = DEFAULT_TASK_QUEUE,
        model_task_queue: str | None = None,
    ) -> None:
        self._client = client
        self._task_queue = task_queue
        self._model_task_queue = model_task_queue
        # Whether Temporal has answered an Update of this client's yet: until then, a Temporal
        # client connected lazily may fail a call for having no connection (see `_send_update`).
        self._reached = False

    @classmethod
    async def connect(
        cls, settings: Settings | None = None, *, tracing: Tracing | None = None
    ) -> Self:
        """Connect as `settings` say (default: the environment's, without what only a worker
        reads); with `tracing`, the runs it starts and what it sends them carry the caller's
        trace.

        Raises:
            Unreachable: Temporal could not be reached.
            ValueError: `settings` not given, a variable it reads is malformed.
        """
        settings = settings or Settings.from_env(worker=False)
        try:
            client = await connect(settings)
        except Exception as err:  # the SDK raises RuntimeError wrapping transport errors
            raise Unreachable(
                f"cannot reach Temporal at {settings.temporal_address}: {first_line(err)}"
            ) from err
        if tracing is not None:
            client = tracing.client(client)
        return cls(
            client, task_queue=settings.task_queue, model_task_queue=settings.model_task_queue
        )

    def _with_model_queue(self, run_input: RunInput) -> RunInput:
        """`run_input`, its model calls on this client's model queue unless it names one: the
        queue travels in the run's input, so every worker that replays the run agrees on it."""
        if self._model_task_queue is None or run_input.model_task_queue is not None:
            return run_input
        return run_input.model_copy(update={"model_task_queue": self._model_task_queue})

    @property
    def temporal(self) -> Client:
        """The Temporal client underneath."""
        return self._client

    def handle(self, run_id: str) -> WorkflowHandle[Any, RunResult]:
        """The run's workflow handle (its latest run), for what this client does not wrap."""
        handle: WorkflowHandle[Any, RunResult] = self._client.get_workflow_handle(
            run_id, result_type=RunResult
        )
        return handle

    async def query(self, run_id: str, *, rpc_timeout: timedelta = QUERY_TIMEOUT) -> RunState:
        """The run's own answer to its `status` query (a worker must answer).

        Raises:
            RunNotFound: no such run.
            NotAnswered: no worker answered within `rpc_timeout`, or the query failed.
        """
        try:
            state: RunState = await self.handle(run_id).query(
                STATUS_QUERY, rpc_timeout=rpc_timeout, result_type=RunState
            )
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                raise RunNotFound(run_id) from err
            raise NotAnswered(run_id, first_line(err)) from err
        except WorkflowQueryFailedError as err:
            raise NotAnswered(run_id, first_line(err)) from err
        return state

    async def describe(
        self, run_id: str, *, rpc_timeout: timedelta | None = None
    ) -> WorkflowExecutionDescription:
        """What Temporal alone knows of the run (its latest in a chain): no worker needed;
        within `rpc_timeout`, if given.

        Raises:
            RunNotFound: no such run.
            TemporalFailed: Temporal could not describe it.
        """
        try:
            return await self.handle(run_id).describe(rpc_timeout=rpc_timeout)
        except RPCError as err:
            self._raise(err, run_id, f"could not look up run {run_id}")

    async def last_changed(
        self, description: WorkflowExecutionDescription, *, rpc_timeout: timedelta
    ) -> datetime | None:
        """When the described run's history last grew (its last event), read within
        `rpc_timeout`; None if it cannot be read then (a look that may go without)."""
        request = GetWorkflowExecutionHistoryReverseRequest(
            namespace=self.temporal.namespace,
            execution=WorkflowExecution(workflow_id=description.id, run_id=description.run_id),
            maximum_page_size=1,
        )
        service = self.temporal.workflow_service
        try:
            page = await service.get_workflow_execution_history_reverse(
                request, timeout=rpc_timeout
            )
        except RPCError as err:
            log.info("run %s: its last event not read (%s)", description.id, err.message)
            return None
        if not page.history.events:
            return None
        return page.history.events[0].event_time.ToDatetime(tzinfo=UTC)

    @staticmethod
    def _raise(err: RPCError, run_id: str | None, doing: str) -> NoReturn:
        if run_id is not None and err.status == RPCStatusCode.NOT_FOUND:
            raise RunNotFound(run_id) from err
        raise TemporalFailed(doing, first_line(err)) from err


def closed_status(status: WorkflowExecutionStatus | None) -> str:
    """A run's status as Temporal alone knows it, in the words of `RunState.status`."""
    if status is None:
        return "unknown"
    return {
        WorkflowExecutionStatus.RUNNING: "running",
        WorkflowExecutionStatus.COMPLETED: "completed",
        WorkflowExecutionStatus.CANCELED: "cancelled",
    }.get(status, "failed")


# The AgentStatus of a run still going: what a run Temporal ended (terminated, timed out)
# still shows, since it had no chance to say how it ended.
GOING_STATUSES = ("running", "waiting")
CONTINUED = WorkflowExecutionStatus.CONTINUED_AS_NEW


def run_status(agent_status: str | None, execution: WorkflowExecutionStatus | None) -> str:
    """A run's status from visibility: its `AgentStatus`, unless it closed while that still
    says it is going (Temporal ended it): then Temporal's (`failed`, `cancelled`...)."""
    if execution in (None, WorkflowExecutionStatus.RUNNING, CONTINUED):
        return agent_status or "running"  # a continued run: as it was when it handed over
    if agent_status is None or agent_status in GOING_STATUSES:
        return closed_status(execution)
    return agent_status
