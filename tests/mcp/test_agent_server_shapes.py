"""How `waitstate.mcp_server` reads what a caller sends it and shows a run as a task, without a
server: responses that cannot apply are refused whole, a run's requests become elicitations,
its outcome a tool result; and the process refuses to start unconfigured."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import mcp_types
import pytest
from pydantic import BaseModel

from tests.helpers import text_question
from tests.mcp.agents_app import APP
from waitstate.mcp_server import __main__ as served
from waitstate.mcp_server import shapes
from waitstate.schemas.approvals import ApprovalPolicy, ApprovalRequest
from waitstate.schemas.messages import Usage
from waitstate.schemas.questions import InputPolicy, InputRequest
from waitstate.schemas.run import RunState
from waitstate.schemas.threads import MAX_KEY_CHARS

NOW = datetime(2026, 12, 3, tzinfo=UTC)


def _approval(request_id: str, status: Any = "pending") -> ApprovalRequest:
    return ApprovalRequest(
        request_id=request_id,
        tool="drop_table",
        tool_call_id="call_0",
        arguments={"name": "t" * 3000},
        reason="destructive",
        requested_at=NOW,
        expires_at=NOW + timedelta(hours=1),
        policy=ApprovalPolicy(),
        status=status,
    )


def _question(question_id: str, answered_by: Any = "person") -> InputRequest:
    policy = InputPolicy(answered_by=answered_by)
    return text_question(question_id, "reports__publish", "channel", "Which channel?", NOW, policy)


def test_open_approvals_and_a_persons_questions_are_elicitations() -> None:
    state = RunState(
        approvals={"a1": _approval("a1"), "a2": _approval("a2", "approved")},
        questions={"q1": _question("q1"), "q2": _question("q2", "model")},
    )

    requests = shapes.input_requests_of(state, approvals=True)
    without_approvals = shapes.input_requests_of(state, approvals=False)

    assert sorted(requests) == ["approval:a1", "question:q1"]
    assert sorted(without_approvals) == ["question:q1"]
    for payload in requests.values():  # each is a well-formed elicitation/create request
        mcp_types.ElicitRequest.model_validate(payload)
    approval = requests["approval:a1"]["params"]
    assert approval["requestedSchema"] == shapes.DECISION_SCHEMA
    assert approval["message"].startswith('Approve drop_table {"name": "ttt')
    assert len(approval["message"]) < 1_100  # the arguments are cut
    assert requests["question:q1"]["params"]["message"] == "reports__publish asks: Which channel?"


@pytest.mark.parametrize(
    ("response", "decision", "comment"),
    [
        ({"action": "accept", "content": {"decision": "approve"}}, "approve", ""),
        ({"action": "accept", "content": {"decision": "reject", "comment": "no"}}, "reject", "no"),
        ({"action": "decline"}, "reject", "declined"),
        ({"action": "decline", "_meta": {"io.waitstate/reason": "nobody"}}, "reject", "nobody"),
    ],
)
def test_a_response_to_an_approval_is_a_decision(
    response: dict[str, Any], decision: str, comment: str
) -> None:
    decided = shapes.decision_of("a1", response, "ana")
    assert decided is not None
    assert (decided.request_id, decided.decision, decided.comment) == ("a1", decision, comment)
    assert decided.reviewer == "mcp:ana"


def test_a_dismissed_form_decides_and_answers_nothing() -> None:
    assert shapes.decision_of("a1", {"action": "cancel"}, "ana") is None
    assert shapes.answer_of("q1", {"action": "cancel"}, "ana") is None


@pytest.mark.parametrize(
    "response",
    [
        "yes",
        {"action": "maybe"},
        {"action": "accept", "content": {"decision": "sure"}},
        {"action": "accept", "content": {}},
        {"action": "accept", "content": {"decision": "approve", "comment": 7}},
        {"action": "accept", "content": {"decision": "approve", "comment": "x" * 5_001}},
    ],
)
def test_a_response_that_is_not_a_decision_is_refused(response: Any) -> None:
    with pytest.raises(shapes.Refused):
        shapes.decision_of("a1", response, "ana")


def test_a_response_to_a_question_is_an_answer() -> None:
    accepted = shapes.answer_of("q1", {"action": "accept", "content": {"channel": "x"}}, "ana")
    declined = shapes.answer_of("q1", {"action": "decline"}, "ana")
    assert accepted is not None and declined is not None
    assert (accepted.action, accepted.content, accepted.responder) == (
        "accept",
        {"channel": "x"},
        "mcp:ana",
    )
    assert (declined.action, declined.content) == ("decline", None)
    with pytest.raises(shapes.Refused):
        shapes.answer_of("q1", ["accept"], "ana")


class Line(BaseModel):
    text: str


class Report(BaseModel):
    lines: list[Line]


def test_an_output_types_definitions_move_where_its_references_point() -> None:
    schema = shapes.output_schema(Report)
    answer = schema["properties"]["answer"]
    assert answer["properties"]["lines"]["items"] == {"$ref": "#/$defs/Line"}
    assert "Line" in schema["$defs"] and "$defs" not in answer
    assert shapes.output_schema(None)["properties"]["answer"] == {"type": "string"}


def test_a_run_that_ended_without_answering_is_a_tool_error() -> None:
    ended = RunState(status="max_turns", error="no answer within 3 turns")
    result = shapes.result_of("mcp-x", ended, structured=False)
    assert result["isError"] is True
    assert result["content"][0]["text"] == "the run ended max_turns: no answer within 3 turns"
    assert "structuredContent" not in result


def test_a_structured_answer_is_parsed_and_a_plain_one_kept() -> None:
    done = RunState(status="completed", final_output='{"a": 1}', usage=Usage(model_calls=2))
    structured = shapes.result_of("mcp-x", done, structured=True)["structuredContent"]
    plain = shapes.result_of("mcp-x", done, structured=False)["structuredContent"]
    assert structured["answer"] == {"a": 1}
    assert plain["answer"] == '{"a": 1}'
    assert structured["usage"]["model_calls"] == 2


def test_the_server_does_not_start_without_apps_or_caller_keys(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("WAITSTATE_APPS", raising=False)
    monkeypatch.delenv("WAITSTATE_MCP_CALLER_KEYS", raising=False)
    assert served.main([]) == 2
    assert "name the apps" in capsys.readouterr().err
    assert served.main(["--app", APP]) == 2
    assert "WAITSTATE_MCP_CALLER_KEYS" in capsys.readouterr().err
    monkeypatch.setenv("WAITSTATE_MCP_CALLER_KEYS", "ana:short")
    assert served.main(["--app", APP]) == 2
    assert "caller key 'ana' is too short" in capsys.readouterr().err


def test_a_messages_task_id_names_its_callers_thread_and_nothing_else() -> None:
    task_id = shapes.message_task_id("listener", "plans", "m2")
    assert shapes.thread_of(task_id) is not None
    assert shapes.thread_of(task_id)[1:] == ("plans", "m2")  # type: ignore[index]
    assert shapes.run_id_of("ana", task_id) == shapes.thread_run_id("ana", "listener", "plans")
    assert shapes.run_id_of("bo", task_id) != shapes.run_id_of("ana", task_id)
    for not_a_message in ("abc", "a.b", "a.b.c.d", "a..b", "a.b c.d", shapes.new_task_id()):
        assert shapes.thread_of(not_a_message) is None


def test_a_keyed_calls_task_is_named_by_its_caller_and_key_alone() -> None:
    """The same caller and key name the same task, whatever else; another caller's equal key
    another task; the id says nothing of the key, and names a task run (no `.`)."""
    task_id = shapes.keyed_task_id("alice", "order-7")

    assert task_id == shapes.keyed_task_id("alice", "order-7")
    assert task_id != shapes.keyed_task_id("bob", "order-7")
    assert task_id != shapes.keyed_task_id("alice", "order-8")
    assert len(task_id) == len(shapes.new_task_id()) and "order" not in task_id
    assert shapes.thread_of(task_id) is None
    assert shapes.run_id_of("alice", task_id).startswith(f"{shapes.runs_of('alice')}-")


def test_a_keyed_message_is_its_threads_key_for_that_text_only() -> None:
    """The thread's key is made of the call's key and the message's text: the same call is the
    same key; the key with another text is another key, found among the thread's keys."""
    longest = "k" * 128
    mine = shapes.message_key(longest, "hello")
    keys = {mine: "m1", shapes.message_key("other", "hi"): "m2"}

    assert mine == shapes.message_key(longest, "hello")
    assert len(mine) <= MAX_KEY_CHARS
    assert shapes.other_message_of(longest, "hello", keys) is None
    assert shapes.other_message_of(longest, "hello!", keys) == "m1"
    assert shapes.other_message_of("other", "hi", keys) is None
