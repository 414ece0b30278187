"""The services both sides run against: one dev server, one model server, one stand-in for the
external systems, one gateway; and a worker process per side and figure."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import secrets
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError

from bench.floor import FLOOR_MODEL, FLOOR_WORKFLOW, FloorInput
from bench.procs import Proc, start_python, start_server
from bench.systems import BenchSystems
from bench.worker import READY
from scripts.services import free_port
from waitstate.auth.tokens import ResumeTokens
from waitstate.client import ClientError, WaitstateClient
from waitstate.converter import DATA_CONVERTER
from waitstate.gateway.delivery import TemporalDeliverer
from waitstate.schemas import RunInput
from waitstate.schemas.operations import Completion

Side = Literal["ours", "floor"]
SIDES: tuple[Side, ...] = ("ours", "floor")
MODEL_NAME = "bench"
CALL_MODEL = "call_model"
MAX_CACHED_WORKFLOWS = 100  # the production default (waitstate/settings.py), for both sides
RESULT_TIMEOUT = 300.0


@dataclass
class Stack:
    """The running services and a client."""

    state: Path
    server: Proc
    address: str
    wire: Proc
    wire_url: str
    systems: BenchSystems
    gateway: Proc | None
    gateway_url: str
    token_keys: str
    client: Client
    http: httpx.AsyncClient
    # Quick mode: one worker per side for the whole bench (starting one costs seconds).
    shared: bool = False
    _leased: dict[Side, tuple[str, Proc]] = field(default_factory=dict)

    @classmethod
    async def start(
        cls,
        pipeline_seconds: float,
        *,
        shared: Sequence[Side] = (),
        keep: Path | None = None,
    ) -> Stack:
        """Start every service on free ports, state under a fresh directory (independent ones
        at once). `shared`: the sides that get one worker for the whole bench (quick mode)."""
        state = Path(tempfile.mkdtemp(prefix="waitstate-bench-", dir=keep))
        (server, port), wire = await asyncio.gather(
            asyncio.to_thread(start_server, state),
            asyncio.to_thread(
                start_python, "wire", ["-m", "bench.wire"], _base_env(), state, "wire server on"
            ),
        )
        address = f"127.0.0.1:{port}"
        wire_port = int(wire.log.read_text().split("wire server on", 1)[1].split()[0])
        systems = BenchSystems(pipeline_seconds)
        gateway_port = free_port()
        token_keys = f"bench:{secrets.token_urlsafe(32)}"
        starting_gateway = asyncio.to_thread(
            start_python,
            "gateway",
            ["-m", "waitstate.gateway"],
            {
                **_base_env(),
                "TEMPORAL_ADDRESS": address,
                "GATEWAY_PORT": str(gateway_port),
                "WAITSTATE_TOKEN_KEYS": token_keys,
            },
            state,
            "gateway listening on",
        )
        # The converter production clients use (settings.connect), with a fixed address.
        client = await Client.connect(address, data_converter=DATA_CONVERTER)
        stack = cls(
            state, server, address, wire, f"http://127.0.0.1:{wire_port}/v1", systems,
            None, f"http://127.0.0.1:{gateway_port}", token_keys, client,
            httpx.AsyncClient(timeout=httpx.Timeout(60.0), limits=httpx.Limits(max_connections=64)),
            bool(shared),
        )  # fmt: skip
        leasing = asyncio.gather(*(stack.lease(side, "shared") for side in shared))
        stack.gateway, _ = await asyncio.gather(starting_gateway, leasing)
        return stack

    @functools.cached_property
    def runs(self) -> WaitstateClient:
        """Our side's runs, started and read as every caller does."""
        return WaitstateClient(self.client)

    async def close(self) -> None:
        """Stop every process this stack started and remove its state."""
        await self.http.aclose()
        for _, worker in self._leased.values():
            await asyncio.to_thread(worker.stop)
        for proc in (self.gateway, self.wire, self.server):
            if proc is not None:
                await asyncio.to_thread(proc.stop)
        self.systems.close()
        shutil.rmtree(self.state, ignore_errors=True)

    async def lease(
        self, side: Side, label: str, *, bytecode: bool = True, apps: str = ""
    ) -> tuple[str, Proc]:
        """A worker process of `side` and the task queue it polls: a fresh one, or in shared
        mode the side's one worker. `bytecode` False: a worker that compiles every module it
        imports from source (no bytecode cache read or written), as in many container
        images. `apps` (ours): the apps it serves (WAITSTATE_APPS), in a fresh worker."""
        if not self.shared or not bytecode or apps:
            queue = new_id(label)
            return queue, await self.worker(side, queue, bytecode=bytecode, apps=apps)
        if side not in self._leased:
            queue = new_id(f"shared-{side}")
            self._leased[side] = (queue, await self.worker(side, queue))
        return self._leased[side]

    async def release(self, worker: Proc) -> None:
        """Stop a leased worker, unless shared."""
        if all(worker is not leased for _, leased in self._leased.values()):
            await asyncio.to_thread(worker.stop)

    async def worker(
        self, side: Side, task_queue: str, *, bytecode: bool = True, apps: str = ""
    ) -> Proc:
        """A fresh worker process for `side`, polling `task_queue` (serving `apps`, ours)."""
        env = self.worker_env(task_queue) | ({"WAITSTATE_APPS": apps} if apps else {})
        if not bytecode:
            # Neither written nor read: an empty cache prefix hides the checkout's .pyc files.
            cache = Path(tempfile.mkdtemp(prefix="no-bytecode-", dir=self.state))
            env |= {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": str(cache)}
        name = f"worker-{side}-{task_queue}"
        return await asyncio.to_thread(
            start_python, name, ["-m", "bench.worker", side], env, self.state, READY
        )

    def worker_env(self, task_queue: str) -> dict[str, str]:
        """The environment of a worker process (either side) polling `task_queue`."""
        return {
            **_base_env(),
            "TEMPORAL_ADDRESS": self.address,
            "WAITSTATE_TASK_QUEUE": task_queue,
            "OPENAI_BASE_URL": self.wire_url,
            "OPENAI_API_KEY": "bench",
            "DEMO_SYSTEMS_URL": self.systems.url,
            "GATEWAY_URL": self.gateway_url,
            "WAITSTATE_TOKEN_KEYS": self.token_keys,
            "WAITSTATE_BLOB_DIR": str(self.state / "blobs"),
            "WAITSTATE_STATE_DIR": str(self.state),
            "WAITSTATE_MAX_CACHED_WORKFLOWS": str(MAX_CACHED_WORKFLOWS),
        }

    async def start_run(
        self, side: Side, task_queue: str, workflow_id: str, task: str, tool: str, max_turns: int
    ) -> WorkflowHandle[Any, Any]:
        """Start one run of `side` offering `tool`."""
        if side == "ours":
            run = RunInput(
                task=task, model=f"openai:{MODEL_NAME}", tools=[tool], max_turns=max_turns
            )
            # As `starter.py run` starts a run: the one client's start.
            await self.runs.start(run, run_id=workflow_id, task_queue=task_queue)
            return self.runs.handle(workflow_id)
        return await self.client.start_workflow(
            FLOOR_WORKFLOW,
            FloorInput(task=task, model=MODEL_NAME, tool=tool, max_turns=max_turns),
            id=workflow_id,
            task_queue=task_queue,
            result_type=str,
        )

    async def result(self, side: Side, handle: WorkflowHandle[Any, Any]) -> None:
        """Wait for a run's result; it must have completed with an answer.

        Raises:
            RuntimeError: the run ended otherwise.
        """
        if side == "ours":
            outcome = await asyncio.wait_for(self.runs.outcome(handle.id), RESULT_TIMEOUT)
            if outcome.status != "completed":
                raise RuntimeError(f"run {handle.id} ended {outcome.status}: {outcome.error}")
            return
        result = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)
        if not result:
            raise RuntimeError(f"floor run {handle.id} gave no answer")

    async def waiting(
        self, side: Side, handle: WorkflowHandle[Any, Any], every: float = 0.01
    ) -> None:
        """Return once the run waits for its job (for ours: after its checkpoint)."""
        deadline = time.monotonic() + RESULT_TIMEOUT
        while time.monotonic() < deadline:
            try:
                if side == "ours":
                    if (await self.runs.query(handle.id)).status == "waiting":
                        return
                elif await handle.query("waiting", result_type=bool):
                    return
            except (ClientError, RPCError):
                pass  # a query times out when the worker is saturated: ask again later
            await asyncio.sleep(every)
            every = min(every * 2, 0.5)  # a query is a task for the worker: ask less and less
        raise RuntimeError(f"run {handle.id} never waited")

    async def complete(
        self, side: Side, handle: WorkflowHandle[Any, Any], *, direct: bool = False
    ) -> None:
        """Finish a run's job: the webhook through the gateway (ours), a signal (floor).

        `direct` (ours): the gateway's Update, sent by this process with the gateway's own
        delivery code, without the HTTP hop (to tell the gateway's share of a resume apart).

        Raises:
            RuntimeError: the gateway refused the webhook.
        """
        result = {"file": "exports/transactions-2025-Q3.csv", "rows": 1200}
        if side == "floor":
            await handle.signal("complete", json.dumps(result))
            return
        export = self.systems.export_for(handle.id)
        if export is None or export.callback_url is None or export.callback_token is None:
            raise RuntimeError(f"run {handle.id} started no export with a callback")
        if direct:
            key_id, secret = self.token_keys.split(":", 1)
            claims = ResumeTokens({key_id: secret}, key_id).verify(export.callback_token)
            completion = Completion(status="succeeded", result=result)
            await TemporalDeliverer(self.client).complete(claims, completion, uuid.uuid4().hex)
            return
        response = await self.http.post(
            export.callback_url,
            headers={"Authorization": f"Bearer {export.callback_token}"},
            json={"status": "succeeded", "result": result},
        )
        if response.status_code != 200:
            raise RuntimeError(f"gateway answered {response.status_code}: {response.text}")

    async def history(
        self, workflow_id: str, run_id: str | None = None
    ) -> list[list[HistoryEvent]]:
        """The events of every run in the continue-as-new chain starting at `run_id`."""
        runs: list[list[HistoryEvent]] = []
        next_run: str | None = run_id
        while True:
            handle = self.client.get_workflow_handle(workflow_id, run_id=next_run)
            events = [event async for event in handle.fetch_history_events()]
            runs.append(events)
            next_run = None
            for event in events:
                if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
                    attributes = event.workflow_execution_continued_as_new_event_attributes
                    next_run = attributes.new_execution_run_id
            if not next_run:
                return runs

    async def count(self, query: str) -> int:
        """How many runs match a visibility query."""
        return (await self.client.count_workflows(query)).count


def model_activity(side: Side) -> str:
    """The activity type of a side's model calls."""
    return CALL_MODEL if side == "ours" else FLOOR_MODEL


def history_bytes(runs: Iterable[list[HistoryEvent]]) -> int:
    """Serialized size of every event, summed over the runs."""
    return sum(event.ByteSize() for events in runs for event in events)


@dataclass(frozen=True)
class ActivityTimes:
    """When one activity was scheduled, started and closed (epoch seconds), and its summary."""

    kind: str
    summary: str
    scheduled: float
    started: float
    closed: float | None


def activity_times(events: list[HistoryEvent]) -> list[ActivityTimes]:
    """Each activity of a history, in order."""
    kinds: dict[int, tuple[str, str, float]] = {}
    started: dict[int, float] = {}
    closed: dict[int, float] = {}
    for event in events:
        when = event.event_time.seconds + event.event_time.nanos / 1e9
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attributes = event.activity_task_scheduled_event_attributes
            summary = event.user_metadata.summary.data.decode(errors="replace").strip('"')
            kinds[event.event_id] = (attributes.activity_type.name, summary, when)
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            started[event.activity_task_started_event_attributes.scheduled_event_id] = when
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            closed[event.activity_task_completed_event_attributes.scheduled_event_id] = when
    return [
        ActivityTimes(kind, summary, at, started.get(event_id, at), closed.get(event_id))
        for event_id, (kind, summary, at) in sorted(kinds.items())
    ]


def new_id(prefix: str) -> str:
    """A unique, readable id."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def _base_env() -> dict[str, str]:
    # No stray provider keys or addresses from the caller's shell reach the processes. Bytecode
    # is cached (as in production): the workflow sandbox re-imports the workflow's module for
    # every run it builds, and compiling it from source each time would dominate the figures.
    drop = (
        "OPENAI_", "ANTHROPIC_", "TEMPORAL_", "WAITSTATE_", "GATEWAY_", "DEMO_SYSTEMS",
        "PYTHONDONTWRITEBYTECODE",
    )  # fmt: skip
    return {key: value for key, value in os.environ.items() if not key.startswith(drop)}
