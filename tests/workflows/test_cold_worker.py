"""A replay hazard that is still open (issue 24), kept as a recorded history so that its fix
has a test to turn.

The chaos suite recorded it (class 10, a link used after the key rotation and the escalation):
a worker was SIGKILLed while the escalation notice's activity completed; the next worker took
that completion and the `decide` Update in one workflow task. It ran the completion first
(the notice's `then` shows the new deadline: an upsert of WaitExpiresAt) and accepted the
Update after; a replay applies the Update first (the SDK puts updates before resolutions in
an activation), so the commands come in another order and the run no longer replays. It is the
SDK's ordering reported in temporalio/sdk-python issue 1591, which the approval desk mitigates
for a timer and an Update ("escalate in form only") but not for an activity's completion.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from waitstate.converter import DATA_CONVERTER
from workflows.agent_run import AgentRunWorkflow

HISTORIES = Path(__file__).resolve().parent / "cold_worker"
RECORDED = {path.stem: path.read_text() for path in sorted(HISTORIES.glob("*.json"))}


@pytest.mark.xfail(
    strict=True, reason="issue 24: a cold worker's order of a completion and an Update"
)
@pytest.mark.parametrize("name", sorted(RECORDED))
async def test_a_history_a_cold_worker_wrote_replays(name: str) -> None:
    history = WorkflowHistory.from_json(name, RECORDED[name])
    replayer = Replayer(workflows=[AgentRunWorkflow], data_converter=DATA_CONVERTER)

    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)

    assert result.replay_failure is None, f"{name}: {result.replay_failure}"
