"""The A2A server's pure mappings (`waitstate.a2a.shapes`): ids, a client's message read and
bounded, a reply as a decision or an answer, a run's end as a task's state, the card."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from a2a.types import TaskState
from a2a.utils.errors import InternalError

from tests.a2a.serving import message
from waitstate.a2a import shapes
from waitstate.a2a.watching import Watches
from waitstate.agents import Agent
from waitstate.schemas.approvals import ApprovalPolicy, ApprovalRequest
from waitstate.schemas.questions import QuestionPolicy, QuestionRequest
from waitstate.schemas.run import RunState

NOW = datetime(2026, 12, 5, tzinfo=UTC)


def _approval() -> ApprovalRequest:
    return ApprovalRequest(
        request_id="req-1",
        tool="issue_refund",
        tool_call_id="call-1",
        arguments={"claim_id": "C-305", "amount": 600},
        reason="refunds over $500 need a person",
        requested_at=NOW,
        expires_at=NOW + timedelta(hours=1),
        policy=ApprovalPolicy(),
    )


def _question(schema: dict[str, object]) -> QuestionRequest:
    return QuestionRequest(
        question_id="q-1",
        operation_id="op-1",
        tool="export",
        key="k",
        message="Which region?",
        requested_schema=schema,
        asked_at=NOW,
        expires_at=NOW + timedelta(hours=1),
        policy=QuestionPolicy(),
    )


def test_a_task_id_is_the_callers_own_and_the_same_for_a_message_sent_again() -> None:
    first = shapes.task_id_of("alice", None, "m-1")
    assert first == shapes.task_id_of("alice", None, "m-1")
    assert first != shapes.task_id_of("bob", None, "m-1")
    assert shapes.context_of(first) == first.partition(".")[0]
    assert not shapes.in_conversation(first)
    assert shapes.run_id_of("alice", "a", first) != shapes.run_id_of("bob", "a", first)
    assert "alice" not in shapes.run_id_of("alice", "a", first)
    in_context = shapes.task_id_of("alice", "chat-1", "m-2")
    assert shapes.in_conversation(in_context)
    assert shapes.run_id_of("alice", "a", in_context) == shapes.thread_id_of("alice", "a", "chat-1")
    assert shapes.context_of("no-dot") is None
    assert shapes.context_of("a.b/c") is None


def test_a_message_is_read_within_its_bounds() -> None:
    said = shapes.said(message("hello", data={"n": 1}))
    assert (said.text, said.data) == ("hello", [{"n": 1.0}])
    for refused in (
        message(),  # no part
        message("x" * (shapes.MAX_TEXT_CHARS + 1)),
        message("hi", message_id="m" * (shapes.MAX_TEXT_CHARS + 1)),
        message(data={"blob": "x" * shapes.MAX_DATA_CHARS}),
    ):
        with pytest.raises(shapes.Refused):
            shapes.said(refused)
    with pytest.raises(shapes.Refused):
        shapes.task_text(shapes.said(message("   ")))


def test_a_reply_is_a_decision_in_words_or_as_data() -> None:
    request = _approval()
    approve = shapes.decision_of(request, shapes.said(message("Approve")), "alice")
    reject = shapes.decision_of(request, shapes.said(message("reject too much")), "alice")
    as_data = shapes.decision_of(
        request, shapes.said(message(data={"decision": "reject", "reason": "no"})), "alice"
    )
    assert (approve.decision, approve.reviewer, approve.request_id) == (
        "approve",
        "a2a:alice",
        "req-1",
    )
    assert (reject.decision, reject.comment) == ("reject", "too much")
    assert (as_data.decision, as_data.comment) == ("reject", "no")
    for refused in (message("maybe"), message(data={"decision": "yes"}), message(data=[1])):
        with pytest.raises(shapes.Refused):
            shapes.decision_of(request, shapes.said(refused), "alice")


def test_a_reply_is_an_answer_as_data_or_as_the_text_of_a_one_string_schema() -> None:
    one_string = _question({"type": "object", "properties": {"region": {"type": "string"}}})
    two = _question(
        {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}}}
    )
    by_text = shapes.answer_of(one_string, shapes.said(message("emea")), "alice")
    by_data = shapes.answer_of(two, shapes.said(message(data={"a": "x", "b": "y"})), "alice")
    assert (by_text.content, by_text.responder) == ({"region": "emea"}, "a2a:alice")
    assert by_data.content == {"a": "x", "b": "y"}
    with pytest.raises(shapes.Refused):
        shapes.answer_of(two, shapes.said(message("emea")), "alice")


def test_what_a_request_asks_is_said_in_words_and_as_data() -> None:
    text, data = shapes.asking(_approval())
    assert text.startswith('Approve issue_refund {"amount": 600, "claim_id": "C-305"}?')
    assert data["kind"] == "approval" and data["request_id"] == "req-1"
    text, data = shapes.asking(_question({"type": "object"}))
    assert text == "export asks: Which region?"
    assert (data["kind"], data["schema"]) == ("question", {"type": "object"})


def test_a_runs_end_is_its_tasks_state() -> None:
    assert shapes.ended(RunState(status="completed"))[0] == TaskState.TASK_STATE_COMPLETED
    assert shapes.ended(RunState(status="cancelled"))[0] == TaskState.TASK_STATE_CANCELED
    for status in ("failed", "max_turns", "approval_expired", "budget_exceeded", "output_invalid"):
        state, why = shapes.ended(RunState(status=status, error="boom"))  # type: ignore[arg-type]
        assert state == TaskState.TASK_STATE_FAILED and why.endswith(": boom")


def test_an_answer_is_text_and_for_an_output_type_data() -> None:
    plain = shapes.answer_artifact('{"a": 1}', structured=False)
    typed = shapes.answer_artifact('{"a": 1}', structured=True)
    assert [p.WhichOneof("content") for p in plain.parts] == ["text"]
    assert [p.WhichOneof("content") for p in typed.parts] == ["text", "data"]


def test_the_card_says_how_to_call_the_agent() -> None:
    card = shapes.card(Agent("helper", description="Helps."), "http://h:1/agents/helper", "1.0")
    assert (card.name, card.description, card.skills[0].id) == ("helper", "Helps.", "helper")
    assert card.supported_interfaces[0].url == "http://h:1/agents/helper"
    assert card.supported_interfaces[0].protocol_binding == "JSONRPC"
    assert card.capabilities.streaming and card.capabilities.push_notifications
    assert card.security_schemes[shapes.BEARER].http_auth_security_scheme.scheme == "Bearer"


def test_a_process_watches_a_bounded_number_of_tasks_at_once() -> None:
    watches = Watches(limit=2)
    held = []
    with watches.slot(), watches.slot(), pytest.raises(InternalError), watches.slot():
        held.append("third")  # never reached: refused before the block
    with watches.slot():  # the slots were given back
        held.append("again")
    assert held == ["again"]
