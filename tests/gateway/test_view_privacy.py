"""What a view link shows of a run: what happened, never what a person typed.

A run started with a distinctive task, its refund approved with a distinctive comment, and a
thread sent a distinctive message, each read through its view link (the event stream and the
timeline page it opens), on the dev server with a worker of the production wiring and the real
gateway over HTTP: none of those strings reaches the reader. The task stays the run's summary
in Temporal's Web UI, which is the operators'.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from examples.demo.basic import demo_tools
from examples.demo.refunds import refund_tools
from examples.systems import DemoSystems, serving
from examples.systems import create_app as systems_app
from tests.helpers import eventually, make_worker
from tests.rigs import REFUND_TASK, REFUND_TOOLS
from tests.workflows.threads_app import app as threads_app
from waitstate.apps import Apps
from waitstate.auth.operators import OperatorKeys
from waitstate.auth.tokens import ResumeTokens
from waitstate.client import RunEvents, WaitstateClient, thread_input
from waitstate.client._events import told
from waitstate.gateway.app import create_app
from waitstate.gateway.delivery import TemporalDeliverer
from waitstate.gateway.streams import EventDesk
from waitstate.schemas import RunInput
from waitstate.settings import Settings

KEYS = {"privacy": "p" * 40}
OPERATOR = "operator-key-privacy-0123456789abcdef0123"
WITHIN = 60.0  # only turns a hang into a failure
# What people typed, each distinctive enough that finding it anywhere is no accident.
TASK = f"{REFUND_TASK}: the customer is Wilhelmina Quackenbush-7731"
COMMENT = "approved after a call with Ottoline Marchbanks-5519"
MESSAGE = "my account number is 4471-Zanzibar-0038"
TYPED = ("Quackenbush", "Marchbanks", "Zanzibar")


@dataclass
class Rig:
    client: Client
    runs: WaitstateClient
    http: httpx.AsyncClient
    gateway_url: str
    systems: DemoSystems

    async def view_link(self, run_id: str) -> dict[str, Any]:
        answer = await self.http.post(
            f"{self.gateway_url}/v1/runs/{run_id}/view-link",
            headers={"Authorization": f"Bearer {OPERATOR}"},
        )
        assert answer.status_code == 200, answer.text
        link: dict[str, Any] = answer.json()
        return link

    async def read(self, url: str, last_id: str, headers: dict[str, str] | None = None) -> str:
        """The stream at `url`, as its reader gets it (every line), up to the event `last_id`."""
        lines: list[str] = []
        async with self.http.stream("GET", url, headers=headers or {}) as answer:
            assert answer.status_code == 200, await answer.aread()
            async for line in answer.aiter_lines():
                lines.append(line)
                if line == f"id: {last_id}":
                    break
        return "\n".join(lines)


@pytest.fixture
async def rig(dev_env: WorkflowEnvironment, task_queue: str) -> AsyncIterator[Rig]:
    tokens = ResumeTokens(KEYS, "privacy")
    systems = systems_app()
    desk = EventDesk(RunEvents(dev_env.client), tokens, OperatorKeys({"ops": OPERATOR}), "")
    gateway = create_app(TemporalDeliverer(dev_env.client), tokens, events=desk)
    async with (
        httpx.AsyncClient(timeout=WITHIN) as http,
        serving(systems) as systems_url,
        serving(gateway) as gateway_url,
    ):
        desk.gateway_url = gateway_url
        settings = Settings(
            gateway_url=gateway_url,
            demo_systems_url=systems_url,
            token_keys=KEYS,
            token_signing_key="privacy",
        )
        tools = [*demo_tools(), *refund_tools(http, systems_url)]
        apps = Apps(scripts=dict(threads_app.scripts))
        async with make_worker(
            dev_env.client, task_queue, tools=tools, settings=settings, tokens=tokens, apps=apps
        ):
            runs = WaitstateClient(dev_env.client, task_queue=task_queue)
            yield Rig(dev_env.client, runs, http, gateway_url, systems.state.systems)


async def _last_told(client: Client, run_id: str) -> str:
    """The id of the last event a reader of `run_id`'s current run gets of it, by now."""
    handle = client.get_workflow_handle(run_id)
    described = await handle.describe()
    events, _ = told(described.run_id, (await handle.fetch_history()).events)
    return events[-1].id


def _untyped(text: str) -> list[str]:
    return [typed for typed in TYPED if typed in text]


async def test_a_view_link_shows_no_task_comment_or_message(rig: Rig) -> None:
    started = await rig.runs.start(
        RunInput(task=TASK, tools=REFUND_TOOLS), run_id="run-privacy-refund"
    )
    notice = await eventually(
        lambda: _notice(rig.systems, started.run_id), "the refund's approval notice"
    )
    decision = notice["decision"]
    approved = await rig.http.post(
        decision["url"],
        json={"decision": "approve", "reviewer": "ana", "comment": COMMENT},
        headers={"Authorization": decision["authorization"]},
    )
    assert approved.status_code == 200, approved.text
    outcome = await rig.runs.outcome(started.run_id)
    sent = await rig.runs.send_message(
        "thread-privacy", MESSAGE, start=thread_input(model="scripted:chat-echo")
    )
    replied = await rig.runs.reply("thread-privacy", sent.accepted.message_id)

    refund = await rig.view_link(started.run_id)
    thread = await rig.view_link("thread-privacy")
    read = {
        "refund stream": await rig.read(
            refund["events_url"], await _last_told(rig.client, started.run_id)
        ),
        "thread stream": await rig.read(
            thread["events_url"], await _last_told(rig.client, "thread-privacy")
        ),
        # An operator reads the same stream: the task is the Web UI's, not the stream's.
        "refund stream, by operator key": await rig.read(
            f"{rig.gateway_url}/v1/runs/{started.run_id}/events",
            await _last_told(rig.client, started.run_id),
            headers={"Authorization": f"Bearer {OPERATOR}"},
        ),
        "refund page": (await rig.http.get(refund["url"])).text,
        "thread page": (await rig.http.get(thread["url"])).text,
    }
    described = await rig.client.get_workflow_handle(started.run_id).describe()
    summary = await described.static_summary()

    assert outcome.status == "completed"
    assert replied.status == "replied" and "Zanzibar" in (replied.reply or "")  # it was read
    assert "event: run.started" in read["refund stream"]
    assert "event: approval.decided" in read["refund stream"]
    assert "event: message.received" in read["thread stream"]
    assert {name: _untyped(text) for name, text in read.items()} == dict.fromkeys(read, [])
    assert summary == TASK  # the Web UI's, for operators


async def _notice(systems: DemoSystems, run_id: str) -> dict[str, Any] | None:
    bodies = [e.body for e in systems.outbox if e.body["workflow_id"] == run_id]
    return bodies[0] if bodies else None
