"""An agent whose structured output never validates: the run ends `output_invalid`, showing the
last rejected answer and why, and `run --wait` exits non-zero (issue 22, defect 11). Through
the CLI in a subprocess, against the dev server and a real worker serving the test app."""

from __future__ import annotations

import json

import pytest
from temporalio.testing import WorkflowEnvironment

from tests.helpers import make_worker, process_env, replays
from tests.test_starter import Cli
from tests.upstream import pydantic_says
from tests.workflows.agent_app import Report
from waitstate.apps import load_apps
from waitstate.schemas import RunResult
from waitstate.workflows.agent_run import AgentRunWorkflow

APP = "tests.workflows.agent_app:app"
# The scripted model `never-good` answers this to the `stubborn` agent (max_turns 2) each turn.
PROSE = "a report, in prose"


@pytest.fixture
def cli(dev_env: WorkflowEnvironment, task_queue: str) -> Cli:
    return Cli(process_env(dev_env.client, task_queue))


@pytest.mark.subprocess  # the CLI
async def test_an_answer_that_never_validates_ends_the_run_output_invalid_and_the_cli_says_so(
    dev_env: WorkflowEnvironment, task_queue: str, cli: Cli
) -> None:
    async with make_worker(dev_env.client, task_queue, apps=load_apps([APP])):
        waited = await cli("run", "write the report", "--agent", "stubborn", "--wait")
        run_id = waited.stdout.split()[1]
        as_json = await cli("run", "write it again", "--agent", "stubborn", "--wait", "--json")
        status = await cli("status", run_id)
        status_json = await cli("status", run_id, "--json")
        handle = dev_env.client.get_workflow_handle_for(AgentRunWorkflow.run, run_id)
        result: RunResult = await handle.result()
        await replays(handle, "agent_structured_output_never_valid")

    # Why it was refused: our name for the whole answer, and pydantic's reason.
    why = "(answer): " + pydantic_says(Report, PROSE, "json_invalid")

    # The run's own outcome.
    assert result.status == "output_invalid"
    assert result.final_output is None
    assert result.rejected_output is not None
    assert (result.rejected_output.turn, result.rejected_output.answer) == (2, PROSE)
    assert result.rejected_output.errors == why
    assert result.error is not None
    assert result.error.startswith("no answer matched the agent's output type within max_turns")

    # `run --wait`: non-zero, saying how it ended, what was refused and why.
    assert waited.code == 1, waited
    assert "output_invalid after 2 turns" in waited.stdout
    assert f"rejected answer (turn 2): {PROSE}" in waited.stdout
    assert f"  why: {why}" in waited.stdout
    assert f"error: {result.error}" in waited.stdout

    # `run --wait --json`: the same, as fields.
    assert as_json.code == 1, as_json
    shown = json.loads(as_json.stdout)
    assert shown["status"] == "output_invalid"
    assert shown["final_output"] is None and shown["output"] is None
    assert shown["rejected_output"]["answer"] == PROSE
    assert shown["rejected_output"]["errors"] == why
    assert shown["error"].startswith("no answer matched")

    # `status`, text and JSON.
    assert status.code == 1, status  # it ended without its answer
    assert f"run {run_id}: output_invalid" in status.stdout
    assert f"rejected answer (turn 2): {PROSE}" in status.stdout
    assert f"error: {result.error}" in status.stdout
    state = json.loads(status_json.stdout)
    assert state["status"] == "output_invalid"
    assert state["rejected_output"] == result.rejected_output.model_dump(mode="json")
