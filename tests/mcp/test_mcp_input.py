"""Mid-flight input over MCP: a task that asks a question (`input_required`) while it runs,
answered by a person (the run's `answer` Update) or by the model (`answer_question`), or left
unanswered until its timer applies the tool's declared outcome; against a real MCP server
over streamable HTTP."""

from __future__ import annotations

import json
from contextlib import AbstractAsyncContextManager
from datetime import timedelta
from typing import Any

import pytest
from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment

from tests.helpers import accept, eventually, first_question, replays, scheduled_activities
from tests.mcp.mcp_app import task_events, task_events_since
from tests.mcp.runs import reports_apps, reports_run, tool_outcome
from waitstate.mcp.extension import TaskState
from waitstate.mcp.results import completion_of
from waitstate.schemas import RunResult
from waitstate.schemas.operations import Completion
from waitstate.schemas.questions import AnswerInput, InputPolicy, Question
from waitstate.schemas.run import ANSWER_OPERATION, CANCEL_OPERATION
from waitstate.workflows.agent_run import AgentRunWorkflow
from waitstate.workflows.search_attributes import WAITING_FOR

CHANNEL_SCHEMA = {
    "type": "object",
    "properties": {"channel": {"type": "string", "enum": ["email", "slack"]}},
    "required": ["channel"],
}


def _publishing(
    env: WorkflowEnvironment, task_queue: str, url: str, model: str, policy: InputPolicy
) -> AbstractAsyncContextManager[WorkflowHandle[Any, RunResult]]:
    """A run of `model` that publishes the emea report, with the server's questions under
    `policy`."""
    return reports_run(
        env,
        task_queue,
        reports_apps(url, input=policy),
        model,
        task="publish the emea report",
        tools=["reports__publish_report"],
    )


async def test_a_person_answers_a_tasks_question_and_the_task_goes_on_with_it(
    dev_env: WorkflowEnvironment, task_queue: str, reports_url: str
) -> None:
    before = await task_events(reports_url)
    async with _publishing(
        dev_env, task_queue, reports_url, "scripted:mcp-publish", InputPolicy()
    ) as handle:
        question = await first_question(handle, "the task's question")

        async def waiting_for_input() -> bool:
            attributes = (await handle.describe()).typed_search_attributes
            return attributes.get(WAITING_FOR) == "input"

        await eventually(waiting_for_input, "WaitingFor = input")
        shown = (await handle.query(AgentRunWorkflow.status)).operations[question.operation_id]

        # Not an answer the question allows: refused, and nothing changes.
        with pytest.raises(WorkflowUpdateFailedError) as wrong:
            await accept(handle, question, {"channel": "fax"})
        outcome = await accept(handle, question, {"channel": "slack"})
        with pytest.raises(WorkflowUpdateFailedError) as again:
            await accept(handle, question, {"channel": "email"}, responder="bo")
        result = await handle.result()
        state = await handle.query(AgentRunWorkflow.status)
        await replays(handle, "mcp_task_question_answered")

    assert question.message == "Publish the emea report to which channel?"
    assert question.requested_schema == CHANNEL_SCHEMA
    assert (question.policy.answered_by, question.sent_to) == ("person", ["operators"])
    assert shown.status == "input_required"
    assert shown.outcome()["questions"][0]["question_id"] == question.question_id
    assert "channel: 'fax' is not one of" in str(wrong.value.cause)
    assert (outcome.accepted, outcome.status, outcome.delivered) == (True, "answered", True)
    assert "already answered" in str(again.value.cause)
    closed = state.questions[question.question_id]
    assert closed.answer is not None and closed.answer.responder == "ana"
    assert closed.delivery == "sent"
    got = tool_outcome(result)
    assert got["status"] == "succeeded"
    assert got["result"] == {"published": "emea", "channel": "slack"}
    assert await task_events_since(reports_url, before) == {
        "publish_report asked": 1,
        "publish_report answered accept": 1,
        "publish_report published": 1,
    }
    # The model was called for the call and the answer: nothing while the task waited.
    assert result.usage.model_calls <= 3
    assert (await scheduled_activities(handle)).count(ANSWER_OPERATION) == 1


async def test_the_model_answers_a_question_the_policy_gives_it(
    dev_env: WorkflowEnvironment, task_queue: str, reports_url: str
) -> None:
    before = await task_events(reports_url)
    policy = InputPolicy(answered_by="model")
    async with _publishing(
        dev_env, task_queue, reports_url, "scripted:mcp-publish-answering", policy
    ) as handle:
        question = await first_question(handle, "the task's question")
        # A person may not answer the model's question.
        with pytest.raises(WorkflowUpdateFailedError) as not_yours:
            await handle.execute_update(
                AgentRunWorkflow.answer,
                AnswerInput(question_id=question.question_id, action="decline"),
            )
        result = await handle.result()
        state = await handle.query(AgentRunWorkflow.status)
        await replays(handle, "mcp_task_question_answered_by_model")

    assert "the model's to answer" in str(not_yours.value.cause)
    assert result.status == "completed", result.error
    lines = (result.final_output or "").splitlines()
    answered = json.loads(lines[1].removeprefix("answer_question: "))
    assert answered == {
        "question_id": question.question_id,
        "accepted": True,
        "status": "answered",
        "delivered": True,
        "reason": "",
    }
    [outcome] = json.loads(lines[2].removeprefix("wait_for_operations: "))
    assert outcome["status"] == "succeeded"
    assert outcome["result"] == {"published": "emea", "channel": "email"}
    assert state.questions[question.question_id].answer.responder == "model"  # type: ignore[union-attr]
    assert (await task_events_since(reports_url, before))["publish_report answered accept"] == 1


@pytest.mark.parametrize(
    ("on_timeout", "operation", "answered"),
    [
        ("decline", "failed", {"publish_report answered decline": 1}),
        ("escalate", "failed", {"publish_report answered decline": 1}),
        ("cancel", "cancelled", {}),
    ],
)
async def test_an_unanswered_question_expires_under_its_declared_outcome(
    dev_env: WorkflowEnvironment,
    task_queue: str,
    reports_url: str,
    on_timeout: Any,
    operation: str,
    answered: dict[str, int],
) -> None:
    before = await task_events(reports_url)
    policy = InputPolicy(timeout=timedelta(seconds=2), on_timeout=on_timeout)
    async with _publishing(
        dev_env, task_queue, reports_url, "scripted:mcp-publish", policy
    ) as handle:
        result = await handle.result()
        state = await handle.query(AgentRunWorkflow.status)
        activities = await scheduled_activities(handle)
        await replays(handle, f"mcp_task_question_{on_timeout}")

    [question] = state.questions.values()
    [op] = state.operations.values()
    assert question.status == "expired"
    assert op.status == operation
    events = await task_events_since(reports_url, before)
    assert {k: v for k, v in events.items() if "answered" in k} == answered
    assert "publish_report published" not in events
    if on_timeout == "escalate":
        assert question.escalated and question.sent_to == ["operators", "managers"]
        assert question.expires_at - question.asked_at == timedelta(seconds=4)
    if on_timeout == "cancel":
        assert CANCEL_OPERATION in activities and ANSWER_OPERATION not in activities
        assert op.error is not None and question.question_id in op.error.message
    else:
        assert question.answer is not None and question.answer.by_policy
        assert op.error is not None and "declined" in op.error.message
    assert tool_outcome(result)["status"] == operation


def test_a_tasks_input_requests_become_questions_under_the_servers_keys() -> None:
    # As fastmcp-tasks sends them (its keys are its own: `{taskId}:{16 hex}`, new each ask).
    key = "FXqDP2HnihhHjJXMkcWq:48fb2a0f152d418f"
    state = TaskState.model_validate(
        {
            "resultType": "complete",
            "taskId": "FXqDP2HnihhHjJXMkcWq",
            "status": "input_required",
            "statusMessage": "waiting for a channel",
            "inputRequests": {
                key: {
                    "method": "elicitation/create",
                    "params": {
                        "mode": "form",
                        "message": "Publish the emea report to which channel?",
                        "requestedSchema": CHANNEL_SCHEMA,
                    },
                },
                "sampling": {"method": "sampling/createMessage", "params": {"messages": []}},
            },
        }
    )

    completion = completion_of(state)

    # Only an elicitation can be answered; a sampling request is left to the task's expiry.
    assert completion == Completion(
        status="input_required",
        progress="waiting for a channel",
        questions=[
            Question(
                key=key,
                message="Publish the emea report to which channel?",
                requested_schema=CHANNEL_SCHEMA,
            )
        ],
    )
