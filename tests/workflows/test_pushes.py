"""A run with A2A push configs pushes each change of its task's state once, with no worker cache
(every workflow task replays the history so far): working, input-required while it waits for
an approval, working again once approved, completed; a config set by the `push_config` Update
while it waits is told the state at once. Its history is the push path's (`a2a_push_approved`).
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from temporalio.client import WorkflowFailureError
from temporalio.testing import WorkflowEnvironment

from tests.a2a.receiver import LOOPBACK, receiving
from tests.helpers import eventually, make_worker, replays, start_run
from waitstate.client import WaitstateClient
from waitstate.schemas import RunInput, RunState
from waitstate.schemas.approvals import DecisionSignal
from waitstate.schemas.pushes import PushConfig, PushConfigChange
from waitstate.settings import Settings
from waitstate.workflows.agent_run import AgentRunWorkflow
from waitstate.workflows.pushes import key_of

TOKEN = "t" * 40
PUSHING = Settings(a2a_push_networks=LOOPBACK)  # the receiver is on loopback
PUSHING_NO_CACHE = Settings(max_cached_workflows=0, a2a_push_networks=LOOPBACK)


async def test_each_state_is_pushed_once_and_the_history_replays(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    async with (
        receiving() as receiver,
        make_worker(dev_env.client, task_queue, settings=PUSHING_NO_CACHE),
    ):
        first = PushConfig(id="first", url=receiver.url, token=TOKEN)
        run_input = RunInput(
            task="publish the report",
            model="scripted:ask-first",
            tools=["request_approval"],
            push=[first],
        )
        handle = await start_run(dev_env.client, task_queue, run_input)

        async def asking() -> RunState | None:
            state: RunState = await handle.query(AgentRunWorkflow.status)
            return state if any(r.open for r in state.approvals.values()) else None

        state = await eventually(asking, "the approval request")
        second = PushConfig(id="second", url=receiver.url)
        client = WaitstateClient(dev_env.client, task_queue=task_queue)
        await client.push_config(handle.id, PushConfigChange(config=second))
        again = await client.push_config(handle.id, PushConfigChange(config=second))

        async def told_both() -> bool:
            return sum(p.state == "TASK_STATE_INPUT_REQUIRED" for p in receiver.pushes) == 2

        await eventually(told_both, "the input-required push to both configs")
        [request] = state.approvals.values()
        await handle.signal(
            AgentRunWorkflow.approve, DecisionSignal(request_id=request.request_id, reviewer="d")
        )
        result = await asyncio.wait_for(handle.result(), 60)
        await replays(handle, "a2a_push_approved")
        ended: RunState = await handle.query(AgentRunWorkflow.status)

    assert result.status == "completed"
    assert [c.id for c in again.configs] == ["first", "second"]
    tokens = Counter((p.key, p.headers.get("x-a2a-notification-token")) for p in receiver.pushes)
    assert all(count == 1 for count in tokens.values()), tokens
    to_first = sorted(
        (p for p in receiver.pushes if p.headers.get("x-a2a-notification-token") == TOKEN),
        key=lambda p: int(p.key.rpartition(":")[2]),
    )
    assert [p.state for p in to_first] == [
        "TASK_STATE_WORKING",
        "TASK_STATE_INPUT_REQUIRED",
        "TASK_STATE_WORKING",
        "TASK_STATE_COMPLETED",
    ]
    # The second config: told the state as it was set, and each change after it.
    to_second = [p.state for p in receiver.pushes if "x-a2a-notification-token" not in p.headers]
    assert sorted(to_second) == sorted(
        ["TASK_STATE_INPUT_REQUIRED", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]
    )
    assert (
        "x-waitstate-signature"
        not in next(
            p for p in receiver.pushes if "x-a2a-notification-token" not in p.headers
        ).headers
    ), "no key and no token: unsigned"
    assert ended.push is not None and ended.push.sent == {"first": 4, "second": 4}


async def test_pushes_go_on_across_continue_as_new(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    async with receiving() as receiver, make_worker(dev_env.client, task_queue, settings=PUSHING):
        run_input = RunInput(
            task="publish the report",
            model="scripted:ask-first",
            tools=["request_approval"],
            push=[PushConfig(id="first", url=receiver.url, token=TOKEN)],
            continue_as_new_after_events=10,
        )
        handle = await start_run(dev_env.client, task_queue, run_input)

        async def asking() -> RunState | None:
            state: RunState = await handle.query(AgentRunWorkflow.status)
            return state if any(r.open for r in state.approvals.values()) else None

        state = await eventually(asking, "the approval request")
        [request] = state.approvals.values()
        await handle.signal(
            AgentRunWorkflow.approve, DecisionSignal(request_id=request.request_id, reviewer="d")
        )
        result = await asyncio.wait_for(handle.result(), 60)
        ended: RunState = await handle.query(AgentRunWorkflow.status)

    assert result.status == "completed"
    assert ended.continued_as_new >= 1
    taken = {p.key: p.state for p in receiver.pushes}
    by_seq = [taken[key] for key in sorted(taken, key=lambda k: int(k.rpartition(":")[2]))]
    # Each state once by key (a copy sent again after a continue-as-new carries the same key).
    assert by_seq == [
        "TASK_STATE_WORKING",
        "TASK_STATE_INPUT_REQUIRED",
        "TASK_STATE_WORKING",
        "TASK_STATE_COMPLETED",
    ]


def test_how_a_runs_status_is_told_as_its_tasks_state() -> None:
    told = {
        status: key_of(RunState(status=status))
        for status in ("running", "waiting", "completed", "cancelled", "max_turns", "failed")
    }

    assert told == {
        "running": ("working", None),
        "waiting": ("working", None),  # waiting for a job: working, to its client
        "completed": ("completed", None),
        "cancelled": ("canceled", None),
        "max_turns": ("failed", None),
        "failed": ("failed", None),
    }


async def test_a_run_that_fails_pushes_failed(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    async with receiving() as receiver, make_worker(dev_env.client, task_queue, settings=PUSHING):
        push = [PushConfig(id="hook", url=receiver.url, token=TOKEN)]
        handle = await start_run(
            dev_env.client, task_queue, RunInput(task="t", model="scripted:nope", push=push)
        )
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), 60)
        states = [p.state for p in sorted(receiver.pushes, key=lambda p: p.key)]

    assert states == ["TASK_STATE_WORKING", "TASK_STATE_FAILED"]
    failed = receiver.pushes[-1].task["status"]["message"]["parts"][0]["text"]
    assert failed.startswith("the run failed")
