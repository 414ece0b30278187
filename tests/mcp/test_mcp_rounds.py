"""Rounds of input on a plain MCP `tools/call` (SEP-2322's `input_required`, no task), against
the real MCP test server over streamable HTTP: a person answers each round's question through
the run, the call is sent again with the answers and the server's `requestState` as it came,
round after round, until its result; each send is made once, also across a worker's restart
and an interrupted attempt; and a server that asks for ever, or too much, fails the call."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from mcp_types import InputRequiredResult
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from tests.helpers import accept, eventually, replays, scheduled_activities
from tests.mcp.mcp_app import task_events, task_events_since
from tests.mcp.runs import (
    ReportsProcess,
    StartedCall,
    reports_apps,
    reports_run,
    started_call,
    tool_outcome,
)
from waitstate.blobs import LocalBlobStore
from waitstate.mcp import McpServer
from waitstate.mcp.rounds import MAX_ROUNDS, PendingCall, Reply, Rounds
from waitstate.mcp.tasks import McpTaskBackend
from waitstate.schemas.operations import Completion
from waitstate.schemas.questions import InputRequest
from waitstate.schemas.run import ANSWER_OPERATION, CALL_TOOL
from waitstate.tools import ToolError
from waitstate.tools.spec import JobAnswer
from waitstate.workflows.agent_run import AgentRunWorkflow

RESULT_TIMEOUT = 90
ROOTS = ["file:///srv/reports"]


async def _open_question(handle: WorkflowHandle[Any, Any], key: str) -> InputRequest:
    """The run's open question under `key`, once it asks it."""

    async def asked() -> InputRequest | None:
        state = await handle.query(AgentRunWorkflow.status)
        return next((q for q in state.questions.values() if q.key == key and q.open), None)

    return await eventually(asked, f"the question {key}")


async def test_a_person_answers_two_rounds_and_the_run_gets_the_calls_result(
    dev_env: WorkflowEnvironment, task_queue: str, reports_url: str
) -> None:
    before = await task_events(reports_url)
    apps = reports_apps(reports_url)
    async with reports_run(
        dev_env, task_queue, apps, "scripted:mcp-budget", tools=["reports__approve_budget"]
    ) as handle:
        amount = await _open_question(handle, "1/answer")
        first = await accept(handle, amount, {"amount": 1200})
        # The server asks under the same key again: a new question, of the second round.
        confirm = await _open_question(handle, "2/answer")
        second = await accept(handle, confirm, {"confirm": True})
        result = await handle.result()
        state = await handle.query(AgentRunWorkflow.status)
        await replays(handle, "mcp_rounds_answered")

    assert amount.message == "What budget for data?"
    assert amount.requested_schema["properties"] == {"amount": {"type": "integer"}}
    assert confirm.message == "Approve 1200 for data?"
    assert (first.delivered, second.delivered) == (True, True)
    got = tool_outcome(result)
    assert got["status"] == "succeeded"
    assert got["result"] == {"team": "data", "amount": 1200, "approved": True}
    [operation] = state.operations.values()
    assert operation.job_id.startswith("mrtr:")
    # The call, then once with each round's answer (and its sealed requestState, which the
    # server opened: a changed one is refused).
    assert await task_events_since(reports_url, before) == {
        "approve_budget called": 3,
        "approve_budget asked amount": 1,
        "approve_budget asked confirm": 1,
        "approve_budget approved": 1,
    }
    activities = await scheduled_activities(handle)
    assert (activities.count(CALL_TOOL), activities.count(ANSWER_OPERATION)) == (1, 2)


async def test_a_worker_restarted_between_rounds_sends_each_round_once(
    reports_process: ReportsProcess,
) -> None:
    async with reports_process("scripted:mcp-budget", "budget") as run:
        amount = await _open_question(run.handle, "1/answer")
        await run.restart_worker()  # mid-poll: the round lives in the blob store, not the worker
        await accept(run.handle, amount, {"amount": 300})
        confirm = await _open_question(run.handle, "2/answer")
        await run.restart_worker()
        await accept(run.handle, confirm, {"confirm": False})
        result = await asyncio.wait_for(run.handle.result(), RESULT_TIMEOUT)

    got = tool_outcome(result)
    assert got["result"] == {"team": "data", "amount": 300, "approved": False}
    events = await run.server_events()
    assert events["approve_budget called"] == 3
    assert events["approve_budget approved"] == 1


@asynccontextmanager
async def _started(
    url: str, tmp_path: Path, tool: str, arguments: dict[str, Any], **listed: Any
) -> AsyncIterator[StartedCall]:
    """The `call_tool` activity's call of `tool` (its listing changed by `listed`), its backend
    closed when the block ends."""
    server = McpServer("reports", url=url, roots=ROOTS)
    started = await started_call(server, tmp_path, tool, arguments, **listed)
    try:
        yield started
    finally:
        await started.backend.aclose()


async def test_a_send_an_interrupted_attempt_claimed_is_not_made_again(
    reports_url: str, tmp_path: Path
) -> None:
    before = await task_events(reports_url)
    async with _started(reports_url, tmp_path, "approve_budget", {"team": "ops"}) as started:
        asked = await started.status()
        await started.answer(JobAnswer(key="1/answer", action="accept", content={"amount": 7}))
        # A second answer to the question is ignored (the first stands); a question no round
        # asked is refused.
        await started.answer(JobAnswer(key="1/answer", action="decline"))
        with pytest.raises(ToolError, match="asked no question '1/other'"):
            await started.answer(JobAnswer(key="1/other", action="decline"))
        with pytest.raises(ToolError, match="asked no question '5/answer'"):
            await started.answer(JobAnswer(key="5/answer", action="decline"))
        # An attempt claimed the send of round 1's answers, then died (before or after sending:
        # nobody can tell).
        assert await Rounds(started.blobs, started.job_id).claim_send(1)
        outcome = await started.status()
        again = await started.status()

    assert started.result.operation is not None
    assert started.result.operation.poll_interval_seconds == 1.0
    assert asked.status == "input_required"
    assert [q.key for q in asked.questions or []] == ["1/answer"]
    assert outcome.status == "failed" and outcome.error is not None
    assert outcome.error.code == "outcome_unknown"
    assert "may or may not have taken effect" in outcome.error.message
    assert again == outcome
    # Sent once: the model's call. The claimed send was not made again.
    assert (await task_events_since(reports_url, before))["approve_budget called"] == 1


async def test_a_repeatable_call_is_sent_again_when_its_send_was_claimed(
    reports_url: str, tmp_path: Path
) -> None:
    async with _started(
        reports_url, tmp_path, "approve_budget", {"team": "ops"}, idempotent=True
    ) as started:
        await started.answer(JobAnswer(key="1/answer", action="accept", content={"amount": 9}))
        assert await Rounds(started.blobs, started.job_id).claim_send(1)
        second = await started.status()

    assert second.status == "input_required"
    assert [q.message for q in second.questions or []] == ["Approve 9 for ops?"]


async def test_a_server_that_asks_for_ever_fails_the_call_after_the_last_round(
    dev_env: WorkflowEnvironment, task_queue: str, reports_url: str
) -> None:
    before = await task_events(reports_url)
    apps = reports_apps(reports_url, roots=ROOTS)
    async with reports_run(
        dev_env, task_queue, apps, "scripted:mcp-roots-forever", tools=["reports__*"]
    ) as handle:
        result = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)

    got = tool_outcome(result)
    assert got["status"] == "failed"
    assert got["error"]["code"] == "too_many_rounds"
    assert f"at most {MAX_ROUNDS} rounds" in got["error"]["message"]
    events = await task_events_since(reports_url, before)
    # Every round's roots request answered from the declaration, by no person; the call made
    # once, then once per round answered.
    assert events["list_roots_forever called"] == MAX_ROUNDS + 1
    assert events["list_roots_forever saw 1 roots"] == MAX_ROUNDS


async def test_an_oversize_request_state_fails_the_call(reports_url: str, tmp_path: Path) -> None:
    async with (
        _started(reports_url, tmp_path / "a", "swell_state", {"at_once": True}) as at_once,
        _started(reports_url, tmp_path / "b", "swell_state", {}) as later,
    ):
        swelled = await later.status()

    # The first round: the model reads why the call failed.
    assert at_once.result.is_error and at_once.result.operation is None
    assert "requestState of" in at_once.result.content
    assert "at most 65,536 are kept" in at_once.result.content
    # A later round: the operation fails.
    assert swelled.status == "failed" and swelled.error is not None
    assert swelled.error.code == "input_required_too_large"
    assert "requestState of" in swelled.error.message


async def test_a_sampling_request_is_left_open_until_the_rounds_are_cancelled(
    reports_url: str, tmp_path: Path
) -> None:
    before = await task_events(reports_url)
    async with _started(reports_url, tmp_path, "draft_with_sampling", {"topic": "q3"}) as started:
        asked = await started.status()
        await started.answer(JobAnswer(key="1/title", action="accept", content={"title": "Q3"}))
        waiting = await started.status()
        await started.cancel()
        cancelled = await started.status()

    # Only the elicitation is a question; the sampling request is named, and never answered.
    assert [q.key for q in asked.questions or []] == ["1/title"]
    assert "not answered by this client: sampling/createMessage" in (asked.progress or "")
    assert (waiting.status, waiting.questions) == ("input_required", None)
    assert "1 answer(s) awaited" in (waiting.progress or "")
    assert cancelled.status == "failed" and cancelled.error is not None
    assert cancelled.error.code == "cancelled"
    assert (await task_events_since(reports_url, before))["draft_with_sampling called"] == 1


async def test_a_call_the_server_runs_as_a_task_after_a_round_is_polled_as_that_task(
    reports_url: str, tmp_path: Path
) -> None:
    blobs = LocalBlobStore(tmp_path / "blobs")
    call = PendingCall(
        server="reports",
        tool="render_report",
        name="reports__render_report",
        arguments={"region": "apac", "seconds": 0.5},
        repeatable=False,
    )
    rounds = await Rounds.begin(blobs, call, Reply(kind="input_required", input_requests={}))
    backend = McpTaskBackend(McpServer("reports", url=reports_url), blobs)
    try:

        async def ended() -> Completion | None:
            status = await backend.status(rounds.job_id)
            return status if status.status in ("succeeded", "failed") else None

        outcome = await eventually(ended, "the task to end")
    finally:
        await backend.aclose()

    reply = await rounds.reply(1)
    assert reply is not None and reply.kind == "task" and reply.task_id
    assert outcome.status == "succeeded"
    assert outcome.result == {"url": "https://reports.example/apac.pdf"}


async def test_a_reply_that_is_no_answer_fails_the_call_without_sending_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blobs = LocalBlobStore(tmp_path / "blobs")
    call = PendingCall(
        server="reports", tool="peek", name="reports__peek", arguments={}, repeatable=True
    )
    rounds = await Rounds.begin(blobs, call, Reply(kind="input_required", input_requests={}))
    sent: list[dict[str, Any]] = []

    class Session:
        async def call_tool(self, name: str, arguments: dict[str, Any], **params: Any) -> Any:
            sent.append(params)
            # What the SDK raises for an input request of no kind it knows.
            return InputRequiredResult.model_validate({"inputRequests": {"x": {"method": "?"}}})

    async def connected(self: McpTaskBackend) -> Any:
        return SimpleNamespace(session=Session())

    monkeypatch.setattr(McpTaskBackend, "_connected", connected)
    backend = McpTaskBackend(McpServer("reports", url="http://127.0.0.1:9/mcp"), blobs)

    first = await backend.status(rounds.job_id)
    second = await backend.status(rounds.job_id)

    assert first.status == "failed" and first.error is not None
    assert first.error.code == "unexpected_result"
    assert "not a tool's answer" in first.error.message
    assert second == first
    assert len(sent) == 1  # a read-only call too: the same answer would come again


async def test_an_answer_mcp_cannot_carry_fails_the_call_unsent(
    reports_url: str, tmp_path: Path
) -> None:
    before = await task_events(reports_url)
    async with _started(reports_url, tmp_path, "approve_budget", {"team": "ops"}) as started:
        # A form of the server's may allow an object; an elicitation's answer holds no such
        # value.
        nested = JobAnswer(key="1/answer", action="accept", content={"amount": {"eur": 5}})
        await started.answer(nested)
        outcome = await started.status()

    assert outcome.status == "failed" and outcome.error is not None
    assert outcome.error.code == "answer_invalid"
    assert (await task_events_since(reports_url, before))["approve_budget called"] == 1
