"""The waitstate client: start agent runs, read them, wait for them, decide what they ask for
approval, answer the questions their operations ask, cancel them, and take in the fleet at a
glance.

The CLI (`starter.py`), the benchmarks and the chaos suite all start and read runs through
`WaitstateClient`, so a run is started one way everywhere: idempotent by id, `AgentStatus`
set from the start, a summary and details for the Web UI. Nothing here prints; failures are
`ClientError`s with one-line messages, which the CLI maps to its exit codes.

    client = await WaitstateClient.connect(Settings.from_env())
    started = await client.start(RunInput(task="What is 17 * 23?", model="scripted:demo"))
    outcome = await client.outcome(started.run_id)
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn, TypeVar

from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.api.failure.v1 import Failure
from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
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
    FailureError,
    TerminatedError,
    WorkflowAlreadyStartedError,
)
from temporalio.exceptions import TimeoutError as WorkflowTimeoutError
from temporalio.service import RPCError, RPCStatusCode

from waitstate.cleanup import DEFAULT_EVERY, clean_blobs, schedule_blob_cleanup

# How an Update's RPC failure tells a run that has ended from an unknown one (the gateway's).
from waitstate.gateway.delivery import rpc_refusal
from waitstate.names import (
    AGENT_NAME,
    AGENT_RUN,
    AGENT_STATUS,
    ANSWER_UPDATE,
    DECIDE_UPDATE,
    PENDING_OPERATIONS,
    STATUS_QUERY,
    WAIT_EXPIRES_AT,
    WAITING_FOR,
)
from waitstate.schemas import RunInput, RunResult, RunState, Step
from waitstate.schemas.approvals import ApprovalRequest, DecideInput, DecideOutcome
from waitstate.schemas.cleanup import CleanResult
from waitstate.schemas.operations import PollHeartbeat
from waitstate.schemas.questions import AnswerInput, AnswerOutcome, InputRequest
from waitstate.schemas.run import CALL_MODEL, CALL_TOOL, POLL_OPERATION
from waitstate.settings import DEFAULT_TASK_QUEUE, Settings, connect
from waitstate.tracing import Tracing

# The Web UI shows a run's task as its summary, cut to this length.
SUMMARY_CHARS = 200
QUERY_TIMEOUT = timedelta(seconds=5)
# How long `decide` waits for the run to answer its `decide` Update. A run whose worker is down
# never answers; the decision may still be applied once one runs.
DECIDE_TIMEOUT = timedelta(seconds=20)
# How long `answer` waits for the run's `answer` Update, which returns once the job that asked
# has the answer: the run's delivery to the job (retried) comes on top of a decision's round trip.
ANSWER_TIMEOUT = timedelta(seconds=60)
# What a run's `WaitingFor` says while a person's decision or answer is open.
WAITING_FOR_PEOPLE = ("approval", "input")
FOLLOW_INTERVAL = timedelta(seconds=0.25)
# `fleet` reads at most this many runs per visibility query.
FLEET_LIMIT = 1000
# `fleet` reports runs that failed within this window.
FAILURE_WINDOW = timedelta(hours=24)
# Activities whose retries a reader should see as they happen (a poll's retries are its
# schedule, not a failure).
RETRIED_CALLS = {CALL_MODEL: "model call", CALL_TOOL: "tool call"}
# Temporal replaces a retrying activity's last failure past 4 KB with this, keeping the start
# of the original as its cause.
FAILURE_TOO_LARGE = "Failure exceeds size limit."
# A job's progress, as a reader is shown it, is cut to this length (a job's text is untrusted).
PROGRESS_CHARS = 500
AGENT_RUNS = f'WorkflowType = "{AGENT_RUN}"'
# How many runs `pending` queries at once.
PENDING_QUERIES_AT_ONCE = 8
FAILED_STATUSES = ("failed", "approval_expired", "output_invalid")
FAILED_EXECUTIONS = (
    WorkflowExecutionStatus.FAILED,
    WorkflowExecutionStatus.TIMED_OUT,
    WorkflowExecutionStatus.TERMINATED,
)

_Result = TypeVar("_Result")


# --- errors ----------------------------------------------------------------------------------


class ClientError(Exception):
    """A call the client could not complete; its message is one line."""


class Unreachable(ClientError):
    """Temporal could not be reached."""


class TemporalFailed(ClientError):
    """Temporal answered with an error of no kind below (permission denied, overload...)."""

    def __init__(self, doing: str, reason: str) -> None:
        super().__init__(f"{doing}: {reason}")
        self.reason = reason


class CleanupFailed(ClientError):
    """The blob cleanup ran and failed; the message is its reason."""


class RunNotFound(ClientError):
    """No run has this id."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"no run with id {run_id}")
        self.run_id = run_id


class RunEnded(ClientError):
    """The run has ended, so it can no longer take what was sent."""

    def __init__(self, run_id: str, status: str | None = None) -> None:
        how = f" ({status})" if status else ""
        super().__init__(f"run {run_id} has already ended{how}")
        self.run_id = run_id
        self.status = status


class StartFailed(ClientError):
    """Temporal refused to start the run."""

    def __init__(self, run_id: str, reason: str) -> None:
        super().__init__(f"could not start run {run_id}: {reason}")
        self.run_id = run_id
        self.reason = reason


class NotAnswered(ClientError):
    """The run did not answer a query or an Update in time: is a worker running?"""

    def __init__(self, run_id: str, reason: str) -> None:
        super().__init__(f"run {run_id} did not answer ({reason}): is a worker running?")
        self.run_id = run_id
        self.reason = reason


class DecisionRefused(ClientError):
    """The run's validator refused a decision (no such request, already decided or expired);
    nothing was recorded."""

    def __init__(self, run_id: str, reason: str) -> None:
        super().__init__(f"run {run_id} refused the decision: {reason}")
        self.run_id = run_id
        self.reason = reason


class AnswerRefused(ClientError):
    """The run's validator refused an answer (no such question, already closed, the model's to
    answer, content that does not match its schema); nothing was recorded.

    `error_type` is the refusal's `ApplicationError` type (`waitstate.schemas.errors`, e.g.
    `QUESTION_INVALID_ANSWER`), for callers that act on it.
    """

    def __init__(self, run_id: str, reason: str, error_type: str | None = None) -> None:
        super().__init__(f"run {run_id} refused the answer: {reason}")
        self.run_id = run_id
        self.reason = reason
        self.error_type = error_type


# --- what the client returns -----------------------------------------------------------------


@dataclass(frozen=True)
class StartedRun:
    """A run `start` started, or found already started under its id."""

    run_id: str
    first_run_id: str  # where its chain of continue-as-new runs begins
    existing: bool


@dataclass(frozen=True)
class Retry:
    """A model or tool call that failed and is being tried again."""

    call: str
    activity_id: str
    attempt: int
    maximum_attempts: int | None
    last_error: str


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


@dataclass(frozen=True)
class PendingRequest:
    """An open approval request of a run that waits for a person."""

    run_id: str
    request: ApprovalRequest


@dataclass(frozen=True)
class PendingQuestion:
    """An open question of a run's operation that waits for a person's answer."""

    run_id: str
    question: InputRequest


@dataclass(frozen=True)
class Pending:
    """What runs wait for people to do: decide on approval requests, answer questions."""

    approvals: list[PendingRequest]
    questions: list[PendingQuestion]


@dataclass(frozen=True)
class Progress:
    """One look at a run being followed: what is new since the last look."""

    steps: list[Step]
    retries: list[Retry]
    state: RunState | None  # the run's answer to its status query; None if nobody answered
    outcome: RunState | None  # set on the last look, once the run has ended


@dataclass(frozen=True)
class FleetRun:
    """A running run, as its search attributes show it."""

    run_id: str
    started: datetime
    agent_status: str | None
    waiting_for: str | None
    pending_operations: int | None
    wait_expires_at: datetime | None


@dataclass(frozen=True)
class ClosedRun:
    """A run that closed within the failure window."""

    run_id: str
    closed: datetime | None
    agent_status: str | None
    execution_status: WorkflowExecutionStatus | None


@dataclass(frozen=True)
class Fleet:
    """What visibility knew of the runs at `read_at`."""

    read_at: datetime
    running: list[FleetRun]
    closed: list[ClosedRun]


@dataclass(frozen=True)
class Wait:
    """A running run that waits for something."""

    run_id: str
    waiting_for: str
    pending_operations: int
    started: datetime
    expires_at: datetime | None
    overdue: bool  # past its expiry and still open: is a worker down?


@dataclass(frozen=True)
class FailedRun:
    """A run that failed within the failure window."""

    run_id: str
    status: str
    closed: datetime | None


@dataclass(frozen=True)
class FleetReport:
    """The fleet at a glance."""

    running_by_status: dict[str, int]
    waiting_for: dict[str, int]
    oldest_wait: Wait | None
    overdue: list[Wait]
    recent_failures: list[FailedRun]


def fleet_report(fleet: Fleet) -> FleetReport:
    """Aggregate what `WaitstateClient.fleet` read: running runs by status and by what they
    wait for, the oldest wait, waits past their expiry, and failures."""
    by_status: dict[str, int] = {}
    by_wait: dict[str, int] = {}
    waits: list[Wait] = []
    for run in fleet.running:
        status = run.agent_status or "running"
        by_status[status] = by_status.get(status, 0) + 1
        waiting_for = run.waiting_for or "none"
        if waiting_for == "none":
            continue
        by_wait[waiting_for] = by_wait.get(waiting_for, 0) + 1
        expires = run.wait_expires_at
        overdue = expires is not None and expires < fleet.read_at
        waits.append(
            Wait(
                run.run_id, waiting_for, run.pending_operations or 0, run.started, expires, overdue
            )
        )
    waits.sort(key=lambda wait: wait.started)
    failures = [
        FailedRun(run.run_id, status, run.closed)
        for run in fleet.closed
        if (status := run.agent_status or closed_status(run.execution_status)) in FAILED_STATUSES
        or run.execution_status in FAILED_EXECUTIONS
    ]
    return FleetReport(
        running_by_status=by_status,
        waiting_for=by_wait,
        oldest_wait=waits[0] if waits else None,
        overdue=[wait for wait in waits if wait.overdue],
        recent_failures=failures,
    )


def closed_status(status: WorkflowExecutionStatus | None) -> str:
    """A run's status as Temporal alone knows it, in the words of `RunState.status`."""
    if status is None:
        return "unknown"
    return {
        WorkflowExecutionStatus.RUNNING: "running",
        WorkflowExecutionStatus.COMPLETED: "completed",
        WorkflowExecutionStatus.CANCELED: "cancelled",
    }.get(status, "failed")


def new_run_id() -> str:
    """A fresh run id."""
    return f"run-{uuid.uuid4().hex[:12]}"


# --- the client ------------------------------------------------------------------------------


class WaitstateClient:
    """Starts, reads, decides and cancels agent runs over a Temporal client.

    Args:
        client: Connected with the waitstate data converter (`settings.connect`).
        task_queue: Where `start` puts runs unless told otherwise.
    """

    def __init__(self, client: Client, *, task_queue: str = DEFAULT_TASK_QUEUE) -> None:
        self._client = client
        self._task_queue = task_queue

    @classmethod
    async def connect(
        cls, settings: Settings | None = None, *, tracing: Tracing | None = None
    ) -> WaitstateClient:
        """Connect as `settings` say (default: the environment's); with `tracing`, the runs it
        starts and what it sends them carry the caller's trace.

        Raises:
            Unreachable: Temporal could not be reached.
        """
        settings = settings or Settings.from_env()
        try:
            client = await connect(settings)
        except Exception as err:  # the SDK raises RuntimeError wrapping transport errors
            raise Unreachable(
                f"cannot reach Temporal at {settings.temporal_address}: {_first_line(err)}"
            ) from err
        if tracing is not None:
            client = tracing.client(client)
        return cls(client, task_queue=settings.task_queue)

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

    async def start(
        self, run_input: RunInput, *, run_id: str | None = None, task_queue: str | None = None
    ) -> StartedRun:
        """Start a run, or find the run already started with that id: one id, one run, ever.

        Raises:
            StartFailed: Temporal refused the start.
        """
        run_id = run_id or new_run_id()
        attributes = [SearchAttributePair(AGENT_STATUS, "running")]
        if run_input.agent is not None:
            attributes.append(SearchAttributePair(AGENT_NAME, run_input.agent))
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
                static_summary=run_input.task[:SUMMARY_CHARS],
                static_details=_details(run_input),
            )
        except WorkflowAlreadyStartedError as err:
            return StartedRun(run_id, err.first_run_id or err.run_id or "", existing=True)
        except RPCError as err:
            raise StartFailed(run_id, err.message) from err
        return StartedRun(run_id, handle.first_execution_run_id or "", existing=False)

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
            raise NotAnswered(run_id, _first_line(err)) from err
        except WorkflowQueryFailedError as err:
            raise NotAnswered(run_id, _first_line(err)) from err
        return state

    async def status(self, run_id: str, *, rpc_timeout: timedelta = QUERY_TIMEOUT) -> RunStatus:
        """The run's state and its calls being retried. With no worker to answer, `unanswered`
        says so, with what Temporal alone knows (times, what the run waits for, its pending
        activities), and the state is the history's: a running run's `AgentStatus`, or a closed
        run's outcome, with the task, agent and model it was started with.

        Raises:
            RunNotFound: no such run.
            TemporalFailed: Temporal could not describe it.
        """
        description = await self._describe(run_id)
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
            return RunStatus(state, _retries(description), unanswered)
        state = await self._with_progress(state, description)
        retrying = _retries(description)
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

    async def follow(
        self, run_id: str, *, retries: bool = True, interval: timedelta = FOLLOW_INTERVAL
    ) -> AsyncIterator[Progress]:
        """Look at the run every `interval` until it ends: its new steps, and (with `retries`)
        each new attempt of a failing model or tool call and the progress its polled jobs
        report (in the state's operations). The last look carries the outcome, with the steps
        the run recorded.

        Raises:
            RunNotFound: no such run.
            TemporalFailed: the outcome could not be read.
        """
        await self._describe(run_id)
        shown = 0
        retries_shown: set[tuple[str, int]] = set()  # (activity id, attempt)
        result = asyncio.create_task(self.outcome(run_id))
        try:
            while True:
                done, _ = await asyncio.wait({result}, timeout=interval.total_seconds())
                try:
                    state: RunState | None = await self.query(run_id)
                except ClientError:
                    state = None
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
                if not done:
                    yield Progress(steps, new_retries, state, None)
                    continue
                yield Progress(steps, new_retries, state, _ended(state, result.result()))
                return
        finally:
            result.cancel()

    async def list_runs(self, *, limit: int = 20) -> list[RunSummary]:
        """Recent runs, newest first.

        Raises:
            TemporalFailed: the listing failed.
        """
        runs = []
        try:
            async for execution in self._client.list_workflows(AGENT_RUNS, limit=limit):
                attributes = execution.typed_search_attributes
                status = attributes.get(AGENT_STATUS) or closed_status(execution.status)
                runs.append(
                    RunSummary(
                        execution.id,
                        status,
                        execution.start_time,
                        execution.close_time,
                        attributes.get(AGENT_NAME),
                    )
                )
        except RPCError as err:
            self._raise(err, None, "could not list runs")
        return runs

    async def pending(self) -> list[PendingRequest]:
        """The open approval requests of runs waiting for a person (`waiting_for_people` lists
        their open questions too); runs whose worker does not answer are left out.

        Raises:
            TemporalFailed: the listing failed.
        """
        return (await self.waiting_for_people()).approvals

    async def waiting_for_people(self) -> Pending:
        """The open approval requests, and the open questions for a person, of runs waiting
        for one (`WaitingFor` is `approval` or `input`: a person's question or approval
        outranks a job's webhook or poll, in runs from agent-run-5 on); runs whose worker does
        not answer are left out.

        Raises:
            TemporalFailed: the listing failed.
        """
        kinds = ", ".join(f'"{kind}"' for kind in WAITING_FOR_PEOPLE)
        query = f'{WAITING_FOR.name} IN ({kinds}) AND ExecutionStatus = "Running"'
        pending = Pending(approvals=[], questions=[])
        try:
            ids = [execution.id async for execution in self._client.list_workflows(query)]
        except RPCError as err:
            self._raise(err, None, "could not list the runs waiting for people")

        async def state_of(run_id: str) -> RunState | None:
            try:
                return await self.query(run_id)
            except ClientError:
                return None

        # Asked together, a few at a time: one run whose worker is slow to answer (killed,
        # restarting) costs the listing one query's timeout, not one per run behind it.
        gate = asyncio.Semaphore(PENDING_QUERIES_AT_ONCE)

        async def gated(run_id: str) -> RunState | None:
            async with gate:
                return await state_of(run_id)

        states = await asyncio.gather(*(gated(run_id) for run_id in ids))
        for run_id, state in zip(ids, states, strict=True):
            if state is None:
                continue
            pending.approvals.extend(
                PendingRequest(run_id, request)
                for request in state.approvals.values()
                if request.open
            )
            pending.questions.extend(
                PendingQuestion(run_id, question) for question in _for_people(state)
            )
        return pending

    async def open_requests(self, run_id: str) -> list[ApprovalRequest]:
        """The run's open approval requests.

        Raises:
            RunNotFound: no such run.
            RunEnded: the run has ended.
            NotAnswered: no worker answered.
        """
        state = await self._running_state(run_id)
        return [request for request in state.approvals.values() if request.open]

    async def open_questions(self, run_id: str) -> list[InputRequest]:
        """The run's open questions that its tools' policies give to a person.

        Raises:
            RunNotFound: no such run.
            RunEnded: the run has ended.
            NotAnswered: no worker answered.
        """
        return _for_people(await self._running_state(run_id))

    async def _running_state(self, run_id: str) -> RunState:
        """The state of a run that is still running (RunEnded otherwise)."""
        description = await self._describe(run_id)
        if description.status != WorkflowExecutionStatus.RUNNING:
            raise RunEnded(run_id, closed_status(description.status))
        return await self.query(run_id)

    async def decide(
        self,
        run_id: str,
        decision: DecideInput,
        *,
        update_id: str | None = None,
        answer_within: timedelta = DECIDE_TIMEOUT,
    ) -> DecideOutcome:
        """Send a decision as the run's `decide` Update and return what the run did with it
        (`accepted` is False if it recorded the decision without applying it).

        Args:
            update_id: Asking again under the same id gets the first answer, never a second
                application.

        Raises:
            DecisionRefused: the run refused it (unknown request, already decided or expired).
            RunEnded: the run has ended.
            RunNotFound: no such run.
            NotAnswered: the run did not answer within `answer_within`; the decision may still be
                applied once its worker runs.
            Unreachable: Temporal could not be reached.
            TemporalFailed: Temporal refused the call (e.g. permission denied).
        """
        return await self._update(
            run_id,
            self._execute_update(run_id, DECIDE_UPDATE, decision, DecideOutcome, update_id),
            what="decision",
            answer_within=answer_within,
            refused=lambda cause: DecisionRefused(run_id, _first_line(cause)),
        )

    async def answer(
        self,
        run_id: str,
        answer: AnswerInput,
        *,
        update_id: str | None = None,
        answer_within: timedelta = ANSWER_TIMEOUT,
    ) -> AnswerOutcome:
        """Send an answer to one of the run's questions as its `answer` Update, and return what
        the run did with it once the job that asked has it (`delivered` is False, and `reason`
        says why, if the job did not take it).

        Args:
            update_id: Sending again under the same id gets the first one's outcome, never a
                second application.

        Raises:
            AnswerRefused: the run refused it (unknown question, already answered, declined,
                expired or cancelled, the model's to answer, or content that does not match
                the question's schema).
            RunEnded: the run has ended.
            RunNotFound: no such run.
            NotAnswered: the run did not answer within `answer_within`; the answer may still
                be applied (and delivered) once its worker runs.
            Unreachable: Temporal could not be reached.
            TemporalFailed: Temporal refused the call (e.g. permission denied).
        """

        def refused(cause: BaseException | None) -> ClientError:
            error_type = cause.type if isinstance(cause, ApplicationError) else None
            return AnswerRefused(run_id, _first_line(cause), error_type)

        return await self._update(
            run_id,
            self._execute_update(run_id, ANSWER_UPDATE, answer, AnswerOutcome, update_id),
            what="answer",
            answer_within=answer_within,
            refused=refused,
        )

    async def cancel(self, run_id: str) -> None:
        """Ask a running run to cancel: it cancels its in-flight work and pending jobs, and
        ends `cancelled`.

        Raises:
            RunNotFound: no such run.
            RunEnded: the run has ended.
        """
        description = await self._describe(run_id)
        if description.status != WorkflowExecutionStatus.RUNNING:
            raise RunEnded(run_id, closed_status(description.status))
        try:
            await self.handle(run_id).cancel()
        except RPCError as err:
            self._raise(err, run_id, f"could not cancel run {run_id}")

    async def clean_blobs(self, *, retention: timedelta | None = None) -> CleanResult:
        """Run the blob cleanup once, on the fleet's workers, and return what it did.

        Args:
            retention: How long after a run ends its blobs are kept (None: the namespace's
                workflow retention).

        Raises:
            CleanupFailed: the cleanup failed (its reason is the message).
            TemporalFailed: Temporal refused to start it.
        """
        try:
            return await clean_blobs(self._client, self._task_queue, retention=retention)
        except WorkflowFailureError as err:
            cause: BaseException | None = err.cause
            while isinstance(cause, FailureError) and cause.cause is not None:
                cause = cause.cause  # the activity's own error, under Temporal's wrapping
            raise CleanupFailed(f"the blob cleanup failed: {_first_line(cause)}") from err
        except RPCError as err:
            self._raise(err, None, "could not run the blob cleanup")

    async def schedule_blob_cleanup(
        self, *, every: timedelta = DEFAULT_EVERY, retention: timedelta | None = None
    ) -> str:
        """Create or update the Temporal Schedule that runs the blob cleanup every `every`:
        `"created"` or `"updated"`.

        Raises:
            TemporalFailed: Temporal refused it.
        """
        try:
            return await schedule_blob_cleanup(
                self._client, self._task_queue, every=every, retention=retention
            )
        except RPCError as err:
            self._raise(err, None, "could not schedule the blob cleanup")

    async def fleet(self, *, now: datetime | None = None) -> Fleet:
        """What visibility knows of the running runs, and of the runs closed within the
        failure window (at most `FLEET_LIMIT` of each); `fleet_report` aggregates it.

        Raises:
            TemporalFailed: a listing failed.
        """
        now = now or datetime.now(UTC)
        running: list[FleetRun] = []
        closed: list[ClosedRun] = []
        since = (now - FAILURE_WINDOW).strftime("%Y-%m-%dT%H:%M:%SZ")
        try:
            async for run in self._client.list_workflows(
                f'{AGENT_RUNS} AND ExecutionStatus = "Running"', limit=FLEET_LIMIT
            ):
                attributes = run.typed_search_attributes
                running.append(
                    FleetRun(
                        run.id,
                        run.start_time,
                        attributes.get(AGENT_STATUS),
                        attributes.get(WAITING_FOR),
                        attributes.get(PENDING_OPERATIONS),
                        attributes.get(WAIT_EXPIRES_AT),
                    )
                )
            async for run in self._client.list_workflows(
                f'{AGENT_RUNS} AND CloseTime > "{since}" AND ExecutionStatus != "Running"',
                limit=FLEET_LIMIT,
            ):
                agent_status = run.typed_search_attributes.get(AGENT_STATUS)
                closed.append(ClosedRun(run.id, run.close_time, agent_status, run.status))
        except RPCError as err:
            self._raise(err, None, "could not list the fleet")
        return Fleet(now, running, closed)

    async def _execute_update(
        self, run_id: str, update: str, arg: Any, result_type: type[_Result], update_id: str | None
    ) -> _Result:
        """The run's Update `update` with `arg`, its result read as `result_type`."""
        result: _Result = await self.handle(run_id).execute_update(
            update, arg, id=update_id, result_type=result_type
        )
        return result

    @staticmethod
    async def _update(
        run_id: str,
        update: Awaitable[_Result],
        *,
        what: str,
        answer_within: timedelta,
        refused: Callable[[BaseException | None], ClientError],
    ) -> _Result:
        """The run's result of `update` (an Update call, not awaited yet) within
        `answer_within`, its failures turned into `ClientError`s: the run's validator refusing
        it (`refused(cause)`), the run ended or unknown, Temporal unreachable or refusing, or
        no answer in time."""
        try:
            async with asyncio.timeout(answer_within.total_seconds()):
                return await update
        except WorkflowUpdateFailedError as err:
            # The run's validator refused it: nothing was recorded.
            raise refused(err.cause) from err
        except RPCError as err:
            if err.status in (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED):
                raise Unreachable(f"cannot reach Temporal: {_first_line(err)}") from err
            if err.status not in (RPCStatusCode.NOT_FOUND, RPCStatusCode.FAILED_PRECONDITION):
                raise TemporalFailed(f"Temporal refused the {what}", _first_line(err)) from err
            if rpc_refusal(err).code == "run_ended":
                raise RunEnded(run_id) from err
            raise RunNotFound(run_id) from err
        except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError) as err:
            seconds = f"no answer within {answer_within.total_seconds():g} s"
            raise NotAnswered(run_id, seconds) from err

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

    async def _describe(self, run_id: str) -> WorkflowExecutionDescription:
        try:
            return await self.handle(run_id).describe()
        except RPCError as err:
            self._raise(err, run_id, f"could not look up run {run_id}")

    @staticmethod
    def _raise(err: RPCError, run_id: str | None, doing: str) -> NoReturn:
        if run_id is not None and err.status == RPCStatusCode.NOT_FOUND:
            raise RunNotFound(run_id) from err
        raise TemporalFailed(doing, _first_line(err)) from err


def _for_people(state: RunState) -> list[InputRequest]:
    """The run's open questions that its tools' policies give to a person."""
    return [
        question
        for question in state.questions.values()
        if question.open and question.policy.answered_by == "person"
    ]


def _ended(state: RunState | None, outcome: RunState) -> RunState:
    """A followed run's final state: the query's has the steps; the outcome knows how it
    ended."""
    if state is None:
        return outcome
    update: dict[str, object] = {"status": outcome.status, "error": outcome.error}
    if outcome.rejected_output is not None:
        update["rejected_output"] = outcome.rejected_output
    return state.model_copy(update={**update, "final_output": outcome.final_output})


def _retries(description: WorkflowExecutionDescription) -> list[Retry]:
    """Model and tool calls of the run that failed and are being retried, from the server's
    record of its pending activities (no worker needed)."""
    return [
        Retry(
            call=RETRIED_CALLS[pending.activity_type.name],
            activity_id=pending.activity_id,
            attempt=pending.attempt,
            maximum_attempts=pending.maximum_attempts or None,  # 0: unlimited
            last_error=_failure_message(pending.last_failure),
        )
        for pending in description.raw_description.pending_activities
        if pending.activity_type.name in RETRIED_CALLS
        and (pending.attempt > 1 or pending.HasField("last_failure"))
    ]


def _new_retries(
    description: WorkflowExecutionDescription, shown: set[tuple[str, int]]
) -> list[Retry]:
    """Attempts of failing calls not in `shown` yet, then added to it."""
    new = [r for r in _retries(description) if (r.activity_id, r.attempt) not in shown]
    shown.update((retry.activity_id, retry.attempt) for retry in new)
    return new


def _activity_state(state: PendingActivityState.ValueType) -> str:
    """`scheduled`, `started`, `cancel requested`, `paused`..."""
    name = PendingActivityState.Name(state).removeprefix("PENDING_ACTIVITY_STATE_")
    return name.lower().replace("_", " ")


def _failure_message(failure: Failure) -> str:
    if failure.message == FAILURE_TOO_LARGE and failure.HasField("cause"):
        return f"{failure.cause.message} (truncated by Temporal: over its failure size limit)"
    return failure.message


def _first_line(err: BaseException | None) -> str:
    # Every error is one line; server and SDK messages may span several.
    if err is None:
        return "unknown error"
    text = err.message if isinstance(err, RPCError | FailureError) else str(err)
    return (text.strip() or type(err).__name__).splitlines()[0]


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
