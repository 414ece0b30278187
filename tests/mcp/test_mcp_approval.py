"""Tools an operator names for approval (`McpServer(require_approval=[...])`, or
`WAITSTATE_MCP_REQUIRE_APPROVAL_<NAME>`), on a real MCP server that annotates nothing
(`tests/mcp/plain_server.py`), on the dev server: a named tool's call waits for a person
through the approval desk (listed by `pending`) and reaches the server only once approved; a
rejected one never does; a tool no pattern names runs at once."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from tests.helpers import eventually, make_worker, replays, start_run
from tests.mcp.mcp_app import calls_made
from waitstate.apps import Apps, load_apps
from waitstate.client import PendingRequest, WaitstateClient
from waitstate.mcp import McpConfigError, McpServer, parse_servers
from waitstate.schemas import RunInput, RunResult
from waitstate.schemas.approvals import ApprovalPolicy, DecideInput
from waitstate.workflows.agent_run import AgentRunWorkflow

APP = "tests.mcp.mcp_app:app"
DBA = ApprovalPolicy(approvers="dba-on-call")


def _apps(*servers: McpServer) -> Apps:
    return load_apps([APP], mcp_servers=list(servers))


async def _start(
    env: WorkflowEnvironment, task_queue: str, model: str, table: str
) -> WorkflowHandle[Any, RunResult]:
    return await start_run(
        env.client, task_queue, RunInput(task=table, model=model, tools=["tables__*"])
    )


async def _listed(client: WaitstateClient, run_id: str) -> PendingRequest:
    """The run's approval request, once `pending` (the approval desk) lists it."""

    async def pending() -> PendingRequest | None:
        return next((row for row in await client.pending() if row.run_id == run_id), None)

    return await eventually(pending, f"run {run_id}'s request among the pending")


@pytest.mark.parametrize("decision", ["approve", "reject"])
async def test_a_tool_named_for_approval_reaches_the_server_only_once_approved(
    dev_env: WorkflowEnvironment, task_queue: str, plain_url: str, decision: str
) -> None:
    table = f"t_{uuid.uuid4().hex[:8]}"
    server = McpServer("tables", url=plain_url, require_approval=["drop_*"], approval=DBA)
    client = WaitstateClient(dev_env.client, task_queue=task_queue)
    async with make_worker(dev_env.client, task_queue, apps=_apps(server)):
        handle = await _start(dev_env, task_queue, "scripted:mcp-drop-table", table)
        row = await _listed(client, handle.id)
        before = await calls_made(plain_url)
        outcome = await client.decide(
            handle.id,
            DecideInput(
                request_id=row.request.request_id,
                decision=decision,
                reviewer="dana",
                comment="not during the audit",
            ),
        )
        result = await handle.result()
    after = await calls_made(plain_url)
    await replays(handle, f"mcp_tool_named_for_approval_{decision}")

    request = row.request
    assert request.tool == "tables__drop_table"
    assert request.reason.startswith("tables__drop_table (named by the operator: drop_*)")
    assert request.policy.approvers == "dba-on-call"
    assert outcome.accepted
    # Nothing reached the server while the call waited for a person.
    assert f"drop_table {table}" not in before
    assert result.status == "completed"
    if decision == "approve":
        assert result.final_output == f"got: dropped {table}"
        assert after.count(f"drop_table {table}") == 1
    else:
        assert "not during the audit" in (result.final_output or "")
        assert f"drop_table {table}" not in after


async def test_the_environment_names_tools_for_approval_and_the_others_run_at_once(
    dev_env: WorkflowEnvironment,
    task_queue: str,
    plain_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WAITSTATE_MCP_REQUIRE_APPROVAL_TABLES", "drop_*, DELETE_ROWS")
    [server] = parse_servers(f"tables={plain_url}")
    table = f"t_{uuid.uuid4().hex[:8]}"
    async with make_worker(dev_env.client, task_queue, apps=_apps(server)):
        # A tool no pattern names: called at once, no request.
        counted = await _start(dev_env, task_queue, "scripted:mcp-count-rows", table)
        result = await counted.result()
        state = await counted.query(AgentRunWorkflow.status)
        # One the environment names (without regard to case): it waits for a person.
        deleting = await _start(dev_env, task_queue, "scripted:mcp-delete-rows", table)

        async def asked() -> str | None:
            requests = (await deleting.query(AgentRunWorkflow.status)).approvals.values()
            return next((r.reason for r in requests if r.open), None)

        reason = await eventually(asked, "the approval request of delete_rows")
        await deleting.cancel()
    made = await calls_made(plain_url)

    assert result.final_output == "got: 42"
    assert state.approvals == {}
    assert f"count_rows {table}" in made
    assert reason.startswith("tables__delete_rows (named by the operator: DELETE_ROWS)")
    assert f"delete_rows {table}" not in made


def test_the_environment_form_gives_a_servers_patterns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WAITSTATE_MCP_REQUIRE_APPROVAL_REPORTS_EU", " delete_*, drop_table ,")

    reports, local = parse_servers("reports-eu=http://127.0.0.1:9000/mcp,local=stdio:serve")

    assert reports.require_approval == ("delete_*", "drop_table")
    assert local.require_approval == ()
    assert reports.approval_pattern("Delete_Dataset") == "delete_*"
    assert reports.approval_pattern("drop_tables") is None


def test_patterns_are_a_list_of_names() -> None:
    with pytest.raises(McpConfigError, match="list of tool name patterns"):
        McpServer("r", url="http://x/mcp", require_approval="delete_*")
    with pytest.raises(McpConfigError, match="empty or non-text pattern"):
        McpServer("r", url="http://x/mcp", require_approval=["delete_*", " "])
