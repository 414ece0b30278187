"""The issue's first done-when point, as a drill: the official Python SDK's client sends the demo
agent a refund that needs a person's approval and sees the task `input-required`; then every
process of ours is SIGKILLed (the A2A server, the worker, the gateway and the Temporal dev
server, on its SQLite file) and started again; a new client of the restarted server finds the
task where it was, approves it, and gets the completed task with the answer: one refund, one
approval."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from a2a.helpers.proto_helpers import get_artifact_text
from a2a.types import GetTaskRequest, TaskState

from tests.a2a.serving import ALICE, agent_url, message, sdk_client, send
from tests.helpers import eventually
from tests.rigs import ServerProcess, Services, port_open, service_port
from waitstate.a2a import shapes
from waitstate.client import WaitstateClient

pytestmark = [pytest.mark.subprocess, pytest.mark.temporal]

DEMO = "examples.demo.app:app"
REFUND = "Issue a refund of $600 for claim C-305"


@pytest.fixture
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    with Services(tmp_path_factory.mktemp("state")).up() as running:
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
    try:
        async with sdk_client(url, ALICE) as alice:
            [sent] = await send(alice, message(REFUND))
        task = sent.task
        asked = task.status.message.parts[0].text

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
        async with httpx.AsyncClient(timeout=30) as http:
            refunds = (await http.get(f"{services.systems_url}/refunds")).json()
        client = WaitstateClient(await services.client())
        state = await client.query(shapes.run_id_of("alice", "demo", task.id))
    finally:
        await server.stop()

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
