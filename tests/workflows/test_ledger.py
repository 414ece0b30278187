"""The run's pure helpers (workflows/ledger.py), without Temporal: the ledger's bounded lines,
the context rebuilt from them, the checkpoint read from the model or built from the ledger,
what the model is told of operations and approvals, and how a model failure is recorded."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from temporalio.exceptions import ApplicationError, TimeoutType
from temporalio.exceptions import TimeoutError as ActivityTimeoutError

from waitstate.auth.tokens import ResumeTokens
from waitstate.schemas import RunState, ToolCall, ToolResult, Usage
from waitstate.schemas.approvals import ApprovalPolicy, ApprovalRequest, Decision
from waitstate.schemas.operations import Completion, Operation
from waitstate.schemas.run import Checkpoint
from waitstate.workflows import ledger
from waitstate.workflows.ledger import (
    FAILURE_CHARS,
    LEDGER_CHARS,
    PREVIEW_CHARS,
    REBUILD_COMPLETED_LINES,
    REBUILD_EVENT_CHARS,
)

NOON = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


def _state(completed: int | list[str] = 0, **fields: object) -> RunState:
    """A run on the Export Q3 task: `completed` ledger lines (`tool_<i>: result <i>`, or these)."""
    lines = (
        completed
        if isinstance(completed, list)
        else [f"tool_{i}: result {i}" for i in range(completed)]
    )
    return RunState.model_validate(
        {"task": "Export Q3", "constraints": ["never email customers"], "completed": lines} | fields
    )


# --- preview ------------------------------------------------------------------------------------


def test_a_preview_is_one_line() -> None:
    assert ledger.preview("  rows:\n 42\t\tfiles:  1 \n") == "rows: 42 files: 1"


def test_a_preview_at_its_limit_is_whole_and_past_it_cut_with_an_ellipsis() -> None:
    at_limit = "x" * PREVIEW_CHARS

    assert ledger.preview(at_limit) == at_limit
    assert ledger.preview(at_limit + "y") == "x" * (PREVIEW_CHARS - 1) + "…"
    assert ledger.preview("abcdef", limit=4) == "abc…"


def test_a_completed_line_is_bounded_by_the_ledgers_width() -> None:
    line = ledger.completed_line("big", "x" * 10_000)

    assert line.startswith("big: xxx") and line.endswith("…")
    assert len(line) == len("big: ") + LEDGER_CHARS


# --- progress reports ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "progress", "report", "same"),
    [
        ("running", "40%", Completion(status="running", progress="40%"), True),
        # A report without progress leaves the progress shown as it is.
        ("running", "40%", Completion(status="running"), True),
        ("input_required", None, Completion(status="input_required"), True),
        ("running", "40%", Completion(status="running", progress="50%"), False),
        ("running", None, Completion(status="running", progress="10%"), False),
        ("running", "40%", Completion(status="input_required", progress="40%"), False),
        # An ending is never the same report, whatever was shown before.
        ("succeeded", None, Completion(status="succeeded"), False),
        ("failed", None, Completion(status="failed", error={"code": "x", "message": "y"}), False),
    ],
)
def test_a_report_that_changes_nothing_is_the_same_report(
    status: str, progress: str | None, report: Completion, same: bool
) -> None:
    assert ledger.same_report(status, progress, report) is same


def _operation(completion: str) -> Operation:
    return Operation.model_validate(
        {
            "operation_id": f"op_{completion}",
            "tool": "t",
            "tool_call_id": "c",
            "turn": 1,
            "completion": completion,
            "mode": "await",
            "job_id": "j",
            "started_at": NOON,
            "expires_at": NOON + timedelta(hours=1),
        }
    )


@pytest.mark.parametrize(
    ("completions", "kind"),
    [
        (["poll"], "poll"),
        (["callback"], "webhook"),
        (["poll", "callback"], "webhook"),
        ([], "poll"),
    ],
)
def test_a_run_waits_for_a_webhook_if_any_operation_completes_by_callback(
    completions: list[str], kind: str
) -> None:
    assert ledger.wait_kind(_operation(c) for c in completions) == kind


# --- the context rebuilt after a long wait -----------------------------------------------------


def test_the_rebuilt_context_says_task_constraints_completed_event_and_remaining() -> None:
    checkpoint = Checkpoint(
        at=NOON, waiting_for="start_export", done="exported", remaining="file it"
    )

    text = ledger.rebuilt_context(_state(2), "start_export: succeeded", checkpoint)

    assert text.splitlines() == [
        "Task: Export Q3",
        "Constraints: never email customers",
        "Completed:",
        "- tool_0: result 0",
        "- tool_1: result 1",
        "Event: start_export: succeeded",
        "Remaining: file it",
    ]


def test_without_a_checkpoint_or_constraints_the_context_says_so() -> None:
    text = ledger.rebuilt_context(_state(constraints=[]), "webhook", None)

    assert text.splitlines() == [
        "Task: Export Q3",
        "Constraints: none",
        "Completed:",
        "Event: webhook",
        "Remaining: continue the task",
    ]


@pytest.mark.parametrize("completed", [REBUILD_COMPLETED_LINES, REBUILD_COMPLETED_LINES + 1, 5000])
def test_the_rebuilt_context_keeps_the_latest_lines_and_counts_the_rest(completed: int) -> None:
    lines = ledger.rebuilt_context(_state(completed), "event", None).splitlines()

    shown = [line for line in lines if line.startswith("- tool_")]
    assert shown == [f"- tool_{i}: result {i}" for i in range(completed - 20, completed)]
    skipped = completed - REBUILD_COMPLETED_LINES
    notes = [line for line in lines if "earlier steps not shown" in line]
    assert notes == ([f"- ({skipped} earlier steps not shown)"] if skipped else [])


def test_the_rebuilt_context_is_bounded_however_long_the_run_and_the_event() -> None:
    long_lines = [ledger.completed_line(f"tool_{i}", "z" * 5000) for i in range(10_000)]
    state = _state(completed=long_lines)
    checkpoint = Checkpoint(
        at=NOON,
        waiting_for="w",
        done="d",
        remaining=ledger.preview("r" * 5000, LEDGER_CHARS),
    )

    text = ledger.rebuilt_context(state, "e" * 1_000_000, checkpoint)

    event = next(line for line in text.splitlines() if line.startswith("Event: "))
    assert len(event) == len("Event: ") + REBUILD_EVENT_CHARS
    # The task and constraints, 21 ledger lines and the event, each bounded.
    bound = 200 + (REBUILD_COMPLETED_LINES + 1) * (LEDGER_CHARS + 20) + REBUILD_EVENT_CHARS * 2
    assert len(text) < bound


# --- checkpoints --------------------------------------------------------------------------------


def test_the_checkpoint_prompt_asks_from_the_ledger_and_the_wait() -> None:
    prompt = ledger.checkpoint_prompt(_state(25), "approval of issue_refund")

    lines = prompt.splitlines()
    assert lines[:3] == ["Task: Export Q3", "Constraints: never email customers", "Completed:"]
    assert lines[3:-1] == [f"- tool_{i}: result {i}" for i in range(5, 25)]
    assert lines[-1] == "Now waiting for: approval of issue_refund"


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("Done: exported Q3\nRemaining: file it", ("exported Q3", "file it")),
        (
            "Sure.\nDone:  exported: 412 rows \nRemaining:\tfile it\n",
            ("exported: 412 rows", "file it"),
        ),
        ("Remaining: file it\nDone: exported", ("exported", "file it")),
        ("Done: exported", None),
        ("Remaining: file it", None),
        ("Done:\nRemaining: file it", None),
        ("I could not say.", None),
        ("", None),
    ],
)
def test_the_models_checkpoint_needs_both_lines(text: str, parsed: tuple[str, str] | None) -> None:
    assert ledger.parse_checkpoint(text) == parsed


def test_the_models_checkpoint_is_bounded() -> None:
    done, remaining = ledger.parse_checkpoint(f"Done: {'d' * 5000}\nRemaining: {'r' * 5000}") or (
        "",
        "",
    )

    assert len(done) == len(remaining) == LEDGER_CHARS
    assert done.endswith("…") and remaining.endswith("…")


def test_a_checkpoint_from_the_ledger_names_the_counts_the_latest_lines_and_the_wait() -> None:
    state = _state(5, turns=4, tool_calls=5)

    done, remaining = ledger.ledger_checkpoint(state, "webhook", ["start_export (op_1)"])

    assert done == (
        "4 model turns and 5 tool calls; "
        "latest: tool_2: result 2; tool_3: result 3; tool_4: result 4"
    )
    assert remaining == (
        "once start_export (op_1) is resolved, continue the task from what is completed"
    )


def test_a_checkpoint_from_an_empty_ledger_names_what_the_run_waits_for() -> None:
    done, remaining = ledger.ledger_checkpoint(_state(), "approval", [])

    assert done == "0 model turns and 0 tool calls; latest: nothing yet"
    assert remaining.startswith("once approval is resolved")


def test_a_checkpoint_from_a_long_ledger_is_bounded() -> None:
    state = _state(completed=["x" * 5000] * 3)

    done, _ = ledger.ledger_checkpoint(state, "webhook", [])

    assert len(done) < 100 + LEDGER_CHARS and done.endswith("…")


# --- approvals ----------------------------------------------------------------------------------


def _request(status: str, decision: Decision | None = None) -> ApprovalRequest:
    return ApprovalRequest.model_validate(
        {
            "request_id": "apr_1",
            "tool": "issue_refund",
            "tool_call_id": "c",
            "reason": "r",
            "requested_at": NOON,
            "expires_at": NOON + timedelta(days=1),
            "policy": ApprovalPolicy(),
            "status": status,
            "decision": decision,
        }
    )


def test_an_approval_tells_the_model_who_decided_and_why() -> None:
    rejected = _request("rejected", Decision(decision="reject", reviewer="dana", comment="dup"))

    assert ledger.approval_outcome(rejected) == {
        "request_id": "apr_1",
        "approval": "rejected",
        "reviewer": "dana",
        "comment": "dup",
        "by_policy": False,
    }


def test_a_default_decision_says_the_policy_made_it() -> None:
    by_policy = Decision(decision="approve", reviewer="policy", by_policy=True)

    outcome = ledger.approval_outcome(_request("approved", by_policy))

    assert (outcome["approval"], outcome["reviewer"], outcome["by_policy"]) == (
        "approved",
        "policy",
        True,
    )


def test_an_expired_request_tells_the_model_nobody_decided_by_when() -> None:
    assert ledger.approval_outcome(_request("expired")) == {
        "request_id": "apr_1",
        "approval": "expired",
        "reason": "nobody decided by 2030-01-02T12:00:00+00:00",
    }


# --- model failures -----------------------------------------------------------------------------


def test_a_model_that_timed_out_is_named_with_its_limit_and_the_attempts() -> None:
    cause = ActivityTimeoutError(
        "activity timeout", type=TimeoutType.START_TO_CLOSE, last_heartbeat_details=[]
    )

    line = ledger.model_failure("openai:gpt-x", cause, 120, "gave up after 8 attempts")

    assert line == (
        "openai:gpt-x did not answer within 120 s (model_timeout); gave up after 8 attempts"
    )


def test_a_model_that_failed_is_named_with_its_own_error() -> None:
    cause = ApplicationError("anthropic: HTTP 400: model: nope", type="ModelUnavailable")

    assert ledger.model_failure("anthropic:nope", cause, 60, "") == (
        "anthropic:nope: anthropic: HTTP 400: model: nope"
    )


def test_any_other_cause_is_named_as_it_reads() -> None:
    assert ledger.model_failure("scripted:x", KeyError("choices"), 60, "") == (
        "scripted:x: 'choices'"
    )
    assert (
        ledger.model_failure("scripted:x", None, 60, "1 attempt") == "scripted:x: None; 1 attempt"
    )


def test_a_model_failure_is_one_bounded_line() -> None:
    cause = ApplicationError("HTTP 502:\n" + "<p>Bad gateway</p>\n" * 5000)

    line = ledger.model_failure("openai:gpt-x", cause, 60, "gave up after 8 attempts")

    assert "\n" not in line and len(line) == FAILURE_CHARS and line.endswith("…")


# --- usage, steps and results -------------------------------------------------------------------


def test_a_model_call_is_counted_once_with_its_tokens() -> None:
    state = _state()

    ledger.add_usage(state, Usage(input_tokens=10, output_tokens=3))
    ledger.add_usage(state, Usage(model_calls=1, input_tokens=5, output_tokens=2))

    # The first call's activity did not count itself, the second's did: two calls either way.
    assert state.usage == Usage(model_calls=2, input_tokens=15, output_tokens=5)


def test_a_step_is_recorded_in_the_current_turn() -> None:
    state = _state(turns=3)

    ledger.step(state, "tool", "calculate", "42")
    ledger.step(state, "event", "start_export", "expired", is_error=True)

    assert [(s.turn, s.kind, s.name, s.detail, s.is_error) for s in state.steps] == [
        (3, "tool", "calculate", "42", False),
        (3, "event", "start_export", "expired", True),
    ]


def test_an_error_result_answers_the_call_it_is_for() -> None:
    call = ToolCall(id="call_7", name="calculate", arguments="{}")

    assert ledger.error_result(call, "no") == ToolResult(
        tool_call_id="call_7", name="calculate", content="no", is_error=True
    )


def test_json_for_the_model_is_compact_and_reads_anything() -> None:
    text = ledger.to_json({"rows": 3, "at": NOON, "ok": True})

    assert text == '{"rows":3,"at":"2030-01-01 12:00:00+00:00","ok":true}'
    assert json.loads(text)["rows"] == 3


def test_the_runs_nonce_hash_is_the_one_its_tokens_carry() -> None:
    # The run keeps the hash; the gateway checks an Update's nonce against it.
    nonce = "AAAAAAAAAAAAAAAA"
    minted = ResumeTokens({"k": "k" * 40}, "k").mint("run-1", "op_1", NOON, nonce=nonce)

    assert ledger.nonce_hash(nonce) == minted.nonce_hash
    assert ledger.nonce_hash(nonce) != ledger.nonce_hash(nonce[:-1] + "B")
