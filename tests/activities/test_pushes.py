"""The `post_push` activity against a receiver of the test's (in its event loop): the task as
A2A's StreamResponse, signed with the workers' key when one is set (else the token), the
config's credentials; a 5xx or a closed port retried, a 4xx or a redirect final. Run in an
ActivityEnvironment."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime

import httpx
import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from tests.a2a.receiver import receiving
from tests.rigs import free_port
from waitstate.activities import PushActivities
from waitstate.schemas.errors import PUSH_REFUSED
from waitstate.schemas.pushes import PostPush, PushConfig, TaskSnapshot

KEY = "w" * 40
TOKEN = "t" * 40
RUN_ID = "a2a-0123456789abcdef-ctx.msg"


def _push(url: str, state: str = "completed") -> PostPush:
    snapshot = TaskSnapshot.model_validate(
        {
            "seq": 7,
            "state": state,
            "at": datetime(2026, 12, 5, tzinfo=UTC),
            "status": "completed",
            "answer": "done",
        }
    )
    config = PushConfig(
        id="hook", url=url, token=TOKEN, auth_scheme="Bearer", auth_credentials="cred"
    )
    return PostPush(config=config, task=snapshot)


def _environment() -> ActivityEnvironment:
    environment = ActivityEnvironment()
    environment.info = dataclasses.replace(environment.info, workflow_id=RUN_ID)
    return environment


async def test_a_push_is_the_task_signed_with_the_workers_key() -> None:
    async with receiving() as receiver, httpx.AsyncClient() as http:
        await _environment().run(PushActivities(http, KEY, {}).post_push, _push(receiver.url))
    [push] = receiver.pushes

    assert push.task["id"] == "ctx.msg" and push.task["contextId"] == "ctx"
    assert push.state == "TASK_STATE_COMPLETED"
    assert push.task["artifacts"][0]["parts"][0]["text"] == "done"
    assert push.key == "ctx.msg:7"
    assert push.headers["x-a2a-notification-token"] == TOKEN
    assert push.headers["authorization"] == "Bearer cred"
    assert push.signed_with(KEY) and not push.signed_with(TOKEN)
    assert json.loads(push.body) == {"task": push.task}


@pytest.mark.parametrize(("answer", "retried"), [(500, True), (429, True), (400, False)])
async def test_what_a_receivers_answer_means(answer: int, retried: bool) -> None:
    async with receiving(answers=[answer]) as receiver, httpx.AsyncClient() as http:
        with pytest.raises(ApplicationError) as failed:
            await _environment().run(PushActivities(http, None, {}).post_push, _push(receiver.url))

    assert failed.value.non_retryable is not retried
    assert (failed.value.type == PUSH_REFUSED) is not retried


async def test_a_receiver_that_is_down_is_tried_again() -> None:
    url = f"http://127.0.0.1:{free_port()}/hook"
    async with httpx.AsyncClient() as http:
        with pytest.raises(ApplicationError) as failed:
            await _environment().run(PushActivities(http, None, {}).post_push, _push(url))

    assert not failed.value.non_retryable
