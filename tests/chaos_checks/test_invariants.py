"""Every invariant of the reliability suite (`chaos.invariants.check_run`) shown failing: each
flags a violation planted in a real run's outcome, and passes that outcome without the plant;
and so is the model faults' check (`check_model_fault`, row 5), on the requests the model
server received.

The outcomes and the systems' records are those of real chaos runs (`recorded.py`: the states,
the histories of every run of each chain, what every sender was told, `/_test/stats`), so each
check reads what the suite gives it, but for the one thing a test changes. REFUNDS is shown
failing against the real refund service in tests/chaos/test_refund_invariant.py.

Here rather than under tests/chaos/: no server, no process, so the quick tier (`make
test-fast`) runs them, and a checker that stops seeing its violation fails there, not only in
the chaos suite's own slow tier."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

from chaos.driver import MODEL_FAULTS
from chaos.history import replay_failures
from chaos.invariants import (
    APPROVALS,
    COMPLETIONS,
    EXPECTED,
    FINAL,
    FINISHED,
    GENUINE,
    INVARIANTS,
    JOBS,
    QUESTIONS,
    READ,
    REFUSED,
    REPLAYS,
    TERMINAL,
    check_model_fault,
    check_run,
    run_keys,
)
from chaos.runs import MODEL_TIMEOUT, RETRY_AFTER, RunOutcome
from chaos.wire import HANG_LIMIT
from tests.chaos_checks.recorded import load, recorded, requests, stats
from waitstate.schemas.approvals import Decision
from waitstate.schemas.run import Step

UPDATE_ACCEPTED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
ACTIVITY_SCHEDULED = EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED


def tag(outcome: RunOutcome) -> str:
    """How the invariants name a run."""
    return f"{outcome.plan.id} ({outcome.plan.kind})"


def passing(name: str, invariant: str) -> tuple[RunOutcome, dict[str, Any]]:
    """Fresh copies of the recorded outcome `name` and of the systems' records, which
    `invariant` passes as they were recorded: the test then plants its violation."""
    outcome, found = load(name), stats()
    assert check_run(outcome, found)[invariant] == []
    return outcome, found


def only(outcome: RunOutcome) -> Any:
    """The run's one operation (or approval request, or question)."""
    assert outcome.state is not None
    [one] = [
        *outcome.state.operations.values(),
        *outcome.state.approvals.values(),
        *outcome.state.questions.values(),
    ]
    return one


def only_question(outcome: RunOutcome) -> Any:
    """The run's one question."""
    assert outcome.state is not None
    [question] = outcome.state.questions.values()
    return question


def accepted_again(outcome: RunOutcome, name: str, index: int = -1) -> None:
    """Plant an Update accepted twice: a copy of the run's `index`th accepted `name` Update (a
    new Update id), accepted at the end of its last run's history."""
    events = [
        e
        for e in outcome.events
        if e.event_type == UPDATE_ACCEPTED
        and e.workflow_execution_update_accepted_event_attributes.accepted_request.input.name
        == name
    ]
    copy = HistoryEvent()
    copy.CopyFrom(events[index])
    last = outcome.chain[-1]
    copy.event_id = last[-1].event_id + 1
    request = copy.workflow_execution_update_accepted_event_attributes.accepted_request
    request.meta.update_id += "-again"
    last.append(copy)
    outcome.events = [e for history in outcome.chain for e in history]


def gateway_answer(attempt: dict[str, Any], status: int, code: str) -> None:
    """Plant the gateway's refusal as a webhook attempt's recorded answer."""
    attempt["status_code"] = status
    attempt["answer"] = json.dumps({"error": {"code": code, "message": "planted"}})


def job_of(outcome: RunOutcome, found: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """The run's one idempotency key, its job's id and the job's records, as the systems keep
    them."""
    [(key, key_stats)] = run_keys(outcome, found).items()
    return key, key_stats["job_id"], found["jobs"][key_stats["job_id"]]


@pytest.mark.parametrize("name", recorded())
def test_every_recorded_run_keeps_every_invariant(name: str) -> None:
    found = check_run(load(name), stats())

    assert set(found) == set(INVARIANTS)
    assert {k: v for k, v in found.items() if v} == {}


# --- READ -----------------------------------------------------------------------------------


def test_read_flags_a_state_or_history_that_could_not_be_read() -> None:
    outcome, _ = passing("export", READ)

    outcome.state = None
    assert check_run(outcome, stats())[READ] == [f"{tag(outcome)}: no state"]
    failed = "state query failed: RPCError: a planted failure"
    outcome.unread.append(failed)
    outcome.unread.append("history fetch failed: TimeoutError: ")
    assert check_run(outcome, stats())[READ] == [
        f"{tag(outcome)}: {failed}",
        f"{tag(outcome)}: history fetch failed: TimeoutError: ",
    ]


# --- REPLAYS --------------------------------------------------------------------------------


# The export's one run; the fourth of the run that continued as new six times.
@pytest.mark.parametrize(("name", "run"), [("export", 0), ("can-export", 3)])
async def test_replays_flags_a_history_of_the_chain_that_does_not_replay(
    name: str, run: int
) -> None:
    outcome = load(name)
    assert len(outcome.chain) > run
    outcome.unreplayable = await replay_failures(outcome.plan.id, outcome.chain, None)
    assert check_run(outcome, stats())[REPLAYS] == []

    # The plant: the history says the run scheduled another activity than it does.
    first = next(e for e in outcome.chain[run] if e.event_type == ACTIVITY_SCHEDULED)
    first.activity_task_scheduled_event_attributes.activity_type.name = "not_what_the_run_does"
    outcome.unreplayable = await replay_failures(outcome.plan.id, outcome.chain, None)
    [problem] = check_run(outcome, stats())[REPLAYS]

    assert problem.startswith(f"{tag(outcome)}: run {run + 1} of the chain does not replay: ")
    assert "not_what_the_run_does" in problem


# --- TERMINAL -------------------------------------------------------------------------------


def test_terminal_flags_a_run_that_never_ended() -> None:
    outcome, _ = passing("export", TERMINAL)

    outcome.status, outcome.seconds = "stuck", 150.2  # as `drive` reports one

    assert check_run(outcome, stats())[TERMINAL] == [f"{tag(outcome)}: still stuck after 150s"]


# --- EXPECTED -------------------------------------------------------------------------------


def test_expected_flags_a_run_that_ended_otherwise_or_a_driver_failure() -> None:
    outcome, _ = passing("export", EXPECTED)
    assert outcome.state is not None

    outcome.status, outcome.state.error = "failed", "model call failed after 3 attempts"
    outcome.problems.append("driver: TimeoutError: the run never got there")

    assert check_run(outcome, stats())[EXPECTED] == [
        f"{tag(outcome)}: ended failed, expected completed: model call failed after 3 attempts",
        f"{tag(outcome)}: driver: TimeoutError: the run never got there",
    ]
    assert check_run(outcome, stats())[TERMINAL] == []  # failed is an end


def test_expected_flags_an_operation_that_ended_otherwise_than_its_plan() -> None:
    outcome, _ = passing("expiry-poll-await", EXPECTED)  # its operations must expire
    op = only(outcome)

    op.status, op.error = "succeeded", None

    assert check_run(outcome, stats())[EXPECTED] == [
        f"{tag(outcome)}: operation {op.operation_id} (poll, await) ended succeeded, "
        "expected expired"
    ]


# --- JOBS -----------------------------------------------------------------------------------


def test_jobs_flags_a_key_that_made_two_jobs_and_an_operation_without_its_job() -> None:
    outcome, found = passing("export", JOBS)
    key, _, _ = job_of(outcome, found)

    found["keys"][key]["jobs_created"] = 2
    assert check_run(outcome, found)[JOBS] == [f"{tag(outcome)}: key {key} created 2 jobs"]
    del found["keys"][key]
    assert check_run(outcome, found)[JOBS] == [
        f"{tag(outcome)}: operation {only(outcome).operation_id} has no job under {key}"
    ]


def test_jobs_flags_a_cancelled_operations_job_never_told_and_still_running() -> None:
    outcome, found = passing("cancelled-exports", JOBS)
    assert outcome.state is not None
    op = next(iter(outcome.state.operations.values()))
    key = f"{outcome.plan.id}/{op.tool_call_id}"

    found["keys"][key]["cancels"] = 0
    found["jobs"][op.job_id]["status"] = "running"

    assert check_run(outcome, found)[JOBS] == [
        f"{tag(outcome)}: cancelled operation {op.operation_id} never cancelled",
        f"{tag(outcome)}: cancelled operation's job {op.job_id} still running",
    ]


def test_jobs_flags_an_mcp_task_made_twice_or_never_finished() -> None:
    outcome, found = passing("mcp-task", JOBS)
    task = found["mcp"][outcome.plan.id]
    op = only(outcome)

    task["started"] = 2
    assert check_run(outcome, found)[JOBS] == [f"{tag(outcome)}: 2 tasks made for one call"]
    task["started"], task["finished"] = 1, 0
    assert check_run(outcome, found)[JOBS] == [
        f"{tag(outcome)}: operation {op.operation_id} succeeded, its task never finished"
    ]


# --- FINISHED -------------------------------------------------------------------------------


def test_finished_flags_a_finished_job_told_to_stop_or_ended_otherwise_by_the_run() -> None:
    outcome, found = passing("export", FINISHED)
    key, job_id, _ = job_of(outcome, found)
    op = only(outcome)
    where = f"job {job_id} (succeeded)"

    found["keys"][key]["cancels"] = 1
    op.status = "failed"

    assert check_run(outcome, found)[FINISHED] == [
        f"{tag(outcome)}: {where} was sent 1 cancel(s)",
        f"{tag(outcome)}: {where}: its operation {op.operation_id} ended failed",
    ]


def test_finished_flags_a_report_refused_that_lost_the_jobs_end() -> None:
    outcome, found = load("export"), stats()
    _, job_id, job = job_of(outcome, found)
    final = job["webhooks"][-1]
    assert final["report"] == "succeeded"

    gateway_answer(final, 409, "run_ended")
    assert check_run(outcome, found)[FINISHED] == [
        f"{tag(outcome)}: job {job_id} (succeeded): report 'succeeded' refused: 409 run_ended"
    ]
    # Refused as telling an end a status check had already found (the operation ended as the
    # job did): nothing lost.
    gateway_answer(final, 409, "operation_resolved")
    assert check_run(outcome, found)[FINISHED] == []


# --- COMPLETIONS ----------------------------------------------------------------------------


def test_completions_flags_a_final_completion_accepted_twice() -> None:
    outcome, _ = passing("export", COMPLETIONS)
    op = only(outcome)

    accepted_again(outcome, "complete_operation")  # its last: `succeeded`

    assert check_run(outcome, stats())[COMPLETIONS] == [
        f"{tag(outcome)}: 2 final completions of {op.operation_id} accepted"
    ]


def test_completions_counts_progress_reports_as_no_final_completion() -> None:
    outcome = load("export")

    accepted_again(outcome, "complete_operation", 0)  # `running 33%`

    assert check_run(outcome, stats())[COMPLETIONS] == []
    # REFUSED sees it: an Update in history that no report was answered 2xx for.
    assert check_run(outcome, stats())[REFUSED] != []


def test_completions_flags_an_operation_the_ledger_applied_twice() -> None:
    outcome = load("export")
    assert outcome.state is not None
    op = only(outcome)
    [ended] = [s for s in outcome.state.steps if s.detail == f"{op.operation_id} succeeded"]

    outcome.state.steps.append(ended.model_copy())

    assert check_run(outcome, stats())[COMPLETIONS] == [
        f"{tag(outcome)}: operation {op.operation_id} applied 2 times"
    ]


# --- APPROVALS ------------------------------------------------------------------------------


def test_approvals_flags_a_decision_accepted_or_applied_twice() -> None:
    outcome, _ = passing("ask-link", APPROVALS)
    assert outcome.state is not None
    request = only(outcome)
    [applied] = [s for s in outcome.state.steps if s.detail.endswith("approved by chaos-link")]

    accepted_again(outcome, "decide")
    outcome.state.steps.append(applied.model_copy())

    assert check_run(outcome, stats())[APPROVALS] == [
        f"{tag(outcome)}: 2 decide updates accepted for {request.request_id}",
        f"{tag(outcome)}: approval {request.request_id} applied 2 times",
    ]


def test_approvals_flags_a_request_that_is_not_the_first_decision_sent_or_never_made() -> None:
    outcome = load("ask-link")
    assert outcome.state is not None
    request = only(outcome)

    request.status = "rejected"  # the first decision sent, by link, was approve
    assert check_run(outcome, stats())[APPROVALS] == [
        f"{tag(outcome)}: approval {request.request_id} is rejected, the first decision sent "
        f"was approve ({'; '.join(outcome.notes)})"
    ]
    outcome.state.approvals.clear()
    assert check_run(outcome, stats())[APPROVALS] == [f"{tag(outcome)}: no approval was requested"]


def test_approvals_flags_a_timeout_policy_not_applied_or_a_person_deciding() -> None:
    outcome, _ = passing("ask-timeout-fail", APPROVALS)  # nobody decides; the policy fails the run
    request = only(outcome)
    assert request.status == "expired" and request.decision is None

    request.status = "approved"
    assert check_run(outcome, stats())[APPROVALS] == [
        f"{tag(outcome)}: fail policy left {request.request_id} approved"
    ]
    request.decision = Decision(decision="approve", reviewer="dana", decided_at=request.expires_at)
    assert check_run(outcome, stats())[APPROVALS] == [
        f"{tag(outcome)}: fail policy left {request.request_id} approved",
        f"{tag(outcome)}: {request.request_id} decided by dana",
    ]


# --- FINAL ----------------------------------------------------------------------------------


def test_final_flags_a_decision_changed_after_it_was_applied() -> None:
    outcome, _ = passing("ask-link", FINAL)
    assert outcome.state is not None
    request = only(outcome)

    outcome.state.steps.append(
        Step(turn=1, kind="event", name="approval", detail=f"approval {request.request_id} expired")
    )

    assert check_run(outcome, stats())[FINAL] == [
        f"{tag(outcome)}: request {request.request_id} decided, then changed: "
        "approved by chaos-link -> expired"
    ]


def test_final_flags_a_decision_the_sender_was_told_was_accepted_but_is_not_the_outcome() -> None:
    outcome = load("ask-link")
    request = only(outcome)
    [told] = [a for a in outcome.answers if a.accepted]
    assert (told.via, told.decision) == ("link", "approve")

    request.status = "rejected"

    assert check_run(outcome, stats())[FINAL] == [
        f"{tag(outcome)}: link told its approve of {request.request_id} was accepted; the "
        "request is rejected by chaos-link"
    ]


def test_final_flags_a_run_that_expired_for_want_of_a_decision_a_person_made() -> None:
    outcome, _ = passing("ask-timeout-fail", FINAL)
    assert outcome.state is not None
    request = only(outcome)
    requested = outcome.state.steps.index(
        next(s for s in outcome.state.steps if s.detail.endswith("requested from approvers"))
    )

    outcome.state.steps.insert(
        requested + 1,
        Step(
            turn=1,
            kind="event",
            name="approval",
            detail=f"approval {request.request_id} approved by dana",
        ),
    )

    assert check_run(outcome, stats())[FINAL] == [
        f"{tag(outcome)}: request {request.request_id} decided, then changed: "
        "approved by dana -> expired",
        f"{tag(outcome)}: ended approval_expired, though a person decided ['{request.request_id}']",
    ]


# --- GENUINE --------------------------------------------------------------------------------


def test_genuine_flags_a_webhook_refused_as_forged_or_unknown() -> None:
    outcome, found = passing("export", GENUINE)
    _, job_id, job = job_of(outcome, found)

    gateway_answer(job["webhooks"][0], 401, "invalid_token")
    gateway_answer(job["webhooks"][1], 404, "unknown_run")

    assert check_run(outcome, found)[GENUINE] == [
        f"{tag(outcome)}: job {job_id} report 'running 33%' answered 401 invalid_token",
        f"{tag(outcome)}: job {job_id} report 'running 66%' answered 404 unknown_run",
    ]


def test_genuine_flags_a_link_refused_as_forged_but_not_a_late_completion() -> None:
    outcome = load("ask-link")
    [link] = [a for a in outcome.answers if a.via == "link"]
    late = load("expiry-callback-await")  # its late completions were refused (410, 409)
    assert check_run(late, stats())[GENUINE] == []
    assert any(a.via.startswith("late") for a in late.answers)

    outcome.answers[outcome.answers.index(link)] = replace(
        link, status=401, code="invalid_token", accepted=False
    )
    late.answers = [
        replace(a, status=404, code="unknown_run") if a.via.startswith("late") else a
        for a in late.answers
    ]

    assert check_run(outcome, stats())[GENUINE] == [
        f"{tag(outcome)}: link for {link.subject} answered 401 invalid_token"
    ]
    # A late completion's token ought to fail: its refusal is no genuine one refused.
    assert check_run(late, stats())[GENUINE] == []


# --- REFUSED --------------------------------------------------------------------------------


def test_refused_flags_completions_in_history_that_every_report_was_refused() -> None:
    outcome, found = passing("export", REFUSED)
    _, _, job = job_of(outcome, found)

    for attempt in job["webhooks"]:
        gateway_answer(attempt, 410, "token_expired")

    assert check_run(outcome, found)[REFUSED] == [
        f"{tag(outcome)}: operation {only(outcome).operation_id}: 3 completions in history, "
        "0 accepted, 3 refused (a refused request added events)"
    ]


def test_refused_takes_a_report_never_answered_as_maybe_applied() -> None:
    outcome, found = load("export"), stats()
    _, _, job = job_of(outcome, found)
    for attempt in job["webhooks"]:
        gateway_answer(attempt, 410, "token_expired")
    # The last report's delivery got no answer (a 503, say): it may have been applied.
    job["webhooks"][-1]["status_code"] = 503

    assert check_run(outcome, found)[REFUSED] == [
        f"{tag(outcome)}: operation {only(outcome).operation_id}: 3 completions in history, "
        "0 accepted, 2 refused (a refused request added events)"
    ]


def test_refused_flags_a_decision_in_history_whose_sender_was_refused() -> None:
    outcome, _ = passing("ask-link", REFUSED)
    request = only(outcome)
    [link] = [a for a in outcome.answers if a.via == "link"]

    outcome.answers[outcome.answers.index(link)] = replace(
        link, status=409, code="duplicate_decision", accepted=False
    )

    assert check_run(outcome, stats())[REFUSED] == [
        f"{tag(outcome)}: request {request.request_id}: 1 decide Updates in history, 0 answered "
        "as accepted, 2 refused"
    ]


# --- QUESTIONS ------------------------------------------------------------------------------


def test_questions_flags_a_question_asked_or_answered_twice_by_the_task() -> None:
    outcome, found = passing("mcp-question-repeat", QUESTIONS)
    seen = found["mcp"][f"delete:{outcome.plan.id}"]
    assert seen == {"asked": 1, "answered": 1, "deleted": 1}

    seen["asked"] = 2
    [asked] = check_run(outcome, found)[QUESTIONS]
    assert asked.startswith(f"{tag(outcome)}: the task asked 2 times, the run has 1 questions")
    seen.update(asked=1, answered=2, deleted=1, kept=1)
    problems = check_run(outcome, found)[QUESTIONS]
    assert problems[0].startswith(f"{tag(outcome)}: the task was given 2 answers")
    assert problems[1] == f"{tag(outcome)}: the dataset was deleted (1) and kept (1)"


def test_questions_flags_a_server_that_did_other_than_the_answer_said() -> None:
    outcome, found = load("mcp-question-repeat"), stats()
    question = only_question(outcome)
    found["mcp"][f"delete:{outcome.plan.id}"].update(deleted=0, kept=1)

    assert check_run(outcome, found)[QUESTIONS] == [
        f"{tag(outcome)}: question {question.question_id} (answered, delivery sent) says "
        "deleted; the server deleted 0, kept 1"
    ]


def test_questions_flags_a_second_answer_accepted() -> None:
    outcome = load("mcp-question-repeat")
    again = next(a for a in outcome.answers if a.via == "update (again)")
    assert again.accepted is False

    outcome.answers[outcome.answers.index(again)] = replace(
        again, accepted=True, code="accepted: answered, delivered True"
    )

    [problem] = check_run(outcome, stats())[QUESTIONS]
    assert problem.startswith(f"{tag(outcome)}: 2 answers accepted, expected 1: ")


# --- the model faults' check (row 5) ----------------------------------------------------------


@pytest.mark.parametrize("fault", MODEL_FAULTS)
def test_a_model_fault_met_and_handled_passes(fault: str) -> None:
    name = f"model-{fault}"

    assert check_model_fault(load(name), requests(name)) == []


def test_model_fault_flags_a_call_never_retried() -> None:
    outcome = load("model-500")
    first = requests("model-500")[0]

    assert check_model_fault(outcome, [first]) == [
        f"{tag(outcome)}: 1 model requests, expected a retry after the fault"
    ]


def test_model_fault_flags_a_retry_before_the_429s_retry_after() -> None:
    outcome, asked = load("model-429"), requests("model-429")
    first, retry = asked[0], asked[1]
    assert first.answered_at is not None
    assert retry.received_at - first.answered_at >= RETRY_AFTER

    asked[1] = replace(retry, received_at=first.answered_at + 0.5)

    assert check_model_fault(outcome, asked) == [
        f"{tag(outcome)}: retried 0.50s after a 429 with retry-after {RETRY_AFTER}"
    ]


def test_model_fault_flags_a_hung_call_the_timeout_did_not_cut() -> None:
    outcome, asked = load("model-hang"), requests("model-hang")
    hung, retry = asked[0], asked[1]

    # Answered only at the hang's limit: no retry came to release it.
    asked[0] = replace(hung, answered_at=hung.received_at + HANG_LIMIT)
    assert check_model_fault(outcome, asked) == [
        f"{tag(outcome)}: no retry within {HANG_LIMIT:.0f}s of a hung call (timeout "
        f"{MODEL_TIMEOUT.total_seconds()}s)"
    ]
    # Answered before its retry came: it did not hang.
    asked[0] = replace(hung, answered_at=retry.received_at - 0.1)
    assert check_model_fault(outcome, asked) == [
        f"{tag(outcome)}: the hung call was answered before its retry arrived"
    ]


def test_model_fault_flags_two_500s_not_both_retried() -> None:
    outcome, asked = load("model-500"), requests("model-500")

    assert check_model_fault(outcome, asked[:2]) == [f"{tag(outcome)}: 2 requests after two 500s"]


def test_model_fault_flags_malformed_arguments_not_told_to_the_model() -> None:
    outcome = load("model-malformed")
    assert outcome.state is not None
    errors = [s for s in outcome.state.steps if s.kind == "tool" and s.is_error]
    assert errors

    for step in errors:
        step.is_error = False

    assert check_model_fault(outcome, requests("model-malformed")) == [
        f"{tag(outcome)}: malformed arguments were not reported as a tool error"
    ]
