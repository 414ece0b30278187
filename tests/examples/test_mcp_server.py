"""The demo's MCP server (`examples/mcp_server.py`, what `make mcp-demo` starts) and the demo
app's `reporter` agent over it: the report runs as an MCP task, polled without a model turn,
and the destructive deletion waits for a person's approval, then for their confirmation (the
task asks it while it runs)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from temporalio.testing import WorkflowEnvironment

from tests.helpers import eventually, make_worker
from tests.rigs import free_port, python_server
from tests.tiers import SUBPROCESS, needs
from waitstate.apps import load_apps
from waitstate.mcp import McpServer, McpServers
from waitstate.schemas import RunInput
from waitstate.schemas.approvals import DecideInput
from waitstate.schemas.questions import AnswerInput
from waitstate.worker import DEMO_APP
from waitstate.workflows.agent_run import AgentRunWorkflow


@pytest.fixture(scope="module")
@needs(SUBPROCESS)
def demo_mcp_url() -> Iterator[str]:
    port = free_port()
    with python_server(["-m", "examples.mcp_server", "--port", str(port)], port):
        yield f"http://127.0.0.1:{port}/mcp"


async def test_the_reporter_builds_the_report_as_a_task_and_deletes_once_approved_and_confirmed(
    dev_env: WorkflowEnvironment, task_queue: str, demo_mcp_url: str
) -> None:
    apps = load_apps([DEMO_APP])
    apps.mcp = McpServers([McpServer("reports", url=demo_mcp_url)])  # on this test's port
    try:
        async with make_worker(dev_env.client, task_queue, apps=apps):
            handle = await dev_env.client.start_workflow(
                AgentRunWorkflow.run,
                RunInput(task="Build the EMEA report and delete its draft", agent="reporter"),
                id=f"run-{uuid.uuid4()}",
                task_queue=task_queue,
            )

            async def open_request() -> str | None:
                state = await handle.query(AgentRunWorkflow.status)
                return next((r.request_id for r in state.approvals.values() if r.open), None)

            request_id = await eventually(open_request, "the deletion's approval request", 60)
            await handle.execute_update(
                AgentRunWorkflow.decide,
                DecideInput(request_id=request_id, decision="approve", reviewer="dana"),
            )

            async def open_question() -> str | None:
                state = await handle.query(AgentRunWorkflow.status)
                return next((q.question_id for q in state.questions.values() if q.open), None)

            question_id = await eventually(open_question, "the deletion's confirmation", 60)
            outcome = await handle.execute_update(
                AgentRunWorkflow.answer,
                AnswerInput(
                    question_id=question_id,
                    action="accept",
                    content={"confirm": True},
                    responder="dana",
                ),
            )
            result = await handle.result()
            state = await handle.query(AgentRunWorkflow.status)
    finally:
        await apps.aclose()

    assert result.status == "completed"
    assert outcome.accepted
    assert [(op.tool, op.status) for op in state.operations.values()] == [
        ("reports__build_report", "succeeded"),
        ("reports__delete_dataset", "succeeded"),
    ]
    [question] = state.questions.values()
    assert (question.status, question.tool) == ("answered", "reports__delete_dataset")
    assert "https://reports.example/emea.pdf" in (result.final_output or "")
    assert "deleted dataset emea-draft" in (result.final_output or "")
