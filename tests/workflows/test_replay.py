"""Replay: today's workflow code must reproduce the commands of recorded histories exactly.

A change that would break runs in flight fails here. To record the committed histories again
(only when a change is deliberately incompatible and guarded by `workflow.patched`):

    .venv/bin/python -m tests.workflows.test_replay
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowFailureError, WorkflowHistory
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from tests.helpers import make_worker
from tests.rigs import time_skipping_server
from waitstate.cli.replay import replayer as agent_replayer
from waitstate.schemas import RunInput
from workflows.agent_run import AgentRunWorkflow

HISTORIES = Path(__file__).resolve().parent.parent / "histories"
ALL_TOOLS = ["calculate", "count_words", "utc_now"]
# name -> (input, ends in failure)
SCENARIOS: dict[str, tuple[RunInput, bool]] = {
    "agent_run_demo": (RunInput(task="What is 1234 * 5678?", tools=ALL_TOOLS), False),
    "agent_run_fix_args": (RunInput(task="add", model="scripted:fix-args", tools=ALL_TOOLS), False),
    "agent_run_max_turns": (
        RunInput(task="loop", model="scripted:forever", tools=ALL_TOOLS, max_turns=2),
        False,
    ),
    "agent_run_model_failed": (RunInput(task="t", model="scripted:nope"), True),
}


def _replayer() -> Replayer:
    return agent_replayer([AgentRunWorkflow])


async def _record(client: Client, task_queue: str, name: str) -> WorkflowHistory:
    run_input, fails = SCENARIOS[name]
    # No cache: every workflow task replays the history so far, as after a worker restart.
    async with make_worker(client, task_queue, max_cached_workflows=0):
        handle = await client.start_workflow(
            AgentRunWorkflow.run, run_input, id=f"{name}-{uuid.uuid4()}", task_queue=task_queue
        )
        if fails:
            with pytest.raises(WorkflowFailureError):
                await handle.result()
        else:
            await handle.result()
    return await handle.fetch_history()


@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_fresh_history_replays(
    time_skipping_env: WorkflowEnvironment, task_queue: str, name: str
) -> None:
    history = await _record(time_skipping_env.client, task_queue, name)

    result = await _replayer().replay_workflow(history)

    assert result.replay_failure is None


COMMITTED = {path.stem: path.read_text() for path in sorted(HISTORIES.glob("*.json"))}


@pytest.mark.parametrize("name", sorted(COMMITTED))
async def test_committed_history_replays(name: str) -> None:
    history = WorkflowHistory.from_json(name, COMMITTED[name])

    result = await _replayer().replay_workflow(history, raise_on_replay_failure=False)

    assert result.replay_failure is None, f"{name} no longer replays: {result.replay_failure}"


def test_every_scenario_has_a_committed_history() -> None:
    assert set(COMMITTED) >= set(SCENARIOS)


async def _record_all() -> None:
    async with time_skipping_server() as env:
        for name in SCENARIOS:
            history = await _record(env.client, f"record-{uuid.uuid4()}", name)
            (HISTORIES / f"{name}.json").write_text(history.to_json())
            print(f"recorded {name}: {len(history.events)} events")


if __name__ == "__main__":
    asyncio.run(_record_all())
