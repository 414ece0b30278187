"""One run at a time: start it, read its state and its calls being retried, list recent runs,
cancel one (following one to its end is `_follow.py`'s)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import (
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
)
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import (
    ApplicationError,
    CancelledError,
    TerminatedError,
    WorkflowAlreadyStartedError,
)
from temporalio.exceptions import TimeoutError as WorkflowTimeoutError
from temporalio.service import RPCError, RPCStatusCode

from waitstate.client._base import (
    AGENT_RUNS,
    QUERY_TIMEOUT,
    ClientBase,
    closed_status,
    run_status,
)
from waitstate.client._errors import (
    NotAnswered,
    RunEnded,
    RunNotFound,
    StartFailed,
)
from waitstate.client._events import Retry, retries_of
from waitstate.names import (
    AGENT_NAME,
    AGENT_RUN,
    AGENT_STATUS,
    FORK_OF,
    PENDING_OPERATIONS,
    THREAD_ID,
    WAIT_EXPIRES_AT,
    WAITING_FOR,
)
from waitstate.schemas import RunInput, RunResult, RunState
from waitstate.schemas.operations import PollHeartbeat
from waitstate.schemas.run import POLL_OPERATION

# The Web UI shows a run's task as its summary, cut to this length: to those who may open the
# Web UI (operators) only. The run's events leave it out (a view link is not an operator's).
SUMMARY_CHARS = 200
# A job's progress, as a reader is shown it, is cut to this length (a job's text is untrusted).
PROGRESS_CHARS = 500


@dataclass(frozen=True)
class StartedRun:
    """A run `start` started, or found already started under its id."""

    run_id: str
    first_run_id: str  # where its chain of continue-as-new runs begins
    existing: bool


@dataclass(frozen=True)
class Unanswered:
    """What Temporal alone knows of a run whose status query no worker answered."""

    reason: str  # why the query got no answer
    started: datetime | None
    closed: datetime | None
    waiting_for: str | None  # the run's `WaitingFor` as it last set it
    wait_expires_at: datetime | None
    pending_operations: int | None
    # Its activities scheduled or running, e.g. `call_model (attempt 3, scheduled)`.
    pending_activities: list[str]


@dataclass(frozen=True)
class RunStatus:
    """A run's state, and its calls being retried."""

    state: RunState
    retrying: list[Retry]
    # Set when no worker answered: `state` then holds only what the history says.
    unanswered: Unanswered | None = None


@dataclass(frozen=True)
class RunSummary:
    """One run of a listing."""

    run_id: str
    status: str
    started: datetime
    closed: datetime | None
    agent: str | None = None
    thread: bool = False  # a thread (a run that takes messages), not a task


def new_run_id() -> str:
    """A fresh run id."""
    return f"run-{uuid.uuid4().hex[:12]}"


class RunCalls(ClientBase):
    """What `WaitstateClient` does with one run: start, read, follow, list, cancel."""

    async def start(
        self, run_input: RunInput, *, run_id: str | None = None, task_queue: str | None = None
    ) -> StartedRun:
        """Start a run, or find the run already started with that id: one id, one run, ever.

        Raises:
            StartFailed: Temporal refused the start, or the input names a model the run could
                never call (a spec not `provider:model`, a budget's degrade_to its dollar
                limit has no price for): nothing was started.
        """
        run_id = run_id or new_run_id()
        try:
            run_input.check_models()
        except ValueError as err:
            raise StartFailed(run_id, str(err)) from None
        run_input = self._with_model_queue(run_input)
        attributes = [SearchAttributePair(AGENT_STATUS, "running")]
        if run_input.agent is not None:
            attributes.append(SearchAttributePair(AGENT_NAME, run_input.agent))
        if run_input.fork is not None:
            attributes.append(SearchAttributePair(FORK_OF, run_input.fork.origin))
        try:
            handle = await self._client.start_workflow(
                AGENT_RUN,
                run_input,
                result_type=RunResult,
                id=run_id,
                task_queue=task_queue or self._task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                search_attributes=TypedSearchAttributes(attributes),
                static_summary=_summary(run_input),
                static_details=_details(run_input),
            )
        except WorkflowAlreadyStartedError as err:
            return StartedRun(run_id, err.first_run_id or err.run_id or "", existing=True)
        except RPCError as err:
            raise StartFailed(run_id, err.message) from err
        return StartedRun(run_id, handle.first_execution_run_id or "", existing=False)

    async def status(self, run_id: str, *, rpc_timeout: timedelta = QUERY_TIMEOUT) -> RunStatus:
        """The run's state and its calls being retried. With no worker to answer, `unanswered`
        says so, with what Temporal alone knows (times, what the run waits for, its pending
        activities), and the state is the history's: a running run's `AgentStatus`, or a closed
        run's outcome, with the task, agent and model it was started with.

        Raises:
            RunNotFound: no such run.
            TemporalFailed: Temporal could not describe it.
        """
        description = await self.describe(run_id)
        try:
            state = await self.query(run_id, rpc_timeout=rpc_timeout)
        except NotAnswered as err:
            attributes = description.typed_search_attributes
            if description.status == WorkflowExecutionStatus.RUNNING:
                state = RunState(status=attributes.get(AGENT_STATUS) or "running")
            else:
                state = await self.outcome(run_id)
            if (started := await self.started_input(run_id)) is not None:
                # An agent's own model is the worker's to fill in: unknown here unless given.
                own = started.agent is not None and "model" not in (started.agent_overrides or ())
                model = "" if own else started.model
                given = {"task": started.task, "agent": started.agent, "model": model}
                state = state.model_copy(update=given)
            unanswered = Unanswered(
                reason=err.reason,
                started=description.start_time,
                closed=description.close_time,
                waiting_for=attributes.get(WAITING_FOR),
                wait_expires_at=attributes.get(WAIT_EXPIRES_AT),
                pending_operations=attributes.get(PENDING_OPERATIONS),
                pending_activities=[
                    f"{pending.activity_type.name} (attempt {pending.attempt}, "
                    f"{_activity_state(pending.state)})"
                    for pending in description.raw_description.pending_activities
                ],
            )
            return RunStatus(state, retries_of(description), unanswered)
        state = await self._with_progress(state, description)
        retrying = retries_of(description)
        outage = state.store_outage
        if outage is not None and not any(r.call == outage.call for r in retrying):
            # Tried again by the run itself (no activity is retrying between its tries).
            retrying.append(
                Retry(
                    outage.call,
                    "",
                    outage.tries + 1,
                    None,
                    f"{outage.error} (since {outage.since})",
                )
            )
        return RunStatus(state, retrying)

    async def started_input(self, run_id: str) -> RunInput | None:
        """What the run (its latest in a chain of continue-as-new) was started with, from its
        history (no worker needed); None if it cannot be read.

        Raises:
            RunNotFound: no such run.
        """
        events = self.handle(run_id).fetch_history_events(page_size=1)
        try:
            async for event in events:
                payloads = event.workflow_execution_started_event_attributes.input.payloads
                [given] = await self._client.data_converter.decode(payloads, [RunInput])
                return given if isinstance(given, RunInput) else None
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                raise RunNotFound(run_id) from err
        except Exception:  # an input this client cannot decode: not known
            return None
        return None

    async def outcome(self, run_id: str) -> RunState:
        """Wait for the run to end and return how it ended, from its history alone (no worker
        needed): status, error, turns, tool calls, usage and answer, no steps.

        Raises:
            RunNotFound: no such run.
            TemporalFailed: the outcome could not be read.
        """
        try:
            result = await self.handle(run_id).result()
        except WorkflowFailureError as err:
            cause = err.cause
            if isinstance(cause, CancelledError):
                return RunState(status="cancelled", error="cancelled")
            if isinstance(cause, TerminatedError):
                return RunState(status="failed", error=f"terminated: {cause.message}")
            if isinstance(cause, WorkflowTimeoutError):
                return RunState(status="failed", error="timed out")
            if isinstance(cause, ApplicationError):  # the run's own reason, without its type
                return RunState(status="failed", error=cause.message)
            return RunState(status="failed", error=str(cause) if cause else str(err))
        except RPCError as err:
            self._raise(err, run_id, f"could not read the outcome of run {run_id}")
        return RunState(
            status=result.status,
            error=result.error,
            turns=result.turns,
            tool_calls=result.tool_calls,
            usage=result.usage,
            final_output=result.final_output,
            rejected_output=result.rejected_output,
        )

    async def list_runs(
        self, *, limit: int = 20, threads: bool = False, prefix: str | None = None
    ) -> list[RunSummary]:
        """Recent runs, newest first; only threads if `threads` (a thread's continued runs
        are one listing each: its latest is the one running); only those whose ids begin with
        `prefix`, if given.

        Raises:
            TemporalFailed: the listing failed.
            ValueError: `prefix` holds a quote or a backslash.
        """
        runs = []
        query = _runs_query(threads, prefix)
        try:
            async for execution in self._client.list_workflows(query, limit=limit):
                attributes = execution.typed_search_attributes
                status = run_status(attributes.get(AGENT_STATUS), execution.status)
                runs.append(
                    RunSummary(
                        execution.id,
                        status,
                        execution.start_time,
                        execution.close_time,
                        attributes.get(AGENT_NAME),
                        attributes.get(THREAD_ID) is not None,
                    )
                )
        except RPCError as err:
            self._raise(err, None, "could not list runs")
        return runs

    async def count_runs(self, *, prefix: str | None = None) -> int:
        """How many runs there are whose ids begin with `prefix`, if given (a run continued as
        new counts once per run of its chain).

        Raises:
            TemporalFailed: the count failed.
            ValueError: `prefix` holds a quote or a backslash.
        """
        try:
            counted = await self._client.count_workflows(_runs_query(False, prefix))
        except RPCError as err:
            self._raise(err, None, "could not count runs")
        return counted.count

    async def cancel(self, run_id: str) -> None:
        """Ask a running run to cancel: it cancels its in-flight work and pending jobs, and
        ends `cancelled`.

        Raises:
            RunNotFound: no such run.
            RunEnded: the run has ended.
        """
        description = await self.describe(run_id)
        if description.status != WorkflowExecutionStatus.RUNNING:
            raise RunEnded(run_id, closed_status(description.status))
        try:
            await self.handle(run_id).cancel()
        except RPCError as err:
            self._raise(err, run_id, f"could not cancel run {run_id}")

    async def _look(self, run_id: str) -> WorkflowExecutionDescription | None:
        """The run's description, or None if it cannot be described just now."""
        try:
            return await self.handle(run_id).describe()
        except RPCError:
            return None

    async def _with_progress(
        self, state: RunState, description: WorkflowExecutionDescription
    ) -> RunState:
        """`state` with the latest progress of each job being polled, read from its poll's
        heartbeat on the server: a job's progress costs the run's history nothing, so the run
        itself does not know it."""
        open_polls = [
            op for op in state.operations.values() if not op.terminal and op.completion == "poll"
        ]
        pending = [
            activity
            for activity in description.raw_description.pending_activities
            if activity.activity_type.name == POLL_OPERATION
        ]
        if not open_polls or not pending:
            return state
        reported: dict[str, str] = {}  # operation id -> progress
        for activity in pending:
            heartbeat = await self._poll_heartbeat(activity.heartbeat_details.payloads)
            if heartbeat is None or heartbeat.progress is None:
                continue
            if heartbeat.job_id:
                polled = [op for op in open_polls if op.job_id == heartbeat.job_id]
            else:  # a poll of a worker from before the job id was heartbeated
                polled = open_polls if len(open_polls) == len(pending) == 1 else []
            for op in polled:
                reported[op.operation_id] = heartbeat.progress
        if not reported:
            return state
        operations = {
            op_id: op.model_copy(update={"progress": reported[op_id]}) if op_id in reported else op
            for op_id, op in state.operations.items()
        }
        return state.model_copy(update={"operations": operations})

    async def _poll_heartbeat(self, payloads: Sequence[Payload]) -> PollHeartbeat | None:
        """A poll's last heartbeat (None if it has none, or not one a poll sends)."""
        if not payloads:
            return None
        try:
            values = await self._client.data_converter.decode(list(payloads))
        except Exception:  # a heartbeat this client cannot read is no progress, not an error
            return None
        return PollHeartbeat.read(values, PROGRESS_CHARS)


def _activity_state(state: PendingActivityState.ValueType) -> str:
    """`scheduled`, `started`, `cancel requested`, `paused`..."""
    name = PendingActivityState.Name(state).removeprefix("PENDING_ACTIVITY_STATE_")
    return name.lower().replace("_", " ")


def _runs_query(threads: bool, prefix: str | None) -> str:
    """The visibility query of agent runs (threads only, if `threads`) whose ids begin with
    `prefix`."""
    query = f"{AGENT_RUNS} AND {THREAD_ID.name} IS NOT NULL" if threads else AGENT_RUNS
    if prefix is not None:
        if '"' in prefix or "\\" in prefix:
            raise ValueError("a run id prefix holds no quote or backslash")
        query += f' AND WorkflowId STARTS_WITH "{prefix}"'
    return query


def started_with(run_input: RunInput) -> list[tuple[str, str]]:
    """What a run was started with, as (label, value): its agent, and the model, tools and
    turns it set (an agent's own defaults are the worker's to fill in)."""
    given = set(run_input.agent_overrides or ())
    agent = run_input.agent
    parts = [("agent", agent)] if agent is not None else []
    if agent is None or "model" in given:
        parts.append(("model", run_input.model))
    if agent is None or "tools" in given:
        parts.append(("tools", ", ".join(run_input.tools) or "none"))
    if agent is None or "max_turns" in given:
        parts.append(("max turns", str(run_input.max_turns)))
    return parts


def _details(run_input: RunInput) -> str:
    """The Web UI's static details of a run: what it was started with."""
    return "\n\n".join(f"{label}: {value}" for label, value in started_with(run_input))


def _summary(run_input: RunInput) -> str:
    """What the Web UI shows of a run: its task; a fork's, led by the run it forks."""
    fork = run_input.fork
    lead = f"fork of {fork.origin} at turn {fork.at}: " if fork is not None else ""
    return f"{lead}{run_input.task}"[:SUMMARY_CHARS]
