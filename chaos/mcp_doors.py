"""Class 18 (issue 39, "every door truthful"): waitstate's own MCP server, its calls sent again.

The driver serves an agent of the suite's (`chaos.app.EXPORTER`, the demo's export) over MCP (`waitstate.mcp_server`, in its own process,
on the stack's Temporal and main task queue, under the same worker kills as the rest) and calls
them as a client that retries does: each call carries an idempotency key
(`io.waitstate/idempotency-key`), and is sent in one of three ways:

- `twice`: sent, answered, and sent again (the same JSON-RPC request: id and body);
- `lost`: sent over a connection dropped once its run (or message) exists, its answer never
  read, then sent again;
- `together`: sent twice at once.

Any answer that is an error (a server that could not reach Temporal in time, under the kills) is
sent again with the same key until one is a task, as a client would. Half the keys are task runs
(an export, whose job the demo systems count), half messages, each to a thread of its own.

Once every task has ended, the row counts the runs and the messages there are: under the
caller's workflow ids (`shapes.runs_of`), one task run per key and no other, each with one export
job at the demo systems; one message per thread; every answer to a key the same task. A
duplicate is a second run, job or message, or an answer naming another task; a lost call, a key
with no run or message.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
from temporalio.client import Client
from temporalio.service import RPCError

from chaos import mcp_wire
from chaos.app import EXPORTER
from chaos.model import Check
from chaos.sizes import Size
from chaos.stack import MAIN_QUEUE
from examples.systems.serving import serving
from waitstate.client import ClientError, RunNotFound, WaitstateClient
from waitstate.mcp_server import CallerKeys, agent_server, http_app, shapes
from waitstate.schemas import RunInput

INVALID_PARAMS = -32602  # JSON-RPC's "invalid params": the call itself refused

log = logging.getLogger("chaos")

ROW = "20 MCP calls sent again with their keys: twice, after a lost answer, at once"
ROWS = (ROW,)
Fault = Literal["twice", "lost", "together"]
FAULTS: tuple[Fault, ...] = ("twice", "lost", "together")
CALLER = "chaos-doors"
AGENT = EXPORTER.name
EXPORT_TASK = "Export transactions for Q3 2025 to the compliance folder ({key})"
# How long an answer is waited for before the call is sent again (a client's timeout).
ANSWER_WITHIN = 60.0
RETRY_PAUSE = 0.5
ACTIVITY_TIMEOUT = RunInput.model_fields["model_timeout"].default.total_seconds()
LOOK_WITHIN = 120.0  # for what is there to be read (Temporal's list lags; the server restarts)


@dataclass
class Call:
    """One keyed call, and what the driver saw of it."""

    key: str
    fault: Fault
    thread: str | None = None
    answers: list[str] = field(default_factory=list)  # the task ids answered, every time
    errors: list[str] = field(default_factory=list)  # answers that were not a task, resent
    refused: list[str] = field(default_factory=list)  # refusals of the call itself (-32602)
    took: float | None = None  # seconds from its first send to its task's end

    @property
    def arguments(self) -> dict[str, Any]:
        task = EXPORT_TASK.format(key=self.key)
        return {"task": task} if self.thread is None else {"task": task, "thread": self.thread}


@dataclass
class Found:
    """What is there once the calls' tasks have ended: the caller's task runs (by workflow id,
    with their status), the export jobs each run started, and each thread's messages."""

    runs: dict[str, str]
    jobs: dict[str, int]
    messages: dict[str, int]


def check(calls: Iterable[Call], found: Found, caller: str = CALLER) -> list[str]:
    """The duplicates and lost calls among `calls`, from what is there (`found`)."""
    problems: list[str] = []
    expected: set[str] = set()
    for call in calls:
        tag = f"key {call.key} ({call.fault})"
        problems += [f"{tag}: refused: {why}" for why in call.refused]
        if not call.answers:
            problems.append(f"{tag}: lost: never answered with a task")
            continue
        if len(set(call.answers)) > 1:
            problems.append(f"{tag}: duplicate: answered with tasks {sorted(set(call.answers))}")
        if call.thread is not None:
            thread = shapes.thread_run_id(caller, AGENT, call.thread)
            received = found.messages.get(thread, 0)
            if received != 1:
                what = "lost: no message" if received == 0 else f"duplicate: {received} messages"
                problems.append(f"{tag}: {what} in its thread")
            continue
        run_id = shapes.run_id_of(caller, shapes.keyed_task_id(caller, call.key))
        expected.add(run_id)
        if run_id not in found.runs:
            problems.append(f"{tag}: lost: no run {run_id}")
        elif found.runs[run_id] != "completed":
            problems.append(f"{tag}: its run ended {found.runs[run_id]}")
        if shapes.run_id_of(caller, call.answers[0]) != run_id:
            problems.append(f"{tag}: answered with task {call.answers[0]}, not its key's")
        jobs = found.jobs.get(run_id, 0)
        if jobs != 1:
            problems.append(f"{tag}: {jobs} export jobs started by its run (one is due)")
    for run_id in sorted(set(found.runs) - expected):
        problems.append(f"duplicate: run {run_id} answers to no key")
    for run_id in sorted(set(found.jobs) - expected):
        problems.append(f"duplicate: run {run_id}, of no key, started {found.jobs[run_id]} jobs")
    return problems


def plan(size: Size) -> list[Call]:
    """`size.mcp_doors` keys per fault, for task runs and for thread messages alike."""
    calls = []
    for i in range(size.mcp_doors):
        for fault in FAULTS:
            calls.append(Call(f"run-{fault}-{i}-{secrets.token_hex(4)}", fault))
            key = f"msg-{fault}-{i}-{secrets.token_hex(4)}"
            calls.append(Call(key, fault, thread=f"t-{key}"))
    return calls


class McpDoors:
    """Class 18 on a stack: `run` during phase A, then `rows`."""

    def __init__(self, client: Client, systems_url: str, size: Size) -> None:
        self._runs = WaitstateClient(client, task_queue=MAIN_QUEUE)
        self._systems_url = systems_url
        self._calls = plan(size)
        self._secret = secrets.token_hex(24)
        self._found: Found | None = None
        self._note = ""
        self._seconds = 0.0

    async def run(self, result_timeout: float) -> None:
        """Serve the agents, send every call its way, wait for every task's end, and see what
        is there. A crash is the row's violation, not the suite's."""
        if not self._calls:
            return
        began = time.monotonic()
        agents = {AGENT: EXPORTER}

        async def connect() -> WaitstateClient:
            return self._runs

        server = agent_server(agents, connect=connect, auth=CallerKeys({CALLER: self._secret}))
        try:
            async with serving(http_app(server)) as root, httpx.AsyncClient(timeout=30) as http:
                url = f"{root}/mcp"
                # A run whose activity met a kill waits out its timeout (the default 120 s: an
                # MCP caller sets none) before it is tried again: twice is allowed for.
                async with asyncio.timeout(result_timeout + 2 * ACTIVITY_TIMEOUT):
                    await asyncio.gather(*(self._send(http, url, c) for c in self._calls))
                self._found = await self._look(http)
        except Exception as err:  # noqa: BLE001 - a crashed class is a failed row
            log.exception("class 20 crashed")
            self._note = f"crashed: {type(err).__name__}: {err}"
        self._seconds = time.monotonic() - began

    def rows(self) -> list[Check]:
        """The class's row."""
        if not self._calls:
            return []
        violations = [self._note] if self._note else []
        if self._found is not None:
            violations += check(self._calls, self._found)
        elif not self._note:
            violations.append("nothing was seen: the calls were never made")
        sent = sum(len(c.answers) + len(c.errors) for c in self._calls)
        resent = sum(len(c.errors) for c in self._calls)
        found = self._found or Found({}, {}, {})
        keys = len(self._calls)
        took = [c.took for c in self._calls if c.took is not None]
        slowest = f", the slowest task ended {max(took):.0f} s after its first send" if took else ""
        return [
            Check(
                ROW,
                attempts=keys,
                outcome=f"{keys} keys ({len(FAULTS)} ways, task runs and thread messages), "
                f"{sent} answers read, {resent} errors sent again; {len(found.runs)} runs, "
                f"{sum(found.jobs.values())} export jobs, {sum(found.messages.values())} "
                f"messages; duplicates and lost: {len(violations)}{slowest} (class {self._seconds:.0f} s)",
                violations=violations,
            )
        ]

    # --- sending -------------------------------------------------------------------------

    async def _send(self, http: httpx.AsyncClient, url: str, call: Call) -> None:
        began = time.monotonic()
        await self._sent(http, url, call)
        if call.answers:
            await self._ended(http, url, call)
            call.took = time.monotonic() - began

    async def _sent(self, http: httpx.AsyncClient, url: str, call: Call) -> None:
        request = mcp_wire.call(AGENT, call.arguments, key=call.key)
        if call.fault == "twice":
            await self._answered(http, url, request, call)
            await self._answered(http, url, request, call)
        elif call.fault == "together":
            await asyncio.gather(*(self._answered(http, url, request, call) for _ in range(2)))
        else:
            async with mcp_wire.unread(url, request, self._secret):
                try:
                    await self._exists(call)
                except TimeoutError:  # dropped all the same: what is there tells the rest
                    call.errors.append("not seen in Temporal while its connection was open")
            await self._answered(http, url, request, call)

    async def _answered(
        self, http: httpx.AsyncClient, url: str, request: dict[str, Any], call: Call
    ) -> None:
        """Send `request` until it is answered with a task: an error is sent again, but a
        refusal of the call itself (`-32602`), which is final."""
        headers = mcp_wire.headers(request, self._secret)
        while True:
            try:
                response = await http.post(
                    url, json=request, headers=headers, timeout=ANSWER_WITHIN
                )
                message = mcp_wire.message(response) or {}
            except httpx.HTTPError as err:
                message = {"error": {"message": f"{type(err).__name__}: {err}"}}
            result = message.get("result") or {}
            if "taskId" in result:
                call.answers.append(str(result["taskId"]))
                return
            error = message.get("error") or {"message": f"no JSON-RPC answer: {message}"}
            call.errors.append(str(error)[:300])
            if error.get("code") == INVALID_PARAMS:
                call.refused.append(str(error.get("message"))[:300])
                return
            await asyncio.sleep(RETRY_PAUSE)

    async def _exists(self, call: Call) -> None:
        """Until the call sent over the connection to be dropped has reached Temporal: its run
        started, or its thread took its message (the connection is dropped then)."""
        if call.thread is None:
            target = shapes.run_id_of(CALLER, shapes.keyed_task_id(CALLER, call.key))
        else:
            target = shapes.thread_run_id(CALLER, AGENT, call.thread)
        async with asyncio.timeout(ANSWER_WITHIN):
            while True:
                try:
                    if call.thread is None:
                        await self._runs.describe(target)
                        return
                    state = await self._runs.query(target)
                    if state.thread is not None and state.thread.received:
                        return
                except ClientError:
                    pass
                await asyncio.sleep(RETRY_PAUSE)

    # --- what is there -------------------------------------------------------------------

    async def _ended(self, http: httpx.AsyncClient, url: str, call: Call) -> None:
        """Until the call's task has ended (`tasks/get`)."""
        request = mcp_wire.body("tasks/get", {"taskId": call.answers[0]})
        headers = mcp_wire.headers(request, self._secret)
        while True:
            with contextlib.suppress(httpx.HTTPError):
                response = await http.post(url, json=request, headers=headers)
                task = ((mcp_wire.message(response) or {}).get("result")) or {}
                if task.get("status") in ("completed", "failed", "cancelled"):
                    return
            await asyncio.sleep(RETRY_PAUSE)

    async def _look(self, http: httpx.AsyncClient) -> Found:
        """What is there, once Temporal lists every task run that ended (its list lags), read
        again while Temporal or the systems cannot be read (the dev server restarted)."""
        expected = sum(1 for c in self._calls if c.thread is None and c.answers)
        async with asyncio.timeout(LOOK_WITHIN):
            while True:
                try:
                    found = await self._seen(http)
                except (ClientError, RPCError, RuntimeError, httpx.HTTPError) as err:
                    log.info("class 20: not read yet (%s: %s)", type(err).__name__, err)
                else:
                    if sum(1 for status in found.runs.values() if status != "running") >= expected:
                        return found
                await asyncio.sleep(RETRY_PAUSE)

    async def _seen(self, http: httpx.AsyncClient) -> Found:
        """The caller's task runs, the export jobs they started, and each thread's messages."""
        prefix = shapes.runs_of(CALLER)
        query = f'WorkflowId STARTS_WITH "{prefix}-" AND ExecutionStatus != "ContinuedAsNew"'
        runs = {
            run.id: (run.status.name.lower() if run.status else "unknown")
            async for run in self._runs.temporal.list_workflows(query)
        }
        response = await http.get(f"{self._systems_url}/_test/stats")
        response.raise_for_status()
        stats = response.json()
        jobs: dict[str, int] = {}
        for key, record in stats["keys"].items():
            run_id = key.split("/", 1)[0]
            if run_id.startswith(f"{prefix}-") and record.get("kind") == "export":
                jobs[run_id] = jobs.get(run_id, 0) + int(record.get("jobs_created", 0))
        messages: dict[str, int] = {}
        for call in self._calls:
            if call.thread is not None:
                thread = shapes.thread_run_id(CALLER, AGENT, call.thread)
                try:
                    state = await self._runs.query(thread)
                except RunNotFound:
                    messages[thread] = 0
                    continue
                messages[thread] = state.thread.received if state.thread else 0
        return Found(runs, jobs, messages)
