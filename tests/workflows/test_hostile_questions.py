"""Hostile questions and answers against the real dev server, gateway, demo systems and MCP
server (issue 22, defects 1 and 2).

A crafted answer (a backtracking pattern's worst case) is refused at once through the
question's link and through the CLI, while another run on the same worker process goes on
answering queries and taking its webhook. A question whose schema no answer could fit is
refused when asked: our own job's report gets 422, saying why; an MCP task's question, or one
a poll returns, is recorded as refused and the job is told no with the reason; one the policy
gives the model no longer wedges the run.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import (
    eventually,
    first_question,
    process_env,
    replays,
    scheduled_activities,
)
from tests.rigs import Stack, WorkerProcess
from tests.test_starter import Cli
from tests.tiers import SUBPROCESS, needs
from tests.workflows.conftest import KEYS
from tests.workflows.hostile_app import AskingJobs, ask_tool
from waitstate.apps import load_apps
from waitstate.mcp import McpServer
from waitstate.schemas import RunResult
from waitstate.schemas.operations import CompletionMode
from waitstate.schemas.questions import QuestionPolicy, QuestionRequest
from waitstate.schemas.run import ANSWER_OPERATION
from waitstate.workflows.agent_run import AgentRunWorkflow

APP = "tests.workflows.hostile_app:app"
# The issue's crafted schema and answer: Python's `re` backtracks on them for minutes.
CRAFTED_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "pattern": "^(a+)+$"}},
}
CRAFTED_ANSWER = {"name": "a" * 30 + "!"}
# Bound on a run that should finish now, or an answer that should come: it only turns a wedged
# run or worker into a failure (the backtracking took minutes).
FINISHES = 60.0
# Schemas no answer could fit, and what the refusal says of each.
MALFORMED: dict[str, tuple[Any, str]] = {
    "type-12": ({"type": 12}, 'type must be "object"'),
    "dangling-ref": (
        {"type": "object", "properties": {"name": {"$ref": "#/$defs/missing"}}},
        "properties.name: $ref not allowed",
    ),
    "remote-ref": ({"$ref": "https://schemas.example/answer.json"}, "the schema: $ref not allowed"),
    "not-an-object": ({"type": "string"}, 'type must be "object" (a form of fields)'),
}


@pytest.fixture
@needs(SUBPROCESS)
def cli(stack: Stack) -> Cli:
    return Cli(process_env(stack.client, stack.task_queue))


async def _link(stack: Stack, question: QuestionRequest) -> dict[str, str]:
    async def posted() -> dict[str, str] | None:
        entries = (await stack.http.get(f"{stack.systems_url}/approvals/outbox")).json()
        bodies = [entry["body"] for entry in entries]
        notice = next((b for b in bodies if b.get("question_id") == question.question_id), None)
        return notice["answer"] if notice else None

    return await eventually(posted, "the question's notice in the outbox")


def _got(result: RunResult) -> dict[str, Any]:
    return dict(json.loads((result.final_output or "").removeprefix("got: ")))


# --- a crafted answer ---------------------------------------------------------------------------


@asynccontextmanager
async def _worker_process(stack: Stack, reports_url: str, tmp_path: Path) -> AsyncIterator[None]:
    """`python worker.py` serving the app: a process of its own, as in production, so that a
    worker the answer wedges cannot wedge the test."""
    key_id, secret = next(iter(KEYS.items()))
    env = process_env(
        stack.client,
        stack.task_queue,
        WAITSTATE_APPS=APP,
        WAITSTATE_MCP_SERVERS=f"reports={reports_url}",
        WAITSTATE_BLOB_DIR=str(tmp_path / "blobs"),
        WAITSTATE_TOKEN_KEYS=f"{key_id}:{secret}",
        GATEWAY_URL=stack.gateway_url,
        DEMO_SYSTEMS_URL=stack.systems_url,
    )
    worker = WorkerProcess(env, tmp_path / "worker.log")
    await worker.start()
    try:
        yield
    finally:
        # Killed, not stopped: a worker stuck in a match (the defect) never gets to stop.
        await worker.kill()


async def test_a_crafted_answer_is_refused_at_once_and_the_worker_keeps_serving(
    stack: Stack, cli: Cli, reports_url: str, tmp_path: Path
) -> None:
    async with _worker_process(stack, reports_url, tmp_path):
        victim = await stack.start(
            json.dumps(CRAFTED_SCHEMA), ["reports__ask_with_schema"], model="scripted:ask-schema"
        )
        question = await first_question(victim, "the run's question")
        link = await _link(stack, question)
        bystander = await stack.start("export", ["start_export"], model="scripted:export-once")

        async def by_link() -> httpx.Response:
            return await stack.http.post(
                link["url"],
                headers={"Authorization": link["authorization"]},
                json={"action": "accept", "content": CRAFTED_ANSWER, "responder": "mallory"},
                timeout=FINISHES,
            )

        async def by_cli() -> Any:
            return await cli(
                "answer", victim.id, "--question", question.question_id,
                "--accept", json.dumps(CRAFTED_ANSWER),
            )  # fmt: skip

        async def the_bystander_goes_on() -> RunResult:
            # While the crafted answers are checked: a query is answered, and the export's
            # webhook reaches its run, which finishes.
            await asyncio.wait_for(bystander.query(AgentRunWorkflow.status), FINISHES)
            return await asyncio.wait_for(bystander.result(), FINISHES)

        # Each to its end, so that a failure says what became of all three.
        link_try, cli_try, bystander_try = await asyncio.gather(
            by_link(), by_cli(), the_bystander_goes_on(), return_exceptions=True
        )
        assert not isinstance(link_try, BaseException), repr(link_try)
        refused = link_try
        assert refused.status_code == 422, (refused.text, cli_try, bystander_try)
        assert not isinstance(cli_try, BaseException), repr(cli_try)
        assert not isinstance(bystander_try, BaseException), repr(bystander_try)
        cli_done, exported = cli_try, bystander_try
        # After: the victim's question still takes a real answer, and its run finishes.
        answered = await stack.http.post(
            link["url"],
            headers={"Authorization": link["authorization"]},
            json={"action": "accept", "content": {"name": "aaa"}, "responder": "ana"},
        )
        result = await asyncio.wait_for(victim.result(), FINISHES)
        await replays(victim, "mcp_task_question_crafted_answer_refused")

    error = refused.json()["error"]
    assert error["code"] == "invalid_answer"
    # Our words (the pattern is matched by our RE2: `elicitation._pattern`), not jsonschema's.
    assert "name: 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!' does not match '^(a+)+$'" in error["message"]
    assert cli_done.code == 1, cli_done.stdout
    assert "does not match '^(a+)+$'" in cli_done.stderr
    assert exported.status == "completed", exported.error
    assert _got(exported)["status"] == "succeeded"
    assert answered.status_code == 200, answered.text
    assert _got(result)["result"] == {
        "action": "accept",
        "content": {"name": "aaa"},
        "reason": None,
    }


# --- malformed schemas ----------------------------------------------------------------------------


@asynccontextmanager
async def _asking(
    stack: Stack,
    reports_url: str,
    completion: CompletionMode = "callback",
    policy: QuestionPolicy | None = None,
) -> AsyncIterator[AskingJobs]:
    """A worker in the test's process with `ask_job` over a job system of the test's own, whose
    jobs ask in the schemas of MALFORMED, by webhook through the real gateway or when polled."""
    jobs = AskingJobs(stack.http, {case: schema for case, (schema, _) in MALFORMED.items()})
    apps = load_apps([APP], mcp_servers=[McpServer("reports", url=reports_url)])
    worker = stack.worker(tools=[ask_tool(jobs, completion, policy)], apps=apps)
    try:
        async with worker:
            yield jobs
    finally:
        await jobs.aclose()


CASES = [(case, says) for case, (_, says) in MALFORMED.items()]


@pytest.mark.parametrize(("case", "says"), CASES, ids=list(MALFORMED))
async def test_our_jobs_question_in_a_malformed_schema_is_refused_by_the_gateway(
    stack: Stack, reports_url: str, case: str, says: str
) -> None:
    async with _asking(stack, reports_url) as jobs:
        handle = await stack.start(case, ["ask_job"], model="scripted:ask-job")

        async def reported() -> Any:
            return next((r for r in jobs.reports if r.body["status"] == "input_required"), None)

        asked = await eventually(reported, "the job's question to reach the gateway")
        assert asked.status_code == 422, asked.answer
        result = await asyncio.wait_for(handle.result(), FINISHES)
        state = await handle.query(AgentRunWorkflow.status)

    assert asked.answer["error"]["code"] == "invalid_question"
    message = asked.answer["error"]["message"]
    assert message.startswith("questions.0 ('form').requested_schema: ") and says in message
    # The job failed, saying why; the run heard it and went on: no question ever opened.
    assert result.status == "completed", result.error
    [line] = (result.final_output or "").splitlines()
    outcome = json.loads(line.removeprefix("ask_job: "))
    assert outcome["status"] == "failed"
    assert outcome["error"]["code"] == "question_refused" and says in outcome["error"]["message"]
    assert state.questions == {}


@pytest.mark.parametrize(("case", "says"), CASES, ids=list(MALFORMED))
async def test_an_mcp_tasks_question_in_a_malformed_schema_is_declined_with_the_reason(
    stack: Stack, reports_url: str, case: str, says: str
) -> None:
    schema = MALFORMED[case][0]
    async with _asking(stack, reports_url):
        handle = await stack.start(
            json.dumps(schema), ["reports__ask_with_schema"], model="scripted:ask-schema"
        )
        question = await first_question(handle, "the run's question")
        assert question.status == "refused", question
        result = await asyncio.wait_for(handle.result(), FINISHES)
        state = await handle.query(AgentRunWorkflow.status)
        activities = await scheduled_activities(handle)
        if case == "type-12":
            await replays(handle, "mcp_task_question_refused")

    refused = state.questions[question.question_id]
    assert refused.refusal is not None and says in refused.refusal
    assert refused.answer is not None and refused.answer.by_policy
    assert (refused.answer.action, refused.delivery) == ("decline", "sent")
    steps = [s.detail for s in state.steps if question.question_id in s.detail]
    assert any("refused" in step and says in step for step in steps), steps
    # The task heard no, with the reason, and went on to its end; so did the run.
    assert result.status == "completed", result.error
    got = _got(result)
    assert got["status"] == "succeeded"
    assert got["result"]["action"] == "decline"
    assert says in got["result"]["reason"]
    assert activities.count(ANSWER_OPERATION) == 1


@pytest.mark.parametrize("answered_by", ["person", "model"])
async def test_a_polled_question_in_a_malformed_schema_is_declined_and_never_wedges_the_run(
    stack: Stack, reports_url: str, answered_by: Any
) -> None:
    # A question the model would have been given: before, its answer raised in the workflow
    # (`'int' object is not iterable`) and the run's task failed on every retry.
    policy = QuestionPolicy(answered_by=answered_by)
    async with _asking(stack, reports_url, "poll", policy) as jobs:
        handle = await stack.start("type-12", ["ask_job"], model="scripted:ask-job")
        result = await asyncio.wait_for(handle.result(), FINISHES)
        state = await handle.query(AgentRunWorkflow.status)
        await replays(handle, f"own_tool_polled_question_refused_for_a_{answered_by}")

    assert result.status == "completed", result.error
    [question] = state.questions.values()
    assert question.status == "refused" and question.delivery == "sent"
    [(_, answer)] = jobs.answers
    assert (answer.action, answer.responder) == ("decline", "policy")
    assert answer.reason is not None and 'type must be "object"' in answer.reason
    lines = (result.final_output or "").splitlines()
    assert [line.split(":")[0] for line in lines] == ["ask_job"]  # the model was asked nothing
    assert '"action":"decline"' in lines[0]
