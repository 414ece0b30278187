"""Steering a thread (issue 25): a message sent while the agent's turn waits for an operation
reaches the model at once, gets a reply of its own, and disturbs nothing the turn waits for; the
earlier message's reply still comes with the operation's outcome. On the real dev server, with
a polled job the test finishes (tests/workflows/steering_app.py's `start_export_*`)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from temporalio.testing import WorkflowEnvironment

from examples.systems import create_app as systems_app
from examples.systems import serving
from tests.helpers import eventually, make_worker, replays
from tests.workflows import steering_app
from waitstate.apps import load_apps
from waitstate.client import WaitstateClient, thread_input
from waitstate.schemas.approvals import ApprovalRequest, DecisionSignal
from waitstate.schemas.questions import AnswerInput, QuestionRequest
from waitstate.schemas.run import RunState
from waitstate.schemas.threads import ThreadMessage
from waitstate.settings import Settings
from waitstate.workflows.agent_run import AgentRunWorkflow

APP = "tests.workflows.steering_app:app"
SOON = timedelta(seconds=30)


def _assert_both_replied(state: RunState) -> None:
    """The thread's two messages, m1 and m2, both have their reply."""
    assert state.thread is not None
    assert [(m.message_id, m.status) for m in state.thread.messages] == [
        ("m1", "replied"),
        ("m2", "replied"),
    ]


async def _open_approval(client: WaitstateClient, thread_id: str) -> ApprovalRequest | None:
    state = await client.query(thread_id)
    return next((r for r in state.approvals.values() if r.open), None)


async def _approve(dev_env: WorkflowEnvironment, thread_id: str, request: ApprovalRequest) -> None:
    """dana approves `request`."""
    await dev_env.client.get_workflow_handle(thread_id).signal(
        AgentRunWorkflow.approve, DecisionSignal(request_id=request.request_id, reviewer="dana")
    )


@pytest.mark.parametrize("mode", ["handle", "await"])
async def test_a_message_during_an_operations_wait_is_answered_and_the_wait_goes_on(
    dev_env: WorkflowEnvironment, task_queue: str, mode: str
) -> None:
    """`handle`: the model started the job and said so; its turn waits for the job (between
    turns). `await`: the model's tool call waits for the job (in the turn): the message ends
    that wait, the call answers with where the job stands, and the job goes on as a handle."""
    exports = steering_app.EXPORTS
    exports.__init__()  # type: ignore[misc]  # a fresh job system for this test
    client = WaitstateClient(dev_env.client, task_queue=task_queue)
    thread_id = f"thread-steer-{mode}-{task_queue[-8:]}"
    start = thread_input(model=f"scripted:export-{mode}").model_copy(
        update={"tools": [f"start_export_{mode}"]}
    )

    async def status_of(message_id: str) -> ThreadMessage:
        message = await client.message(thread_id, message_id)
        assert message is not None
        return message

    async with make_worker(dev_env.client, task_queue, apps=load_apps([APP])):
        first = await client.send_message(thread_id, "export please", start=start)

        async def job_running() -> bool:
            state = await client.query(thread_id)
            return exports.started == 1 and any(
                op.status == "running" for op in state.operations.values()
            )

        await eventually(job_running, "the export job running")
        second = await client.send_message(thread_id, "how is it going?")
        answered = await client.reply(thread_id, second.accepted.message_id)
        while_waiting = await status_of(first.accepted.message_id)
        exports.done = True
        replied = await client.reply(thread_id, first.accepted.message_id)
        state = await client.query(thread_id)
        await replays(dev_env.client.get_workflow_handle(thread_id), f"thread_steered_{mode}")

    # The second message was answered at once, while the first one's job ran...
    assert (answered.status, answered.reply) == ("replied", "re: how is it going?")
    assert while_waiting.status == "working"
    # ...and the first one's reply came with the job's outcome.
    assert (replied.status, replied.reply) == ("replied", "export done")
    assert (exports.started, exports.cancelled) == (1, 0)
    (op,) = state.operations.values()
    assert op.status == "succeeded"
    _assert_both_replied(state)


async def test_a_message_while_a_jobs_question_waits_for_a_person_is_answered(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    """The model's tool call waits on a job that asks a person a question: a message ends
    that wait (the question stays open), is answered at once, and the first message's reply
    comes once the person has answered and the job has finished."""
    client = WaitstateClient(dev_env.client, task_queue=task_queue)
    thread_id = f"thread-steer-asks-{task_queue[-8:]}"
    start = thread_input(model="scripted:export-asks").model_copy(
        update={"tools": ["start_export_asks"]}
    )
    async with serving(systems_app()) as systems:
        settings = Settings(demo_systems_url=systems)
        async with make_worker(
            dev_env.client, task_queue, apps=load_apps([APP]), settings=settings
        ):
            first = await client.send_message(thread_id, "export please", start=start)

            async def asked() -> QuestionRequest | None:
                state = await client.query(thread_id)
                return next((q for q in state.questions.values() if q.open), None)

            question = await eventually(asked, "the job's question")
            second = await client.send_message(thread_id, "how is it going?")
            answered = await client.reply(thread_id, second.accepted.message_id)
            while_asking = await client.message(thread_id, first.accepted.message_id)
            still_open = await asked()
            await dev_env.client.get_workflow_handle(thread_id).execute_update(
                AgentRunWorkflow.answer,
                AnswerInput(
                    question_id=question.question_id,
                    action="accept",
                    content={"ok": True},
                    responder="ana",
                ),
            )
            replied = await client.reply(thread_id, first.accepted.message_id)

    assert (answered.status, answered.reply) == ("replied", "re: how is it going?")
    assert while_asking is not None and while_asking.status == "working"
    assert still_open is not None and still_open.question_id == question.question_id
    assert (replied.status, replied.reply) == ("replied", "export done")
    assert [a.content for a in steering_app.ASKS.answers] == [{"ok": True}]


async def test_a_message_while_a_call_waits_for_approval_is_answered_and_the_wait_goes_on(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    """The model's tool call needs a person's approval: a message sent meanwhile is answered at
    once (the model sees the call pending, then the message), the request stays open and its
    window runs on, the tool runs once approved, and the first message's reply comes after it,
    the model told what was said meanwhile."""
    deletions = steering_app.DELETIONS
    deletions.__init__()  # type: ignore[misc]  # a fresh tool for this test
    client = WaitstateClient(dev_env.client, task_queue=task_queue)
    thread_id = f"thread-steer-approval-{task_queue[-8:]}"
    start = thread_input(model="scripted:deleter").model_copy(update={"tools": ["delete_records"]})
    async with make_worker(dev_env.client, task_queue, apps=load_apps([APP])):
        first = await client.send_message(thread_id, "delete please", start=start)

        async def asked() -> ApprovalRequest | None:
            return await _open_approval(client, thread_id)

        request = await eventually(asked, "the approval request")
        second = await client.send_message(thread_id, "how is it going?")
        # (Before agent-run-7, folded into 1.0, the message waited for the decision.)
        answered = await client.reply(thread_id, second.accepted.message_id, within=SOON)
        while_waiting = await client.message(thread_id, first.accepted.message_id)
        still_open = await asked()
        ran_before = deletions.ran
        await _approve(dev_env, thread_id, request)
        replied = await client.reply(thread_id, first.accepted.message_id)
        state = await client.query(thread_id)
        await replays(dev_env.client.get_workflow_handle(thread_id), "thread_steered_approval")

    # The message was answered while the call waited, with the call shown pending...
    assert answered.status == "replied"
    assert answered.reply == "re: how is it going? (pending)"
    assert while_waiting is not None and while_waiting.status == "working"
    # ...the request was left open, as it was, and nothing ran before the approval...
    assert still_open is not None and still_open.request_id == request.request_id
    assert still_open.expires_at == request.expires_at
    assert ran_before == 0
    # ...then the tool ran once, and the first reply came with what was said meanwhile.
    assert deletions.ran == 1
    assert replied.status == "replied" and replied.reply is not None
    assert replied.reply.startswith("deleted; told: While your calls were pending")
    assert "how is it going?" in replied.reply and "re: how is it going?" in replied.reply
    assert state.approvals[request.request_id].status == "approved"
    _assert_both_replied(state)


async def test_a_message_during_an_approval_wait_of_an_aside_turn_is_answered_too(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    """Asides nest: the first message's turn waits for an export; the second is answered aside
    and its call waits for an approval; the third, sent then, is answered at once. Each reply
    comes once its own wait ends: the second's with the approval, the first's with the job."""
    exports, deletions = steering_app.EXPORTS, steering_app.DELETIONS
    exports.__init__()  # type: ignore[misc]  # a fresh job system for this test
    deletions.__init__()  # type: ignore[misc]
    client = WaitstateClient(dev_env.client, task_queue=task_queue)
    thread_id = f"thread-steer-nested-{task_queue[-8:]}"
    start = thread_input(model="scripted:export-delete").model_copy(
        update={"tools": ["start_export_handle", "delete_records"]}
    )
    async with make_worker(dev_env.client, task_queue, apps=load_apps([APP])):
        first = await client.send_message(thread_id, "export please", start=start)

        async def job_running() -> bool:
            state = await client.query(thread_id)
            return any(op.status == "running" for op in state.operations.values())

        async def asked() -> ApprovalRequest | None:
            return await _open_approval(client, thread_id)

        await eventually(job_running, "the export job running")
        second = await client.send_message(thread_id, "delete please")
        request = await eventually(asked, "the deletion's approval request")
        third = await client.send_message(thread_id, "how is it going?")
        answered = await client.reply(thread_id, third.accepted.message_id, within=SOON)
        waiting = [await client.message(thread_id, m.accepted.message_id) for m in (first, second)]
        await _approve(dev_env, thread_id, request)
        deleted = await client.reply(thread_id, second.accepted.message_id, within=SOON)
        exports.done = True
        exported = await client.reply(thread_id, first.accepted.message_id, within=SOON)
        await replays(dev_env.client.get_workflow_handle(thread_id), "thread_steered_nested")

    assert (answered.status, answered.reply) == ("replied", "re: how is it going? (pending)")
    assert [m.status if m else None for m in waiting] == ["working", "working"]
    assert deleted.reply is not None and deleted.reply.startswith("deleted; told: While")
    assert (exported.status, exported.reply) == ("replied", "export done")
    assert (exports.started, deletions.ran) == (1, 1)
