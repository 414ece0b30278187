"""The issue's first done-when point, as a drill: the official Python SDK's client sends the demo
agent a refund that needs a person's approval and sees the task `input-required`; then every
process of ours is SIGKILLed (the A2A server, the worker, the gateway and the Temporal dev
server, on its SQLite file) and started again; a new client of the restarted server finds the
task where it was, approves it, and gets the completed task with the answer: one refund, one
approval. The task was started with a push config: the client's webhook (the test's own, alive
throughout) gets each state of the task once, across the kills."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from a2a.helpers.proto_helpers import get_artifact_text
from a2a.types import (
    GetTaskRequest,
    SendMessageConfiguration,
    SendMessageRequest,
    TaskPushNotificationConfig,
    TaskState,
)

from tests.a2a.receiver import PUSH_ENV, Push, receiving
from tests.a2a.serving import ALICE, agent_url, message, sdk_client, send
from tests.helpers import eventually
from tests.rigs import ServerProcess, Services, port_open, service_port
from waitstate.a2a import shapes
from waitstate.client import WaitstateClient

pytestmark = [pytest.mark.subprocess, pytest.mark.temporal]

DEMO = "examples.demo.app:app"
REFUND = "Issue a refund of $600 for claim C-305"
TOKEN = "drill-token-" + "d" * 30
STATES = [
    "TASK_STATE_WORKING",
    "TASK_STATE_INPUT_REQUIRED",
    "TASK_STATE_WORKING",
    "TASK_STATE_COMPLETED",
]


@pytest.fixture
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    env: dict[str, str | None] = {**PUSH_ENV}
    with Services(tmp_path_factory.mktemp("state"), env).up() as running:
        yield running


def _kill(services: Services, name: str) -> None:
    os.kill(int((services.state / f"{name}.pid").read_text()), signal.SIGKILL)


async def test_a_task_survives_a_sigkill_of_every_process(
    services: Services, tmp_path: Path
) -> None:
    port = service_port()
    args = ["-m", "waitstate.a2a", "--app", DEMO, "--port", str(port)]
    env = {**services.env, "WAITSTATE_A2A_CALLER_KEYS": f"alice:{ALICE}"}
    server = ServerProcess(args, port, tmp_path / "a2a.log", env)
    url = agent_url(server, "demo")
    await server.start()
    async with receiving() as receiver:
        try:
            async with sdk_client(url, ALICE) as alice:
                push = TaskPushNotificationConfig(id="hook", url=receiver.url, token=TOKEN)
                request = SendMessageRequest(
                    message=message(REFUND),
                    configuration=SendMessageConfiguration(task_push_notification_config=push),
                )
                [sent] = [event async for event in alice.send_message(request)]
            task = sent.task
            asked = task.status.message.parts[0].text

            async def asking_pushed() -> bool:
                return len(receiver.pushes) >= 2

            # Both pushes taken before the kills: none is in flight as every process dies.
            await eventually(asking_pushed, "the working and input-required pushes")

            # Every process, killed: none gets to finish anything.
            await server.kill()
            for name in ("worker", "gateway", "server"):
                _kill(services, name)

            async def all_gone() -> bool:
                ports = (services.port, services.gateway_port, port)
                return not any(port_open(each) for each in ports)

            await eventually(all_gone, "the killed processes' ports to close")
            up = await services.services("up")
            assert up.returncode == 0, up.stderr + up.stdout
            for name in ("server", "worker", "gateway"):
                assert f"{name} started" in up.stdout, up.stdout
            await server.start()

            async with sdk_client(url, ALICE) as alice:
                after = await alice.get_task(GetTaskRequest(id=task.id))
                await send(alice, message("approve", task_id=task.id))

                async def completed() -> object:
                    read = await alice.get_task(GetTaskRequest(id=task.id))
                    return read if read.status.state == TaskState.TASK_STATE_COMPLETED else None

                done = await eventually(completed, "the approved task to complete", within=120)

            async def all_pushed() -> bool:
                return len(receiver.pushes) >= len(STATES)

            await eventually(all_pushed, "the completed push")
            async with httpx.AsyncClient(timeout=30) as http:
                refunds = (await http.get(f"{services.systems_url}/refunds")).json()
            client = WaitstateClient(await services.client())
            state = await client.query(shapes.run_id_of("alice", "demo", task.id))
        finally:
            await server.stop()
        pushes = list(receiver.pushes)

    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert "issue_refund" in asked
    # The restarted server found the task where it was, from Temporal alone.
    assert after.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert after.status.message.parts[0].text == asked
    assert done.status.state == TaskState.TASK_STATE_COMPLETED  # type: ignore[attr-defined]
    assert "Refunded $600 for claim C-305" in get_artifact_text(done.artifacts[0])  # type: ignore[attr-defined]
    assert [r["claim_id"] for r in refunds].count("C-305") == 1, "one refund, not two"
    [approval] = state.approvals.values()
    assert approval.decision is not None and approval.decision.reviewer == "a2a:alice"
    # A push per state, each once (by count and by idempotency key), across the kills.
    by_seq = sorted(pushes, key=_seq)
    assert [p.state for p in by_seq] == STATES
    assert [p.key for p in by_seq] == [f"{task.id}:{seq}" for seq in range(1, len(STATES) + 1)]
    assert all(p.signed_with(TOKEN) and p.answered == 200 for p in pushes)


def _seq(push: Push) -> int:
    return int(push.key.rpartition(":")[2])
