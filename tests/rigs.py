"""What tests stand up: the Temporal servers, the stacks of real systems a run works against, a
worker process, and the gateway with a recording deliverer. The fixtures that yield them live in
the `conftest.py` beside the tests that use them; test modules import the types from here."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import httpx
import uvicorn
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
from examples.systems import DemoSystems, serving
from examples.systems import create_app as systems_app
from scripts.services import ONE_PARTITION
from tests.helpers import eventually, make_worker, process_env, start_run
from waitstate.apps import Apps
from waitstate.converter import DATA_CONVERTER
from waitstate.gateway.app import create_app as gateway_app
from waitstate.gateway.delivery import TemporalDeliverer
from waitstate.gateway.tokens import ResumeClaims, ResumeTokens
from waitstate.schemas import RunInput, RunResult
from waitstate.schemas.approvals import DecideOutcome, DecisionBody
from waitstate.schemas.operations import Completion, CompletionOutcome, ResultMode
from waitstate.schemas.questions import AnswerBody, AnswerOutcome
from waitstate.settings import Settings
from waitstate.tools import ToolSpec
from workflows.search_attributes import ALL as SEARCH_ATTRIBUTES

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


@dataclass
class Stack:
    """The real dev server, gateway and demo systems over HTTP, and the worker's settings to
    reach them: what a long tool's run needs end to end."""

    client: Client
    http: httpx.AsyncClient
    systems_url: str
    gateway_url: str
    tokens: ResumeTokens
    settings: Settings
    task_queue: str

    def tools(
        self, *, export_timeout: timedelta = timedelta(hours=1), mode: ResultMode = "await"
    ) -> list[ToolSpec]:
        """The demo's tools, the export and the pipeline (polled every half second) included."""
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
        ]

    def worker(
        self,
        *,
        tools: Sequence[ToolSpec] | None = None,
        settings: Settings | None = None,
        apps: Apps | None = None,
    ) -> AbstractAsyncContextManager[Worker]:
        """The production worker wiring on the test's task queue (`tools()`, the stack's
        settings and no apps, unless given)."""
        return make_worker(
            self.client,
            self.task_queue,
            tools=self.tools() if tools is None else tools,
            tokens=self.tokens,
            settings=settings or self.settings,
            apps=apps,
        )

    async def start(
        self, task: str, tools: Sequence[str], **fields: Any
    ) -> WorkflowHandle[Any, RunResult]:
        return await start_run(
            self.client, self.task_queue, RunInput(task=task, tools=list(tools), **fields)
        )

    async def stats(self) -> dict[str, Any]:
        """What the demo systems saw (`GET /_test/stats`)."""
        return dict((await self.http.get(f"{self.systems_url}/_test/stats")).json())

    async def faults(self, **faults: Any) -> None:
        """Set the demo systems' faults (`POST /_test/faults`)."""
        (await self.http.post(f"{self.systems_url}/_test/faults", json=faults)).raise_for_status()


@asynccontextmanager
async def serving_stack(
    client: Client,
    task_queue: str,
    keys: dict[str, str],
    signing_key: str,
    systems: Any,
    *,
    http_timeout: float = 10,
) -> AsyncIterator[Stack]:
    """A `Stack` on the test's server and task queue: the demo systems app `systems` and the
    gateway (accepting `keys`) served over real HTTP, and worker settings that sign tokens with
    `signing_key`."""
    tokens = ResumeTokens(keys, signing_key)
    async with (
        httpx.AsyncClient(timeout=http_timeout) as http,
        serving(systems) as systems_url,
        serving(gateway_app(TemporalDeliverer(client), tokens)) as gateway_url,
    ):
        settings = Settings(
            gateway_url=gateway_url,
            demo_systems_url=systems_url,
            token_keys=keys,
            token_signing_key=signing_key,
        )
        yield Stack(client, http, systems_url, gateway_url, tokens, settings, task_queue)


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
    systems: Any,
    keys: dict[str, str],
    **variables: str,
) -> AsyncIterator[tuple[WorkerProcess, str]]:
    """A worker process, started, serving the test's queue (with `variables` in its
    environment), beside the demo `systems` and a gateway accepting `keys`, both served in this
    process: the worker (a test can kill it and start it again), and the systems' URL."""
    tokens = ResumeTokens(keys, next(iter(keys)))
    async with (
        serving(systems) as systems_url,
        serving(gateway_app(TemporalDeliverer(client), tokens)) as gateway_url,
    ):
        env = process_env(
            client,
            task_queue,
            DEMO_SYSTEMS_URL=systems_url,
            GATEWAY_URL=gateway_url,
            WAITSTATE_TOKEN_KEYS=",".join(f"{k}:{v}" for k, v in keys.items()),
            **variables,
        )
        worker = WorkerProcess(env, log)
        try:
            await worker.start()
            yield worker, systems_url
        finally:
            await worker.stop()


# --- The gateway with a recording deliverer -----------------------------------------------------

GATEWAY_SECRET = "test-secret-0123456789abcdef0123456789"
MAX_BODY = 4096
RUN = "run-1"
OP = "op_1"

Outcome = TypeVar("Outcome", CompletionOutcome, DecideOutcome, AnswerOutcome)


@dataclass
class RecordingDeliverer:
    """Records every delivery; answers from `script` (an outcome or a refusal), else applies.

    Completions are recorded in `calls` (and the report id each came with in `report_ids`),
    decisions in `decisions`, answers to questions in `answers`; one script serves them all.
    """

    calls: list[tuple[ResumeClaims, Completion, str]] = field(default_factory=list)
    report_ids: list[str | None] = field(default_factory=list)
    decisions: list[tuple[ResumeClaims, str, DecisionBody]] = field(default_factory=list)
    answers: list[tuple[ResumeClaims, str, AnswerBody]] = field(default_factory=list)
    script: list[CompletionOutcome | DecideOutcome | AnswerOutcome | Exception] = field(
        default_factory=list
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
        self.port, self.ui_port = service_port(), service_port()
        self.gateway_port, self.systems_port = service_port(), service_port()
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
        self.env.update(
            TEMPORAL_ADDRESS=f"127.0.0.1:{self.port}",
            TEMPORAL_UI_PORT=str(self.ui_port),
            WAITSTATE_STATE_DIR=str(state),
            GATEWAY_PORT=str(self.gateway_port),
            DEMO_SYSTEMS_URL=f"http://127.0.0.1:{self.systems_port}",
            WAITSTATE_WORKER_METRICS=f"127.0.0.1:{service_port()}",
            WAITSTATE_TASK_QUEUE=f"e2e-{uuid.uuid4()}",
        )
        for key, value in (env or {}).items():
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
        """`up` for the block (a module's fixture), then `down`; both must succeed."""
        up = self.services_now("up")
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
        assert done.returncode == 0, done.stderr
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
    process = subprocess.Popen(
        [sys.executable, *args], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 30
        while not port_open(port):
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            assert time.monotonic() < deadline, f"{' '.join(args)} did not listen on {port}"
            time.sleep(0.1)
        yield
    finally:
        process.terminate()
        process.wait(timeout=10)
        if process.stderr is not None:
            process.stderr.close()


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
