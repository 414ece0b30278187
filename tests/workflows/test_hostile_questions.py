"""Hostile questions and answers against the real dev server, gateway, demo systems and MCP
server (issue 22, defect 1).

A crafted answer (a backtracking pattern's worst case) is refused at once through the
question's link and through the CLI, while another run on the same worker process goes on
answering queries and taking its webhook.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import WorkflowHandle

from tests.helpers import eventually, replays
from tests.rigs import Stack, WorkerProcess, free_port, python_server
from tests.test_starter import Cli
from tests.workflows.conftest import KEYS
from waitstate.schemas import RunResult
from waitstate.schemas.questions import InputRequest
from workflows.agent_run import AgentRunWorkflow

APP = "tests.workflows.hostile_app:app"
# The crafted schema and answer: Python's `re` backtracks on them for minutes.
CRAFTED_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "pattern": "^(a+)+$"}},
}
CRAFTED_ANSWER = {"name": "a" * 30 + "!"}
# Far longer than a refusal takes on a loaded machine; far shorter than the backtracking.
QUICKLY = 15.0
# Bound on a run that should finish now: it only turns a wedged run into a failure.
FINISHES = 60.0


@pytest.fixture(scope="module")
def reports_url() -> Iterator[str]:
    """The MCP test server (tests/mcp/reports_server.py) over streamable HTTP."""
    port = free_port()
    with python_server(["-m", "tests.mcp.reports_server", str(port)], port):
        yield f"http://127.0.0.1:{port}/mcp"


@pytest.fixture
def cli(stack: Stack) -> Cli:
    address = stack.client.service_client.config.target_host
    return Cli(
        {**os.environ, "TEMPORAL_ADDRESS": address, "WAITSTATE_TASK_QUEUE": stack.task_queue}
    )


async def _question(handle: WorkflowHandle[Any, Any]) -> InputRequest:
    async def asked() -> InputRequest | None:
        state = await handle.query(AgentRunWorkflow.status)
        return next(iter(state.questions.values()), None)

    return await eventually(asked, "the run's question")


async def _link(stack: Stack, question: InputRequest) -> dict[str, str]:
    async def posted() -> dict[str, str] | None:
        entries = (await stack.http.get(f"{stack.systems_url}/approvals/outbox")).json()
        bodies = [entry["body"] for entry in entries]
        notice = next((b for b in bodies if b.get("question_id") == question.question_id), None)
        return notice["answer"] if notice else None

    return await eventually(posted, "the question's notice in the outbox")


def _got(result: RunResult) -> dict[str, Any]:
    return dict(json.loads((result.final_output or "").removeprefix("got: ")))


# --- a crafted answer ---------------------------------------------------------------------------


@asynccontextmanager
async def _worker_process(stack: Stack, reports_url: str, tmp_path: Path) -> AsyncIterator[None]:
    """`python worker.py` serving the app: a process of its own, as in production, so that a
    worker the answer wedges cannot wedge the test."""
    key_id, secret = next(iter(KEYS.items()))
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": stack.client.service_client.config.target_host,
        "WAITSTATE_TASK_QUEUE": stack.task_queue,
        "WAITSTATE_APPS": APP,
        "WAITSTATE_MCP_SERVERS": f"reports={reports_url}",
        "WAITSTATE_BLOB_DIR": str(tmp_path / "blobs"),
        "WAITSTATE_TOKEN_KEYS": f"{key_id}:{secret}",
        "GATEWAY_URL": stack.gateway_url,
        "DEMO_SYSTEMS_URL": stack.systems_url,
    }
    worker = WorkerProcess(env, tmp_path / "worker.log")
    await worker.start()
    try:
        yield
    finally:
        # Killed, not stopped: a worker stuck in a match (the defect) never gets to stop.
        await worker.kill()


async def test_a_crafted_answer_is_refused_at_once_and_the_worker_keeps_serving(
    stack: Stack, cli: Cli, reports_url: str, tmp_path: Path
) -> None:
    async with _worker_process(stack, reports_url, tmp_path):
        victim = await stack.start(
            json.dumps(CRAFTED_SCHEMA), ["reports__ask_with_schema"], model="scripted:ask-schema"
        )
        question = await _question(victim)
        link = await _link(stack, question)
        bystander = await stack.start("export", ["start_export"], model="scripted:export-once")

        async def by_link() -> tuple[httpx.Response, float]:
            began = asyncio.get_running_loop().time()
            response = await stack.http.post(
                link["url"],
                headers={"Authorization": link["authorization"]},
                json={"action": "accept", "content": CRAFTED_ANSWER, "responder": "mallory"},
                timeout=FINISHES,
            )
            return response, asyncio.get_running_loop().time() - began

        async def by_cli() -> tuple[Any, float]:
            began = asyncio.get_running_loop().time()
            done = await cli(
                "answer", victim.id, "--question", question.question_id,
                "--accept", json.dumps(CRAFTED_ANSWER),
            )  # fmt: skip
            return done, asyncio.get_running_loop().time() - began

        async def the_bystander_goes_on() -> RunResult:
            # While the crafted answers are checked: a query is answered, and the export's
            # webhook reaches its run, which finishes.
            await asyncio.wait_for(bystander.query(AgentRunWorkflow.status), QUICKLY)
            return await asyncio.wait_for(bystander.result(), FINISHES)

        # Each to its end, so that a failure says what became of all three.
        link_try, cli_try, bystander_try = await asyncio.gather(
            by_link(), by_cli(), the_bystander_goes_on(), return_exceptions=True
        )
        assert not isinstance(link_try, BaseException), repr(link_try)
        refused, link_seconds = link_try
        assert refused.status_code == 422, (refused.text, link_seconds, cli_try, bystander_try)
        assert not isinstance(cli_try, BaseException), repr(cli_try)
        assert not isinstance(bystander_try, BaseException), repr(bystander_try)
        (cli_done, cli_seconds), exported = cli_try, bystander_try
        # After: the victim's question still takes a real answer, and its run finishes.
        answered = await stack.http.post(
            link["url"],
            headers={"Authorization": link["authorization"]},
            json={"action": "accept", "content": {"name": "aaa"}, "responder": "ana"},
        )
        result = await asyncio.wait_for(victim.result(), FINISHES)
        await replays(victim, "mcp_task_question_crafted_answer_refused")

    error = refused.json()["error"]
    assert error["code"] == "invalid_answer"
    assert "name: 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!' does not match '^(a+)+$'" in error["message"]
    assert cli_done.code == 1, cli_done.stdout
    assert "does not match '^(a+)+$'" in cli_done.stderr
    assert link_seconds < QUICKLY and cli_seconds < QUICKLY, (link_seconds, cli_seconds)
    assert exported.status == "completed", exported.error
    assert _got(exported)["status"] == "succeeded"
    assert answered.status_code == 200, answered.text
    assert _got(result)["result"] == {
        "action": "accept",
        "content": {"name": "aaa"},
        "reason": None,
    }
