"""What tests stand up: the Temporal servers, the stacks of real systems a run works against, a
worker process, and the gateway with a recording deliverer. The fixtures that yield them live in
the `conftest.py` beside the tests that use them; test modules import the types from here."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import httpx
import uvicorn
from fastapi import FastAPI
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.client import Client, WorkflowHandle
from temporalio.common import SearchAttributeIndexedValueType
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from examples.demo.basic import demo_tools
from examples.demo.compliance import compliance_tools
from examples.demo.exports import ExportService, export_tool
from examples.demo.pipeline import EnrichmentPipeline, enrich_tool
from examples.demo.refunds import refund_tools
from examples.systems import DemoSystems, JobRecord, serving
from examples.systems import create_app as systems_app
from scripts.services import ONE_PARTITION
from tests.helpers import TEST_BLOBS, eventually, make_worker, process_env, start_run
from waitstate.apps import Apps
from waitstate.auth.operators import OperatorKeys
from waitstate.auth.tokens import ResumeClaims, ResumeTokens
from waitstate.client import RunEvents, WaitstateClient
from waitstate.converter import DATA_CONVERTER
from waitstate.gateway.app import DEFAULT_MAX_BODY_BYTES
from waitstate.gateway.app import create_app as gateway_app
from waitstate.gateway.delivery import DELIVERY_TIMEOUT, TemporalDeliverer
from waitstate.gateway.streams import EventDesk
from waitstate.gateway.threads import ThreadDesk
from waitstate.schemas import RunInput, RunResult, RunState
from waitstate.schemas.approvals import DecideOutcome, DecisionBody
from waitstate.schemas.operations import CheckOutcome, Completion, CompletionOutcome, ResultMode
from waitstate.schemas.questions import AnswerBody, AnswerOutcome
from waitstate.settings import Settings
from waitstate.tools import ToolSpec
from waitstate.workflows.agent_run import AgentRunWorkflow
from waitstate.workflows.search_attributes import ALL as SEARCH_ATTRIBUTES

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
TEMPORAL_CLI = BIN / "temporal"
TEST_SERVER = BIN / "temporal-test-server"

EXPORT_TASK = "Export Q3 transactions and file them in the compliance folder"
EXPORT_TOOLS = ["start_export", "verify_row_count", "upload_file", "notify_team"]
REFUND_TASK = "Refund $420 for claim C-118 if the claim is valid"
REFUND_TOOLS = ["check_claim", "issue_refund"]


# --- Temporal servers ------------------------------------------------------------------------


@asynccontextmanager
async def time_skipping_server() -> AsyncIterator[WorkflowEnvironment]:
    """The time-skipping test server, with the run's search attributes: a 24-hour timer takes
    milliseconds."""
    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=DATA_CONVERTER, test_server_existing_path=str(TEST_SERVER)
    )
    async with env:
        await _register_search_attributes(env.client)
        yield env


@asynccontextmanager
async def dev_server() -> AsyncIterator[WorkflowEnvironment]:
    """The real dev server (`temporal server start-dev`), in memory, on free ports."""
    env = await WorkflowEnvironment.start_local(
        data_converter=DATA_CONVERTER,
        dev_server_existing_path=str(TEMPORAL_CLI),
        search_attributes=SEARCH_ATTRIBUTES,
        dev_server_extra_args=[
            "--dynamic-config-value",
            "history.transferProcessorMaxPollRPS=2000",
            # A worker deployment version whose runs have all closed is reported drained within
            # a second or two, not minutes (tests/test_deploy_drill.py waits for it).
            "--dynamic-config-value",
            'matching.wv.VersionDrainageStatusRefreshInterval="1s"',
            "--dynamic-config-value",
            'matching.wv.VersionDrainageStatusVisibilityGracePeriod="1s"',
            # One partition per task queue, as `make up` runs it: a queue's rate limit is held by
            # one limiter (tests/test_worker_rate.py).
            *ONE_PARTITION,
        ],
    )
    async with env:
        yield env


async def _register_search_attributes(client: Client) -> None:
    # The time-skipping server has no flag for them; its operator service accepts them.
    kinds = {
        SearchAttributeIndexedValueType.KEYWORD: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
        SearchAttributeIndexedValueType.INT: IndexedValueType.INDEXED_VALUE_TYPE_INT,
        SearchAttributeIndexedValueType.DATETIME: IndexedValueType.INDEXED_VALUE_TYPE_DATETIME,
    }
    await client.operator_service.add_search_attributes(
        AddSearchAttributesRequest(
            namespace=client.namespace,
            search_attributes={
                key.name: kinds[key.indexed_value_type] for key in SEARCH_ATTRIBUTES
            },
        )
    )


# --- Stacks a run works against ----------------------------------------------------------------


@dataclass
class Systems:
    """The demo systems served over real HTTP: their address, a client for them, and their state
    (each job's idempotency key, callback URL and token, as the system received them)."""

    url: str
    http: httpx.AsyncClient
    state: DemoSystems

    async def faults(self, **faults: Any) -> None:
        """Set the systems' faults (`POST /_test/faults`)."""
        (await self.http.post(f"{self.url}/_test/faults", json=faults)).raise_for_status()


@asynccontextmanager
async def demo_systems(
    *, export_seconds: float = 0.2, pipeline_seconds: float = 0.2
) -> AsyncIterator[Systems]:
    """The demo systems on a free port, and a client for them."""
    app = systems_app(export_seconds=export_seconds, pipeline_seconds=pipeline_seconds)
    async with httpx.AsyncClient(timeout=10) as http, serving(app) as url:
        yield Systems(url, http, app.state.systems)


# The operator key the gateways of these stacks accept (id `ops`): it reads any run's events,
# hands out view links and starts threads.
OPERATOR = "operator-key-0123456789abcdef0123456789"


@dataclass
class Stack:
    """The real dev server's client, the gateway app over a real `TemporalDeliverer` served over
    HTTP (with the desks `serving_stack` was asked for), the demo systems, the resume-token keys
    of both, and the worker's settings to reach them: what a run needs end to end.

    `http` has the gateway's URL as its base (a path is the gateway's; a full URL goes where it
    says). `within` bounds each wait of the stack's and each of `http`'s calls: it only turns a
    hang into a failure.
    """

    client: Client
    task_queue: str
    http: httpx.AsyncClient
    gateway: FastAPI
    gateway_url: str
    systems: DemoSystems
    systems_url: str
    tokens: ResumeTokens
    settings: Settings
    within: float
    waitstate: WaitstateClient
    _event_desk: EventDesk | None = None
    # The gateway again, waiting less for a run (served with `impatient=`).
    impatient_url: str = ""

    @property
    def event_desk(self) -> EventDesk:
        """The gateway's event desk (served with `events=True`)."""
        assert self._event_desk is not None, "the stack was served without events=True"
        return self._event_desk

    def impatient(self, url: str) -> str:
        """`url` (the gateway's), on the gateway that waits less for a run (served with
        `impatient=`)."""
        assert self.impatient_url, "the stack was served without impatient="
        return url.replace(self.gateway_url, self.impatient_url)

    # --- the worker and its runs

    def tools(
        self, *, export_timeout: timedelta = timedelta(hours=1), mode: ResultMode = "await"
    ) -> list[ToolSpec]:
        """The demo's tools over the stack's systems: the export, the pipeline (polled every
        half second), the compliance tools and the refunds included."""
        return [
            *demo_tools(),
            export_tool(
                ExportService(self.http, self.systems_url), timeout=export_timeout, mode=mode
            ),
            enrich_tool(
                EnrichmentPipeline(self.http, self.systems_url),
                poll_interval=timedelta(seconds=0.5),
            ),
            *compliance_tools(self.http, self.systems_url),
            *refund_tools(self.http, self.systems_url),
        ]

    def worker(
        self,
        *,
        tools: Sequence[ToolSpec] | None = None,
        apps: Apps | None = None,
        signing_key: str | None = None,
        **settings: Any,
    ) -> AbstractAsyncContextManager[Worker]:
        """The production worker wiring on the test's task queue: `tools()` (or `tools`), with
        `apps`' tools and scripts besides, signing tokens with the stack's key (or
        `signing_key`, one of its keys), its settings overridden by `settings`."""
        tokens = self.tokens
        if signing_key is not None:
            tokens = ResumeTokens(self.settings.token_keys, signing_key)
            settings["token_signing_key"] = signing_key
        return make_worker(
            self.client,
            self.task_queue,
            tools=self.tools() if tools is None else tools,
            tokens=tokens,
            settings=dataclasses.replace(self.settings, **settings),
            apps=apps,
        )

    async def start(
        self, task: str, tools: Sequence[str], **fields: Any
    ) -> WorkflowHandle[Any, RunResult]:
        """Start a run of `task` with `tools` (and the run input's other `fields`)."""
        return await start_run(
            self.client, self.task_queue, RunInput(task=task, tools=list(tools), **fields)
        )

    # --- what the demo systems saw

    async def stats(self) -> dict[str, Any]:
        """What the demo systems saw (`GET /_test/stats`)."""
        return dict((await self.http.get(f"{self.systems_url}/_test/stats")).json())

    async def faults(self, **faults: Any) -> None:
        """Set the demo systems' faults (`POST /_test/faults`)."""
        (await self.http.post(f"{self.systems_url}/_test/faults", json=faults)).raise_for_status()

    async def outbox(self, run_id: str, kind: str | None = None) -> list[dict[str, Any]]:
        """The notices of the run the systems' outbox holds so far, oldest first (those of
        `kind` only, `approval` or `question`, when given)."""
        bodies = [e.body for e in self.systems.outbox if e.body["workflow_id"] == run_id]
        return [b for b in bodies if kind is None or b.get("kind", "approval") == kind]

    async def notice(self, run_id: str, kind: str | None = None) -> dict[str, Any]:
        """The run's first notice (of `kind`), once the outbox has it."""

        async def posted() -> dict[str, Any] | None:
            return next(iter(await self.outbox(run_id, kind)), None)

        return await eventually(posted, f"the {kind or 'first'} notice of {run_id}", self.within)

    async def notices(self, handle: WorkflowHandle[Any, Any], count: int) -> list[dict[str, Any]]:
        """The run's `count` approval notices in the outbox, once its requests' links are
        confirmed by the run (their nonce hash recorded)."""

        async def posted() -> list[dict[str, Any]]:
            requests = (await _state(handle)).approvals.values()
            if len([r for r in requests if r.nonce_hash]) < count:
                return []
            bodies = await self.outbox(handle.id)
            return bodies if len(bodies) == count else []

        return await eventually(posted, f"{count} approval notices of {handle.id}", self.within)

    async def job(self, run_id: str) -> JobRecord:
        """The run's first job at the systems, once it was handed its callback."""

        async def handed() -> JobRecord | None:
            jobs = [j for j in self.systems.jobs.values() if j.key.startswith(f"{run_id}/")]
            return jobs[0] if jobs and jobs[0].callback_url else None

        return await eventually(handed, f"the job of {run_id}", self.within)

    async def jobs(self, handle: WorkflowHandle[Any, Any], count: int) -> list[JobRecord]:
        """The run's `count` export jobs once they exist, and its operations are waiting:
        what the export service holds (its callback URL and token) for each, by period."""

        async def started() -> list[JobRecord]:
            state = await _state(handle)
            mine = [j for j in self.systems.jobs.values() if j.key.startswith(f"{handle.id}/")]
            running = [op for op in state.operations.values() if op.status == "running"]
            return mine if len(mine) == len(running) == count else []

        jobs = await eventually(started, f"{count} export jobs of {handle.id}", self.within)
        return sorted(jobs, key=lambda job: job.arguments["period"])

    # --- the gateway, as people and systems use it

    async def post(
        self, url: str, body: Any, authorization: str | None = None, **headers: str
    ) -> httpx.Response:
        """POST `body` as JSON to `url`, with that `Authorization` header (if any) and
        `headers`."""
        sent = {"Authorization": authorization} if authorization else {}
        return await self.http.post(url, json=body, headers={**sent, **headers})

    async def approve_by_link(self, notice: dict[str, Any]) -> httpx.Response:
        """Approve, as "ana", through the decision link of an approval notice."""
        link = notice["decision"]
        body = {"decision": "approve", "reviewer": "ana"}
        return await self.post(link["url"], body, link["authorization"])

    async def approval_link(self, run_id: str) -> tuple[str, str, str]:
        """The approval page's URL for the run's request, its request id and its token."""
        notice = await self.notice(run_id, "approval")
        token = notice["decision"]["authorization"].removeprefix("Bearer ")
        request_id = notice["request_id"]
        url = f"{self.gateway_url}/pages/approvals/{request_id}?token={token}"
        if "page" in notice:  # the notice's own link to the page, once notices carry it
            assert notice["page"] == url
        return url, request_id, token

    async def question_link(self, run_id: str) -> tuple[str, str, str]:
        """The question page's URL for the run's question, its question id and its token."""
        notice = await self.notice(run_id, "question")
        token = notice["answer"]["authorization"].removeprefix("Bearer ")
        question_id = notice["question_id"]
        url = f"{self.gateway_url}/pages/questions/{question_id}?token={token}"
        if "page" in notice:
            assert notice["page"] == url
        return url, question_id, token

    async def view_link(self, run_id: str) -> dict[str, Any]:
        """A view link of the run, as an operator asks for one (the event desk's)."""
        response = await self.http.post(f"/v1/runs/{run_id}/view-link", headers=bearer(OPERATOR))
        assert response.status_code == 200, response.text
        link: dict[str, Any] = response.json()
        return link

    def events(
        self, url: str, *, headers: dict[str, str] | None = None
    ) -> AbstractAsyncContextManager[httpx.Response]:
        """The streaming response of a GET of `url` (a run's events)."""
        return self.http.stream("GET", url, headers=headers or {})


@asynccontextmanager
async def serving_stack(
    client: Client,
    task_queue: str,
    keys: dict[str, str],
    signing_key: str,
    systems: FastAPI | None = None,
    *,
    events: bool = False,
    thread_model: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    gateway_client: Client | None = None,
    impatient: timedelta | None = None,
    within: float = 10,
) -> AsyncIterator[Stack]:
    """A `Stack` on the test's server and task queue: the demo systems app `systems` (default:
    `systems_app()`) and the gateway, accepting `keys` and signing with `signing_key`, served
    over real HTTP.

    Args:
        events: The gateway serves the event desk (runs' streams, view links, the inbox).
        thread_model: The gateway serves the thread desk, whose threads run on this model.
        max_body_bytes: The gateway refuses larger bodies.
        gateway_client: What the gateway reaches Temporal with (a traced client, say);
            default: `client`.
        impatient: The gateway is also served waiting this long for a run (its deliveries,
            its threads' sends), at `Stack.impatient_url` (without the event desk): for
            requests sent while no worker runs, whose outcome no wait would learn.
        within: Seconds each wait of the stack's and each HTTP call may take.
    """
    systems = systems if systems is not None else systems_app()
    tokens = ResumeTokens(keys, signing_key)
    waitstate = WaitstateClient(client, task_queue=task_queue)
    gateway_client = gateway_client or client
    operators = OperatorKeys({"ops": OPERATOR})
    event_desk = EventDesk(RunEvents(gateway_client), tokens, operators, "") if events else None

    def gateway_waiting(timeout: timedelta, desk: EventDesk | None = None) -> FastAPI:
        """The gateway app, waiting `timeout` for a run, serving the event `desk` (if any)."""
        thread_desk = (
            ThreadDesk(
                WaitstateClient(gateway_client, task_queue=task_queue),
                operators,
                default_model=thread_model,
                answer_within=timeout,
            )
            if thread_model
            else None
        )
        return gateway_app(
            TemporalDeliverer(gateway_client, timeout=timeout),
            tokens,
            threads=thread_desk,
            events=desk,
            max_body_bytes=max_body_bytes,
        )

    gateway = gateway_waiting(DELIVERY_TIMEOUT, event_desk)
    impatient_gateway = gateway_waiting(impatient) if impatient is not None else None
    async with (
        serving(systems) as systems_url,
        serving(gateway) as gateway_url,
        _serving_if(impatient_gateway) as impatient_url,
    ):
        if event_desk is not None:
            event_desk.gateway_url = gateway_url  # its links point here, known once it serves
        settings = Settings(
            temporal_address=client.service_client.config.target_host,
            task_queue=task_queue,
            gateway_url=gateway_url,
            demo_systems_url=systems_url,
            token_keys=keys,
            token_signing_key=signing_key,
            blob_dir=TEST_BLOBS,
        )
        async with httpx.AsyncClient(base_url=gateway_url, timeout=within) as http:
            yield Stack(
                client,
                task_queue,
                http,
                gateway,
                gateway_url,
                systems.state.systems,
                systems_url,
                tokens,
                settings,
                within,
                waitstate,
                event_desk,
                impatient_url,
            )


@asynccontextmanager
async def _serving_if(app: FastAPI | None) -> AsyncIterator[str]:
    """`serving(app)`: its URL; without an app, "" and nothing served."""
    if app is None:
        yield ""
        return
    async with serving(app) as url:
        yield url


async def _state(handle: WorkflowHandle[Any, Any]) -> RunState:
    state: RunState = await handle.query(AgentRunWorkflow.status)
    return state


async def sse_fields(lines: AsyncIterator[str]) -> AsyncIterator[dict[str, str]]:
    """The fields of each server-sent event with data in `lines`, comments passed over."""
    fields: dict[str, str] = {}
    async for line in lines:
        if line.startswith(":"):
            continue
        if line:
            name, _, value = line.partition(": ")
            fields[name] = value
            continue
        if "data" in fields:
            yield fields
        fields = {}


@dataclass(frozen=True)
class ServerEvent:
    """One server-sent event as a reader gets it (`id` empty: an event of the moment, never
    sent again, such as a retry or a delta)."""

    id: str
    kind: str
    data: dict[str, Any]


class EventReader:
    """The events of one server-sent events response, read as they come, in as many takes as a
    test needs; each take given `within` seconds."""

    def __init__(self, response: httpx.Response, within: float = 60.0) -> None:
        self._lines = response.aiter_lines()
        self._within = within

    async def take(self, until: Callable[[ServerEvent], bool] | None = None) -> list[ServerEvent]:
        """The events up to the first `until` is true of (included), or to the stream's end."""
        taken: list[ServerEvent] = []
        async with asyncio.timeout(self._within):
            async for fields in sse_fields(self._lines):
                data = json.loads(fields["data"])
                taken.append(ServerEvent(fields.get("id", ""), fields["event"], data))
                if until is not None and until(taken[-1]):
                    return taken
        return taken


@dataclass
class Desk:
    """The time-skipping server and the demo systems (claims, refunds and the approvals outbox):
    what a run that asks a person needs, a day passing in milliseconds."""

    env: WorkflowEnvironment
    http: httpx.AsyncClient
    systems_url: str
    task_queue: str

    @property
    def client(self) -> Client:
        return self.env.client

    def worker(self) -> AbstractAsyncContextManager[Worker]:
        """The production worker wiring with the demo's and the refund tools."""
        # Links point at a gateway nobody calls here; tests/test_e2e.py uses the real one.
        settings = Settings(demo_systems_url=self.systems_url, gateway_url="http://127.0.0.1:9")
        tools = [*demo_tools(), *refund_tools(self.http, self.systems_url)]
        tokens = ResumeTokens({"desk": "d" * 40}, "desk")
        return make_worker(
            self.client, self.task_queue, tools=tools, settings=settings, tokens=tokens
        )

    async def start(
        self, task: str, tools: Sequence[str], **fields: Any
    ) -> WorkflowHandle[Any, RunResult]:
        return await start_run(
            self.client, self.task_queue, RunInput(task=task, tools=list(tools), **fields)
        )

    async def get(self, path: str) -> Any:
        """The demo systems' JSON answer to `GET path`."""
        return (await self.http.get(f"{self.systems_url}{path}")).json()


class _Killable:
    """A process of the test's that it can SIGKILL, freeze, or stop."""

    _process: asyncio.subprocess.Process | None = None

    def freeze(self) -> None:
        """SIGSTOP: the process keeps its connections (a poll it had open still takes a task)
        but does nothing more; `kill` it after."""
        assert self._process is not None
        self._process.send_signal(signal.SIGSTOP)

    async def kill(self) -> None:
        """SIGKILL: the process gets no chance to finish anything."""
        assert self._process is not None
        self._process.send_signal(signal.SIGKILL)
        await self._process.wait()

    async def stop(self) -> None:
        if self._process is not None and self._process.returncode is None:
            self._process.terminate()
            await asyncio.wait_for(self._process.wait(), 30)


class WorkerProcess(_Killable):
    """`python worker.py`, as `make up` runs it, that a test can kill and start again."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self._env, self._log = env, log

    async def start(self) -> None:
        """Start the worker; return once it polls its task queue."""
        offset = self._log.stat().st_size if self._log.exists() else 0
        with self._log.open("ab") as log:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "worker.py", cwd=ROOT, env=self._env, stdout=log, stderr=log
            )
        self._process = process

        async def polling() -> bool:
            assert process.returncode is None, self._log.read_text()
            return "worker polling" in self._log.read_text(errors="replace")[offset:]

        await eventually(polling, "the worker to poll", within=60)


@asynccontextmanager
async def worker_process_beside(
    client: Client,
    task_queue: str,
    log: Path,
    systems: FastAPI,
    keys: dict[str, str],
    **variables: str,
) -> AsyncIterator[tuple[WorkerProcess, str]]:
    """A worker process, started, serving the test's queue (with `variables` in its
    environment), beside the demo `systems` and a gateway accepting `keys`, both served in this
    process: the worker (a test can kill it and start it again), and the systems' URL."""
    async with serving_stack(client, task_queue, keys, next(iter(keys)), systems) as stack:
        env = process_env(
            client,
            task_queue,
            DEMO_SYSTEMS_URL=stack.systems_url,
            GATEWAY_URL=stack.gateway_url,
            WAITSTATE_TOKEN_KEYS=",".join(f"{k}:{v}" for k, v in keys.items()),
            **variables,
        )
        worker = WorkerProcess(env, log)
        try:
            await worker.start()
            yield worker, stack.systems_url
        finally:
            await worker.stop()


# --- The gateway with a recording deliverer -----------------------------------------------------

GATEWAY_SECRET = "test-secret-0123456789abcdef0123456789"
MAX_BODY = 4096
RUN = "run-1"
OP = "op_1"

Outcome = TypeVar("Outcome", CheckOutcome, CompletionOutcome, DecideOutcome, AnswerOutcome)


@dataclass
class RecordingDeliverer:
    """Records every delivery; answers from `script` (an outcome or a refusal), else applies.

    Completions are recorded in `calls` (and the report id each came with in `report_ids`),
    decisions in `decisions`, answers to questions in `answers`, asks to check a job now in
    `checks`; one script serves them all.
    """

    calls: list[tuple[ResumeClaims, Completion, str]] = field(default_factory=list)
    report_ids: list[str | None] = field(default_factory=list)
    decisions: list[tuple[ResumeClaims, str, DecisionBody]] = field(default_factory=list)
    answers: list[tuple[ResumeClaims, str, AnswerBody]] = field(default_factory=list)
    checks: list[tuple[ResumeClaims, str]] = field(default_factory=list)
    script: list[CheckOutcome | CompletionOutcome | DecideOutcome | AnswerOutcome | Exception] = (
        field(default_factory=list)
    )

    async def complete(
        self,
        claims: ResumeClaims,
        completion: Completion,
        delivery_id: str,
        report_id: str | None = None,
    ) -> CompletionOutcome:
        self.calls.append((claims, completion, delivery_id))
        self.report_ids.append(report_id)
        applied = CompletionOutcome(applied=True, status=completion.status, delivery_id=delivery_id)
        return self._scripted_or(applied)

    async def check(self, claims: ResumeClaims, report_id: str) -> CheckOutcome:
        self.checks.append((claims, report_id))
        return self._scripted_or(CheckOutcome(operation_id=claims.operation_id, checking=True))

    async def decide(
        self, claims: ResumeClaims, request_id: str, body: DecisionBody
    ) -> DecideOutcome:
        self.decisions.append((claims, request_id, body))
        status = "approved" if body.decision == "approve" else "rejected"
        return self._scripted_or(DecideOutcome(accepted=True, status=status))

    async def answer(
        self, claims: ResumeClaims, question_id: str, body: AnswerBody
    ) -> AnswerOutcome:
        self.answers.append((claims, question_id, body))
        status = "answered" if body.action == "accept" else "declined"
        return self._scripted_or(AnswerOutcome(accepted=True, status=status, delivered=True))

    def _scripted_or(self, applied: Outcome) -> Outcome:
        """The script's next answer (raised if it is a refusal), else `applied`."""
        if not self.script:
            return applied
        answer = self.script.pop(0)
        if isinstance(answer, Exception):
            raise answer
        assert isinstance(answer, type(applied)), answer
        return answer

    def clear(self) -> None:
        self.calls.clear()
        self.report_ids.clear()
        self.decisions.clear()
        self.answers.clear()
        self.checks.clear()
        self.script.clear()


@dataclass
class Gateway:
    """The gateway app served over HTTP, its client, deliverer and keys."""

    client: httpx.AsyncClient
    deliverer: RecordingDeliverer
    tokens: ResumeTokens
    subject: str = OP  # what tokens are minted for unless a test says otherwise

    def token(
        self, subject: str | None = None, *, expires_in: timedelta = timedelta(hours=1)
    ) -> str:
        expires_at = datetime.now(UTC) + expires_in
        return self.tokens.mint(RUN, subject or self.subject, expires_at).token

    def auth(self, subject: str | None = None) -> dict[str, str]:
        return bearer(self.token(subject))


def bearer(token: str) -> dict[str, str]:
    """The headers that send `token` as a bearer token."""
    return {"Authorization": f"Bearer {token}"}


@asynccontextmanager
async def running_gateway(subject: str = OP) -> AsyncIterator[Gateway]:
    """The app on a free port of 127.0.0.1, served by uvicorn in the test's event loop."""
    deliverer = RecordingDeliverer()
    tokens = ResumeTokens({"k1": GATEWAY_SECRET}, "k1")
    app = gateway_app(deliverer, tokens, max_body_bytes=MAX_BODY)
    # Bound and listening before uvicorn starts, so the first request never races startup.
    # IPPROTO_TCP, not the default 0: asyncio sets TCP_NODELAY only on sockets that say TCP,
    # and without it every keep-alive response waits 40 ms for a delayed ACK.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, lifespan="off"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            yield Gateway(client, deliverer, tokens, subject)
    finally:
        server.should_exit = True
        await serving
        sock.close()


def free_port() -> int:
    """A TCP port nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# Ports `service_port()` chooses from, up to the ephemeral range.
SERVICE_PORTS_FROM = 20000


# How many times `Services.up` chooses its ports, and what says a port was taken.
PORT_TRIES = 3
_PORT_TAKEN = re.compile(r"another process listens there|address already in use", re.IGNORECASE)


def service_port() -> int:
    """A TCP port nothing listens on now, below the kernel's ephemeral range.

    For a stack whose processes start one after another on ports chosen up front: a port from
    `free_port()` is an ephemeral one, and the dev server started first may take it for one of
    its own internal services (it binds several on random ephemeral ports) before the process
    it was chosen for binds it.
    """
    low = _ephemeral_low()
    for _ in range(200):
        port = random.randrange(SERVICE_PORTS_FROM, low)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {SERVICE_PORTS_FROM}-{low - 1}")


def _ephemeral_low() -> int:
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768  # Linux's default; elsewhere the range may differ
    return max(low, SERVICE_PORTS_FROM + 1000)


def port_open(port: int) -> bool:
    """Whether something listens on the local `port`."""
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


class Services:
    """`scripts/services.py` (dev server, demo systems, worker, gateway) on free ports, in a state
    directory of its own, with `starter.py` run as a user runs it; `env` adds to (or, as None,
    removes from) the environment they all get."""

    def __init__(self, state: Path, env: dict[str, str | None] | None = None) -> None:
        self.state = state
        self._given = env or {}
        self.env = {
            k: v
            for k, v in os.environ.items()
            if k
            not in (
                "OPENAI_API_KEY",
                "ANTHROPIC_API_KEY",
                "WAITSTATE_MODEL",
                "WAITSTATE_TOKEN_KEYS",
                "GATEWAY_URL",
            )
        }
        self.env.update(WAITSTATE_STATE_DIR=str(state), WAITSTATE_TASK_QUEUE=f"e2e-{uuid.uuid4()}")
        self._choose_ports()

    def _choose_ports(self) -> None:
        """Free ports for every service, in the environment (then the caller's `env`)."""
        self.port, self.ui_port = service_port(), service_port()
        self.gateway_port, self.systems_port = service_port(), service_port()
        self.env.update(
            TEMPORAL_ADDRESS=f"127.0.0.1:{self.port}",
            TEMPORAL_UI_PORT=str(self.ui_port),
            GATEWAY_PORT=str(self.gateway_port),
            DEMO_SYSTEMS_URL=f"http://127.0.0.1:{self.systems_port}",
            WAITSTATE_WORKER_METRICS=f"127.0.0.1:{service_port()}",
        )
        for key, value in self._given.items():
            if value is None:
                self.env.pop(key, None)
            else:
                self.env[key] = value
        self.systems_url = self.env["DEMO_SYSTEMS_URL"]
        self.gateway_url = f"http://127.0.0.1:{self.gateway_port}"
        self.ui_url = f"http://127.0.0.1:{self.ui_port}"

    def services_now(self, action: str) -> subprocess.CompletedProcess[str]:
        """`scripts/services.py ACTION`, for the module's fixture (not a test's event loop)."""
        return subprocess.run(
            [sys.executable, "scripts/services.py", action],
            cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    @contextmanager
    def up(self) -> Iterator[Services]:
        """`up` for the block (a module's fixture), then `down`; both must succeed. A port
        taken between its choice and its bind (the tests beside this one choose in the same
        range) is chosen again, twice at most."""
        for _ in range(PORT_TRIES):
            up = self.services_now("up")
            if up.returncode == 0 or not _PORT_TAKEN.search(up.stderr):
                break
            down = self.services_now("down")
            assert down.returncode == 0, down.stderr
            self._choose_ports()
        assert up.returncode == 0, up.stderr + up.stdout
        try:
            yield self
        finally:
            down = self.services_now("down")
            assert down.returncode == 0, down.stderr

    async def services(self, action: str) -> subprocess.CompletedProcess[str]:
        return await self._run([sys.executable, "scripts/services.py", action])

    async def starter(
        self, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return await self._run([sys.executable, "starter.py", *args], env=env)

    async def python(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`python ARGS` from the checkout, in the services' environment (a script of
        `scripts/`, say)."""
        return await self._run([sys.executable, *args])

    async def _run(
        self, command: list[str], env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        process = await asyncio.create_subprocess_exec(
            *command, cwd=ROOT, env=env or self.env,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        async with asyncio.timeout(120):
            out, err = await process.communicate()
        assert process.returncode is not None
        return subprocess.CompletedProcess(command, process.returncode, out.decode(), err.decode())

    async def status(self, run_id: str) -> dict[str, Any]:
        done = await self.starter("status", run_id, "--json")
        # 1: a run that ended without its answer (cancelled, failed...), shown all the same.
        assert done.returncode in (0, 1) and done.stdout, done.stderr
        return dict(json.loads(done.stdout))

    async def ui_executions(self, query: str) -> list[dict[str, Any]]:
        """The runs the Web UI's HTTP API lists for a visibility query."""
        async with httpx.AsyncClient(timeout=10) as http:
            response = await http.get(
                f"{self.ui_url}/api/v1/namespaces/default/workflows", params={"query": query}
            )
        response.raise_for_status()
        return list(response.json().get("executions", []))

    async def client(self) -> Client:
        return await Client.connect(self.env["TEMPORAL_ADDRESS"], data_converter=DATA_CONVERTER)

    def tokens(self) -> ResumeTokens:
        """The resume-token key `up` generated for this state dir (what the worker signs with
        and the gateway checks)."""
        key_id, _, secret = (self.state / "resume-token.keys").read_text().strip().partition(":")
        return ResumeTokens({key_id: secret}, key_id)


@contextmanager
def python_server(args: list[str], port: int) -> Iterator[None]:
    """`python ARGS` from the checkout, a server that listens on `port`: running, from the
    moment it listens until the block ends."""
    # Its output to a file, not a pipe: a pipe nobody reads fills at 64 KB of log lines, and
    # then the server blocks on its next one, with every test that calls it.
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            [sys.executable, *args], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log
        )
        try:
            deadline = time.monotonic() + 30
            while not port_open(port):
                if process.poll() is not None:
                    log.seek(0)
                    raise AssertionError(log.read().decode(errors="replace"))
                assert time.monotonic() < deadline, f"{' '.join(args)} did not listen on {port}"
                time.sleep(0.1)
            yield
        finally:
            process.terminate()
            process.wait(timeout=10)


class ServerProcess(_Killable):
    """`python ARGS` from the checkout, a server on `port` that a test can SIGKILL and start
    again on the same port (`python_server` is for one that runs for a block); its output goes
    to `log`. `python` and `cwd` run it with another interpreter, from another directory."""

    def __init__(
        self,
        args: list[str],
        port: int,
        log: Path,
        env: dict[str, str] | None = None,
        *,
        python: Path | str = sys.executable,
        cwd: Path = ROOT,
    ) -> None:
        self.port = port
        self._args, self._log, self._env = args, log, env
        self._python, self._cwd = python, cwd

    async def start(self) -> None:
        """Start the server; return once it listens."""
        with self._log.open("ab") as log:
            process = await asyncio.create_subprocess_exec(
                self._python, *self._args, cwd=self._cwd, env=self._env, stdout=log, stderr=log
            )
        self._process = process

        async def listening() -> bool:
            assert process.returncode is None, self._log.read_text(errors="replace")
            return port_open(self.port)

        await eventually(listening, f"{' '.join(self._args)} to listen on {self.port}")
