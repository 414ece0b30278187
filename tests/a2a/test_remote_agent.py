"""A remote A2A agent as a long tool (`A2AAgent`), end to end: the agent is
`tests/a2a/remote_agent.mjs` (ours, on the official JavaScript SDK's server and push sender) in a
Node process; the run on the dev server, its worker, and the gateway over real HTTP.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.types import ListTaskPushNotificationConfigsRequest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from bench.a2a import remote_agent
from tests.helpers import eventually, first_question, replays
from tests.rigs import Stack, serving_stack
from tests.script_steps import answer_then_wait, call, tool_results
from waitstate import Message, QuestionPolicy, ToolDefinition
from waitstate.a2a.client import A2AAgent, A2ABackend
from waitstate.apps import Apps
from waitstate.auth.tokens import ResumeTokens
from waitstate.client import CompletionRefused
from waitstate.names import CHECK_OPERATION_UPDATE
from waitstate.schemas import RunResult, RunState
from waitstate.schemas.errors import OPERATION_NONCE_MISMATCH, OPERATION_UNKNOWN
from waitstate.schemas.operations import CheckOperation, Completion, Operation
from waitstate.schemas.questions import AnswerInput
from waitstate.tools import ToolSpec
from waitstate.workflows.agent_run import AgentRunWorkflow
from waitstate.workflows.jobs import ASKED_CHECK, MAX_CHECK_ASKS

pytestmark = [pytest.mark.temporal, pytest.mark.subprocess]

KEYS = {"test": "t" * 40}
FINISHES = 60.0
MODEL = "scripted:a2a-call"


def calls_the_agent(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Sends the run's task to `reports`; answers its question with EMEA; answers with every
    result."""
    results = tool_results(messages)
    if not results:
        task = next(m.content for m in messages if m.role == "user")
        return call(0, "reports", {"message": task})
    answering = answer_then_wait(results, "reports", {"answer": "EMEA"})
    if answering is not None:
        return answering
    return Message(role="assistant", content="\n".join(f"{m.name}: {m.content}" for m in results))


SCRIPTS = Apps(scripts={"a2a-call": calls_the_agent})


@pytest.fixture
async def stack(dev_env: WorkflowEnvironment, task_queue: str) -> AsyncIterator[Stack]:
    async with serving_stack(dev_env.client, task_queue, KEYS, "test") as stack:
        yield stack


def agent(url: str, **options: Any) -> ToolSpec:
    return A2AAgent(url, name="reports", description="Builds a report.", **options)


@asynccontextmanager
async def serving(stack: Stack, spec: ToolSpec) -> AsyncIterator[None]:
    assert spec.long is not None and isinstance(spec.long.backend, A2ABackend)
    try:
        async with stack.worker(tools=[spec], apps=SCRIPTS):
            yield
    finally:
        await spec.long.backend.aclose()


async def state(handle: WorkflowHandle[Any, Any]) -> RunState:
    result: RunState = await handle.query(AgentRunWorkflow.status)
    return result


async def waiting_operation(handle: WorkflowHandle[Any, Any]) -> Operation:
    """The run's operation, once it waits for the remote's task and took its first push (the
    task, working)."""

    async def started() -> Operation | None:
        ops = [op for op in (await state(handle)).operations.values() if op.job_id]
        return ops[0] if ops and ops[0].progress == "working" else None

    return await eventually(started, "the run's operation to wait for the remote task")


async def result(handle: WorkflowHandle[Any, RunResult]) -> RunResult:
    return await asyncio.wait_for(handle.result(), FINISHES)


def events(run: RunState) -> list[str]:
    return [line.detail for line in run.steps if line.kind == "event"]


async def push_token(url: str, task_id: str) -> str:
    """The token the remote holds for the task's pushes (its push config, as it lists it)."""
    async with httpx.AsyncClient(timeout=10) as http:
        client = await create_client(url, ClientConfig(streaming=False, httpx_client=http))
        listed = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task_id)
        )
    [config] = listed.configs
    return str(config.authentication.credentials)


@asynccontextmanager
async def waiting_on_the_remote(
    stack: Stack, reconcile_every: timedelta | None = None
) -> AsyncIterator[tuple[str, WorkflowHandle[Any, RunResult], Operation, str, str]]:
    """A run whose operation waits for the remote agent's task (by default never reconciled):
    the agent's URL, the run, its operation, the token of the task's pushes and where they
    are sent."""
    async with remote_agent() as url, serving(stack, agent(url, reconcile_every=reconcile_every)):
        handle = await stack.start("hang on", ["reports"], model=MODEL)
        op = await waiting_operation(handle)
        token = await push_token(url, op.job_id)
        yield url, handle, op, token, f"/v1/operations/{op.operation_id}/a2a"


async def remote_status(url: str, task_id: str, code: str) -> Completion:
    """The remote task's report, once it failed with `code`."""
    remote = A2ABackend(url)

    async def ended() -> Completion | None:
        report = await remote.status(task_id)
        return report if report.error is not None and report.error.code == code else None

    try:
        return await eventually(ended, f"the remote task to end with {code}")
    finally:
        await remote.aclose()


UPDATE_ACCEPTED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
SIGNALED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED


def completed(task_id: str, text: str) -> dict[str, Any]:
    status = {"state": "TASK_STATE_COMPLETED"}
    artifact = {"artifactId": "a", "parts": [{"text": text}]}
    return {"task": {"id": task_id, "status": status, "artifacts": [artifact]}}


async def test_a_run_calls_the_remote_agent_and_is_woken_by_its_push(stack: Stack) -> None:
    # No status checks: only the remote's push can end the operation before its hour is up.
    async with (
        remote_agent("--delay-ms", "300") as url,
        serving(stack, agent(url, reconcile_every=None)),
    ):
        handle = await stack.start("Q3 revenue", ["reports"], model=MODEL)
        outcome = await result(handle)
        run = await state(handle)

    assert outcome.status == "completed", outcome.error
    said = json.loads((outcome.final_output or "").removeprefix("reports: "))
    assert said["status"] == "succeeded"
    assert said["result"] == {
        "text": "done: Q3 revenue",
        "data": [{"answered": False, "text": "Q3 revenue"}],
    }
    [op] = run.operations.values()
    assert op.status == "succeeded"
    assert not [line for line in events(run) if "found by" in line]


async def test_with_no_push_a_status_check_wakes_the_run(stack: Stack) -> None:
    async with remote_agent("--delay-ms", "300", "--no-push") as url:
        spec = agent(url, reconcile_every=timedelta(seconds=1))
        async with serving(stack, spec):
            handle = await stack.start("Q4 revenue", ["reports"], model=MODEL)
            outcome = await result(handle)
            run = await state(handle)

    assert outcome.status == "completed", outcome.error
    assert "done: Q4 revenue" in (outcome.final_output or "")
    [found] = [line for line in events(run) if "found by" in line]
    assert "succeeded: found by a status check" in found


async def test_the_remote_agents_question_is_answered_and_the_answer_reaches_it(
    stack: Stack,
) -> None:
    async with remote_agent("--delay-ms", "100") as url:
        spec = agent(url, reconcile_every=None, input=QuestionPolicy(answered_by="model"))
        async with serving(stack, spec):
            handle = await stack.start("ask for the region", ["reports"], model=MODEL)
            outcome = await result(handle)
            run = await state(handle)

    assert outcome.status == "completed", outcome.error
    *_, last = (outcome.final_output or "").splitlines()
    [waited] = json.loads(last.removeprefix("wait_for_operations: "))
    assert waited["status"] == "succeeded"
    assert waited["result"]["text"] == "report for EMEA"
    [question] = run.questions.values()
    assert question.message == "Which region should the report cover?"
    assert question.status == "answered" and question.delivery == "sent"


async def test_a_person_answers_the_remote_agents_question_once(stack: Stack) -> None:
    async with (
        remote_agent("--delay-ms", "100") as url,
        serving(stack, agent(url, reconcile_every=None)),
    ):
        handle = await stack.start("ask for the region", ["reports"], model=MODEL)
        question = await first_question(handle, "the remote agent's question")
        answer = AnswerInput(
            question_id=question.question_id,
            action="accept",
            content={"answer": "APAC"},
            responder="ana",
        )
        told = await asyncio.gather(*(stack.waitstate.answer(handle.id, answer) for _ in range(3)))
        outcome = await result(handle)

    assert question.message == "Which region should the report cover?"
    assert all(t.accepted and t.delivered for t in told), told
    assert outcome.status == "completed", outcome.error
    assert '"text":"report for APAC"' in (outcome.final_output or "")


async def test_the_runs_expiry_cancels_the_remote_task(stack: Stack) -> None:
    async with remote_agent() as url:
        spec = agent(url, reconcile_every=None, timeout=timedelta(seconds=2))
        async with serving(stack, spec):
            handle = await stack.start("hang on", ["reports"], model=MODEL)
            outcome = await result(handle)
            run = await state(handle)
        [op] = run.operations.values()
        remote = A2ABackend(url)
        try:
            at_the_remote = await remote.status(op.job_id)
        finally:
            await remote.aclose()

    assert outcome.status == "completed", outcome.error
    assert op.status == "expired" and op.cancel == "sent"
    assert at_the_remote.error is not None and at_the_remote.error.code == "a2a_canceled"


async def test_forged_and_malformed_pushes_are_refused_and_change_nothing(stack: Stack) -> None:
    async with waiting_on_the_remote(stack) as (url, handle, op, token, push):
        body = completed(op.job_id, "forged")
        forged = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
        answers = [
            await stack.post(push, body, f"Bearer {forged}"),
            await stack.post(push, body, None, **{"X-A2A-Notification-Token": forged}),
            await stack.post(push, body),
            await stack.post("/v1/operations/op-other/a2a", body, f"Bearer {token}"),
            await stack.post(push, {"task": {"id": op.job_id}}, f"Bearer {token}"),
            await stack.post(push, {"task": body["task"], "message": {}}, f"Bearer {token}"),
        ]
        still = (await state(handle)).operations[op.operation_id]
        await stack.waitstate.cancel(handle.id)
        at_the_remote = await remote_status(url, op.job_id, "a2a_canceled")
        # What the run recorded of reports, read once it has ended (the genuine first push's
        # Update may still be being written as the refused ones are sent: the history's
        # length would say nothing).
        reported = [
            event.SerializeToString()
            async for event in handle.fetch_history_events()
            if event.event_type in (UPDATE_ACCEPTED, SIGNALED)
        ]

    assert [a.status_code for a in answers] == [401, 401, 401, 401, 422, 422]
    assert [a.json()["error"]["code"] for a in answers[:4]] == [
        "invalid_token", "invalid_token", "missing_token", "wrong_operation",
    ]  # fmt: skip
    assert not [event for event in reported if b"forged" in event], len(reported)
    assert still.status == "running"
    # The run's cancel reached the remote task.
    assert at_the_remote.status == "failed"


async def test_copies_of_one_push_apply_once(stack: Stack) -> None:
    async with waiting_on_the_remote(stack) as (url, handle, op, token, push):
        body = completed(op.job_id, "pushed once")
        answers = await asyncio.gather(
            *(stack.post(push, body, f"Bearer {token}") for _ in range(10))
        )
        late = await stack.post(push, body, None, **{"X-A2A-Notification-Token": token})
        outcome = await result(handle)
        run = await state(handle)
        # The task the pushes were forged for still runs at the remote: stopped here.
        remote = A2ABackend(url)
        try:
            await remote.cancel(op.job_id)
        finally:
            await remote.aclose()

    codes = sorted(a.status_code for a in answers)
    assert codes.count(200) == 1 and set(codes) <= {200, 409}, codes
    assert late.status_code == 409
    assert json.loads((outcome.final_output or "").removeprefix("reports: "))["result"] == (
        "pushed once"
    )
    assert [line for line in events(run) if line.endswith("succeeded")] == [
        f"{op.operation_id} succeeded"
    ]


async def test_a_push_that_carries_no_state_is_read_and_ignored(stack: Stack) -> None:
    async with waiting_on_the_remote(stack) as (url, handle, op, token, push):
        artifact = {"artifactId": "a", "parts": [{"text": "half"}]}
        update = {"taskId": op.job_id, "artifact": artifact}
        answer = await stack.post(push, {"artifactUpdate": update}, f"Bearer {token}")
        # The run that never checks its task cannot be asked to read it now.
        status = {"taskId": op.job_id, "status": {"state": "TASK_STATE_COMPLETED"}}
        completed_only = await stack.post(push, {"statusUpdate": status}, f"Bearer {token}")
        still = (await state(handle)).operations[op.operation_id]
        await stack.waitstate.cancel(handle.id)

    assert answer.status_code == 202 and answer.json()["status"] == "ignored"
    assert completed_only.status_code == 409
    assert completed_only.json()["error"]["code"] == "check_refused"
    assert still.status == "running"


async def test_a_completed_status_without_its_artifacts_has_the_run_read_the_task_at_once(
    stack: Stack,
) -> None:
    # As an executor on the SDKs' task updater publishes its end: an artifact update, then a
    # final status update, each pushed; the second carries no artifacts. The status checks
    # come every 5 minutes: only the ask the push makes ends the operation within FINISHES.
    async with (
        remote_agent("--delay-ms", "300") as url,
        serving(stack, agent(url, reconcile_every=timedelta(minutes=5))),
    ):
        handle = await stack.start("Q3 revenue apart", ["reports"], model=MODEL)
        outcome = await result(handle)
        run = await state(handle)
        await replays(handle, "a2a_check_asked")

    assert outcome.status == "completed", outcome.error
    said = json.loads((outcome.final_output or "").removeprefix("reports: "))
    assert said["status"] == "succeeded"
    assert said["result"]["text"] == "done: Q3 revenue apart"
    [op] = run.operations.values()
    [found] = [line for line in events(run) if "found by" in line]
    assert found == f"{op.operation_id} succeeded: found by {ASKED_CHECK} (no report came)"


async def test_a_completed_status_pushed_before_the_start_returned_is_read_once_it_has(
    stack: Stack,
) -> None:
    # No delay: the agent's pushes race the start's answer. A `completed` status that beats
    # it is held as an ask, and checked as soon as the run watches the task.
    async with (
        remote_agent("--delay-ms", "0") as url,
        serving(stack, agent(url, reconcile_every=timedelta(minutes=5))),
    ):
        handles = [await stack.start(f"Q{i} apart", ["reports"], model=MODEL) for i in range(5)]
        outcomes = await asyncio.gather(*(result(handle) for handle in handles))

    for i, outcome in enumerate(outcomes):
        assert outcome.status == "completed", outcome.error
        said = json.loads((outcome.final_output or "").removeprefix("reports: "))
        assert said["result"]["text"] == f"done: Q{i} apart"


async def test_pushes_saying_completed_ask_one_check_each_and_no_more_than_the_bound(
    stack: Stack,
) -> None:
    # The task still runs: a push saying it completed (a sender's mistake, or a hostile one
    # holding the token) costs a check that finds it running, and changes nothing else.
    async with waiting_on_the_remote(stack, timedelta(minutes=5)) as (url, handle, op, token, push):

        def completed_at(second: int) -> dict[str, Any]:
            status = {
                "state": "TASK_STATE_COMPLETED",
                "timestamp": f"2026-12-06T00:00:{second:02}Z",
            }
            return {"statusUpdate": {"taskId": op.job_id, "status": status}}

        copies = await asyncio.gather(
            *(stack.post(push, completed_at(0), f"Bearer {token}") for _ in range(5))
        )
        others = [
            await stack.post(push, completed_at(second), f"Bearer {token}")
            for second in range(1, MAX_CHECK_ASKS + 1)
        ]
        still = (await state(handle)).operations[op.operation_id]
        await stack.waitstate.cancel(handle.id)
        asks = [
            event
            async for event in handle.fetch_history_events()
            if event.event_type == UPDATE_ACCEPTED
            and event.workflow_execution_update_accepted_event_attributes.accepted_request.input.name
            == CHECK_OPERATION_UPDATE
        ]

    assert [c.status_code for c in copies] == [202] * 5
    assert {c.json()["status"] for c in copies} == {"checking"}
    # One ask per push, copies included: the bound's last is refused.
    assert [o.status_code for o in others] == [202] * (MAX_CHECK_ASKS - 1) + [409]
    assert others[-1].json()["error"]["code"] == "check_refused"
    assert len(asks) == MAX_CHECK_ASKS
    assert still.status == "running" and still.progress == "working"


async def test_an_ask_to_check_is_refused_for_another_operation_or_nonce(stack: Stack) -> None:
    async with waiting_on_the_remote(stack, timedelta(minutes=5)) as (url, handle, op, token, _):
        nonce = ResumeTokens(KEYS, "test").verify(token).nonce
        asked = [
            CheckOperation(operation_id=op.operation_id, nonce=nonce[::-1]),
            CheckOperation(operation_id="op_other", nonce=nonce),
        ]
        refusals = []
        for ask in asked:
            with pytest.raises(CompletionRefused) as refused:
                await stack.waitstate.check_operation(handle.id, ask, update_id=ask.operation_id)
            refusals.append(refused.value.error_type)
        genuine = CheckOperation(operation_id=op.operation_id, nonce=nonce)
        checking = await stack.waitstate.check_operation(handle.id, genuine, update_id="genuine")
        await stack.waitstate.cancel(handle.id)

    assert refusals == [OPERATION_NONCE_MISMATCH, OPERATION_UNKNOWN]
    assert checking.checking and checking.operation_id == op.operation_id
