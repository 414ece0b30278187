"""Exactly once, on the real dev server and gateway: the four paths where a completion, a cancel
or a person's decision used to be lost (issue 11), each as it was reproduced."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from examples.systems import create_app as systems_app
from examples.systems import serving
from tests.helpers import (
    callback_token,
    eventually,
    quiet_history_length,
    replays,
    until_the_update_is_admitted,
)
from tests.rigs import EXPORT_TASK, EXPORT_TOOLS, Stack, serving_stack
from tests.workflows.cold_order_steps import in_one_task, update_accepted
from waitstate.auth.tokens import ResumeTokens
from waitstate.converter import DATA_CONVERTER
from waitstate.schemas import RunInput, RunResult, RunState
from waitstate.schemas.approvals import ApprovalPolicy, ApprovalRequest, DecideInput, OnTimeout
from waitstate.schemas.operations import Operation
from waitstate.workflows.agent_run import AgentRunWorkflow

KEYS = {"old": "o" * 40, "new": "n" * 40}
RESULT_TIMEOUT = 90
T = TypeVar("T")


@dataclass
class Outbox:
    """An approvals outbox over HTTP that holds its answers until the test releases them."""

    url: str = ""
    posts: list[dict[str, Any]] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    async def first_notice(self) -> dict[str, Any]:
        """The first notice posted here, once one is."""

        async def posted() -> list[dict[str, Any]]:
            return self.posts

        [notice, *_] = await eventually(posted, "the notice reached the outbox")
        return notice


@pytest.fixture
async def rig(dev_env: WorkflowEnvironment, task_queue: str) -> AsyncIterator[Stack]:
    """The stack, its gateway accepting both keys; workers sign with the key a test chooses
    (`old` unless it says), as a fleet does while it rotates keys."""
    systems = systems_app(export_seconds=0.3)
    async with serving_stack(dev_env.client, task_queue, KEYS, "old", systems, within=30) as stack:
        yield stack


async def _ask_first(rig: Stack, policy: ApprovalPolicy) -> WorkflowHandle[Any, Any]:
    """Start the scripted run that asks for an approval, under `policy`, before it acts."""
    return await rig.start(
        "ask first", ["request_approval"], model="scripted:ask-first", approval=policy
    )


@asynccontextmanager
async def _asked_first(
    rig: Stack, outbox: Outbox, policy: ApprovalPolicy
) -> AsyncIterator[WorkflowHandle[Any, Any]]:
    """A worker whose approval notices go to `outbox`, and on it the run that asks first under
    `policy` (`_ask_first`)."""
    async with rig.worker(approvals_outbox_url=outbox.url):
        yield await _ask_first(rig, policy)


@pytest.fixture
async def failing_outbox() -> AsyncIterator[Outbox]:
    """Takes every notice, and answers each with a 503: the run never learns it was sent."""
    outbox = Outbox()
    app = FastAPI()

    @app.post("/outbox")
    async def post(request: Request) -> JSONResponse:
        outbox.posts.append(await request.json())
        return JSONResponse({"error": "lost answer"}, status_code=503)

    async with serving(app) as url:
        outbox.url = f"{url}/outbox"
        yield outbox


@pytest.fixture
async def held_outbox() -> AsyncIterator[Outbox]:
    outbox = Outbox()
    app = FastAPI()

    @app.post("/outbox", status_code=201)
    async def post(request: Request) -> dict[str, str]:
        outbox.posts.append(await request.json())
        await outbox.release.wait()
        return {"id": f"out_{len(outbox.posts)}"}

    async with serving(app) as url:
        outbox.url = f"{url}/outbox"
        yield outbox
        outbox.release.set()


async def _state(handle: WorkflowHandle[Any, Any]) -> RunState:
    state: RunState = await handle.query(AgentRunWorkflow.status)
    return state


async def _result(handle: WorkflowHandle[Any, Any]) -> RunResult:
    result: RunResult = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)
    return result


# --- 1. reports that beat the start's answer ------------------------------------------------


async def test_reports_that_beat_the_start_are_held_in_order_and_the_final_one_applies(
    rig: Stack,
) -> None:
    # The job reports 50%, then succeeds, both while the export service holds the start's
    # answer: the run hears of the operation only after both webhooks.
    await rig.faults(progress_reports=1, hold_start_answers_seconds=2)
    async with rig.worker():
        handle = await rig.start(EXPORT_TASK, EXPORT_TOOLS, operation_timeout=timedelta(seconds=8))
        result = await _result(handle)
        state = await _state(handle)
    stats = await rig.stats()

    [op] = state.operations.values()
    [job] = stats["jobs"].values()
    assert [(w["report"], w["status_code"]) for w in job["webhooks"]] == [
        ("running 50%", 200),
        ("succeeded", 200),
    ]
    assert op.status == "succeeded" and op.progress == "50%"
    events = [s.detail for s in state.steps if s.kind == "event" and s.name == "start_export"]
    assert events == [f"{op.operation_id} running", f"{op.operation_id} succeeded"]
    assert result.status == "completed"
    assert result.final_output is not None and "filed them at compliance/" in result.final_output
    assert [k["cancels"] for k in stats["keys"].values()] == [0], "a job that succeeded"
    await replays(handle, "exactly_once_early_reports")


async def test_an_early_report_with_a_wrong_nonce_is_refused_to_its_sender(rig: Stack) -> None:
    await rig.faults(hold_start_answers_seconds=3, never_complete=True)
    async with rig.worker():
        handle = await rig.start(EXPORT_TASK, EXPORT_TOOLS)

        async def callback_url() -> str | None:
            jobs = (await rig.stats())["jobs"].values()
            return next((j["callback_url"] for j in jobs if j["callback_url"]), None)

        url = await eventually(callback_url, "the export was started")
        operation_id = url.rsplit("/", 2)[-2]
        # Signed with a key the gateway accepts, for this run and operation: only the nonce
        # is not the one the run chose.
        forged = ResumeTokens(KEYS, "old").mint(
            handle.id, operation_id, datetime.now(UTC) + timedelta(hours=1), nonce="x" * 22
        )
        answer = await rig.http.post(
            url,
            json={"status": "succeeded", "result": {"rows": 1}},
            headers={"Authorization": f"Bearer {forged.token}"},
        )
        await handle.cancel()

    assert answer.status_code == 401, answer.text
    assert answer.json()["error"]["code"] == "nonce_mismatch"


# --- 2. continue-as-new right after an expiry ----------------------------------------------


# The history's length is under this while the run waits for its two exports, and over it once
# their expiries have been reported: the run continues as new then, with both cancels in flight.
CAN_AFTER_EXPIRY = 33


async def test_continue_as_new_right_after_an_expiry_still_cancels_both_jobs(rig: Stack) -> None:
    await rig.faults(never_complete=True)
    async with rig.worker():
        handle = await rig.start(
            EXPORT_TASK,
            ["start_export"],
            model="scripted:two-exports",
            operation_mode="handle",
            operation_timeout=timedelta(seconds=3),
            # Past this many events the run continues as new: after the expiry's report.
            continue_as_new_after_events=CAN_AFTER_EXPIRY,
        )
        result = await _result(handle)
        state = await _state(handle)
    stats = await rig.stats()

    assert result.status == "completed"
    assert state.continued_as_new >= 1
    assert sorted(op.status for op in state.operations.values()) == ["expired", "expired"]
    assert sorted(k["cancels"] for k in stats["keys"].values()) == [1, 1]
    assert sorted(j["status"] for j in stats["jobs"].values()) == ["cancelled", "cancelled"]
    await replays(handle, "exactly_once_cancel_across_continue_as_new")


# --- 3. key rotation -------------------------------------------------------------------------


async def test_a_link_minted_before_the_key_rotated_still_decides_after_escalation(
    rig: Stack,
) -> None:
    # Each window outlasts a busy machine's delays: the escalation's notice is sent only while
    # its window is open (a worker that wakes past both windows expires the request at once).
    policy = ApprovalPolicy(timeout=timedelta(seconds=5), on_timeout="escalate")
    # The rotation is the subject, not Temporal's handling of a departed worker's tasks: the old
    # worker caches nothing (a departed worker's sticky task once took over 30 s to move), and
    # leaves once the run waits with no task (one it took and dropped as it left waited 10 s
    # for Temporal's timeout, past the first window and the escalation's).
    async with rig.worker(signing_key="old", max_cached_workflows=0):
        handle = await _ask_first(rig, policy)
        [first] = await eventually(lambda: rig.outbox(handle.id), "the first notice")
        await quiet_history_length(handle)
    async with rig.worker(signing_key="new"):
        notices = await eventually(
            lambda: _at_least(rig.outbox(handle.id), 2), "the escalation notice"
        )
        answer = await rig.approve_by_link(first)
        result = await _result(handle)
        state = await _state(handle)

    assert notices[1]["escalation"] is True
    first_link = first["decision"]["authorization"]
    assert notices[1]["decision"]["authorization"] != first_link, "signed by `new`"
    assert answer.status_code == 200, answer.text
    [request] = state.approvals.values()
    assert request.status == "approved" and request.decision is not None
    assert request.decision.reviewer == "ana"
    assert result.status == "completed"
    await replays(handle, "exactly_once_link_after_rotation_and_escalation")


async def test_a_start_retried_under_the_new_key_accepts_the_token_the_job_kept(
    rig: Stack,
) -> None:
    # The first attempt creates the job (which keeps that attempt's token, signed by `old`)
    # and its answer is lost; the retry runs on a worker that signs with `new`. The old worker
    # caches no run: the next task of its runs goes to the shared queue at once, not to its own
    # queue after it left.
    await rig.faults(accept_then_fail_next_starts=1)
    async with rig.worker(signing_key="old", max_cached_workflows=0):
        handle = await rig.start(EXPORT_TASK, EXPORT_TOOLS, operation_timeout=timedelta(seconds=15))

        async def started_once() -> bool:
            return any(k["starts"] >= 1 for k in (await rig.stats())["keys"].values())

        await eventually(started_once, "the first start")
    async with rig.worker(signing_key="new"):
        result = await _result(handle)
        state = await _state(handle)
    stats = await rig.stats()

    [key] = stats["keys"].values()
    assert (key["starts"], key["jobs_created"], key["cancels"]) == (2, 1, 0)
    [op] = state.operations.values()
    assert op.status == "succeeded"
    [job] = stats["jobs"].values()
    assert job["webhooks"][-1]["status_code"] == 200
    assert result.status == "completed"


async def _at_least(entries: Awaitable[list[T]], n: int) -> list[T] | None:
    found = await entries
    return found if len(found) >= n else None


# --- 4. a person's decision against the timeout policy --------------------------------------


@pytest.mark.parametrize("on_timeout", ["fail", "default"])
async def test_a_decision_made_while_the_notice_outlasts_the_window_is_final(
    rig: Stack, held_outbox: Outbox, on_timeout: OnTimeout
) -> None:
    policy = ApprovalPolicy(
        timeout=timedelta(seconds=2), on_timeout=on_timeout, default_decision="reject"
    )
    async with _asked_first(rig, held_outbox, policy) as handle:
        await held_outbox.first_notice()
        [request] = (await _state(handle)).approvals.values()
        # Ana decides (as the CLI does) while the notice is still being posted.
        outcome = await handle.execute_update(
            AgentRunWorkflow.decide,
            DecideInput(request_id=request.request_id, decision="approve", reviewer="ana"),
        )

        async def window_passed() -> bool:
            return datetime.now(UTC) > request.expires_at + timedelta(milliseconds=300)

        await eventually(window_passed, "the approval window passed")
        held_outbox.release.set()
        result = await _result(handle)
        state = await _state(handle)

    assert outcome.accepted and outcome.status == "approved"
    decided = state.approvals[request.request_id]
    assert decided.status == "approved"
    assert decided.decision is not None and decided.decision.reviewer == "ana"
    assert not decided.decision.by_policy
    assert result.status == "completed", result.error
    assert result.final_output is not None and '"approval":"approved"' in result.final_output
    await replays(handle, f"exactly_once_decision_during_notice_{on_timeout}")


# --- a chatty job while the run waits ----------------------------------------------------------


async def _continuations(handle: WorkflowHandle[Any, Any]) -> list[tuple[str, RunInput]]:
    """Each run the chain continued as new into, with its input, oldest first."""
    inputs: list[tuple[str, RunInput]] = []
    run_id: str | None = handle.first_execution_run_id or handle.result_run_id
    while run_id:
        run = handle._client.get_workflow_handle(handle.id, run_id=run_id)
        run_id = None
        async for event in run.fetch_history_events():
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
                attributes = event.workflow_execution_continued_as_new_event_attributes
                [carried] = DATA_CONVERTER.payload_converter.from_payloads(
                    attributes.input.payloads, [RunInput]
                )
                run_id = attributes.new_execution_run_id
                inputs.append((run_id, carried))
    return inputs


async def _chatty_export(
    rig: Stack, tools: list[str], **fields: Any
) -> tuple[WorkflowHandle[Any, RunResult], RunResult, RunState, list[tuple[str, RunInput]]]:
    """A run of the export task whose job reports progress eight times in its 4 s: the run's
    handle, result, last state and continuations."""
    await rig.faults(progress_reports=8, export_seconds=4)
    async with rig.worker():
        handle = await rig.start(EXPORT_TASK, tools, **fields)
        result = await _result(handle)
        state = await _state(handle)
    return handle, result, state, await _continuations(handle)


async def _chatty_handled_export(
    rig: Stack, model: str, continue_as_new_after_events: int
) -> tuple[WorkflowHandle[Any, RunResult], RunResult, RunState, list[tuple[str, RunInput]]]:
    """`_chatty_export` of `model`, whose exports the run holds as handles (`start_export`
    only), continuing as new after that many events."""
    return await _chatty_export(
        rig,
        ["start_export"],
        model=model,
        operation_mode="handle",
        continue_as_new_after_events=continue_as_new_after_events,
    )


async def _replays_with_a_turn_carried(
    rig: Stack,
    handle: WorkflowHandle[Any, RunResult],
    continued: list[tuple[str, RunInput]],
    first_call: str,
    histories: tuple[str, str],
) -> None:
    """The chain continued as new at least once with a turn carried over, whose first call is
    `first_call`; the chain replays (`histories[0]`), and so does the first run that resumed a
    carried turn (`histories[1]`)."""
    turns = [(run, c.carry.turn) for run, c in continued if c.carry and c.carry.turn]
    assert turns and all(turn.calls[0].name == first_call for _, turn in turns)
    await replays(handle, histories[0])
    resumed = rig.client.get_workflow_handle(handle.id, run_id=turns[0][0])
    await replays(resumed, histories[1])


async def test_progress_while_a_turn_waits_continues_the_run_as_new_mid_turn(rig: Stack) -> None:
    handle, result, state, continued = await _chatty_export(
        rig, EXPORT_TOOLS, continue_as_new_after_events=30
    )
    stats = await rig.stats()

    [job] = stats["jobs"].values()
    assert [w["status_code"] for w in job["webhooks"]] == [200] * 9, job["webhooks"]
    [op] = state.operations.values()
    assert op.status == "succeeded"
    assert result.status == "completed", result.error
    assert result.final_output is not None and "filed them at compliance/" in result.final_output
    assert result.turns == 5, "the model was not asked again for the carried turn"
    assert [k["cancels"] for k in stats["keys"].values()] == [0]
    # At least one continuation happened while the export's call waited in its turn.
    await _replays_with_a_turn_carried(
        rig,
        handle,
        continued,
        "start_export",
        ("exactly_once_continued_mid_turn", "exactly_once_resumed_mid_turn"),
    )


async def test_progress_while_handles_run_continues_the_run_as_new_between_turns(
    rig: Stack,
) -> None:
    handle, result, state, continued = await _chatty_handled_export(rig, "scripted:two-exports", 40)
    stats = await rig.stats()

    assert sorted(op.status for op in state.operations.values()) == ["succeeded", "succeeded"]
    assert all(w["status_code"] == 200 for j in stats["jobs"].values() for w in j["webhooks"])
    assert any(c.carry and c.carry.answer for _, c in continued), "continued while waiting"
    assert result.status == "completed", result.error
    await replays(handle, "exactly_once_continued_between_turns")


async def test_wait_for_operations_goes_on_in_the_next_run(rig: Stack) -> None:
    handle, result, _, continued = await _chatty_handled_export(rig, "scripted:check-and-wait", 30)

    assert result.status == "completed", result.error
    assert result.final_output is not None
    assert '"status":"succeeded"' in result.final_output.split("waited:")[1]
    await _replays_with_a_turn_carried(
        rig,
        handle,
        continued,
        "wait_for_operations",
        ("exactly_once_wait_for_operations_continued", "exactly_once_wait_for_operations_resumed"),
    )


# --- copies and repeats of progress reports -----------------------------------------------------


async def test_copies_of_a_report_collapse_and_a_repeated_report_does_not(rig: Stack) -> None:
    await rig.faults(never_complete=True)
    async with rig.worker():
        handle = await rig.start(EXPORT_TASK, EXPORT_TOOLS, operation_mode="handle")

        async def operation() -> Operation | None:
            return next(iter((await _state(handle)).operations.values()), None)

        op = await eventually(operation, "the export's operation")
        token = await callback_token(ResumeTokens(KEYS, "old"), handle, op)
        url = f"{rig.gateway_url}/v1/operations/{op.operation_id}/complete"

        async def post(body: dict[str, Any], webhook_id: str | None = None) -> httpx.Response:
            headers = {"Authorization": f"Bearer {token}"}
            if webhook_id:
                headers["Webhook-Id"] = webhook_id
            return await rig.http.post(url, json=body, headers=headers)

        half = {"status": "running", "progress": "50%"}
        asking = {"status": "input_required", "progress": "50%"}
        first = await asyncio.gather(*(post(half, "whk_a") for _ in range(5)))
        unnamed_copy = await post(half)
        second = await post(asking, "whk_b")
        # The same body as the first report, but another report: the job is back at work.
        third = await post(half, "whk_c")
        shown = (await _state(handle)).operations[op.operation_id]
        await handle.cancel()

    assert sorted(r.status_code for r in first) == [200, 409, 409, 409, 409]
    assert {r.json()["error"]["code"] for r in first if r.status_code == 409} == {
        "duplicate_completion"
    }
    assert unnamed_copy.status_code == 409
    assert unnamed_copy.json()["error"]["code"] == "duplicate_report"
    assert second.status_code == 200 and second.json()["operation_status"] == "input_required"
    assert third.status_code == 200 and third.json()["operation_status"] == "running"
    assert shown.status == "running" and shown.progress == "50%"


# --- a notice whose every answer is lost ----------------------------------------------------


async def test_a_link_works_though_the_run_never_heard_its_notice_was_sent(
    rig: Stack, failing_outbox: Outbox
) -> None:
    policy = ApprovalPolicy(timeout=timedelta(minutes=10), on_timeout="fail")
    async with _asked_first(rig, failing_outbox, policy) as handle:
        answer = await rig.approve_by_link(await failing_outbox.first_notice())
        result = await _result(handle)

    assert answer.status_code == 200, answer.text
    assert answer.json()["approval_status"] == "approved"
    assert result.status == "completed"
    assert result.final_output is not None and '"approval":"approved"' in result.final_output


# --- a decision and the window's end in one workflow task ---------------------------------------


async def test_a_decision_taken_with_the_windows_end_by_a_rebuilding_worker_replays(
    rig: Stack, held_outbox: Outbox
) -> None:
    # The window's timer fires while no worker runs, and a decision waits for a worker too:
    # the worker that comes gets both in one workflow task, and takes the decision first (so
    # does a replay). The decision wins, and the run escalates only in form (see
    # ApprovalDesk._mirrors_escalation): nothing of it reaches the history. The other order,
    # met by the chaos suite after a worker was killed in the middle of that task, is not
    # reproduced here.
    policy = ApprovalPolicy(timeout=timedelta(seconds=2), on_timeout="escalate")
    async with _asked_first(rig, held_outbox, policy) as handle:

        async def asked() -> ApprovalRequest | None:
            return next(iter((await _state(handle)).approvals.values()), None)

        request = await eventually(asked, "the approval request")

    async def window_passed() -> bool:
        kinds = [e.event_type async for e in handle.fetch_history_events()]
        return EventType.EVENT_TYPE_TIMER_FIRED in kinds

    await eventually(window_passed, "the approval window's timer to fire with no worker")
    deciding = asyncio.create_task(
        handle.execute_update(
            AgentRunWorkflow.decide,
            DecideInput(request_id=request.request_id, decision="approve", reviewer="ana"),
            id="decide-as-the-window-ends",
        )
    )
    await until_the_update_is_admitted(rig.client, handle, "decide-as-the-window-ends")
    held_outbox.release.set()
    async with rig.worker(approvals_outbox_url=held_outbox.url):
        outcome = await deciding
        result = await _result(handle)
        state = await _state(handle)
    history = await handle.fetch_history()

    # The race this is about: the window's end and the decision reached the run together.
    assert in_one_task(history.events, update_accepted("decide")), (
        "the window's timer and the decision came in different tasks"
    )
    assert outcome.accepted and outcome.status == "approved"
    assert state.approvals[request.request_id].status == "approved"
    assert result.status == "completed", result.error
    await replays(handle, "exactly_once_decision_with_the_windows_end")
