"""A remote A2A agent's task read as an operation's report (`waitstate.schemas.a2a_tasks`): what a
push and a status check both go through."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from waitstate.elicitation import schema_problem
from waitstate.schemas.a2a_tasks import (
    ANSWER_SCHEMA,
    MAX_RESULT_CHARS,
    A2APush,
    push_report,
)


def task(state: str, *, message: str | None = None, artifacts: Any = ()) -> dict[str, Any]:
    status: dict[str, Any] = {"state": state}
    if message is not None:
        status["message"] = {"messageId": "m-1", "parts": [{"text": message}]}
    return {"id": "t-1", "status": status, "artifacts": list(artifacts)}


def read(body: dict[str, Any]) -> Any:
    return push_report(A2APush.model_validate(body))


def test_a_completed_task_succeeds_with_its_artifacts_text_and_data() -> None:
    artifacts = [
        {"parts": [{"text": "EMEA: 12"}, {"data": {"rows": 3}}]},
        {"parts": [{"text": "ok"}]},
    ]
    report, _ = read({"task": task("TASK_STATE_COMPLETED", artifacts=artifacts)})
    assert report.status == "succeeded"
    assert report.result == {"text": "EMEA: 12\nok", "data": [{"rows": 3}]}


def test_text_alone_is_the_result_and_a_long_answer_is_cut_saying_so() -> None:
    report, _ = read(
        {"task": task("TASK_STATE_COMPLETED", artifacts=[{"parts": [{"text": "hi"}]}])}
    )
    assert report.result == "hi"
    parts = [{"text": "x" * 20_000} for _ in range(5)]
    report, _ = read({"task": task("TASK_STATE_COMPLETED", artifacts=[{"parts": parts}])})
    assert len(report.result) < MAX_RESULT_CHARS + 200
    assert report.result.endswith(
        f"(cut: the agent's answer is over {MAX_RESULT_CHARS} characters)"
    )


@pytest.mark.parametrize(
    ("state", "code"),
    [("TASK_STATE_FAILED", "a2a_failed"), ("TASK_STATE_REJECTED", "a2a_rejected"),
     ("TASK_STATE_CANCELED", "a2a_canceled"), ("TASK_STATE_AUTH_REQUIRED", "a2a_auth_required")],
)  # fmt: skip
def test_an_ended_task_fails_with_a_code_the_model_can_read(state: str, code: str) -> None:
    report, _ = read({"statusUpdate": {"taskId": "t-1", "status": {"state": state}}})
    assert report.status == "failed" and report.error.code == code


def test_input_required_is_one_question_keyed_by_the_agents_message() -> None:
    report, _ = read({"task": task("TASK_STATE_INPUT_REQUIRED", message="Which region?")})
    [question] = report.questions
    assert (question.key, question.message) == ("m-1", "Which region?")
    assert schema_problem(question.requested_schema) is None
    assert question.requested_schema == ANSWER_SCHEMA


def test_a_bare_task_as_protocol_0_3_pushed_it_is_read() -> None:
    report, _ = read(
        {**task("completed", artifacts=[{"parts": [{"text": "done"}]}]), "kind": "task"}
    )
    assert report.status == "succeeded" and report.result == "done"
    report, _ = read(task("input-required", message="Which?"))
    assert report.status == "input_required"


@pytest.mark.parametrize(
    "body",
    [
        {"statusUpdate": {"taskId": "t-1", "status": {"state": "TASK_STATE_COMPLETED"}}},
        {"artifactUpdate": {"taskId": "t-1", "artifact": {"parts": []}}},
        {"message": {"messageId": "m", "parts": []}},
        {"task": task("TASK_STATE_UNSPECIFIED")},
    ],
    ids=["completed-status", "artifact", "message", "unspecified"],
)
def test_a_push_that_says_nothing_the_run_can_take_is_none_with_why(body: dict[str, Any]) -> None:
    report, why = read(body)
    assert report is None and why


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"task": task("TASK_STATE_WORKING"), "message": {}},
        {"task": {"id": "t", "status": {"state": "W" * 41}}},
        {"task": {**task("TASK_STATE_COMPLETED"), "artifacts": [{"parts": []}] * 21}},
        {"task": task("TASK_STATE_COMPLETED", artifacts=[{"parts": [{"text": "x" * 20_001}]}])},
    ],
    ids=["empty", "two", "long-state", "many-artifacts", "long-text"],
)
def test_a_malformed_or_oversized_push_is_refused(body: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        A2APush.model_validate(body)
