"""MCP servers as tool sources, against a real MCP server over streamable HTTP: a run's grants
listed once, ordinary calls (results, structured content, errors, large results by
reference), destructive tools behind approval, and grants no declared server answers."""

from __future__ import annotations

import json
import sys

import pytest
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from tests.helpers import eventually, make_worker, replays, scheduled_activities, start_run
from tests.mcp.runs import APP, reports_run
from waitstate.apps import load_apps
from waitstate.mcp import McpServer
from waitstate.schemas import RunInput
from waitstate.schemas.approvals import DecideInput
from waitstate.schemas.run import CALL_MODEL, CALL_TOOL, LIST_MCP_TOOLS
from waitstate.workflows.agent_run import AgentRunWorkflow


async def test_a_run_lists_its_grant_once_and_calls_the_tool(
    dev_env: WorkflowEnvironment, task_queue: str, reports_url: str
) -> None:
    async with reports_run(
        dev_env, task_queue, reports_url, "scripted:mcp-add", tools=["reports__add"]
    ) as handle:
        result = await handle.result()
        await replays(handle, "mcp_ordinary_tool")

    assert result.status == "completed"
    assert result.final_output == "sum=5 offered=reports__add"
    assert await scheduled_activities(handle) == [LIST_MCP_TOOLS, CALL_MODEL, CALL_TOOL, CALL_MODEL]


async def test_a_server_grant_gives_every_tool_and_maps_each_kind_of_result(
    dev_env: WorkflowEnvironment, task_queue: str, reports_url: str
) -> None:
    async with reports_run(dev_env, task_queue, reports_url, "scripted:mcp-tour") as handle:
        result = await handle.result()
        state = await handle.query(AgentRunWorkflow.status)

    assert result.status == "completed"
    explode, summarize, big = (result.final_output or "").split("\n")
    assert explode.startswith("reports__explode error=True: ")
    assert "disk full" in explode
    head, _, summary = summarize.partition(": ")
    assert head == "reports__summarize error=False"
    assert json.loads(summary) == {"region": "emea", "total": 1200, "currency": "EUR"}
    assert big.startswith("reports__big_table error=False: row 0: ")
    assert result.tool_calls == 3
    assert state.references == 1  # the 30 KB table reached the model by reference


async def test_a_destructive_tool_runs_only_once_a_person_approved_it(
    dev_env: WorkflowEnvironment, task_queue: str, reports_url: str
) -> None:
    async with reports_run(dev_env, task_queue, reports_url, "scripted:mcp-delete") as handle:

        async def open_request() -> str | None:
            state = await handle.query(AgentRunWorkflow.status)
            return next((r.request_id for r in state.approvals.values() if r.open), None)

        request_id = await eventually(open_request, "the approval of delete_dataset")
        await handle.execute_update(
            AgentRunWorkflow.decide,
            DecideInput(request_id=request_id, decision="approve", reviewer="dana"),
        )
        result = await handle.result()
        state = await handle.query(AgentRunWorkflow.status)

    assert result.final_output == "result: deleted q3-drafts"
    [request] = state.approvals.values()
    assert request.tool == "reports__delete_dataset"
    assert request.decision is not None and request.decision.reviewer == "dana"


@pytest.mark.parametrize(
    ("grant", "message"),
    [
        ("crm__lookup", "unknown MCP server 'crm'; declared: reports"),
        ("reports__render", "MCP server 'reports' has no tool matching render; it has: "),
    ],
)
async def test_a_grant_no_declared_server_answers_fails_the_run_at_once(
    dev_env: WorkflowEnvironment, task_queue: str, reports_url: str, grant: str, message: str
) -> None:
    async with reports_run(
        dev_env, task_queue, reports_url, "scripted:mcp-add", tools=[grant]
    ) as handle:
        with pytest.raises(WorkflowFailureError) as failure:
            await handle.result()

    cause = failure.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.message.startswith(message)
    assert await scheduled_activities(handle) == [LIST_MCP_TOOLS]


async def test_runs_continued_as_new_keep_the_listing_of_the_first(
    dev_env: WorkflowEnvironment, task_queue: str, reports_url: str
) -> None:
    async with reports_run(
        dev_env,
        task_queue,
        reports_url,
        "scripted:mcp-tour",
        task="tour",
        continue_as_new_after_events=10,
    ) as handle:
        result = await handle.result()

    activities: list[str] = []
    run_id: str | None = handle.first_execution_run_id
    runs = 0
    while run_id:  # a walk along the chain, not a wait: each run's history is complete
        runs += 1
        one = dev_env.client.get_workflow_handle(handle.id, run_id=run_id)
        activities += await scheduled_activities(one)
        run_id = None
        async for event in one.fetch_history_events():
            if event.HasField("workflow_execution_continued_as_new_event_attributes"):
                run_id = (
                    event.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
                )

    assert result.status == "completed"
    assert result.tool_calls == 3
    assert runs > 1
    assert activities.count(LIST_MCP_TOOLS) == 1


@pytest.mark.subprocess
async def test_a_server_over_stdio_is_listed_and_called(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    local = McpServer("local", command=f"{sys.executable} -m tests.mcp.stdio_server")
    apps = load_apps([APP], mcp_servers=[local])
    try:
        async with make_worker(dev_env.client, task_queue, apps=apps):
            handle = await start_run(
                dev_env.client,
                task_queue,
                RunInput(task="quiet please", model="scripted:mcp-shout", tools=["local__shout"]),
            )
            result = await handle.result()
    finally:
        await apps.aclose()  # the worker's process of the server ends with it

    assert result.final_output == "got: QUIET PLEASE"
