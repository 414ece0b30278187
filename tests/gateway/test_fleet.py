"""The fleet's gauges on the gateway's /metrics: runs by AgentStatus and open runs by
WaitingFor, counted by the real dev server's visibility store."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from temporalio.client import WorkflowExecutionStatus
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.testing import WorkflowEnvironment

from tests.helpers import eventually
from waitstate.client import run_status
from waitstate.gateway.fleet import RUN_STATUSES, RunCounts, status_query
from waitstate.schemas import RunInput
from waitstate.workflows.search_attributes import AGENT_STATUS, WAIT_KINDS, WAITING_FOR

ROOT = Path(__file__).resolve().parents[2]


def _value(registry: CollectorRegistry, name: str, label: str, value: str) -> float:
    text = generate_latest(registry).decode()
    found = re.search(rf'^{name}{{{label}="{value}"}} (\S+)$', text, re.MULTILINE)
    assert found, f"no {name}{{{label}={value!r}}} in:\n{text}"
    return float(found.group(1))


async def test_every_series_exists_before_the_first_count(dev_env: WorkflowEnvironment) -> None:
    registry = CollectorRegistry()
    RunCounts(dev_env.client, registry)

    for status in RUN_STATUSES:
        assert _value(registry, "waitstate_runs", "status", status) == 0
    for kind in WAIT_KINDS:
        assert _value(registry, "waitstate_runs_waiting", "waiting_for", kind) == 0


async def test_runs_are_counted_by_status_and_by_what_they_wait_for(
    dev_env: WorkflowEnvironment,
) -> None:
    registry = CollectorRegistry()
    counts = RunCounts(dev_env.client, registry)
    await counts.refresh()
    before = _value(registry, "waitstate_runs_waiting", "waiting_for", "approval")
    waiting_before = _value(registry, "waitstate_runs", "status", "waiting")
    # Open runs as visibility sees them (on a queue no worker polls, so they stay as started).
    handles = [
        await dev_env.client.start_workflow(
            "AgentRunWorkflow",
            RunInput(task="count me"),
            id=f"fleet-{uuid.uuid4().hex[:8]}",
            task_queue=f"fleet-{uuid.uuid4().hex[:8]}",
            search_attributes=TypedSearchAttributes(
                [
                    SearchAttributePair(AGENT_STATUS, "waiting"),
                    SearchAttributePair(WAITING_FOR, "approval"),
                ]
            ),
        )
        for _ in range(2)
    ]
    try:

        async def counted() -> bool:
            await counts.refresh()
            waiting = _value(registry, "waitstate_runs_waiting", "waiting_for", "approval")
            status = _value(registry, "waitstate_runs", "status", "waiting")
            return waiting >= before + 2 and status >= waiting_before + 2

        await eventually(counted, "the two runs counted as waiting for approval")
        failed_before = _value(registry, "waitstate_runs", "status", "failed")
    finally:
        for handle in handles:
            await handle.terminate("counted")

    # Ended by Temporal, their AgentStatus still says `waiting`: they count as failed, no
    # longer as waiting.
    async def ended() -> bool:
        await counts.refresh()
        status = _value(registry, "waitstate_runs", "status", "waiting")
        failed = _value(registry, "waitstate_runs", "status", "failed")
        return status <= waiting_before and failed >= failed_before + 2

    await eventually(ended, "the two terminated runs counted as failed, not waiting")


@pytest.mark.parametrize(
    ("agent_status", "execution", "shown"),
    [
        ("waiting", WorkflowExecutionStatus.RUNNING, "waiting"),
        (None, WorkflowExecutionStatus.RUNNING, "running"),
        ("running", WorkflowExecutionStatus.COMPLETED, "completed"),
        ("waiting", WorkflowExecutionStatus.COMPLETED, "completed"),
        ("completed", WorkflowExecutionStatus.COMPLETED, "completed"),
        ("max_turns", WorkflowExecutionStatus.COMPLETED, "max_turns"),
        ("running", WorkflowExecutionStatus.TERMINATED, "failed"),
        ("cancelled", WorkflowExecutionStatus.CANCELED, "cancelled"),
        ("waiting", WorkflowExecutionStatus.CONTINUED_AS_NEW, "waiting"),
    ],
)
def test_a_runs_status_is_its_own_ending_else_temporals(
    agent_status: str | None, execution: WorkflowExecutionStatus, shown: str
) -> None:
    assert run_status(agent_status, execution) == shown


def test_each_status_is_counted_by_the_query_that_finds_what_run_status_says() -> None:
    assert status_query("waiting") == "ExecutionStatus = 'Running' AND AgentStatus = 'waiting'"
    assert status_query("failed") == (
        "(AgentStatus = 'failed' OR "
        "(ExecutionStatus IN ('Failed', 'Terminated', 'TimedOut') AND "
        "AgentStatus IN ('running', 'waiting')))"
    )
    assert status_query("completed") == (
        "(AgentStatus = 'completed' OR "
        "(ExecutionStatus = 'Completed' AND AgentStatus IN ('running', 'waiting')))"
    )
    assert status_query("max_turns") == "AgentStatus = 'max_turns'"


def test_the_kinds_counted_are_every_kind_a_run_waits_for() -> None:
    # Each literal kind the workflows put in WaitingFor (ledger.wait_kind's two, and those
    # passed to the board, or to a desk's wait, by name) is one the gateway counts.
    source = "\n".join(p.read_text() for p in (ROOT / "workflows").glob("*.py"))
    named = set(re.findall(r'waiting\(\s*(?:request, )?"([a-z_]+)"', source))
    named |= set(re.findall(r'return "([a-z_]+)" if any\(op\.completion', source))
    named |= set(re.findall(r'else "([a-z_]+)"\n', source)) & {"poll"}
    named |= set(re.findall(r'"([a-z_]+)", ""', source))
    assert named >= {"approval", "input", "webhook", "poll", "none"}, named
    assert named <= set(WAIT_KINDS), named - set(WAIT_KINDS)
