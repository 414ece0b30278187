"""Mid-flight input for a long tool of our own: the demo's purge, whose job asks by webhook
(through the gateway) for a person's confirmation while it runs, and takes the answer through
the tool's `answer`. Answered through the question's link, through the CLI, by the model, or
by nobody (each declared outcome); against the real dev server, gateway and demo systems. And
an MCP task's question answered through its link and through the CLI (tests/mcp has the
rest of the MCP side)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from examples.demo.purges import PurgeService, purge_tool
from tests.helpers import (
    accept,
    eventually,
    expiries,
    first_question,
    make_worker,
    process_env,
    replays,
    scheduled_activities,
)
from tests.rigs import Stack
from tests.test_starter import Cli
from tests.tiers import SUBPROCESS, needs
from waitstate.apps import load_apps
from waitstate.mcp import McpServer
from waitstate.schemas import RunResult
from waitstate.schemas.questions import QuestionPolicy, QuestionRequest
from waitstate.schemas.run import ANSWER_OPERATION, CANCEL_OPERATION
from waitstate.workflows.agent_run import AgentRunWorkflow
from waitstate.workflows.search_attributes import WAITING_FOR

APP = "tests.workflows.questions_app:app"
MCP_APP = "tests.mcp.mcp_app:app"
CONFIRM_SCHEMA = {
    "type": "object",
    "properties": {"confirm": {"type": "boolean"}},
    "required": ["confirm"],
}


@pytest.fixture
@needs(SUBPROCESS)
def cli(dev_env: WorkflowEnvironment, task_queue: str) -> Cli:
    return Cli(process_env(dev_env.client, task_queue))


@asynccontextmanager
async def _worker(stack: Stack, policy: QuestionPolicy | None = None) -> AsyncIterator[Worker]:
    backend = PurgeService(stack.http, stack.systems_url)
    tool = purge_tool(backend) if policy is None else purge_tool(backend, input=policy)
    worker = stack.worker(tools=[tool], apps=load_apps([APP]))
    async with worker as running:
        yield running


async def _notice(stack: Stack, question: QuestionRequest) -> dict[str, Any]:
    async def posted() -> dict[str, Any] | None:
        entries = (await stack.http.get(f"{stack.systems_url}/approvals/outbox")).json()
        bodies = [entry["body"] for entry in entries]
        return next((b for b in bodies if b.get("question_id") == question.question_id), None)

    return await eventually(posted, "the question's notice in the outbox")


async def _notices(stack: Stack, question: QuestionRequest) -> list[dict[str, Any]]:
    entries = (await stack.http.get(f"{stack.systems_url}/approvals/outbox")).json()
    return [e["body"] for e in entries if e["body"].get("question_id") == question.question_id]


async def _purges(stack: Stack) -> dict[str, int]:
    return dict((await stack.stats())["purges"])


def _got(result: RunResult) -> dict[str, Any]:
    return dict(json.loads((result.final_output or "").removeprefix("got: ")))


async def test_a_person_answers_through_the_questions_link_once(stack: Stack) -> None:
    async with _worker(stack):
        handle = await stack.start(
            "purge the staging events", ["purge_dataset"], model="scripted:purge"
        )
        question = await first_question(handle, "the purge's question")
        notice = await _notice(stack, question)

        async def waiting_for_input() -> bool:
            attributes = (await handle.describe()).typed_search_attributes
            return attributes.get(WAITING_FOR) == "input"

        await eventually(waiting_for_input, "WaitingFor = input")
        link = notice["answer"]
        headers = {"Authorization": link["authorization"]}
        confirm = {"action": "accept", "content": {"confirm": True}, "responder": "ana"}
        wrong = await stack.http.post(
            link["url"], headers=headers, json={**confirm, "content": {"confirm": "yes"}}
        )
        forged = await stack.http.post(
            link["url"], headers={"Authorization": "Bearer x.y"}, json=confirm
        )
        answered = await stack.http.post(link["url"], headers=headers, json=confirm)
        copy = await stack.http.post(link["url"], headers=headers, json=confirm)
        late = await stack.http.post(
            link["url"], headers=headers, json={"action": "decline", "responder": "bo"}
        )
        result = await handle.result()
        state = await handle.query(AgentRunWorkflow.status)
        await replays(handle, "own_tool_question_answered_by_link")

    assert question.message.startswith("Purge dataset staging_events (")
    assert question.requested_schema == CONFIRM_SCHEMA
    assert notice["message"] == question.message and notice["recipient"] == "operators"
    assert wrong.status_code == 422 and "confirm" in wrong.json()["error"]["message"]
    assert forged.status_code == 401
    assert answered.status_code == 200, answered.text
    assert answered.json()["delivered"] is True
    assert copy.status_code == 200 and copy.json() == answered.json()  # one answer, not two
    assert late.status_code == 409 and late.json()["error"]["code"] == "question_closed"
    got = _got(result)
    assert got["status"] == "succeeded"
    assert got["result"]["confirmed_by"] == "ana"
    assert state.questions[question.question_id].status == "answered"
    purges = await _purges(stack)
    assert (purges["questions_asked"], purges["answers_applied"]) == (1, 1)
    assert (await scheduled_activities(handle)).count(ANSWER_OPERATION) == 1


async def test_a_person_answers_through_the_cli_and_pending_lists_the_question(
    stack: Stack, cli: Cli
) -> None:
    async with _worker(stack):
        handle = await stack.start(
            "purge the staging events", ["purge_dataset"], model="scripted:purge"
        )
        question = await first_question(handle, "the purge's question")

        async def listed() -> Any:
            pending = await cli("pending", "--json")
            rows = [r for r in json.loads(pending.stdout) if r.get("run_id") == handle.id]
            return rows or None

        [row] = await eventually(listed, "the question in `pending`")
        bad = await cli("answer", handle.id, "--accept", "[1]")
        answered = await cli(
            "answer", handle.id, "--accept", '{"confirm": true}', "--responder", "dana"
        )
        again = await cli("answer", handle.id, "--question", question.question_id, "--decline")
        result = await handle.result()

    assert row["kind"] == "question" and row["question_id"] == question.question_id
    assert row["requested_schema"] == CONFIRM_SCHEMA
    assert bad.code == 2 and "JSON object" in bad.stderr
    assert answered.code == 0, answered.stderr
    assert question.question_id in answered.stdout and "dana" in answered.stdout
    # Refused: the question is answered, or (the purge quick) the run has already ended.
    assert again.code == 1, again.stdout
    assert "already answered" in again.stderr or "already ended" in again.stderr
    assert _got(result)["result"]["confirmed_by"] == "dana"
    assert (await _purges(stack))["answers_applied"] == 1


async def test_the_model_answers_when_the_policy_gives_it_the_question(stack: Stack) -> None:
    async with _worker(stack, QuestionPolicy(answered_by="model")):
        handle = await stack.start(
            "purge the staging events", ["purge_dataset"], model="scripted:purge-confirming"
        )
        result = await handle.result()
        state = await handle.query(AgentRunWorkflow.status)
        await replays(handle, "own_tool_question_answered_by_model")

    assert result.status == "completed", result.error
    lines = (result.final_output or "").splitlines()
    assert lines[0].startswith("purge_dataset: ") and '"input_required"' in lines[0]
    assert lines[1].startswith("answer_question: invalid answer: confirm: 'yes' is not")
    assert json.loads(lines[2].removeprefix("answer_question: "))["delivered"] is True
    [outcome] = json.loads(lines[3].removeprefix("wait_for_operations: "))
    assert outcome["status"] == "succeeded"
    assert outcome["result"]["confirmed_by"] == "model"
    [question] = state.questions.values()
    assert (question.status, question.sent_to) == ("answered", ["model"])
    assert (await _purges(stack))["answers_applied"] == 1


async def test_a_question_open_when_the_run_continues_as_new_is_answered_in_the_next(
    stack: Stack,
) -> None:
    async with _worker(stack):
        handle = await stack.start(
            "purge the staging events",
            ["purge_dataset"],
            model="scripted:purge",
            continue_as_new_after_events=20,
        )
        question = await first_question(handle, "the purge's question")

        async def continued() -> bool:
            return (await handle.query(AgentRunWorkflow.status)).continued_as_new > 0

        await eventually(continued, "the run continued as new while the question was open")
        outcome = await accept(handle, question, {"confirm": True})
        result = await handle.result()
        await replays(handle, "own_tool_question_answered_after_continue_as_new")
        notices = await _notices(stack, question)

    assert (outcome.status, outcome.delivered) == ("answered", True)
    assert _got(result)["result"]["confirmed_by"] == "ana"
    assert [n["recipient"] for n in notices] == ["operators"]  # told once, not once a run


@pytest.mark.parametrize("on_timeout", ["decline", "escalate", "cancel"])
async def test_an_unanswered_question_expires_under_its_declared_outcome(
    stack: Stack, on_timeout: Any
) -> None:
    policy = QuestionPolicy(timeout=timedelta(seconds=2), on_timeout=on_timeout)
    before = await _purges(stack)
    async with _worker(stack, policy):
        handle = await stack.start(
            "purge the staging events", ["purge_dataset"], model="scripted:purge"
        )
        result = await handle.result()
        state = await handle.query(AgentRunWorkflow.status)
        activities = await scheduled_activities(handle)
        told = await expiries(handle)
        await replays(handle, f"own_tool_question_{on_timeout}")
    after = await _purges(stack)

    [question] = state.questions.values()
    [op] = state.operations.values()
    got = _got(result)
    assert question.status == "expired"
    windows = 2 if on_timeout == "escalate" else 1
    assert told == [("question.expired", question.question_id)] * windows
    if on_timeout == "cancel":
        assert op.status == "cancelled" and got["status"] == "cancelled"
        assert CANCEL_OPERATION in activities and ANSWER_OPERATION not in activities
        assert after["cancels"] - before["cancels"] == 1
        assert after["answers_applied"] == before["answers_applied"]
        return
    # The job is told no: the purge fails `not_confirmed`, declined by the policy.
    assert question.answer is not None and question.answer.by_policy
    assert op.status == "failed" and got["error"]["code"] == "not_confirmed"
    assert "declined by policy" in got["error"]["message"]
    assert after["answers_applied"] - before["answers_applied"] == 1
    if on_timeout == "escalate":
        assert question.escalated and question.sent_to == ["operators", "managers"]
        notices = await _notices(stack, question)
        assert sorted(n["recipient"] for n in notices) == ["managers", "operators"]


# --- the same for an MCP task's question ----------------------------------------------------


async def test_a_person_answers_an_mcp_tasks_question_through_its_link_and_the_cli(
    stack: Stack, cli: Cli, reports_url: str
) -> None:
    apps = load_apps([MCP_APP], mcp_servers=[McpServer("reports", url=reports_url)])
    worker = make_worker(
        stack.client, stack.task_queue, tokens=stack.tokens, settings=stack.settings, apps=apps
    )
    async with worker:
        by_link = await stack.start(
            "publish", ["reports__publish_report"], model="scripted:mcp-publish"
        )
        by_cli = await stack.start(
            "publish", ["reports__publish_report"], model="scripted:mcp-publish"
        )
        link = (await _notice(stack, await first_question(by_link, "the purge's question")))[
            "answer"
        ]
        answered = await stack.http.post(
            link["url"],
            headers={"Authorization": link["authorization"]},
            json={"action": "accept", "content": {"channel": "slack"}, "responder": "ana"},
        )
        await first_question(by_cli, "the purge's question")
        done = await cli("answer", by_cli.id, "--accept", '{"channel": "email"}')
        results = [await by_link.result(), await by_cli.result()]

    assert answered.status_code == 200 and answered.json()["delivered"] is True
    assert done.code == 0 and "the job has it" in done.stdout, done.stderr
    got = [_got(result) for result in results]
    assert [g["result"] for g in got] == [
        {"published": "emea", "channel": "slack"},
        {"published": "emea", "channel": "email"},
    ]
