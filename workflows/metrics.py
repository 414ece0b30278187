"""What a run counts, times and traces of its waits: operations, approvals and questions, each
counted by tool and outcome when it ends, timed, and traced as a span from its start.

Metrics and spans add no command to the run's history (a span is recorded by the worker's
tracing interceptor, and not while replaying), so they may be called anywhere in workflow code.
"""

from __future__ import annotations

from datetime import datetime

from temporalio import workflow

from waitstate.schemas.approvals import ApprovalRequest
from waitstate.schemas.operations import Operation
from waitstate.schemas.questions import QuestionRequest

from .traces import wait_span


def wait_ended(
    kind: str,
    tool: str,
    outcome: str,
    began: datetime,
    counter: tuple[str, str],
    histogram: tuple[str, str],
    attributes: dict[str, str | int | bool],
) -> None:
    """A wait that ended (an operation, an approval, a question): count it by tool and outcome
    (`counter`: name, description), record how long it lasted (`histogram`, in ms), and trace
    it as a span from `began` to now. Silent while replaying: no command is added."""
    meter = workflow.metric_meter()
    labels = {"tool": tool, "outcome": outcome}
    meter.create_counter(*counter).add(1, labels)
    meter.create_histogram_timedelta(*histogram, unit="ms").record(workflow.now() - began, labels)
    wait_span(
        f"{kind} {tool}",
        began,
        {"waitstate.wait.kind": kind, "gen_ai.tool.name": tool, **attributes},
    )


def operation_finished(op: Operation) -> None:
    """An operation that ended: counted by tool and outcome, timed, traced from its start."""
    wait_ended(
        "operation",
        op.tool,
        op.status,
        op.started_at,
        ("waitstate_operations_finished", "Operations ended"),
        ("waitstate_operation_duration", "Start to end of an operation"),
        {
            "waitstate.operation.id": op.operation_id,
            "waitstate.operation.job_id": op.job_id,
            "waitstate.operation.completion": op.completion,
            "waitstate.operation.status": op.status,
            "gen_ai.tool.call.id": op.tool_call_id,
        },
    )


def approval_decided(request: ApprovalRequest) -> None:
    """A request decided (or expired): counted by tool and outcome, timed, traced from the
    request."""
    wait_ended(
        "approval",
        request.tool,
        request.status,
        request.requested_at,
        ("waitstate_approvals", "Approval requests decided"),
        ("waitstate_approval_wait", "Request to decision"),
        {
            "waitstate.approval.request_id": request.request_id,
            "waitstate.approval.outcome": request.status,
        },
    )


def cancel_failed(op: Operation) -> None:
    """Count a job that could not be cancelled: it may run on with nobody waiting for it."""
    workflow.metric_meter().create_counter(
        "waitstate_cancel_failures", "Jobs that could not be cancelled"
    ).add(1, {"tool": op.tool})


def operation_reconciled(op: Operation) -> None:
    """Count an operation whose end a status check found, no report having come: for a
    callback operation, a webhook was lost or is late, worth an operator's look."""
    workflow.metric_meter().create_counter(
        "waitstate_operations_reconciled",
        "Operations whose end a status check found, no report having come",
    ).add(1, {"tool": op.tool, "outcome": op.status, "completion": op.completion})


def question_asked(request: QuestionRequest) -> None:
    """Count a question a job asked, by tool and by who answers it."""
    workflow.metric_meter().create_counter(
        "waitstate_questions_asked", "Questions operations' jobs asked"
    ).add(1, {"tool": request.tool, "answered_by": request.policy.answered_by})


def question_closed(request: QuestionRequest) -> None:
    """A question that closed: counted by tool and outcome, timed, traced from the ask."""
    wait_ended(
        "question",
        request.tool,
        request.status,
        request.asked_at,
        ("waitstate_questions", "Questions of operations closed"),
        ("waitstate_question_wait", "Question to answer"),
        {
            "waitstate.question.id": request.question_id,
            "waitstate.operation.id": request.operation_id,
            "waitstate.question.answered_by": request.policy.answered_by,
            "waitstate.question.outcome": request.status,
        },
    )


def budget_reached(on_exceed: str, outcome: str) -> None:
    """Count a run that reached its budget (or the share at which it degrades), and what
    became of it: `degraded`, `raised` (a person gave more), `stopped`."""
    workflow.metric_meter().create_counter(
        "waitstate_budget_reached",
        "Runs that reached their budget, by policy and what became of them",
    ).add(1, {"on_exceed": on_exceed, "outcome": outcome})
