"""An MCP task's question for the model asked while the run is in `wait_for_operations`
(issue 22, defect 5): the wait ends, the model answers it, and the task goes on with the
answer; against a real MCP server over streamable HTTP."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

from temporalio.testing import WorkflowEnvironment

from tests.helpers import replays
from tests.mcp.mcp_app import task_events, task_events_since
from tests.mcp.runs import reports_apps, reports_run
from tests.workflows.waiting_app import results_seen
from waitstate.schemas.questions import InputPolicy
from waitstate.workflows.agent_run import AgentRunWorkflow

APP = "tests.workflows.waiting_app:app"
RESULT_TIMEOUT = 90


async def test_a_tasks_question_for_the_model_ends_its_wait_for_operations(
    dev_env: WorkflowEnvironment, task_queue: str, reports_url: str
) -> None:
    before = await task_events(reports_url)
    # A question that nobody answers in 20 s is declined: the test would fail soon.
    policy = InputPolicy(answered_by="model", timeout=timedelta(seconds=20))
    async with reports_run(
        dev_env,
        task_queue,
        reports_apps(reports_url, APP, input=policy),
        "scripted:publish-wait-answer",
        task="publish the emea report",
        tools=["reports__publish_report"],
        operation_mode="handle",
    ) as handle:
        result = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)
        state = await handle.query(AgentRunWorkflow.status)
        await replays(handle, "mcp_task_question_during_wait_for_operations")
    events = await task_events_since(reports_url, before)

    *_, waited = results_seen(result, "reports__publish_report")
    [ended] = json.loads(waited)
    assert ended["status"] == "succeeded"
    assert ended["result"] == {"published": "emea", "channel": "email"}
    [request] = state.questions.values()
    assert request.answer is not None and request.answer.responder == "model"
    assert events.get("publish_report answered accept", 0) == 1
