"""What the two desks share (workflows/desk.py), without Temporal: an escalation's second
window and whom it tells, and when a request's links stop working. The window, the notices
and the timeout policies run on real servers in test_approvals.py and test_questions.py, and
every recorded history of both desks replays (test_replay.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.helpers import approval_request
from waitstate.schemas import RunState
from waitstate.schemas.approvals import ApprovalPolicy, ApprovalRequest
from waitstate.schemas.questions import QuestionPolicy, QuestionRequest
from waitstate.workflows.desk import escalate, links_expiry

NOON = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


def _approval(policy: ApprovalPolicy) -> ApprovalRequest:
    return approval_request(
        "r1",
        "delete_user",
        NOON,
        policy,
        tool_call_id="c1",
        reason="cleanup",
        sent_to=[policy.approvers],
    )


def _question(policy: QuestionPolicy) -> QuestionRequest:
    return QuestionRequest(
        question_id="q_1",
        operation_id="op_1",
        tool="export",
        key="k1",
        message="Which region?",
        requested_schema={"type": "object", "properties": {}},
        asked_at=NOON,
        expires_at=NOON + policy.timeout,
        policy=policy,
        sent_to=[policy.recipients],
    )


@pytest.mark.parametrize(
    ("request_", "name", "tool", "first"),
    [
        (
            _approval(ApprovalPolicy(timeout=HOUR, on_timeout="escalate", escalate_to="boss")),
            "approval r1",
            "delete_user",
            "approvers",
        ),
        (
            _question(QuestionPolicy(timeout=HOUR, on_timeout="escalate", escalate_to="boss")),
            "q_1",
            "export",
            "operators",
        ),
    ],
)
def test_an_escalation_opens_a_second_window_from_the_first_deadline(
    request_: ApprovalRequest | QuestionRequest, name: str, tool: str, first: str
) -> None:
    state = RunState(task="t")

    escalate(state, request_, name)

    assert request_.escalated
    assert request_.expires_at == NOON + 2 * HOUR
    assert request_.sent_to == [first, "boss"]
    assert [(s.name, s.detail) for s in state.steps] == [(tool, f"{name} escalated to boss")]


@pytest.mark.parametrize(
    ("policy", "windows"),
    [
        (ApprovalPolicy(timeout=HOUR, on_timeout="escalate"), 2),
        (ApprovalPolicy(timeout=HOUR, on_timeout="fail"), 1),
        (ApprovalPolicy(timeout=HOUR, on_timeout="default"), 1),
        (QuestionPolicy(timeout=HOUR, on_timeout="escalate"), 2),
        (QuestionPolicy(timeout=HOUR, on_timeout="decline"), 1),
        (QuestionPolicy(timeout=HOUR, on_timeout="cancel"), 1),
    ],
)
def test_links_work_until_the_last_window_ends(
    policy: ApprovalPolicy | QuestionPolicy, windows: int
) -> None:
    assert links_expiry(NOON, policy) == NOON + windows * HOUR
