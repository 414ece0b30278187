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

It is the one road into a run: the gateway (its webhooks, links, pages and inbox), the MCP
server and the CLI translate their protocol to it and its errors back, and nothing else in
`waitstate` starts a run or sends one an Update, a signal or a cancel
(`tests/test_one_road.py`).

What it does is kept by concern, and imported from here: one run (`_runs`: start, status,
follow, list, cancel), threads (`_threads`: send a message, await its reply), people
(`_people`: pending requests and questions, decide, answer), operations (`_operations`: a
job's completion or progress report), the fleet (`_fleet`: the fleet at a glance, the blob
cleanup), how Updates are sent and read back (`_updates`: Update ids, what an Update's failure
means, copies told apart, `recall` of an earlier Update's outcome), and the errors
(`_errors`).
"""

from __future__ import annotations

from waitstate.client._base import GOING_STATUSES, QUERY_TIMEOUT, closed_status, run_status
from waitstate.client._errors import (
    AlreadyApplied,
    AnswerRefused,
    CleanupFailed,
    ClientError,
    CompletionRefused,
    DecisionRefused,
    NotAnswered,
    OutcomeUnknown,
    RunEnded,
    RunNotFound,
    RunUnavailable,
    StartFailed,
    TemporalFailed,
    Unreachable,
    UpdateNotFound,
    UpdateRefused,
)
from waitstate.client._evals import EvalCalls, new_eval_id
from waitstate.client._events import (
    END_KINDS,
    EVENT_KINDS,
    BadPosition,
    Position,
    Retry,
    RunEvent,
    RunEvents,
)
from waitstate.client._fleet import (
    FAILED_EXECUTIONS,
    FAILED_STATUSES,
    FAILURE_WINDOW,
    FLEET_LIMIT,
    ClosedRun,
    FailedRun,
    Fleet,
    FleetCalls,
    FleetReport,
    FleetRun,
    Wait,
    fleet_report,
)
from waitstate.client._follow import FOLLOW_INTERVAL, FollowCalls, Progress, Report
from waitstate.client._forks import ForkCalls, Recorded, new_fork_id
from waitstate.client._operations import COMPLETE_TIMEOUT, OperationCalls
from waitstate.client._people import (
    ANSWER_TIMEOUT,
    DECIDE_TIMEOUT,
    PENDING_QUERIES_AT_ONCE,
    WAITING_FOR_PEOPLE,
    Pending,
    PendingQuestion,
    PendingRequest,
    PeopleCalls,
)
from waitstate.client._runs import (
    PROGRESS_CHARS,
    SUMMARY_CHARS,
    RunStatus,
    RunSummary,
    StartedRun,
    Unanswered,
    new_run_id,
    started_with,
)
from waitstate.client._threads import (
    REPLY_TIMEOUT,
    SEND_TIMEOUT,
    THREAD_TASK,
    MessageRefused,
    SentMessage,
    ThreadCalls,
    ThreadClosed,
    new_message_key,
    new_thread_id,
    thread_input,
)
from waitstate.client._trees import TREE_LIMIT, TREE_QUERIES_AT_ONCE, TreeCalls, TreeNode
from waitstate.client._updates import (
    RECALL_RUNS,
    RECALL_TIMEOUT,
    answer_update_id,
    completion_update_id,
    decision_update_id,
    refuse_copy,
)

__all__ = [
    "END_KINDS",
    "EVENT_KINDS",
    "BadPosition",
    "GOING_STATUSES",
    "Position",
    "RunEvent",
    "RunEvents",
    "REPLY_TIMEOUT",
    "SEND_TIMEOUT",
    "THREAD_TASK",
    "TREE_LIMIT",
    "TREE_QUERIES_AT_ONCE",
    "TreeCalls",
    "ForkCalls",
    "EvalCalls",
    "Recorded",
    "new_eval_id",
    "new_fork_id",
    "TreeNode",
    "MessageRefused",
    "SentMessage",
    "ThreadCalls",
    "ThreadClosed",
    "new_message_key",
    "new_thread_id",
    "thread_input",
    "ANSWER_TIMEOUT",
    "COMPLETE_TIMEOUT",
    "DECIDE_TIMEOUT",
    "RECALL_RUNS",
    "RECALL_TIMEOUT",
    "AlreadyApplied",
    "CompletionRefused",
    "OperationCalls",
    "RunUnavailable",
    "UpdateNotFound",
    "UpdateRefused",
    "answer_update_id",
    "completion_update_id",
    "decision_update_id",
    "refuse_copy",
    "FAILED_EXECUTIONS",
    "FAILED_STATUSES",
    "FAILURE_WINDOW",
    "FLEET_LIMIT",
    "FOLLOW_INTERVAL",
    "PENDING_QUERIES_AT_ONCE",
    "PROGRESS_CHARS",
    "QUERY_TIMEOUT",
    "SUMMARY_CHARS",
    "WAITING_FOR_PEOPLE",
    "AnswerRefused",
    "CleanupFailed",
    "ClientError",
    "ClosedRun",
    "DecisionRefused",
    "FailedRun",
    "Fleet",
    "FleetReport",
    "FleetRun",
    "NotAnswered",
    "OutcomeUnknown",
    "Pending",
    "PendingQuestion",
    "PendingRequest",
    "Progress",
    "Report",
    "Retry",
    "RunEnded",
    "RunNotFound",
    "RunStatus",
    "RunSummary",
    "StartFailed",
    "StartedRun",
    "TemporalFailed",
    "Unanswered",
    "Unreachable",
    "Wait",
    "WaitstateClient",
    "closed_status",
    "fleet_report",
    "new_run_id",
    "run_status",
    "started_with",
]


class WaitstateClient(
    FollowCalls,
    ThreadCalls,
    PeopleCalls,
    OperationCalls,
    FleetCalls,
    TreeCalls,
    ForkCalls,
    EvalCalls,
):
    """Starts, reads, decides and cancels agent runs over a Temporal client: the one road into a
    run (whatever starts a run or sends it an Update, a signal or a cancel goes through it).

        Args:
            client: Connected with the waitstate data converter (`settings.connect`).
            task_queue: Where `start` puts runs unless told otherwise.
            model_task_queue: Where the model calls of the runs it starts go, unless their input
                names a queue (None: the runs' own queue); `connect` takes WAITSTATE_MODEL_TASK_QUEUE.
    """
