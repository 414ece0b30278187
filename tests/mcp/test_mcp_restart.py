"""An MCP server killed with SIGKILL and started again while a run waits for one of its tasks:
its tasks live in a store of their own process (`restartable_reports`), so the run's poll
waits through the outage and finds its task again, running or asking its question."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass

import pytest
from temporalio.testing import WorkflowEnvironment

from tests.helpers import (
    accept,
    activity_attempts,
    eventually,
    first_question,
    scheduled_activities,
    until_the_poll_has_heartbeated,
)
from tests.mcp.mcp_app import task_events
from tests.mcp.runs import mcp_url, reports_run, tool_outcome
from tests.rigs import ServerProcess
from waitstate.schemas.run import CALL_MODEL, CALL_TOOL, LIST_MCP_TOOLS, POLL_OPERATION
from waitstate.workflows.agent_run import AgentRunWorkflow


@dataclass
class RestartableReports:
    """The reports server a test kills and starts again, and the test's captured logs (where
    the run's poll says it found the server gone)."""

    server: ServerProcess
    caplog: pytest.LogCaptureFixture

    @property
    def url(self) -> str:
        return mcp_url(self.server.port)

    async def outage(self) -> dict[str, int]:
        """SIGKILL the server; start it again on its port once the run's poll has found it
        gone. Returns what its tasks had done by then (its first life)."""
        self.caplog.set_level(logging.WARNING, logger="temporalio.activity")
        first_life = await task_events(self.url)
        await self.server.kill()

        async def failed_check() -> bool:
            return any("status check of" in r.getMessage() for r in self.caplog.records)

        await eventually(failed_check, "the poll to find the server gone")
        await self.server.start()
        return first_life


@pytest.fixture
def reports(
    restartable_reports: ServerProcess, caplog: pytest.LogCaptureFixture
) -> RestartableReports:
    return RestartableReports(restartable_reports, caplog)


async def test_a_task_outlives_its_servers_restart_and_the_poll_waits_through_the_outage(
    dev_env: WorkflowEnvironment, task_queue: str, reports: RestartableReports
) -> None:
    # An 8-second render, killed while the run polls it.
    async with reports_run(dev_env, task_queue, reports.url, "scripted:mcp-render-slow") as handle:
        await until_the_poll_has_heartbeated(handle)
        first_life = await reports.outage()
        result = await handle.result()
        state = await handle.query(AgentRunWorkflow.status)
    second_life = await task_events(reports.url)

    # Killed mid-run: the next life ran the task again from its start (the store redelivers
    # a task whose worker stopped renewing its lease); the run polled its one task id.
    assert first_life == {"render_report started": 1}
    assert second_life == {"render_report started": 1, "render_report finished": 1}
    got = tool_outcome(result)
    assert got["status"] == "succeeded"
    assert got["result"] == {"url": "https://reports.example/emea.pdf"}
    [operation] = state.operations.values()
    assert (operation.tool, operation.status) == ("reports__render_report", "succeeded")
    # One tools/call (one task), and one poll that waited through the outage in one attempt:
    # the session it had open when the server died, and the refused connections after, are
    # failed checks it rides out.
    scheduled = await scheduled_activities(handle)
    assert scheduled == [
        LIST_MCP_TOOLS, CALL_MODEL, CALL_TOOL, CALL_MODEL, POLL_OPERATION, CALL_MODEL,
    ]  # fmt: skip
    attempts = list(zip(scheduled, await activity_attempts(handle), strict=True))
    assert all(n == 1 for name, n in attempts if name != POLL_OPERATION)
    assert [n for name, n in attempts if name == POLL_OPERATION] == [1]


async def test_a_question_asked_before_its_servers_restart_is_answered_after_it(
    dev_env: WorkflowEnvironment, task_queue: str, reports: RestartableReports
) -> None:
    async with reports_run(dev_env, task_queue, reports.url, "scripted:mcp-publish") as handle:
        question = await first_question(handle, "the task's question")
        first_life = await reports.outage()
        outcome = await accept(handle, question, {"channel": "slack"})
        result = await handle.result()
        state = await handle.query(AgentRunWorkflow.status)
    second_life = await task_events(reports.url)

    assert first_life == {"publish_report asked": 1}
    assert (outcome.accepted, outcome.status, outcome.delivered) == (True, "answered", True)
    got = tool_outcome(result)
    assert got["status"] == "succeeded"
    assert got["result"] == {"published": "emea", "channel": "slack"}
    assert state.questions[question.question_id].delivery == "sent"
    # The next life kept the task waiting for its answer (the store holds the question's
    # key): it went on with the answer, and asked nothing again.
    assert second_life == {"publish_report answered accept": 1, "publish_report published": 1}
    assert Counter(await scheduled_activities(handle))[CALL_TOOL] == 1
