"""Figure 10: how soon a run goes on once the MCP task it waits for has ended, with task
notifications (`notifications/tasks` on a `subscriptions/listen` stream) against polling.

A run of ours (`caller`) calls an agent our MCP server serves (`approver`, through
`waitstate.mcp_server`, over real HTTP) as a task, and waits for it. The served run waits for an
operator's approval, which the bench gives at a random moment (so the end falls anywhere in the
calling run's poll cycle); the served run then ends. The wake latency is from the served run's
close (Temporal's close time) to the calling run's next model call (its `call_model` scheduled):
what the calling run took to notice, plus its poll's return.

The same app, worker and server each time, but for the server's `notify` (whether it serves the
stream). Polling runs at the interval the server suggests (`pollIntervalMs`): our server's
default, 2 s, and the client's own default when a server suggests none, 5 s.
"""

from __future__ import annotations

import asyncio
import os
import random
import statistics
import uuid
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import httpx
from temporalio.api.enums.v1 import EventType
from temporalio.testing import WorkflowEnvironment

from bench.figures import Row, Sizes
from bench.procs import dev_env
from examples.systems.serving import serving
from waitstate import Agent, App, Message, ToolDefinition
from waitstate.apps import load_apps
from waitstate.client import WaitstateClient
from waitstate.mcp import McpServer
from waitstate.mcp_server import CallerKeys, agent_server, http_app, shapes
from waitstate.schemas import ToolCall
from waitstate.schemas.approvals import ApprovalPolicy, DecideInput
from waitstate.schemas.run import RunInput
from waitstate.settings import Settings
from waitstate.worker import build_providers, build_worker

CALLER = "bench"
KEY = "n" * 40
AUTHORIZATION = "WAITSTATE_BENCH_FLEET_AUTHORIZATION"
CALL_MODEL = "call_model"
# The served run's approval is given this long after it opens, at random: the task's end falls
# anywhere in the calling run's poll cycle.
DECIDE_WITHIN_SECONDS = 5.0
MODES = (("notifications", True, 2.0), ("polling every 2 s", False, 2.0),
         ("polling every 5 s", False, 5.0))  # fmt: skip


def calls_the_fleet(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Calls the served agent once, then says it got its answer."""
    if not any(m.role == "tool" for m in messages):
        call = ToolCall(id="call-0", name="fleet__approver", arguments='{"task": "Delete it"}')
        return Message(role="assistant", content="", tool_calls=[call])
    return Message(role="assistant", content="got it")


APPROVER = Agent(
    "approver",
    model="scripted:ask-first",
    tools=["request_approval"],
    approval=ApprovalPolicy(approvers="operators"),
)
app = App(
    agents=[
        Agent("caller", model="scripted:calls-the-fleet", tools=["fleet__approver"]),
        APPROVER,
    ],
    scripts={"calls-the-fleet": calls_the_fleet},
)


async def figure10(sizes: Sizes, reps: int, log: Callable[[str], None]) -> list[Row]:
    """Wake latency after an MCP task's end, notified (ours) against polled (the floor)."""
    rows = [
        Row("10", f"wake after an MCP task ends, notified (floor: {name})", "s",
            target="< polled", check=lambda _, ratio: ratio is not None and ratio < 1)
        for name, _, _ in MODES[1:]
    ]  # fmt: skip
    async with dev_env() as env:
        for rep in range(reps):
            measured: dict[str, list[float]] = {}
            for name, notify, interval in MODES:
                measured[name] = await _samples(env, sizes.notice_samples, notify, interval)
                log(
                    f"  fig 10 rep {rep + 1} {name}: median "
                    f"{statistics.median(measured[name]):.2f} s, max {max(measured[name]):.2f} s"
                )
            for row, (name, _, _) in zip(rows, MODES[1:], strict=True):
                row.ours.append(statistics.median(measured[MODES[0][0]]))
                row.floor.append(statistics.median(measured[name]))
    return rows


async def _samples(env: WorkflowEnvironment, n: int, notify: bool, interval: float) -> list[float]:
    """`n` wake latencies, in seconds, with the server notifying or not."""
    os.environ[AUTHORIZATION] = f"Bearer {KEY}"
    task_queue = f"bench-notices-{uuid.uuid4().hex[:8]}"
    client = WaitstateClient(env.client, task_queue=task_queue)

    async def connect() -> WaitstateClient:
        return client

    server = agent_server(
        {"approver": APPROVER},
        connect=connect,
        auth=CallerKeys({CALLER: KEY}),
        approvals=False,
        poll_interval=timedelta(seconds=interval),
        notify=notify,
    )
    latencies = []
    async with serving(http_app(server)) as root:
        fleet = McpServer(
            "fleet", url=f"{root}/mcp", headers_from_env={"Authorization": AUTHORIZATION}
        )
        apps = load_apps(["bench.notices:app"], mcp_servers=[fleet])
        settings = Settings()
        providers = build_providers(settings, apps.providers, apps.scripts)
        async with httpx.AsyncClient(timeout=10) as http:
            worker = build_worker(
                env.client, settings, providers, apps.tools, http, task_queue=task_queue,
                agents=apps.agents, tool_deps=apps.tool_deps, mcp=apps.mcp,
            )  # fmt: skip
            async with worker:
                for _ in range(n):
                    latencies.append(await _one(client))
        await providers.aclose()
        await apps.aclose()
    return latencies


async def _one(client: WaitstateClient) -> float:
    """One calling run to its end: its wake latency after the served run's close."""
    run_id = f"bench-caller-{uuid.uuid4().hex[:12]}"
    await client.start(RunInput(task="Ask the fleet", agent="caller"), run_id=run_id)
    served_id = await _served(client, run_id)
    request_id = await _open_approval(client, served_id)
    await asyncio.sleep(random.uniform(0, DECIDE_WITHIN_SECONDS))
    await client.decide(
        served_id,
        DecideInput(request_id=request_id, decision="approve", reviewer="operator:bench"),
    )
    outcome = await client.handle(run_id).result()
    if outcome.status != "completed":
        raise RuntimeError(f"the calling run {run_id} ended {outcome.status}: {outcome.error}")
    closed = (await client.describe(served_id)).close_time
    if closed is None:
        raise RuntimeError(f"the served run {served_id} has not closed")
    calls = [
        e.event_time.ToDatetime().replace(tzinfo=closed.tzinfo)
        async for e in client.handle(run_id).fetch_history_events()
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == CALL_MODEL
    ]
    after = [call for call in calls if call >= closed]  # before it: turn 1, the wait's checkpoint
    if not after:
        raise RuntimeError(f"{run_id}: no model call after the task")
    return (min(after) - closed).total_seconds()


async def _served(client: WaitstateClient, run_id: str) -> str:
    """The served run the calling run's task is, once it started it."""
    async with asyncio.timeout(60):
        while True:
            state = await client.query(run_id)
            jobs = [op.job_id for op in state.operations.values() if op.job_id]
            if jobs:
                return shapes.run_id_of(CALLER, jobs[0])
            await asyncio.sleep(0.1)


async def _open_approval(client: WaitstateClient, served_id: str) -> str:
    async with asyncio.timeout(60):
        while True:
            try:
                opened: Any = await client.open_requests(served_id)
            except Exception:  # not started yet
                opened = []
            if opened:
                return str(opened[0].request_id)
            await asyncio.sleep(0.1)
