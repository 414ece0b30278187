"""What docs/approvals.md says, checked against a real run on the dev server: where the notice
goes and what it carries, and what the model is told when a person rejects."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import Sequence
from typing import Any

import httpx
from temporalio.testing import WorkflowEnvironment

from examples.demo.refunds import refund_tools
from examples.systems import create_app as systems_app
from examples.systems import serving
from tests.docs import between, page
from tests.helpers import eventually, make_worker
from waitstate import Message, RunInput, ToolCall, ToolDefinition
from waitstate.apps import Apps
from waitstate.auth.tokens import ResumeTokens
from waitstate.client import WaitstateClient
from waitstate.schemas.approvals import DecideInput
from waitstate.settings import Settings

APPROVALS = page("docs/approvals.md")
WITHIN = 60.0


def _refund_and_report(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Asks for a refund over the approval threshold, then answers with the tool's result."""
    results = [m for m in messages if m.role == "tool"]
    if not results:
        arguments = json.dumps({"claim_id": "C-118", "amount": 420})
        call = ToolCall(id="call_0", name="issue_refund", arguments=arguments)
        return Message(role="assistant", tool_calls=[call])
    return Message(role="assistant", content=results[-1].content)


async def test_the_docs_say_where_notices_go_and_what_a_rejection_tells_the_model(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    client = WaitstateClient(dev_env.client, task_queue=task_queue)
    run_id = f"run-{uuid.uuid4()}"
    async with httpx.AsyncClient(timeout=10) as http, serving(systems_app()) as systems:
        worker = make_worker(
            dev_env.client,
            task_queue,
            tools=refund_tools(http, systems),
            settings=Settings(demo_systems_url=systems, gateway_url="http://127.0.0.1:9"),
            tokens=ResumeTokens({"readme": "r" * 40}, "readme"),
            apps=Apps(scripts={"refund-and-report": _refund_and_report}),
        )
        async with worker:
            run = RunInput(
                task="refund", model="scripted:refund-and-report", tools=["issue_refund"]
            )
            await client.start(run, run_id=run_id)

            async def notice() -> dict[str, Any] | None:
                entries = (await http.get(f"{systems}/approvals/outbox")).json()
                mine = [e["body"] for e in entries if e["body"]["workflow_id"] == run_id]
                return mine[0] if mine else None

            posted = await eventually(notice, "the approval notice in the outbox", WITHIN)
            decision = DecideInput(
                request_id=posted["request_id"],
                decision="reject",
                reviewer="lee",
                comment="over budget",
            )
            await client.decide(run_id, decision)
            async with asyncio.timeout(WITHIN):
                outcome = await client.outcome(run_id)

    # Where it goes, and what it carries: every field of the notice is named.
    where = between(APPROVALS, "**Where the notices go.**", "**What a rejection looks like")
    assert "`APPROVALS_OUTBOX_URL`" in where and "`GET /approvals/outbox`" in where
    unnamed = [key for key in posted if f"`{key}" not in where]
    assert unnamed == [], f"docs/approvals.md does not name {unnamed}"
    for kind in ("approve", "reject"):
        assert set(posted["links"][kind]) >= {"method", "url", "authorization"}
    # What the model is told: the page's example, as the model got it.
    told = between(APPROVALS, "**What a rejection looks like to the model.**", "\n## ")
    [example] = re.findall(r"```\n(\{.*?\})\n```", told, re.DOTALL)
    documented = json.loads(example.replace('"…"', json.dumps(posted["request_id"])))
    assert outcome.status == "completed"
    assert json.loads(outcome.final_output or "") == documented
