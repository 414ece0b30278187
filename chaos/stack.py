"""The stack the suite attacks, as real processes: the Temporal dev server (SQLite, WAL), the
gateway, four demo-systems instances and the workers, plus a wire server for model faults.

The demo systems' faults (durations, held start answers, progress reports) hold for a whole
instance, so each behaviour the suite needs at once has an instance and a worker of its own:

- main: the mixed runs (two workers on one task queue, SIGKILLed at random);
- gateway: the gateway attacks' own runs (chaos.gateway_faults);
- early: jobs whose webhooks beat the start's answer (answers held past the job);
- slow: jobs that outlast any short operation timeout (expiry, continue-as-new after it).

With `blobs="s3"` the workers keep blobs in a bucket of moto's S3 server, a process of the
stack too. Every process gets a free port and a log under one temp dir, and can be killed and restarted
by the driver (the server on the same SQLite file and port, so clients reconnect). Workers
start signing tokens with key `old`; `rotate()` restarts them signing with `new`, while the
gateway keeps accepting both.

Outages (issue 22): `stop_gateway()`/`start_gateway()` take the gateway away and bring it back
on its port; `blobs_away()`/`blobs_back()` do the same to the workers' blob store: a directory
whose owners' directory (where every write begins) is made a file, so writes fail and reads
work (root ignores permission bits: no chmod would stop its writes); or moto's S3 server
SIGKILLed, then started again on its port with its data (chaos.s3_server).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self

import httpx
from temporalio.client import Client
from temporalio.runtime import LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter

from chaos.app import APP as CHAOS_APP
from chaos.model import GatewayTarget
from chaos.wire import HangingWire
from examples.tasks_store import REDELIVERY_TIMEOUT
from scripts.services import SEARCH_ATTRIBUTES, SERVER_TUNING, free_port, port_open
from waitstate.blobs import BlobStore, LocalBlobStore
from waitstate.blobs.s3 import S3BlobStore
from waitstate.converter import DATA_CONVERTER
from waitstate.settings import parse_blob_url
from waitstate.worker import DEMO_APP

if TYPE_CHECKING:
    from obstore.store import S3Config

ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT = 90.0
STOP_TIMEOUT = 20.0
# Two keys from the start, as a fleet mid-rotation has: the gateway accepts both; workers sign
# with OLD_KEY until `Stack.rotate` restarts them signing with NEW_KEY.
OLD_KEY = "old"
NEW_KEY = "new"
TOKEN_KEYS = {
    OLD_KEY: "chaos-old-resume-token-secret-" + "o" * 24,
    NEW_KEY: "chaos-new-resume-token-secret-" + "n" * 24,
}
MAIN_QUEUE = "chaos-main"
GATEWAY_QUEUE = "chaos-gateway"
EARLY_QUEUE = "chaos-early"
SLOW_QUEUE = "chaos-slow"
# The threads the gateway starts (chaos.thread_doors): their own task queue and worker, stopped
# and started by their class alone, and the operator key that starts them.
THREADS_QUEUE = "chaos-threads"
THREADS_MODEL = "scripted:echo"
OPERATOR_KEY = "chaos-operator-key-" + "t" * 24
# Job durations of the early and slow systems (the main ones are the Stack's fields).
EARLY_EXPORT_SECONDS = 1.5
SLOW_JOB_SECONDS = 60.0


# The workers' bucket and prefix with `--blobs s3` (moto takes any credentials; these keep the
# client from looking for real ones).
S3_BUCKET = "chaos"
S3_BLOBS = f"s3://{S3_BUCKET}/blobs"
S3_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "chaos",
    "AWS_SECRET_ACCESS_KEY": "chaos",
    "AWS_REGION": "us-east-1",
}
# moto's S3 server records every request it serves here, to be given its data back when it is
# started again after an outage (`blobs_back`).
S3_RECORDING = "s3-recording.jsonl"
# A report of the demo's MCP server takes five pages of this long.
MCP_PAGE_SECONDS = 1.5
# How long a question of its tasks waits for a person before the run tells the task no (the
# demo app's policy, set here so that a change of the demo's default cannot leave the runs
# whose question expires waiting past the suite's patience). Its answer link lasts as long:
# an answer delivered late (its worker killed mid-delivery) may outlast the link, and a copy
# sent then is refused as expired; a minute keeps that rare, and the runs within phase A.
MCP_ANSWER_SECONDS = 60.0


async def _until_listening(port: int) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while not port_open(port):
        if time.monotonic() > deadline:
            raise RuntimeError(f"nothing listens on {port} after {START_TIMEOUT:.0f}s")
        await asyncio.sleep(0.1)


@dataclass
class Service:
    """One process of the stack: started, waited for (a line in its log), killed, restarted."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    ready: re.Pattern[str]
    process: asyncio.subprocess.Process | None = None
    starts: int = 0

    async def start(self) -> str:
        """Spawn it and wait for its ready line; returns the line's first group (a URL)."""
        offset = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                *self.argv,
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=log,
                stdin=asyncio.subprocess.DEVNULL,
            )
        self.starts += 1
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            text = self.log.read_text(errors="replace")[offset:]
            if found := self.ready.search(text):
                return found.group(1) if found.groups() else found.group(0)
            if self.process.returncode is not None:
                raise RuntimeError(f"{self.name} exited at start:\n{text[-3000:]}")
            await asyncio.sleep(0.1)
        raise RuntimeError(f"{self.name} not ready after {START_TIMEOUT:.0f}s; see {self.log}")

    @property
    def running(self) -> bool:
        """Started and not exited."""
        return self.process is not None and self.process.returncode is None

    async def kill(self, sig: signal.Signals = signal.SIGKILL) -> None:
        """Send `sig` and wait for the exit (SIGKILL after STOP_TIMEOUT if it lingers)."""
        if not self.running:
            return
        assert self.process is not None
        self.process.send_signal(sig)
        try:
            await asyncio.wait_for(self.process.wait(), STOP_TIMEOUT)
        except TimeoutError:
            self.process.kill()
            await self.process.wait()

    async def stop(self) -> None:
        """A graceful stop: SIGTERM."""
        await self.kill(signal.SIGTERM)


class DevServer(Service):
    """`temporal server start-dev` on a SQLite file; ready once its port answers."""

    port: int = 0

    async def start(self) -> str:
        """Spawn it and wait until its gRPC port accepts connections; returns host:port."""
        offset = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                *self.argv, cwd=ROOT, env=self.env, stdout=log, stderr=log
            )
        self.starts += 1
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if port_open(self.port):
                return f"127.0.0.1:{self.port}"
            if self.process.returncode is not None:
                text = self.log.read_text(errors="replace")[offset:]
                raise RuntimeError(f"dev server exited at start:\n{text[-3000:]}")
            await asyncio.sleep(0.1)
        raise RuntimeError(f"dev server not ready after {START_TIMEOUT:.0f}s; see {self.log}")


def _binary(name: str) -> str:
    beside = Path(sys.executable).parent / name
    if not beside.exists():
        raise RuntimeError(f"{name} not found beside {sys.executable}; run `make install`")
    return str(beside)


@dataclass
class Stack:
    """Everything the driver runs against; `async with Stack(...)` starts and stops it all."""

    workers_per_queue: int = 2
    max_cached_workflows: int = 100
    export_seconds: float = 2.0
    pipeline_seconds: float = 3.0
    keep: bool = False
    # The demo's MCP server (examples/mcp_server.py), for runs whose tool is an MCP task; and
    # the schemas its deletions of some datasets ask in instead of their own (a hostile server).
    mcp: bool = False
    mcp_delete_schemas: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Where the workers keep blobs: a directory of the stack's, or a bucket of an S3-protocol
    # server (moto's) started with the stack.
    blobs: Literal["dir", "s3"] = "dir"
    dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="waitstate-chaos-")))
    server: DevServer | None = None
    systems: list[Service] = field(default_factory=list)
    systems_urls: list[str] = field(default_factory=list)
    gateway: Service | None = None
    gateway_url: str = ""
    mcp_store: Service | None = None
    s3: Service | None = None
    s3_url: str = ""
    mcp_server: Service | None = None
    mcp_url: str = ""
    mcp_port: int = 0
    workers: list[Service] = field(default_factory=list)
    gateway_worker: Service | None = None
    early_worker: Service | None = None
    slow_worker: Service | None = None
    threads_worker: Service | None = None  # not started with the stack: its class starts it
    signing_key: str = OLD_KEY
    wire: HangingWire | None = None
    client: Client | None = None
    runtime: Runtime | None = None

    @property
    def address(self) -> str:
        """The dev server's host:port."""
        assert self.server is not None
        return f"127.0.0.1:{self.server.port}"

    @property
    def systems_url(self) -> str:
        """The demo systems the driver's own runs use."""
        return self.systems_urls[0]

    @property
    def early_url(self) -> str:
        """The demo systems whose start answers are held past their jobs' webhooks."""
        return self.systems_urls[2]

    @property
    def slow_url(self) -> str:
        """The demo systems whose jobs outlast every short operation timeout."""
        return self.systems_urls[3]

    @property
    def signing_workers(self) -> list[Service]:
        """The workers a key rotation restarts: all but the gateway attacks' own, whose runs
        the attacks mint tokens for with the key they were given (see `target`)."""
        return [w for w in [*self.workers, self.early_worker, self.slow_worker] if w is not None]

    async def __aenter__(self) -> Self:
        try:
            await self._start()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _start(self) -> None:
        base = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "WAITSTATE_TOKEN_KEYS": ",".join(f"{k}:{v}" for k, v in TOKEN_KEYS.items()),
            "WAITSTATE_TOKEN_SIGNING_KEY": self.signing_key,
        }
        base.pop("WAITSTATE_WORKER_METRICS", None)
        await self._start_server(base)
        base["TEMPORAL_ADDRESS"] = self.address
        self.client = await self.connect()
        durations = [
            (self.export_seconds, self.pipeline_seconds),  # main
            (self.export_seconds, self.pipeline_seconds),  # gateway attacks
            (EARLY_EXPORT_SECONDS, self.pipeline_seconds),  # early
            (SLOW_JOB_SECONDS, SLOW_JOB_SECONDS),  # slow
        ]
        self.systems = [
            Service(
                f"systems{index}",
                [
                    sys.executable,
                    "-m",
                    "examples.systems",
                    "--port",
                    "0",
                    "--export-seconds",
                    str(export),
                    "--pipeline-seconds",
                    str(pipeline),
                ],
                base,
                self.dir / f"systems{index}.log",
                re.compile(r"demo systems listening on (http://\S+)"),
            )  # fmt: skip
            for index, (export, pipeline) in enumerate(durations)
        ]
        self.systems_urls = list(await asyncio.gather(*(s.start() for s in self.systems)))
        self.gateway = Service(
            "gateway",
            [sys.executable, "-m", "waitstate.gateway"],
            {
                **base,
                "GATEWAY_PORT": "0",
                "WAITSTATE_OPERATOR_KEYS": f"chaos:{OPERATOR_KEY}",
                "WAITSTATE_TASK_QUEUE": THREADS_QUEUE,
                "WAITSTATE_MODEL": THREADS_MODEL,
            },
            self.dir / "gateway.log",
            re.compile(r"gateway listening on (http://\S+)"),
        )
        self.gateway_url = await self.gateway.start()
        if self.mcp:
            await self._start_mcp(base)
        self.wire = HangingWire()
        worker_env = {
            **base,
            **(await self._start_s3(base) if self.blobs == "s3" else {}),
            "GATEWAY_URL": self.gateway_url,
            "WAITSTATE_BLOB_DIR": str(self.dir / "blobs"),
            "WAITSTATE_MAX_CACHED_WORKFLOWS": str(self.max_cached_workflows),
            "OPENAI_BASE_URL": self.wire.openai_base_url,
            "OPENAI_API_KEY": "chaos",
        }
        if self.mcp_url:
            worker_env["DEMO_MCP_URL"] = self.mcp_url
            worker_env["DEMO_MCP_ANSWER_SECONDS"] = str(MCP_ANSWER_SECONDS)

        def env(queue: str, systems_url: str) -> dict[str, str]:
            return {**worker_env, "WAITSTATE_TASK_QUEUE": queue, "DEMO_SYSTEMS_URL": systems_url}

        main_env = env(MAIN_QUEUE, self.systems_urls[0])
        self.workers = [
            self._worker(f"worker{index}", main_env) for index in range(self.workers_per_queue)
        ]
        self.gateway_worker = self._worker(
            "gateway-worker", env(GATEWAY_QUEUE, self.systems_urls[1])
        )
        self.early_worker = self._worker("early-worker", env(EARLY_QUEUE, self.early_url))
        self.slow_worker = self._worker("slow-worker", env(SLOW_QUEUE, self.slow_url))
        self.threads_worker = self._worker("threads-worker", env(THREADS_QUEUE, self.systems_url))
        await asyncio.gather(*(w.start() for w in [*self.signing_workers, self.gateway_worker]))

    async def _start_s3(self, base: dict[str, str]) -> dict[str, str]:
        """moto's S3 server with the workers' bucket (chaos.s3_server: it comes back with its
        data after a SIGKILL); returns what points a worker at it."""
        port = free_port()
        recording = self.dir / S3_RECORDING
        self.s3 = Service(
            "s3",
            [
                sys.executable,
                "-m",
                "chaos.s3_server",
                "--port",
                str(port),
                "--recording",
                str(recording),
            ],
            {**base, "MOTO_ENABLE_RECORDING": "true", "MOTO_RECORDER_FILEPATH": str(recording)},
            self.dir / "s3.log",
            re.compile(r"Running on (http://\S+)"),
        )
        await self.s3.start()
        await _until_listening(port)
        self.s3_url = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(timeout=10) as http:
            (await http.put(f"{self.s3_url}/{S3_BUCKET}")).raise_for_status()
        return self._s3_env()

    def blob_store(self) -> BlobStore:
        """The workers' blob store, as they open it."""
        if self.blobs == "s3":
            # The credentials as the workers have them in their environment (not this one's).
            credentials: S3Config = {
                "access_key_id": S3_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                "secret_access_key": S3_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                "region": S3_CREDENTIALS["AWS_REGION"],
            }
            bucket, prefix = parse_blob_url(S3_BLOBS)
            return S3BlobStore(bucket, prefix, endpoint=self.s3_url, config=credentials)
        return LocalBlobStore(self.dir / "blobs")

    def _s3_env(self) -> dict[str, str]:
        return {**S3_CREDENTIALS, "AWS_ENDPOINT_URL": self.s3_url, "WAITSTATE_BLOB_URL": S3_BLOBS}

    async def _start_mcp(self, base: dict[str, str]) -> None:
        """The demo's MCP server, its tasks in a Redis-protocol store of their own process
        (fakeredis's) and what they did in a file, so that `restart_mcp` loses neither."""
        store_port = free_port()
        self.mcp_store = Service(
            "mcp-store",
            [sys.executable, "-m", "examples.tasks_store", str(store_port)],
            base,
            self.dir / "mcp-store.log",
            re.compile(r"tasks store listening"),
        )
        await self.mcp_store.start()
        await _until_listening(store_port)
        self.mcp_port = free_port()
        self.mcp_server = Service(
            "mcp",
            [sys.executable, "-m", "examples.mcp_server", "--port", str(self.mcp_port)],
            {
                **base,
                "DEMO_MCP_PAGE_SECONDS": str(MCP_PAGE_SECONDS),
                "DEMO_MCP_TASKS_URL": f"redis://127.0.0.1:{store_port}/0",
                "DEMO_MCP_STATS_FILE": str(self.dir / "mcp-stats.jsonl"),
                "DEMO_MCP_DELETE_SCHEMAS": json.dumps(self.mcp_delete_schemas),
                "FASTMCP_DOCKET_REDELIVERY_TIMEOUT": REDELIVERY_TIMEOUT,
            },
            self.dir / "mcp.log",
            re.compile(r"mcp server listening on (http://\S+)"),
        )
        self.mcp_url = await self.mcp_server.start()
        await _until_listening(self.mcp_port)

    async def restart_mcp(self, pause: float) -> float:
        """SIGKILL the MCP server, wait `pause` s, start it again on the same port and store;
        returns how long it was down (s)."""
        assert self.mcp_server is not None
        began = time.monotonic()
        await self.mcp_server.kill(signal.SIGKILL)
        await asyncio.sleep(pause)
        await self.mcp_server.start()
        await _until_listening(self.mcp_port)
        return time.monotonic() - began

    async def stop_gateway(self) -> None:
        """SIGKILL the gateway: webhooks and links find nothing listening until
        `start_gateway`."""
        assert self.gateway is not None
        await self.gateway.kill(signal.SIGKILL)

    async def start_gateway(self) -> None:
        """Start the gateway again on its port (the workers hand out its URL)."""
        assert self.gateway is not None
        port = self.gateway_url.rsplit(":", 1)[1]
        self.gateway.env = {**self.gateway.env, "GATEWAY_PORT": port}
        await self.gateway.start()

    async def blobs_away(self) -> str:
        """Make the workers' blob store unavailable; returns how, in words."""
        if self.blobs == "s3":
            assert self.s3 is not None
            await self.s3.kill(signal.SIGKILL)
            return f"moto's S3 server SIGKILLed ({self.s3_url})"
        owners = self.dir / "blobs" / "owners"
        owners.mkdir(parents=True, exist_ok=True)
        owners.rename(owners.with_name("owners.away"))
        owners.write_text("not a directory: the blob store is unwritable for a while\n")
        return f"the blob directory unwritable ({owners} made a file)"

    async def blobs_back(self) -> float:
        """End `blobs_away`'s outage: the owners' directory put back, or moto's server started
        again on its port and given its data back. Returns how long that took (s)."""
        began = time.monotonic()
        if self.blobs == "s3":
            assert self.s3 is not None
            # It serves itself its recorded requests before it listens (chaos.s3_server).
            await self.s3.start()
            await _until_listening(int(self.s3_url.rsplit(":", 1)[1]))
        else:
            owners = self.dir / "blobs" / "owners"
            owners.unlink()
            owners.with_name("owners.away").rename(owners)
        return time.monotonic() - began

    def worker_logs(self) -> list[Path]:
        """The logs of every worker process (each kept across its restarts)."""
        workers = [*self.signing_workers, self.gateway_worker]
        return [w.log for w in workers if w is not None and w.log.exists()]

    def _worker(self, name: str, env: dict[str, str]) -> Service:
        # The demo app, and the suite's own scripts (chaos.app).
        return Service(
            name,
            [sys.executable, "worker.py", "--app", DEMO_APP, "--app", CHAOS_APP],
            env,
            self.dir / f"{name}.log",
            re.compile(r"worker polling"),
        )

    async def rotate(self, key_id: str) -> float:
        """Rotate the signing key: SIGKILL every signing worker (what they hold in flight is
        retried by their successors), restart them signing with `key_id`; the gateway keeps
        accepting every key. Returns how long it took (s)."""
        began = time.monotonic()
        workers = self.signing_workers
        await asyncio.gather(*(w.kill(signal.SIGKILL) for w in workers))
        self.signing_key = key_id
        for worker in workers:
            worker.env = {**worker.env, "WAITSTATE_TOKEN_SIGNING_KEY": key_id}
        await asyncio.gather(*(w.start() for w in workers))
        return time.monotonic() - began

    async def _start_server(self, env: dict[str, str]) -> None:
        port = free_port()  # chosen here, not by the server: it keeps it across restarts
        argv = [
            _binary("temporal"), "server", "start-dev",
            "--ip", "127.0.0.1", "--port", str(port), "--headless",
            "--db-filename", str(self.dir / "temporal.db"),
            "--log-level", "error",
            *SERVER_TUNING,
        ]  # fmt: skip
        for name, kind in SEARCH_ATTRIBUTES.items():
            argv += ["--search-attribute", f"{name}={kind}"]
        self.server = DevServer("server", argv, env, self.dir / "server.log", re.compile(""))
        self.server.port = port
        await self.server.start()

    async def connect(self) -> Client:
        """A client of the dev server (retried while it starts)."""
        if self.runtime is None:
            # The SDK warns on every retried call while the server is down on purpose.
            quiet = TelemetryFilter(core_level="ERROR", other_level="ERROR")
            self.runtime = Runtime(telemetry=TelemetryConfig(logging=LoggingConfig(filter=quiet)))
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                return await Client.connect(
                    self.address, data_converter=DATA_CONVERTER, runtime=self.runtime
                )
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)

    async def restart_server(self, sig: signal.Signals, pause: float) -> float:
        """Stop the dev server with `sig`, wait `pause` s, start it again on the same file and
        port; returns how long it was down (s)."""
        assert self.server is not None
        began = time.monotonic()
        await self.server.kill(sig)
        await asyncio.sleep(pause)
        await self.server.start()
        return time.monotonic() - began

    def target(self) -> GatewayTarget:
        """What the gateway faults attack: the gateway, the second systems and its worker."""
        assert self.client is not None
        return GatewayTarget(
            client=self.client,
            gateway_url=self.gateway_url,
            systems_url=self.systems_urls[1],
            task_queue=GATEWAY_QUEUE,
            token_keys=dict(TOKEN_KEYS),
            # Its worker is never rotated: the attacks mint tokens as its runs' jobs hold them.
            signing_key_id=OLD_KEY,
        )

    async def close(self) -> None:
        """Stop every process (workers first, the server last) and the wire server."""
        others = [
            *self.signing_workers, self.gateway_worker, self.threads_worker, self.gateway,
            self.mcp_server, *self.systems,
        ]  # fmt: skip
        await asyncio.gather(*(s.stop() for s in others if s is not None))
        for store in (self.mcp_store, self.s3):
            if store is not None:
                await store.stop()
        if self.server is not None:
            await self.server.stop()
        if self.wire is not None:
            self.wire.close()
            self.wire = None
        if not self.keep:
            shutil.rmtree(self.dir, ignore_errors=True)
