"""The AG-UI mapping and the reading of a `RunAgentInput`, without a server: what each run event
is told as, what a connection may close, the interrupts a run's state is, and what an input asks
(or why it is refused)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from ag_ui.core import RunAgentInput

from waitstate.agui import inputs, mapping
from waitstate.agui.history import RunRead, ToolDone
from waitstate.client import RunEvent
from waitstate.schemas import Message, RunState
from waitstate.schemas.approvals import ApprovalPolicy, ApprovalRequest, DecideInput
from waitstate.schemas.calls import ToolResult
from waitstate.schemas.messages import ToolCall
from waitstate.schemas.threads import MAX_MESSAGE_CHARS

NOW = datetime(2026, 12, 5, tzinfo=UTC)


def event(number: int, kind: str, summary: str = "", **detail: Any) -> RunEvent:
    return RunEvent(id=f"r1.{number}", kind=kind, at=NOW, summary=summary, detail=detail)


def types(told: list[Any]) -> list[str]:
    return [e.type.value for e in told]


def test_a_model_turn_is_a_step_with_its_text_and_its_tool_calls() -> None:
    telling = mapping.Telling("t1", "run-1")
    call = ToolCall(id="c1", name="check_claim", arguments='{"claim_id": "C-1"}')
    read = RunRead(run="r1", length=9)
    read.replies[7] = Message(role="assistant", content="Looking.", tool_calls=[call])
    read.tools[9] = ToolDone("c1", "check_claim", ToolResult(content='{"valid": true}'))
    started = telling.event(event(5, "model.started", "model: demo"), read)
    ended = telling.event(event(7, "model.ended", "model: demo"), read)
    tool = telling.event(event(8, "tool.started", "tool check_claim"), read)
    result = telling.event(event(9, "tool.ended", "tool check_claim"), read)
    assert types(started) == ["STEP_STARTED"]
    assert types(ended) == [
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "STEP_FINISHED",
    ]
    assert ended[1].delta == "Looking." and ended[4].delta == call.arguments
    assert ended[3].parent_message_id == ended[0].message_id == mapping.message_id("r1.7")
    assert types(tool) == ["STEP_STARTED"] and types(result) == [
        "TOOL_CALL_RESULT",
        "STEP_FINISHED",
    ]
    assert result[0].tool_call_id == "c1" and result[0].content == '{"valid": true}'
    assert started[0].step_name == ended[-1].step_name


def test_streamed_text_ends_with_its_call_and_is_not_told_again() -> None:
    telling = mapping.Telling("t1", "run-1")
    read = RunRead(run="r1", length=7)
    read.replies[7] = Message(role="assistant", content="Hello there")
    telling.event(event(5, "model.started", "model"), read)
    first = telling.delta("act.1", "Hello")
    second = telling.delta("act.1", " there")
    ended = telling.event(event(7, "model.ended", "model"), read)
    assert types(first) == ["TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT"]
    assert types(second) == ["TEXT_MESSAGE_CONTENT"]
    assert types(ended) == ["TEXT_MESSAGE_END", "STEP_FINISHED"]


def test_a_connection_closes_only_what_it_opened() -> None:
    telling = mapping.Telling("t1", "run-1")
    # A tool that started before this connection began ends: nothing to finish.
    assert telling.event(event(9, "tool.ended", "tool x"), RunRead(run="r1")) == []
    telling.event(event(10, "tool.started", "tool y"), None)
    telling.forget()
    assert telling.event(event(11, "tool.ended", "tool y"), None) == []
    # What is open when the run ends is closed before its end.
    telling.event(event(12, "model.started", "model"), None)
    done = telling.succeeded(None, "answer")
    assert types(done) == ["STEP_FINISHED", "RUN_FINISHED"] and telling.finished
    assert done[-1].result == "answer"


def test_a_run_that_fails_is_a_run_error() -> None:
    telling = mapping.Telling("t1", "run-1")
    told = telling.event(event(20, "run.failed"), None)
    assert types(told) == ["RUN_ERROR"] and told[0].code == "run_failed" and telling.finished


def _request(request_id: str, minutes: int, status: str = "pending") -> ApprovalRequest:
    return ApprovalRequest(
        request_id=request_id,
        tool="issue_refund",
        tool_call_id=f"call-{request_id}",
        arguments={"amount": 420},
        reason="over the threshold",
        requested_at=NOW + timedelta(minutes=minutes),
        expires_at=NOW + timedelta(days=1),
        policy=ApprovalPolicy(),
        status=status,  # type: ignore[arg-type]
    )


def test_open_approvals_are_the_interrupts_oldest_first() -> None:
    state = RunState(
        approvals={
            "b": _request("b", 2),
            "a": _request("a", 1),
            "c": _request("c", 0, status="approved"),
        }
    )
    telling = mapping.Telling("t1", "run-1")
    told = telling.interrupted(state)
    assert types(told) == ["STATE_SNAPSHOT", "RUN_FINISHED"]
    interrupts = told[-1].outcome.interrupts
    assert [i.id for i in interrupts] == ["approval:a", "approval:b"]
    assert interrupts[0].tool_call_id == "call-a" and interrupts[0].response_schema
    assert told[0].snapshot["approvals"] == ["b", "a"]
    # Nothing open: no interrupt, the run goes on.
    assert mapping.Telling("t1", "run-2").interrupted(RunState()) == []


def test_an_events_id_is_on_the_last_of_what_it_is_told_as() -> None:
    telling = mapping.Telling("t1", "run-1")
    text = mapping.sse(telling.started()[0], "r1.4")
    assert text.startswith("id: r1.4\ndata: {") and text.endswith("\n\n")
    assert '"threadId":"t1"' in text and "null" not in text


# --- what an input asks --------------------------------------------------------------------


def _input(**fields: Any) -> RunAgentInput:
    given = {"threadId": "t1", "runId": "run-1", "messages": [], **fields}
    return RunAgentInput.model_validate(given)


def test_a_new_message_is_keyed_by_its_id_in_its_thread() -> None:
    message = {"id": "m7", "role": "user", "content": "hi"}
    ask = inputs.asked(_input(messages=[message]), "agui:ops")
    again = inputs.asked(_input(runId="run-9", messages=[message]), "agui:ops")
    assert (ask.text, ask.key) == ("hi", again.key) and ask.resumes == ()
    other = inputs.asked(_input(threadId="t2", messages=[message]), "agui:ops")
    assert other.key != ask.key


def test_a_resume_is_a_decision_under_an_update_id_of_the_interrupt() -> None:
    entry = {"interruptId": "approval:a1", "status": "resolved", "payload": {"decision": "approve"}}
    ask = inputs.asked(_input(resume=[entry]), "agui:ops")
    copy = inputs.asked(_input(runId="run-2", resume=[entry]), "agui:ops")
    [resume] = ask.resumes
    assert isinstance(resume.reply, DecideInput)
    assert (resume.reply.request_id, resume.reply.decision) == ("a1", "approve")
    # Every copy shares the Update id; another run's copy has another delivery id (refused
    # as already applied), the same run's the same (told the outcome).
    assert copy.resumes[0].update_id == resume.update_id
    assert copy.resumes[0].reply.delivery_id != resume.reply.delivery_id
    cancelled = {"interruptId": "approval:a1", "status": "cancelled"}
    [rejected] = inputs.asked(_input(resume=[cancelled]), "agui:ops").resumes
    assert isinstance(rejected.reply, DecideInput) and rejected.reply.decision == "reject"
    assert rejected.update_id != resume.update_id


def test_a_question_is_answered_with_its_payload() -> None:
    entry = {"interruptId": "question:q1", "status": "resolved", "payload": {"rows": 3}}
    [resume] = inputs.asked(_input(resume=[entry]), "agui:ops").resumes
    assert resume.reply.model_dump(include={"question_id", "action", "content"}) == {
        "question_id": "q1",
        "action": "accept",
        "content": {"rows": 3},
    }
    with pytest.raises(inputs.BadInput, match="object"):
        bad = {"interruptId": "question:q1", "status": "resolved", "payload": "three"}
        inputs.asked(_input(resume=[bad]), "agui:ops")


def test_media_is_refused() -> None:
    image = {"type": "image", "source": {"type": "url", "value": "https://example.com/a.png"}}
    message = {"id": "m1", "role": "user", "content": [{"type": "text", "text": "see"}, image]}
    with pytest.raises(inputs.BadInput, match="text"):
        inputs.asked(_input(messages=[message]), "agui:ops")


def test_the_apps_context_is_told_after_the_message_and_bounded() -> None:
    message = {"id": "m1", "role": "user", "content": "refund this one"}
    context = [
        {"description": "the page\nopen", "value": "claims/C-118"},
        {"description": "selected rows", "value": "2"},
    ]
    ask = inputs.asked(_input(messages=[message], context=context), "agui:ops")
    assert ask.text == (
        "refund this one\n\nContext from the app:\n- the page open: claims/C-118\n"
        "- selected rows: 2"
    )
    # The key is the message's: the same message sent again is one, whatever its context.
    plain = inputs.asked(_input(messages=[message]), "agui:ops")
    assert plain.text == "refund this one" and plain.key == ask.key
    many = [{"description": f"d{i}", "value": "v"} for i in range(inputs.MAX_CONTEXT + 1)]
    with pytest.raises(inputs.BadInput, match="context entries"):
        inputs.asked(_input(messages=[message], context=many), "agui:ops")
    large = [{"description": "all of it", "value": "x" * MAX_MESSAGE_CHARS}]
    with pytest.raises(inputs.BadInput, match="with its context"):
        inputs.asked(_input(messages=[message], context=large), "agui:ops")
