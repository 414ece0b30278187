"""One waitstate run awaits another waitstate agent served over MCP (`python -m
waitstate.mcp_server`, a process of the test's), as a task: the served agent asks for an
approval, which reaches the calling run as its task's question; the server is SIGKILLed and
started again while both runs wait; a person answers the calling run's question, its
`tasks/update` reaches the new server, and both runs complete: one task, one approval."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from tests.helpers import accept, eventually, first_question, process_env, scheduled_activities
from tests.mcp.agents_app import APP, ASKS
from tests.mcp.runs import mcp_url, reports_run
from tests.rigs import ServerProcess, free_port
from waitstate.apps import load_apps
from waitstate.client import WaitstateClient
from waitstate.mcp import McpServer
from waitstate.mcp_server import shapes
from waitstate.schemas.run import CALL_TOOL
from waitstate.workflows.agent_run import AgentRunWorkflow

CALLER_KEY = "k" * 40
AUTHORIZATION = "WAITSTATE_TEST_FLEET_AUTHORIZATION"


@pytest.mark.subprocess
async def test_a_run_awaits_a_served_agent_through_its_approval_and_a_server_restart(
    dev_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="temporalio.activity")
    port = free_port()
    serving = ["-m", "waitstate.mcp_server", "--app", APP, "--port", str(port)]
    variables = process_env(
        dev_env.client, task_queue, WAITSTATE_MCP_CALLER_KEYS=f"calling-fleet:{CALLER_KEY}"
    )
    server = ServerProcess(serving, port, tmp_path / "mcp_server.log", variables)
    monkeypatch.setenv(AUTHORIZATION, f"Bearer {CALLER_KEY}")
    fleet = McpServer("fleet", url=mcp_url(port), headers_from_env={"Authorization": AUTHORIZATION})
    apps = load_apps([APP], mcp_servers=[fleet])
    client = WaitstateClient(dev_env.client, task_queue=task_queue)
    await server.start()
    try:
        run = reports_run(
            dev_env, task_queue, apps, "scripted:call-approver", tools=["fleet__approver"]
        )
        async with run as calling:
            question = await first_question(calling, "the served agent's approval")
            [operation] = (await calling.query(AgentRunWorkflow.status)).operations.values()
            served_id = shapes.run_id_of("calling-fleet", operation.job_id or "")
            [approval] = await client.open_requests(served_id)
            await server.kill()

            async def failed_check() -> bool:
                return any("status check of" in r.getMessage() for r in caplog.records)

            await eventually(failed_check, "the calling run's poll to find the server gone")
            await server.start()
            outcome = await accept(calling, question, {"decision": "approve", "comment": "go"})
            result = await calling.result()
            served = await client.outcome(served_id)
            served_state = await client.query(served_id)
    finally:
        await server.stop()

    # The served run's approval was the calling run's question, in a person's words.
    assert question.tool == "fleet__approver"
    assert question.message.startswith(f'Approve request_approval {{"action": "{ASKS}"')
    assert question.requested_schema == shapes.DECISION_SCHEMA
    assert (outcome.accepted, outcome.delivered) == (True, True)
    # Both ran to the end: the served run was told the decision, and the calling run got its
    # answer as the task's structured result.
    assert result.status == "completed", result.error
    assert served.status == "completed"
    [decided] = served_state.approvals.values()
    assert decided.request_id == approval.request_id
    assert (decided.status, decided.decision and decided.decision.reviewer) == (
        "approved",
        "mcp:calling-fleet",
    )
    got = json.loads((result.final_output or "").removeprefix("got: "))
    assert got["status"] == "succeeded"
    assert got["result"]["run_id"] == served_id
    assert '"approval":"approved"' in got["result"]["answer"]
    # One task (one tools/call), one served run, one approval.
    assert (await scheduled_activities(calling)).count(CALL_TOOL) == 1
    assert len(served_state.approvals) == 1

    async def served_runs() -> list[str]:
        found = dev_env.client.list_workflows(f"TaskQueue = '{task_queue}'")
        return [w.id async for w in found if w.id.startswith(shapes.RUN_PREFIX)]

    assert await eventually(served_runs, "the served run in the list") == [served_id]
