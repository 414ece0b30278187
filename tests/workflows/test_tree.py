"""Agent trees on the dev server: sub-agents as child workflows, fanned out in one turn and
waited for holding no worker; the tree's limits; long answers by reference; cancel that reaches
every node."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from tests.helpers import eventually, make_worker, replays, start_run
from tests.workflows.runs import run_to_end
from tests.workflows.tree_app import TREE_BUDGET_TOKENS
from waitstate.apps import load_apps
from waitstate.client import DecisionRefused, TreeNode, WaitstateClient
from waitstate.client._events import told as told_events
from waitstate.schemas import RunInput, RunState
from waitstate.schemas.approvals import ApprovalRequest, DecideInput, DecisionSignal
from waitstate.schemas.builtin import REF_PREFIX
from waitstate.workflows.agent_run import AgentRunWorkflow

APP = "tests.workflows.tree_app:app"
CHILD_EVENTS = {
    EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED,
    EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED,
    EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED,
}


async def _run(env: WorkflowEnvironment, task_queue: str, task: str, agent: str) -> Any:
    """A run of `agent` on `task` to its end, on a worker serving the tree app: its handle,
    result and last state."""
    return await run_to_end(
        env, task_queue, RunInput(task=task, agent=agent), apps=load_apps([APP])
    )


@contextlib.asynccontextmanager
async def _client_started(
    env: WorkflowEnvironment, task_queue: str, task: str, agent: str
) -> AsyncIterator[tuple[WaitstateClient, str]]:
    """A run of `agent` on `task` started through the client, on a worker serving the tree
    app (while it runs): the client and the run's id."""
    async with make_worker(env.client, task_queue, apps=load_apps([APP])):
        client = WaitstateClient(env.client, task_queue=task_queue)
        started = await client.start(RunInput(task=task, agent=agent))
        yield client, started.run_id


@contextlib.asynccontextmanager
async def _started(
    env: WorkflowEnvironment, task_queue: str, task: str, agent: str
) -> AsyncIterator[WorkflowHandle[Any, Any]]:
    """A run of `agent` on `task`, started on a worker serving the tree app (while it runs)."""
    async with make_worker(env.client, task_queue, apps=load_apps([APP])):
        yield await start_run(env.client, task_queue, RunInput(task=task, agent=agent))


async def _nodes(env: WorkflowEnvironment, root: str, count: int) -> list[Any]:
    """The runs below `root` (Temporal's RootWorkflowId), once the list view shows `count`."""

    async def listed() -> list[Any] | None:
        query = f"RootWorkflowId = '{root}' AND WorkflowId != '{root}'"
        found = [w async for w in env.client.list_workflows(query)]
        return found if len(found) == count else None

    return await eventually(listed, f"{count} nodes of {root} in the list view", within=20)


async def test_a_lead_fans_out_to_its_sub_agents_and_answers_with_all_they_said(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    handle, result, state = await _run(dev_env, task_queue, "survey fan=3", "lead")

    await replays(handle, "tree_lead_fan_out")
    assert result.status == "completed", result
    assert "combined 3" in (result.final_output or "")
    for part in (1, 2, 3):
        assert f"notes on part {part}" in (result.final_output or "")
    assert state.tree is not None and state.tree.started == 3
    children = list(state.tree.children.values())
    assert [c.node for c in children] == ["researcher-1", "researcher-2", "researcher-3"]
    assert {c.status for c in children} == {"completed"}
    # Each a run of its own, a child of the lead's, found by the tree's root.
    nodes = await _nodes(dev_env, handle.id, 3)
    assert sorted(n.id for n in nodes) == sorted(c.run_id for c in children)
    for node in nodes:
        described = await dev_env.client.get_workflow_handle(node.id).describe()
        assert described.parent_id == handle.id
        assert described.status == WorkflowExecutionStatus.COMPLETED
    # All three ran at once: each was started before any ended.
    events = [e async for e in handle.fetch_history_events()]
    kinds = [e.event_type for e in events if e.event_type in CHILD_EVENTS]
    last_start = max(
        i
        for i, k in enumerate(kinds)
        if k == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED
    )
    first_end = kinds.index(EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED)
    assert last_start < first_end
    # The lead's usage is its own and its children's.
    own = state.usage
    assert result.usage.output_tokens == own.output_tokens + sum(
        c.usage.output_tokens for c in children
    )


async def test_a_tree_three_levels_deep_lists_every_node_under_its_root(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    handle, result, _ = await _run(dev_env, task_queue, "deep fan=2", "deep-lead")

    assert result.status == "completed", result
    nodes = await _nodes(dev_env, handle.id, 6)  # 2 teams, 2 researchers each
    paths = sorted(n.id.removeprefix(f"{handle.id}/") for n in nodes)
    assert paths == [
        "team-1",
        "team-1/researcher-1",
        "team-1/researcher-2",
        "team-2",
        "team-2/researcher-1",
        "team-2/researcher-2",
    ]
    assert result.final_output is not None and result.final_output.count("notes on") == 4


async def test_the_tree_reads_as_nodes_with_their_paths_and_on_the_parents_stream(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    async with _client_started(dev_env, task_queue, "deep fan=2", "deep-lead") as (client, root):
        await client.outcome(root)
        nodes = await eventually(lambda: _all_listed(client, root), "the tree's 7 nodes", within=20)
        events = [e async for e in dev_env.client.get_workflow_handle(root).fetch_history_events()]

    assert [(n.path, n.agent, n.status, n.depth) for n in nodes] == [
        ("", "deep-lead", "completed", 0),
        ("team-1", "team", "completed", 1),
        ("team-1/researcher-1", "researcher", "completed", 2),
        ("team-1/researcher-2", "researcher", "completed", 2),
        ("team-2", "team", "completed", 1),
        ("team-2/researcher-1", "researcher", "completed", 2),
        ("team-2/researcher-2", "researcher", "completed", 2),
    ]
    assert all(n.usage is not None and n.usage.model_calls >= 1 for n in nodes)
    told, _ = told_events("run", events)
    children = [(e.kind, e.detail["node"]) for e in told if e.kind.startswith("subagent.")]
    assert sorted(children) == [
        ("subagent.completed", "team-1"),
        ("subagent.completed", "team-2"),
        ("subagent.started", "team-1"),
        ("subagent.started", "team-2"),
    ]
    # The child's task (the parent's model wrote it) is not on the stream.
    assert not any("deep fan=2" in e.model_dump_json() for e in told)


async def _all_listed(client: WaitstateClient, run_id: str) -> list[TreeNode] | None:
    nodes = await client.tree(run_id)
    return nodes if len(nodes) == 7 else None


async def test_a_call_past_the_trees_depth_or_the_runs_children_is_refused_to_the_model(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    _, deep, _ = await _run(dev_env, task_queue, "deep fan=1", "too-deep")
    # The team is one level below the root, the tree's limit: its own sub-agent is refused.
    assert deep.status == "completed"
    assert "goes 1 deep at most" in (deep.final_output or "")

    _, narrow, state = await _run(dev_env, task_queue, "wide fan=3", "narrow-lead")
    assert narrow.status == "completed"
    assert state.tree is not None and state.tree.started == 2
    assert "2 sub-agents of this run are running, its limit" in (narrow.final_output or "")


async def test_a_long_answer_reaches_the_parent_by_reference_and_its_history_stays_small(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    handle, result, _ = await _run(dev_env, task_queue, "long fan=2", "long-lead")

    assert result.status == "completed", result
    assert result.final_output is not None and result.final_output.count(REF_PREFIX) == 2
    per_child = 0
    async for event in handle.fetch_history_events():
        if event.event_type in CHILD_EVENTS:
            per_child += event.ByteSize()
    assert per_child / 2 < 2_048, per_child


async def test_cancelling_the_root_cancels_every_node_and_what_they_wait_for(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    async with _started(dev_env, task_queue, "ask fan=3", "asking-lead") as root:
        nodes = await _nodes(dev_env, root.id, 3)

        async def all_asking() -> bool:
            for node in nodes:
                state: RunState = await dev_env.client.get_workflow_handle(node.id).query(
                    AgentRunWorkflow.status
                )
                if not any(r.open for r in state.approvals.values()):
                    return False
            return True

        await eventually(all_asking, "every asker's approval request")
        await root.cancel()
        with contextlib.suppress(WorkflowFailureError):
            await asyncio.wait_for(root.result(), 10)
        assert (await root.describe()).status == WorkflowExecutionStatus.CANCELED
        for node in nodes:
            child = dev_env.client.get_workflow_handle(node.id)
            assert (await child.describe()).status == WorkflowExecutionStatus.CANCELED
            state = await child.query(AgentRunWorkflow.status)
            assert state.status == "cancelled"


async def test_a_sub_agent_cancelled_alone_is_told_to_its_parents_model(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    async with _started(dev_env, task_queue, "ask fan=2", "asking-lead") as root:
        nodes = sorted((await _nodes(dev_env, root.id, 2)), key=lambda n: n.id)
        first, second = (dev_env.client.get_workflow_handle(n.id) for n in nodes)

        async def asking(handle: Any) -> str | None:
            state: RunState = await handle.query(AgentRunWorkflow.status)
            return next((r.request_id for r in state.approvals.values() if r.open), None)

        await eventually(lambda: asking(first), "the first asker's request")
        request = await eventually(lambda: asking(second), "the second asker's request")
        await first.cancel()
        await second.signal(
            AgentRunWorkflow.approve, DecisionSignal(request_id=request, reviewer="ana")
        )
        result = await asyncio.wait_for(root.result(), 20)

    assert result.status == "completed"
    said = result.final_output or ""
    assert "cancelled" in said and "decided" in said, said


async def _call_tokens(env: WorkflowEnvironment, run_id: str) -> list[int]:
    """The tokens of each model call of run `run_id`, oldest first (from its history)."""
    tokens = []
    async for event in env.client.get_workflow_handle(run_id).fetch_history_events():
        if event.event_type != EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            continue
        payloads = event.activity_task_completed_event_attributes.result.payloads
        if not payloads:
            continue
        usage = json.loads(payloads[0].data).get("usage") if payloads[0].data[:1] == b"{" else None
        if isinstance(usage, dict) and {"input_tokens", "output_tokens"} & set(usage):
            tokens.append(usage.get("input_tokens", 0) + usage.get("output_tokens", 0))
    return tokens


async def test_a_root_budget_holds_its_tree_to_one_call_in_flight_per_child_over_20_runs(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    apps = load_apps([APP])
    overspent = []
    async with make_worker(dev_env.client, task_queue, apps=apps):
        for batch in range(4):  # 20 runs, 5 at a time
            roots = [
                await start_run(
                    dev_env.client, task_queue, RunInput(task="spend fan=10", agent="budget-lead")
                )
                for _ in range(5)
            ]
            for root in roots:
                result = await asyncio.wait_for(root.result(), 120)
                state: RunState = await root.query(AgentRunWorkflow.status)
                assert result.status == "budget_exceeded", (batch, result)
                assert state.tree is not None and len(state.tree.children) == 10
                children = list(state.tree.children.values())
                assert {c.status for c in children} == {"budget_exceeded"}
                spent = sum(await _call_tokens(dev_env, root.id))
                bound = 0
                for child in children:
                    calls = await _call_tokens(dev_env, child.run_id)
                    spent += sum(calls)
                    bound += max(calls, default=0)  # its one call in flight, at most its largest
                    # Told to the root: what each node spent, counted once.
                    assert state.tree_budget is not None
                    node = state.tree_budget.spent[child.node]
                    assert node.input_tokens + node.output_tokens == sum(calls)
                assert state.budget is not None and state.budget.spent_tokens == spent
                overspent.append(spent - TREE_BUDGET_TOKENS)
                assert spent - TREE_BUDGET_TOKENS <= bound, (spent, bound)
    assert len(overspent) == 20
    print(f"tree overspend over 20 runs (tokens past {TREE_BUDGET_TOKENS}): {sorted(overspent)}")


async def test_a_sub_agents_requests_are_listed_and_decided_at_the_root(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    async with _client_started(dev_env, task_queue, "ask fan=2", "asking-lead") as (client, root):

        async def both() -> list[ApprovalRequest] | None:
            requests = await client.open_requests(root)
            return requests if len(requests) == 2 else None

        requests = await eventually(both, "both askers' requests, at the root")
        assert sorted(r.reason.split("]")[0] for r in requests) == ["[asker-1", "[asker-2"]
        # Decided at the root: each reaches the node that asked, once.
        for request in requests:
            outcome = await client.decide(
                root,
                DecideInput(request_id=request.request_id, decision="approve", reviewer="ana"),
            )
            assert outcome.accepted
        with pytest.raises(DecisionRefused):
            await client.decide(
                root,
                DecideInput(request_id="no-such-request", decision="approve", reviewer="ana"),
            )
        result = await client.outcome(root)

    assert result.status == "completed"
    assert (result.final_output or "").count("decided") == 2
