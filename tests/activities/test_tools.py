"""The tool activity: a sync tool's answer (by reference past 1 KB), a gated call held for a
person, and a long tool's start, with its callback token, limits and expiry. Run in an
ActivityEnvironment, with the demo systems over real HTTP as the external system."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from examples.demo.basic import CalculateArgs, demo_tools
from examples.demo.exports import ExportService, export_tool
from examples.demo.pipeline import ENRICH_ETA, EnrichmentPipeline, enrich_tool
from examples.demo.refunds import refund_approval_policy, refund_tools
from examples.systems.exports import ExportRequest
from tests.rigs import Systems
from tests.upstream import pydantic_says
from waitstate.activities import ToolActivities
from waitstate.activities.tools import INLINE_PREVIEW_CHARS, INLINE_RESULT_BYTES
from waitstate.auth.tokens import ResumeTokens
from waitstate.blobs import LocalBlobStore
from waitstate.blobs.results import DEFAULT_PREVIEW_CHARS, DEFAULT_THRESHOLD
from waitstate.schemas import ToolCall, ToolCallInput, ToolResult
from waitstate.schemas.builtin import REF_PREFIX
from waitstate.schemas.errors import RUN_INPUT_INVALID
from waitstate.tools import ToolRegistry, ToolSpec

TOKENS = ResumeTokens({"k1": "k" * 40}, "k1")
GATEWAY = "http://gateway.test/"
NONCE = "nonce-of-the-run"
STARTED = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
EXPORT = {"dataset": "transactions", "period": "2025-Q3"}


class _Text(BaseModel):
    size: int


async def _text(args: _Text) -> str:
    """`size` characters of numbered lines (ASCII, so as many bytes)."""
    lines = "".join(f"line {i:06d}\n" for i in range(args.size // 12 + 1))
    return lines[: args.size]


async def _crash(args: _Text) -> str:
    raise RuntimeError("disk on fire")


def _tools(systems: Systems, **export: Any) -> list[ToolSpec]:
    return [
        *demo_tools(),
        ToolSpec(name="text", description="d", args=_Text, handler=_text),
        ToolSpec(name="crash", description="d", args=_Text, handler=_crash),
        export_tool(ExportService(systems.http, systems.url), **export),
        enrich_tool(
            EnrichmentPipeline(systems.http, systems.url), poll_interval=timedelta(seconds=30)
        ),
        *refund_tools(systems.http, systems.url),
    ]


def _activities(
    tools: Sequence[ToolSpec], blobs: Path, tokens: ResumeTokens | None = TOKENS
) -> ToolActivities:
    return ToolActivities(ToolRegistry(tools), LocalBlobStore(blobs), tokens, GATEWAY)


def _call(name: str, arguments: dict[str, Any] | str, **fields: Any) -> ToolCallInput:
    """A call as the run sends it (its run id, operation id and time are the activity's)."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    given = {"nonce": NONCE}
    return ToolCallInput(
        call=ToolCall(id="call_1", name=name, arguments=text), **{**given, **fields}
    )


def _env() -> ActivityEnvironment:
    """The activity as a run schedules it: run-1's operation op_1 (the activity's id), at
    STARTED."""
    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        env.info, workflow_id="run-1", activity_id="op_1", scheduled_time=STARTED
    )
    return env


async def _run(activities: ToolActivities, call: ToolCallInput) -> ToolResult:
    return await _env().run(activities.call_tool, call)


# --- sync tools ---------------------------------------------------------------------------


async def test_a_sync_tool_answers_with_its_result(systems: Systems, tmp_path: Path) -> None:
    result = await _run(
        _activities(_tools(systems), tmp_path), _call("calculate", {"expression": "6 * 7"})
    )

    # The call's id and name are the run's to add (it has the call): not recorded twice.
    assert result == ToolResult(content="42")


@pytest.mark.parametrize(
    ("name", "arguments", "says"),
    [
        (
            "calculate",
            {},
            "invalid arguments for calculate: expression: "
            + pydantic_says(CalculateArgs, {}, "missing"),
        ),
        ("calculate", '{"expression": ', "arguments are not valid JSON"),
        ("calculate", {"expression": "1 / 0"}, "division by zero"),
        ("delete_everything", {}, "unknown tool 'delete_everything'; available: calculate"),
    ],
)
async def test_a_call_the_tool_refuses_is_an_error_the_model_reads(
    systems: Systems, tmp_path: Path, name: str, arguments: dict[str, Any] | str, says: str
) -> None:
    result = await _run(_activities(_tools(systems), tmp_path), _call(name, arguments))

    assert result.is_error and result.content.startswith(says)
    assert result.operation is None and result.approval_needed is None


async def test_an_unexpected_failure_propagates_for_the_retry_policy(
    systems: Systems, tmp_path: Path
) -> None:
    with pytest.raises(RuntimeError, match="disk on fire"):
        await _run(_activities(_tools(systems), tmp_path), _call("crash", {"size": 1}))


async def test_a_result_of_a_kilobyte_travels_inline(systems: Systems, tmp_path: Path) -> None:
    size = INLINE_RESULT_BYTES
    result = await _run(_activities(_tools(systems), tmp_path), _call("text", {"size": size}))

    assert result.content == await _text(_Text(size=size))
    assert result.content_ref is None


async def test_a_larger_result_travels_by_reference_and_the_history_keeps_a_preview(
    systems: Systems, tmp_path: Path
) -> None:
    size = INLINE_RESULT_BYTES + 1
    whole = await _text(_Text(size=size))

    result = await _run(_activities(_tools(systems), tmp_path), _call("text", {"size": size}))

    assert result.content == whole[:INLINE_PREVIEW_CHARS] + "…"
    assert result.content_ref is not None
    assert await LocalBlobStore(tmp_path).get(result.content_ref) == whole.encode()


async def test_a_result_past_the_threshold_reaches_the_model_as_a_preview_and_a_ref(
    systems: Systems, tmp_path: Path
) -> None:
    size = DEFAULT_THRESHOLD + 1
    whole = await _text(_Text(size=size))
    store = LocalBlobStore(tmp_path)

    result = await _run(_activities(_tools(systems), tmp_path), _call("text", {"size": size}))

    # What the model reads (by reference too: it is over a kilobyte) is the shrunk text: the
    # start of the result and a line naming where all of it is.
    assert result.content_ref is not None
    shrunk = (await store.get(result.content_ref)).decode()
    preview, trailer = shrunk.rsplit("\n", 1)
    assert preview == whole[:DEFAULT_PREVIEW_CHARS]
    assert trailer.startswith(f"[truncated: {size} bytes in all; the full result is {REF_PREFIX}")
    ref = trailer.split("the full result is ", 1)[1].split(";", 1)[0]
    assert await store.get(ref) == whole.encode()
    # Both are the run's: a blob cleanup keeps them while it may read them.
    run = _env().info.workflow_id
    assert await store.owners(ref) == await store.owners(result.content_ref) == [run]
    # The history's preview keeps that line in sight: the run offers read_ref when it sees it.
    assert result.content == f"{shrunk[:INLINE_PREVIEW_CHARS]}…\n{trailer}"


# --- approvals ------------------------------------------------------------------------------


async def test_a_gated_call_is_held_for_a_person_and_nothing_runs(
    systems: Systems, tmp_path: Path
) -> None:
    refund = {"claim_id": "C-118", "amount": 420.0}

    result = await _run(_activities(_tools(systems), tmp_path), _call("issue_refund", refund))

    assert result.approval_needed is not None
    assert result.approval_needed.reason == 'issue_refund {"claim_id":"C-118","amount":420.0}'
    assert result.approval_needed.policy == refund_approval_policy()
    assert (result.content, result.is_error, result.operation) == ("", False, None)
    assert systems.state.refunds == []


async def test_a_gated_call_runs_once_approved(systems: Systems, tmp_path: Path) -> None:
    refund = {"claim_id": "C-118", "amount": 420.0}
    activities = _activities(_tools(systems), tmp_path)

    result = await _run(activities, _call("issue_refund", refund, approved_by="apr_1"))

    assert result.approval_needed is None and not result.is_error
    [issued] = systems.state.refunds
    assert json.loads(result.content) == issued.model_dump()


async def test_a_call_under_the_threshold_needs_no_approval(
    systems: Systems, tmp_path: Path
) -> None:
    refund = {"claim_id": "C-200", "amount": 80.0}

    result = await _run(_activities(_tools(systems), tmp_path), _call("issue_refund", refund))

    assert result.approval_needed is None and not result.is_error
    assert [r.amount for r in systems.state.refunds] == [80.0]


# --- long tools -----------------------------------------------------------------------------


async def test_a_callback_tool_starts_its_job_with_a_token_for_the_runs_nonce(
    systems: Systems, tmp_path: Path
) -> None:
    await systems.faults(never_complete=True)

    result = await _run(_activities(_tools(systems), tmp_path), _call("start_export", EXPORT))

    [job] = systems.state.jobs.values()
    operation = result.operation
    assert operation is not None and not result.is_error and result.content == ""
    assert operation.job_id == job.job_id
    assert (operation.completion, operation.mode) == ("callback", "await")
    assert operation.expires_at == STARTED + timedelta(hours=1)
    assert operation.nonce_hash == hashlib.sha256(NONCE.encode()).hexdigest()
    # What the export service was handed: the run's idempotency key, the gateway's URL for
    # this operation, and a token for it carrying the run's nonce.
    assert (job.key, job.arguments) == ("run-1/call_1", EXPORT)
    assert job.callback_url == "http://gateway.test/v1/operations/op_1/complete"
    assert job.callback_token is not None
    claims = TOKENS.verify(job.callback_token, now=STARTED)
    assert (claims.workflow_id, claims.operation_id, claims.nonce) == ("run-1", "op_1", NONCE)
    assert claims.expires_at == operation.expires_at


async def test_a_retried_start_finds_the_same_job_and_mints_the_same_token(
    systems: Systems, tmp_path: Path
) -> None:
    await systems.faults(never_complete=True)
    activities = _activities(_tools(systems), tmp_path)

    first = await _run(activities, _call("start_export", EXPORT))
    retried = await _run(activities, _call("start_export", EXPORT))

    assert first == retried
    [job] = systems.state.jobs.values()
    [key] = systems.state.keys.values()
    assert (key.starts, key.jobs_created) == (2, 1)
    assert (
        job.callback_token
        == TOKENS.mint("run-1", "op_1", STARTED + timedelta(hours=1), nonce=NONCE).token
    )


async def test_what_the_call_leaves_out_is_read_from_the_activity_info(
    systems: Systems, tmp_path: Path
) -> None:
    # A run sends neither its id, the operation's nor the time: the activity's info has them.
    await systems.faults(never_complete=True)
    env = ActivityEnvironment()
    scheduled = datetime(2031, 6, 1, 8, 30, tzinfo=UTC)
    env.info = dataclasses.replace(
        env.info, workflow_id="run-from-info", activity_id="op_from_info", scheduled_time=scheduled
    )
    call = _call("start_export", EXPORT)

    result = await env.run(_activities(_tools(systems), tmp_path).call_tool, call)

    [job] = systems.state.jobs.values()
    assert result.operation is not None
    assert result.operation.expires_at == scheduled + timedelta(hours=1)
    assert job.key == "run-from-info/call_1"
    assert job.callback_url == "http://gateway.test/v1/operations/op_from_info/complete"
    assert job.callback_token is not None
    claims = TOKENS.verify(job.callback_token, now=scheduled)
    assert (claims.workflow_id, claims.operation_id) == ("run-from-info", "op_from_info")
    assert claims.expires_at == scheduled + timedelta(hours=1)


async def test_the_runs_timeout_and_mode_win_over_the_tools(
    systems: Systems, tmp_path: Path
) -> None:
    await systems.faults(never_complete=True)
    call = _call(
        "start_export",
        EXPORT,
        operation_timeout=timedelta(minutes=10),
        operation_mode="handle",
    )

    result = await _run(_activities(_tools(systems), tmp_path), call)

    assert result.operation is not None
    assert result.operation.expires_at == STARTED + timedelta(minutes=10)
    assert result.operation.mode == "handle"


async def test_a_timeout_of_the_run_longer_than_the_tools_leaves_the_tools(
    systems: Systems, tmp_path: Path
) -> None:
    await systems.faults(never_complete=True)
    tools = _tools(systems, timeout=timedelta(minutes=5))
    call = _call("start_export", EXPORT, operation_timeout=timedelta(days=1))

    result = await _run(_activities(tools, tmp_path), call)

    assert result.operation is not None
    assert result.operation.expires_at == STARTED + timedelta(minutes=5)


async def test_a_polled_tool_gets_no_callback_and_says_how_often_to_check(
    systems: Systems, tmp_path: Path
) -> None:
    await systems.faults(never_complete=True)

    result = await _run(
        _activities(_tools(systems), tmp_path), _call("enrich_dataset", {"dataset": "sales"})
    )

    [job] = systems.state.jobs.values()
    operation = result.operation
    assert operation is not None
    assert (operation.job_id, operation.completion) == (job.job_id, "poll")
    assert operation.poll_interval_seconds == 30
    assert operation.nonce_hash is None
    assert (job.callback_url, job.callback_token) == (None, None)
    # The pipeline's own estimate, not the tool's generic one.
    assert operation.eta_seconds is not None
    assert operation.eta_seconds < ENRICH_ETA.total_seconds()


async def test_a_callback_tool_on_a_worker_without_keys_fails_the_call_for_good(
    systems: Systems, tmp_path: Path
) -> None:
    activities = _activities(_tools(systems), tmp_path, tokens=None)

    with pytest.raises(ApplicationError) as raised:
        await _run(activities, _call("start_export", EXPORT))

    assert (raised.value.type, raised.value.non_retryable) == (RUN_INPUT_INVALID, True)
    assert "WAITSTATE_TOKEN_KEYS and GATEWAY_URL" in raised.value.message
    assert systems.state.keys == {}


async def test_a_start_the_system_refuses_is_an_error_the_model_reads(
    systems: Systems, tmp_path: Path
) -> None:
    arguments = {"dataset": "transactions", "period": "Q3 of 2025"}
    call = _call("start_export", arguments)

    result = await _run(_activities(_tools(systems), tmp_path), call)

    assert result.is_error and result.operation is None
    # The service's 422 names the field and passes its model's reason on (ours, in pydantic's
    # frame for a validator's error).
    reason = pydantic_says(ExportRequest, arguments, "value_error")
    assert "period must be a quarter like '2025-Q3'" in reason
    assert result.content == f"export service: period: {reason}"
    assert systems.state.jobs == {}


@pytest.mark.parametrize(
    ("limits", "says"),
    [
        ({"in_flight": 2}, "start_export already has 2 operations running (limit 2)"),
        (
            {"in_flight": 1, "run_in_flight": 3, "run_max_in_flight": 3},
            "this run already has 3 operations running (limit 3)",
        ),
    ],
    ids=["the-tools-limit", "the-runs-limit"],
)
async def test_a_start_beyond_a_limit_is_an_error_and_reaches_no_system(
    systems: Systems, tmp_path: Path, limits: dict[str, int], says: str
) -> None:
    tools = _tools(systems, max_in_flight=2)

    result = await _run(_activities(tools, tmp_path), _call("start_export", EXPORT, **limits))

    assert result.is_error and result.content.startswith(says)
    assert result.operation is None
    assert systems.state.keys == {}


async def test_a_start_under_both_limits_goes_ahead(systems: Systems, tmp_path: Path) -> None:
    await systems.faults(never_complete=True)
    tools = _tools(systems, max_in_flight=2)
    call = _call("start_export", EXPORT, in_flight=1, run_in_flight=2, run_max_in_flight=3)

    result = await _run(_activities(tools, tmp_path), call)

    assert result.operation is not None and len(systems.state.jobs) == 1
