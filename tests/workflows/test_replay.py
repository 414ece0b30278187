"""Replay: today's workflow code must reproduce the commands of recorded histories exactly.

A change that would break runs in flight fails here. To record the scenarios' histories of a
new version (a `workflow.patched` marker or an input revision; a history already kept is never
written again):

    .venv/bin/python -m tests.workflows.test_replay

Every path a run waits on has a committed history (`WAITING_PATHS`), and so has every path a
test replays (`replays(handle, name)` fails, in the test, for a name with none; here, every name
the tests give it is looked up without running them). A history of a new path is kept with
WAITSTATE_RECORD_HISTORIES=1 (docs/versions.md) and named here.
"""

from __future__ import annotations

import ast
import asyncio
import fnmatch
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowFailureError, WorkflowHistory
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from tests.helpers import committed_histories, committed_history, keep_history, make_worker
from tests.rigs import time_skipping_server
from waitstate.cli.replay import replayer as agent_replayer
from waitstate.schemas import RunInput
from waitstate.workflows.agent_run import AgentRunWorkflow
from waitstate.workflows.served import WORKFLOWS

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
    return agent_replayer(list(WORKFLOWS))


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
    history = committed_history(name, COMMITTED[name])

    result = await _replayer().replay_workflow(history, raise_on_replay_failure=False)

    assert result.replay_failure is None, f"{name} no longer replays: {result.replay_failure}"


# The paths a run waits on, each with the committed histories that record it (by name, of any
# workflow version); then the recorded paths that do not wait. Every committed history is named
# here, and every name has one: a new path is recorded and named, or this fails.
WAITING_PATHS: dict[str, list[str]] = {
    "approval decided by a person": [
        "approval_approved_by_signal",
        "approval_rejected_by_signal",
        "approval_escalated_then_approved",
        "exactly_once_link_after_rotation_and_escalation",
        "mcp_tool_named_for_approval_approve",
        "mcp_tool_named_for_approval_reject",
        "budget_raised_then_refused",
    ],
    "approval decided by a person racing its timeout policy": [
        "exactly_once_decision_during_notice_default",
        "exactly_once_decision_during_notice_fail",
        "exactly_once_decision_with_the_windows_end",
    ],
    "approval left to its timeout policy (default, escalate, fail)": [
        "approval_timeout_default_approve",
        "approval_timeout_default_reject",
        "approval_timeout_escalate_then_expire",
        "approval_timeout_fail",
        "budget_raise_unanswered",
    ],
    "sub-agents: the children a lead started, fanned out and waited for": [
        "tree_lead_fan_out",
    ],
    "callback: the job's webhook": [
        "operation_callback_export",
        "operation_duplicate_completions",
        "exactly_once_early_reports",
    ],
    "callback reconciled by status checks": [
        "reconcile_lost_webhook_found_by_a_check",
        "reconcile_lost_webhook_found_before_expiry",
        "reconcile_many_checks_then_webhook",
    ],
    "poll": ["operation_long_poll", "mcp_task_polled"],
    "operation timeout": [
        "operation_expired",
        "reconcile_checked_then_expired",
        "mcp_task_expired",
    ],
    "handle mode: the model goes on, then waits for operations": [
        "operation_handle_mode",
        "exactly_once_wait_for_operations_resumed",
    ],
    "cancel": [
        "operation_run_cancelled",
        "cancel_refused_by_the_jobs_system",
        "mcp_task_run_cancelled",
        "mcp_task_cancel_failed_server_down",
        "agent_run_cancelled_mid_model_call",
        "agent_run_background_response_cancelled",
    ],
    "continue-as-new while waiting": [
        "state_continued_as_new",
        "state_webhook_after_continue_as_new",
        "exactly_once_cancel_across_continue_as_new",
        "exactly_once_continued_between_turns",
        "exactly_once_continued_mid_turn",
        "exactly_once_resumed_mid_turn",
        "exactly_once_wait_for_operations_continued",
        "own_tool_question_answered_after_continue_as_new",
        "blob_store_outage_continued_as_new",
    ],
    "context rebuilt after a long wait": [
        "state_rebuilt_after_a_day_0",
        "state_rebuilt_after_a_day_3",
    ],
    "a job's question answered by a person": [
        "own_tool_question_answered_by_link",
        "mcp_task_question_answered",
    ],
    "a job's question answered by the model": [
        "own_tool_question_answered_by_model",
        "mcp_task_question_answered_by_model",
        "wait_for_operations_question_for_the_model",
        "mcp_task_question_during_wait_for_operations",
        "question_during_checkpoint",
    ],
    "a job's question expired (decline, escalate, cancel)": [
        "own_tool_question_decline",
        "own_tool_question_escalate",
        "own_tool_question_cancel",
        "mcp_task_question_decline",
        "mcp_task_question_escalate",
        "mcp_task_question_cancel",
    ],
    "a job's question refused": [
        "mcp_task_question_refused",
        "mcp_task_question_crafted_answer_refused",
        "own_tool_polled_question_refused_for_a_model",
        "own_tool_polled_question_refused_for_a_person",
    ],
    "MCP rounds of input on a plain call": ["mcp_rounds_answered"],
    "MCP sampling behind a person's leave": [
        "mcp_sampling_allowed_in_rounds",
        "mcp_sampling_allowed_in_a_task",
    ],
    "thread waiting for its next message": ["thread", "thread_quiet_turns", "fork_of_a_thread"],
    "a fork's call behind a person's approval": ["fork_live_approved"],
    "a fork of a tree waiting for its children's forks": ["fork_of_a_tree"],
    "an evaluation waiting for its forks": ["eval_forks_scored"],
    "thread steered while a turn waits": [
        "thread_steered_await",
        "thread_steered_handle",
        "thread_steered_approval",
        "thread_steered_nested",
    ],
    "background model response": [
        "agent_run_background_response",
        "agent_run_background_response_past_its_timeout",
    ],
    "A2A pushes: a task's states pushed while it waits for an approval": ["a2a_push_approved"],
    "a job's end read at once, asked by its system (an A2A status pushed apart from its artifacts; "
    "before its start returned)": ["a2a_check_asked", "reconcile_check_asked_before_the_start"],
    "blob store outage waited out": [
        "blob_store_outage_reply_in_hand",
        "blob_store_outage_unreachable",
        "mcp_listing_store_outage",
    ],
}
NOT_WAITING = [
    *SCENARIOS,
    "fork_recorded",
    "agent_of_an_app",
    "agent_unknown",
    "agent_structured_output_corrected",
    "agent_structured_output_never_valid",
    "mcp_ordinary_tool",
    "model_queue_tenant",
    "state_result_by_reference",
]
TESTS = HISTORIES.parent


def test_every_scenario_has_a_committed_history() -> None:
    assert not [name for name in SCENARIOS if not committed_histories(name)]


@pytest.mark.parametrize("path", sorted(WAITING_PATHS))
def test_every_waiting_path_has_a_committed_history(path: str) -> None:
    missing = [name for name in WAITING_PATHS[path] if not committed_histories(name)]

    assert not missing, f"{path}: no history of {missing} under tests/histories/"


def test_every_committed_history_is_of_a_path_named_here() -> None:
    named = {name for names in WAITING_PATHS.values() for name in names} | set(NOT_WAITING)
    # `<name>.json` or `<name>.<patch>.json`.
    recorded = {stem.split(".")[0] for stem in COMMITTED}

    assert recorded - named == set(), "name the path of each in WAITING_PATHS or NOT_WAITING"


def replayed_names() -> dict[str, str]:
    """The name every test gives `replays(handle, name)`, by where it is: a literal, or an
    f-string's pattern (`own_tool_question_*`); a name held in a variable is looked up when
    its test runs (`replays` fails for a name without a history)."""
    found = {}
    for path in sorted(TESTS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "replays"
                and len(node.args) == 2
            ):
                continue
            where = f"{path.relative_to(TESTS)}:{node.lineno}"
            name = node.args[1]
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                found[where] = name.value
            elif isinstance(name, ast.JoinedStr):
                found[where] = "".join(
                    str(part.value) if isinstance(part, ast.Constant) else "*"
                    for part in name.values
                )
    return found


def test_every_path_a_test_replays_has_a_committed_history() -> None:
    names = replayed_names()
    recorded = {stem.split(".")[0] for stem in COMMITTED}
    missing = {where: name for where, name in names.items() if not fnmatch.filter(recorded, name)}

    assert len(names) > 50, names  # the look-up finds them
    assert "mcp_rounds_answered" in names.values()
    assert not missing, f"no committed history of {missing}: record them (docs/versions.md)"


async def _record_all() -> None:
    async with time_skipping_server() as env:
        for name in SCENARIOS:
            history = await _record(env.client, f"record-{uuid.uuid4()}", name)
            path = await keep_history(name, history)
            print(f"{path.name}: {len(history.events)} events")


if __name__ == "__main__":
    asyncio.run(_record_all())
