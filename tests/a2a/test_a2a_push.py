"""A2A push notifications, over real HTTP: the official Python SDK's client starts a task with a
push config, and a webhook of the test's (`receiver.py`) gets each state of the task once
(working, input-required, working again once approved, completed), signed and carrying the
client's token; a receiver that fails twice gets the push on the third try; one that refuses it
is given up on, and the run goes on; bad configs are refused, changing nothing."""

from __future__ import annotations

from collections import Counter

import httpx
import pytest
from a2a.client import A2ACardResolver, Client
from a2a.types import (
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigsRequest,
    SendMessageConfiguration,
    SendMessageRequest,
    Task,
    TaskPushNotificationConfig,
)
from a2a.utils.errors import (
    InvalidParamsError,
    PushNotificationNotSupportedError,
    TaskNotFoundError,
)
from temporalio.testing import WorkflowEnvironment

from tests.a2a.receiver import Receiver, receiving
from tests.a2a.serving import ALICE, BOB, agent_url, message, sdk_client, send
from tests.helpers import eventually
from tests.rigs import ServerProcess
from waitstate.a2a import shapes
from waitstate.client import WaitstateClient

pytestmark = pytest.mark.subprocess

TOKEN = "client-token-" + "t" * 30
DONE = ["TASK_STATE_WORKING", "TASK_STATE_INPUT_REQUIRED", "TASK_STATE_WORKING"]
ALL_STATES = [*DONE, "TASK_STATE_COMPLETED"]


def _config(url: str, config_id: str = "hook", token: str = TOKEN) -> TaskPushNotificationConfig:
    return TaskPushNotificationConfig(id=config_id, url=url, token=token)


async def _start(client: Client, receiver: Receiver) -> Task:
    """A task of the approver with a push config to `receiver`: its input-required answer."""
    request = SendMessageRequest(
        message=message("Delete the q3 drafts"),
        configuration=SendMessageConfiguration(task_push_notification_config=_config(receiver.url)),
    )
    [sent] = [event async for event in client.send_message(request)]
    return sent.task


async def _pushed(receiver: Receiver, states: list[str], what: str) -> list[str]:
    async def taken() -> list[str] | None:
        got = [p.state for p in sorted(receiver.taken(), key=lambda p: p.key)]
        return got if len(got) >= len(states) else None

    return await eventually(taken, what, within=60)


def _by_seq(receiver: Receiver) -> list[str]:
    """The states taken, in the order of their changes (`TASK:SEQ`)."""
    return [p.state for p in sorted(receiver.taken(), key=lambda p: int(p.key.rpartition(":")[2]))]


async def test_each_state_is_pushed_once_signed_with_the_clients_token(
    served: ServerProcess,
) -> None:
    url = agent_url(served, "approver")
    async with httpx.AsyncClient() as http:
        card = await A2ACardResolver(http, url).get_agent_card()
    async with receiving() as receiver, sdk_client(url, ALICE) as alice:
        task = await _start(alice, receiver)
        await _pushed(receiver, DONE[:2], "the input-required push")
        listed = await alice.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task.id)
        )
        await send(alice, message("approve", task_id=task.id))
        await _pushed(receiver, ALL_STATES, "the completed push")
        pushes = list(receiver.pushes)

    assert card.capabilities.push_notifications
    assert [c.id for c in listed.configs] == ["hook"]
    assert not listed.configs[0].token, "the token is not shown back"
    # Each state once: by count and by idempotency key (TASK:SEQ), none retried.
    assert _by_seq(receiver) == ALL_STATES
    keys = [p.key for p in pushes]
    assert sorted(keys) == sorted({f"{task.id}:{seq}" for seq in range(1, 5)})
    assert Counter(keys).most_common(1)[0][1] == 1
    for push in pushes:
        assert push.headers["x-a2a-notification-token"] == TOKEN
        assert push.signed_with(TOKEN)  # no WAITSTATE_A2A_PUSH_KEY: signed with the token
        assert push.task["id"] == task.id
    asking = next(p for p in pushes if p.state == "TASK_STATE_INPUT_REQUIRED")
    assert asking.task["status"]["message"]["parts"][0]["text"].startswith("Approve")
    completed = next(p for p in pushes if p.state == "TASK_STATE_COMPLETED")
    assert "approved" in completed.task["artifacts"][0]["parts"][0]["text"]


async def test_a_receiver_that_fails_twice_gets_the_push_and_one_that_refuses_is_given_up_on(
    served: ServerProcess, dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    url = agent_url(served, "approver")
    async with (
        receiving(answers=[500, 503]) as flaky,
        receiving(answers=[400]) as refusing,
        sdk_client(url, ALICE) as alice,
    ):
        task = await _start(alice, flaky)
        # A second config, set on the task that runs: it is told the state at once.
        await alice.create_task_push_notification_config(
            TaskPushNotificationConfig(
                id="refusing", task_id=task.id, url=refusing.url, token=TOKEN
            )
        )
        await _pushed(flaky, DONE[:2], "the input-required push, after two failures")

        async def refused_once() -> bool:
            return bool(refusing.pushes)

        await eventually(refused_once, "the refusing receiver's first push")
        await send(alice, message("approve", task_id=task.id))
        await _pushed(flaky, ALL_STATES, "the completed push")
        await _pushed(refusing, ALL_STATES[2:], "the refusing receiver's later pushes")
        state = await WaitstateClient(dev_env.client, task_queue=task_queue).query(
            shapes.run_id_of("alice", "approver", task.id)
        )

    assert _by_seq(flaky) == ALL_STATES
    assert [p.answered for p in flaky.pushes[:3]] == [500, 503, 200]
    assert flaky.pushes[0].key == flaky.pushes[2].key, "the same push, retried"
    # The refused push was not tried again; the run went on, and pushed its later states.
    assert refusing.pushes[0].answered == 400
    assert Counter(p.key for p in refusing.pushes).most_common(1)[0][1] == 1
    assert state.status == "completed"


async def test_bad_push_configs_are_refused_and_change_nothing(
    served: ServerProcess, dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    url = agent_url(served, "approver")
    async with receiving() as receiver, sdk_client(url, ALICE) as alice:
        bad = [
            _config("ftp://127.0.0.1/hook"),
            _config("http://example.com/hook"),  # plain http only to a loopback host
            # Not public, and not in the networks its operator allows (loopback, here).
            _config("https://169.254.169.254/latest/meta-data"),
            _config("https://[::ffff:10.0.0.1]/hook"),
            _config(receiver.url, token="x" * 600),
            _config(receiver.url, config_id="no spaces"),
        ]
        for config in bad:
            request = SendMessageRequest(
                message=message("Delete the q3 drafts"),
                configuration=SendMessageConfiguration(task_push_notification_config=config),
            )
            with pytest.raises(InvalidParamsError):
                await send_request(alice, request)
        listed = dev_env.client.list_workflows(f"TaskQueue = '{task_queue}'")
        started = [w.id async for w in listed]

        task = await _start(alice, receiver)
        for n in range(4):  # five in all, with the first
            await alice.create_task_push_notification_config(
                TaskPushNotificationConfig(
                    id=f"more-{n}", task_id=task.id, url=receiver.url, token=TOKEN
                )
            )
        with pytest.raises(InvalidParamsError) as too_many:
            await alice.create_task_push_notification_config(
                TaskPushNotificationConfig(id="sixth", task_id=task.id, url=receiver.url)
            )
        with pytest.raises(InvalidParamsError):
            await alice.create_task_push_notification_config(
                TaskPushNotificationConfig(id="ftp", task_id=task.id, url="ftp://127.0.0.1/x")
            )
        await alice.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="more-0")
        )
        got = await alice.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=task.id, id="more-1")
        )
        listed_after = await alice.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task.id)
        )
        async with sdk_client(url, BOB) as bob:
            with pytest.raises(TaskNotFoundError):  # Alice's task, as Bob sees it: none
                await bob.create_task_push_notification_config(
                    TaskPushNotificationConfig(id="bobs", task_id=task.id, url=receiver.url)
                )
            with pytest.raises(TaskNotFoundError):
                await bob.list_task_push_notification_configs(
                    ListTaskPushNotificationConfigsRequest(task_id=task.id)
                )
        with pytest.raises(PushNotificationNotSupportedError):
            await alice.create_task_push_notification_config(
                TaskPushNotificationConfig(
                    id="hook", task_id="ctx.message", url=receiver.url, token=TOKEN
                )
            )

    assert started == [], "a refused config starts nothing"
    assert "at most 5" in str(too_many.value)
    assert (got.id, got.url) == ("more-1", receiver.url)
    assert sorted(c.id for c in listed_after.configs) == ["hook", "more-1", "more-2", "more-3"]


async def send_request(client: Client, request: SendMessageRequest) -> list[object]:
    return [event async for event in client.send_message(request)]


async def test_a_canceled_task_pushes_canceled(served: ServerProcess) -> None:
    url = agent_url(served, "approver")
    async with receiving() as receiver, sdk_client(url, ALICE) as alice:
        task = await _start(alice, receiver)
        await _pushed(receiver, DONE[:2], "the input-required push")
        await alice.cancel_task(CancelTaskRequest(id=task.id))
        await _pushed(receiver, [*DONE[:2], "TASK_STATE_CANCELED"], "the canceled push")

    assert _by_seq(receiver) == [*DONE[:2], "TASK_STATE_CANCELED"]
    assert receiver.pushes[-1].task["status"]["message"]["parts"][0]["text"]
