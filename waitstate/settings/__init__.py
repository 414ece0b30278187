"""The one place the environment is read, and the one `connect()` every entry point uses.

How each variable's text becomes a value, checked, is `waitstate.settings.values`.

Run behaviour (model, tools, max turns, timeouts) travels in each run's input, not here.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import traceback
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import quote

from temporalio.client import Client
from temporalio.envconfig import ClientConfig
from temporalio.runtime import Runtime

from waitstate.converter import DATA_CONVERTER
from waitstate.notices import Route, SmtpServer, parse_routes
from waitstate.outbound import NETWORKS_VARIABLE, Network, parse_networks
from waitstate.schemas.run import parse_model_spec
from waitstate.settings import values
from waitstate.settings.values import (
    DEFAULT_DEPLOYMENT,
    DEFAULT_TASK_QUEUE,
    DEFAULT_THREAD_TOKEN_LIFETIME,
    otlp_traces_endpoint,
    parse_blob_url,
    parse_keys,
)

__all__ = [
    "DEFAULT_TASK_QUEUE",
    "DEFAULT_THREAD_TOKEN_LIFETIME",
    "WORKER_VARIABLES",
    "Settings",
    "connect",
    "exit_process",
    "otlp_traces_endpoint",
    "parse_blob_url",
    "parse_keys",
    "run_program",
]

DEFAULT_ADDRESS = "127.0.0.1:7233"
DEFAULT_NAMESPACE = "default"
# What only a worker reads (its cache, metrics, notices, versioning, model queue's rate, model
# text streaming): a process that runs no worker (the CLI, a client program) leaves them unread,
# so one malformed there stops the worker at its start and nothing else.
WORKER_VARIABLES = frozenset(
    {
        "WAITSTATE_MAX_CACHED_WORKFLOWS",
        "WAITSTATE_WORKER_METRICS",
        "WAITSTATE_NOTICE_ROUTES",
        "WAITSTATE_SMTP_URL",
        "WAITSTATE_SMTP_FROM",
        "WAITSTATE_VERSIONING",
        "WAITSTATE_DEPLOYMENT",
        "WAITSTATE_BUILD_ID",
        "WAITSTATE_MODEL_CALLS_PER_SECOND",
        "WAITSTATE_MODEL_DELTAS",
    }
)


@dataclass(frozen=True)
class Settings:
    """Process configuration, read from the environment."""

    # TEMPORAL_ADDRESS / TEMPORAL_NAMESPACE / TEMPORAL_API_KEY / TEMPORAL_TLS* and a
    # TEMPORAL_PROFILE in a config file are read by temporalio.envconfig in connect().
    temporal_address: str = DEFAULT_ADDRESS
    namespace: str = DEFAULT_NAMESPACE
    task_queue: str = DEFAULT_TASK_QUEUE
    # WAITSTATE_APPS: `module:attribute` references of the apps to load, comma-separated.
    apps: str = ""
    # WAITSTATE_MCP_SERVERS: `name=URL` or `name=stdio:COMMAND`, comma-separated. Per server
    # (NAME upper-cased, `-` as `_`), read with it by `waitstate.mcp.parse_servers`:
    # WAITSTATE_MCP_HEADERS_<NAME> (`Header=VARIABLE;...`) and
    # WAITSTATE_MCP_REQUIRE_APPROVAL_<NAME> (tool name patterns that need a person's approval,
    # comma-separated).
    mcp_servers: str = ""
    ui_url: str = "http://127.0.0.1:8233"
    default_model: str = "scripted:demo"
    openai_api_key: str | None = field(default=None, repr=False)
    openai_base_url: str | None = None
    anthropic_api_key: str | None = field(default=None, repr=False)
    anthropic_base_url: str | None = None
    max_cached_workflows: int = 100
    state_dir: Path = Path(".temporal")
    gateway_host: str = "127.0.0.1"
    gateway_port: int = 8787
    gateway_url: str = "http://127.0.0.1:8787"
    # Resume-token keys: key id -> secret. Several are accepted; `token_signing_key` signs.
    token_keys: dict[str, str] = field(default_factory=dict, repr=False)
    token_signing_key: str | None = None
    # WAITSTATE_OPERATOR_KEYS: key id -> secret, `kid:secret,kid2:secret2`. A request to the
    # gateway with one of them may start a thread; none: the gateway starts no threads.
    operator_keys: dict[str, str] = field(default_factory=dict, repr=False)
    # WAITSTATE_MCP_CALLER_KEYS: caller -> secret, `caller:secret,...`: who may call the agents
    # `python -m waitstate.mcp_server` serves (each task is its caller's).
    mcp_caller_keys: dict[str, str] = field(default_factory=dict, repr=False)
    # WAITSTATE_A2A_CALLER_KEYS: caller -> secret, `caller:secret,...`: who may call the agents
    # `python -m waitstate.a2a` serves (each task is its caller's).
    a2a_caller_keys: dict[str, str] = field(default_factory=dict, repr=False)
    # WAITSTATE_A2A_PUSH_KEY: what a worker signs A2A pushes with (HMAC-SHA256); None: each
    # push is signed with its receiver's own token, if it gave one.
    a2a_push_key: str | None = field(default=None, repr=False)
    # WAITSTATE_A2A_PUSH_NETWORKS: the networks (comma-separated, `10.1.0.0/16`) a push may go
    # to besides public addresses: none by default, so no caller can make a worker POST to its
    # loopback or private network (waitstate/outbound.py).
    a2a_push_networks: tuple[Network, ...] = ()
    # WAITSTATE_MCP_ALLOWED_ORIGINS: the browser origins (`scheme://host[:port]`, comma-separated)
    # `python -m waitstate.mcp_server` serves besides loopback ones; read by
    # `waitstate.guards.parse_origins`.
    mcp_allowed_origins: str = ""
    # WAITSTATE_THREAD_TOKEN_DAYS: how long the token a new thread is handed stays valid.
    thread_token_lifetime: timedelta = DEFAULT_THREAD_TOKEN_LIFETIME
    demo_systems_url: str = "http://127.0.0.1:8790"
    approvals_outbox_url: str | None = None  # default: the demo systems' outbox
    # WAITSTATE_NOTICE_ROUTES: where each approver group's notices go, `GROUP=DESTINATION;...`
    # with `outbox`, `email:ADDRESS,...` or `slack:WEBHOOK_URL` (`*`: every other group), read
    # by `waitstate.notices.parse_routes`. Empty: every notice goes to the outbox. A webhook's
    # URL is a secret: a route's repr shows its host only.
    notice_routes: Mapping[str, tuple[Route, ...]] = field(default_factory=dict)
    # WAITSTATE_SMTP_URL (`smtp://USER:PASSWORD@HOST:PORT` or `smtps://...`) and
    # WAITSTATE_SMTP_FROM: the server email notices are submitted to, and their sender (its
    # password is in no repr). Required when a route sends email.
    smtp: SmtpServer | None = None
    # Conversations and large results, by content hash. Workers of one fleet must share it:
    # a directory (on one machine, or a shared volume), unless blob_url names object storage.
    blob_dir: Path = Path(".temporal/blobs")
    # WAITSTATE_BLOB_URL: `s3://bucket/prefix`, S3-compatible object storage instead of
    # blob_dir (checked by parse_blob_url). Credentials and region come from the usual AWS_*
    # variables, read by the S3 client itself.
    blob_url: str | None = None
    # AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL: an S3-compatible server other than AWS (MinIO,
    # R2, GCS...); None: AWS S3 for the region.
    blob_endpoint: str | None = None
    # host:port of the worker's Prometheus endpoint (SDK metrics and ours); None: off.
    worker_metrics_address: str | None = None
    # How often the gateway counts the fleet's runs by status and wait for its /metrics
    # (WAITSTATE_RUN_COUNTS_SECONDS); 0: never.
    run_counts_seconds: float = 30.0
    # Where spans go by OTLP/HTTP: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, or
    # OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces; None (neither set, or OTEL_SDK_DISABLED=true):
    # tracing is off. The exporter reads the other OTEL_EXPORTER_OTLP_* variables itself.
    otlp_endpoint: str | None = None
    # OTEL_SERVICE_NAME: the service spans are from, instead of the process's own
    # (waitstate-worker, waitstate-gateway, waitstate-starter).
    otel_service_name: str | None = None
    # WAITSTATE_TRACE_CONTENT=1: spans carry prompts, answers, tool arguments and results.
    trace_content: bool = False
    # WAITSTATE_VERSIONING=1: the worker joins the worker deployment `deployment`
    # (WAITSTATE_DEPLOYMENT) as version `build_id` (WAITSTATE_BUILD_ID; None: the package's
    # version and the checkout's commit, see `waitstate.deployment.build_id`). Off: unversioned workers,
    # which take every task of their queue (what the dev stack runs; docs/deploy.md says why).
    versioning: bool = False
    # Stream OpenAI(-compatible) and Anthropic models' text to the gateway for runs' readers (off:
    # every call as before, one answer; on: a streamed call, its text posted as it comes, never
    # in history).
    model_deltas: bool = False
    deployment: str = DEFAULT_DEPLOYMENT
    build_id: str | None = None
    # WAITSTATE_MODEL_TASK_QUEUE: the task queue runs' model calls go on (None: the run's own).
    # Where runs start (CLI, gateway, client), it goes into each run's input; on a worker, a
    # second worker polls it with the model activity alone.
    model_task_queue: str | None = None
    # WAITSTATE_MODEL_CALLS_PER_SECOND: the model queue's rate, enforced by the Temporal server
    # across every worker polling it (None: no limit). Needs the model queue.
    model_calls_per_second: float | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, *, worker: bool = True) -> Settings:
        """Read settings from `env` (default: the process environment).

        Args:
            worker: Read the variables only a worker reads (`WORKER_VARIABLES`); without, they
                keep their defaults, and one malformed stops nothing.

        Raises:
            ValueError: a variable read is malformed; the message names it.
        """
        env = os.environ if env is None else env
        if not worker:
            env = {name: value for name, value in env.items() if name not in WORKER_VARIABLES}
        openai_key = env.get("OPENAI_API_KEY") or None
        anthropic_key = env.get("ANTHROPIC_API_KEY") or None
        if model := env.get("WAITSTATE_MODEL"):
            try:
                parse_model_spec(model)
            except ValueError as err:
                raise ValueError(f"WAITSTATE_MODEL: {err}") from None
            default_model = model
        elif openai_key:
            default_model = "openai:gpt-4.1"
        elif anthropic_key:
            default_model = "anthropic:claude-sonnet-4-5"
        else:
            default_model = "scripted:demo"
        ui_port = env.get("TEMPORAL_UI_PORT", "8233")
        gateway_port = values.port(env, "GATEWAY_PORT", 8787)
        keys = values.parse_token_keys(env.get("WAITSTATE_TOKEN_KEYS", ""))
        operator_keys = parse_keys(
            env.get("WAITSTATE_OPERATOR_KEYS", ""), "WAITSTATE_OPERATOR_KEYS", "operator key"
        )
        mcp_caller_keys = parse_keys(
            env.get("WAITSTATE_MCP_CALLER_KEYS", ""), "WAITSTATE_MCP_CALLER_KEYS", "caller key"
        )
        a2a_caller_keys = parse_keys(
            env.get("WAITSTATE_A2A_CALLER_KEYS", ""), "WAITSTATE_A2A_CALLER_KEYS", "caller key"
        )
        push_key = env.get("WAITSTATE_A2A_PUSH_KEY", "").strip() or None
        if push_key is not None and len(push_key) < 32:
            raise ValueError("WAITSTATE_A2A_PUSH_KEY is a secret of 32 characters or more")
        notice_routes = parse_routes(env.get("WAITSTATE_NOTICE_ROUTES", ""))
        smtp = values.smtp_server(env, notice_routes)
        model_task_queue, model_rate = values.model_queue(env)
        if blob_url := env.get("WAITSTATE_BLOB_URL", "").strip() or None:
            parse_blob_url(blob_url)  # a bad URL stops the process here, not at its first blob
        return cls(
            temporal_address=env.get("TEMPORAL_ADDRESS", DEFAULT_ADDRESS),
            namespace=env.get("TEMPORAL_NAMESPACE", DEFAULT_NAMESPACE),
            task_queue=env.get("WAITSTATE_TASK_QUEUE", DEFAULT_TASK_QUEUE),
            apps=env.get("WAITSTATE_APPS", ""),
            mcp_servers=env.get("WAITSTATE_MCP_SERVERS", ""),
            ui_url=env.get("TEMPORAL_UI_URL", f"http://127.0.0.1:{ui_port}").rstrip("/"),
            default_model=default_model,
            openai_api_key=openai_key,
            openai_base_url=env.get("OPENAI_BASE_URL") or None,
            anthropic_api_key=anthropic_key,
            anthropic_base_url=env.get("ANTHROPIC_BASE_URL") or None,
            max_cached_workflows=values.count(env, "WAITSTATE_MAX_CACHED_WORKFLOWS", 100),
            state_dir=Path(env.get("WAITSTATE_STATE_DIR", ".temporal")),
            gateway_host=env.get("GATEWAY_HOST", "127.0.0.1"),
            gateway_port=gateway_port,
            gateway_url=env.get("GATEWAY_URL", f"http://127.0.0.1:{gateway_port}").rstrip("/"),
            token_keys=keys,
            token_signing_key=env.get("WAITSTATE_TOKEN_SIGNING_KEY") or next(iter(keys), None),
            operator_keys=operator_keys,
            mcp_caller_keys=mcp_caller_keys,
            a2a_caller_keys=a2a_caller_keys,
            a2a_push_key=push_key,
            a2a_push_networks=parse_networks(env.get(NETWORKS_VARIABLE, "")),
            mcp_allowed_origins=env.get("WAITSTATE_MCP_ALLOWED_ORIGINS", ""),
            thread_token_lifetime=values.lifetime_days(env, "WAITSTATE_THREAD_TOKEN_DAYS"),
            demo_systems_url=env.get("DEMO_SYSTEMS_URL", "http://127.0.0.1:8790").rstrip("/"),
            approvals_outbox_url=env.get("APPROVALS_OUTBOX_URL") or None,
            notice_routes=notice_routes,
            smtp=smtp,
            worker_metrics_address=env.get("WAITSTATE_WORKER_METRICS") or None,
            run_counts_seconds=values.seconds(env, "WAITSTATE_RUN_COUNTS_SECONDS", 30.0),
            blob_dir=Path(
                env.get("WAITSTATE_BLOB_DIR")
                or Path(env.get("WAITSTATE_STATE_DIR", ".temporal")) / "blobs"
            ),
            blob_url=blob_url,
            blob_endpoint=env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None,
            otlp_endpoint=otlp_traces_endpoint(env),
            otel_service_name=env.get("OTEL_SERVICE_NAME") or None,
            trace_content=env.get("WAITSTATE_TRACE_CONTENT", "").lower() in ("1", "true", "yes"),
            versioning=values.switch(env, "WAITSTATE_VERSIONING"),
            model_deltas=values.switch(env, "WAITSTATE_MODEL_DELTAS"),
            deployment=values.deployment_name(env.get("WAITSTATE_DEPLOYMENT", "").strip()),
            build_id=values.checked_build_id(env.get("WAITSTATE_BUILD_ID", "").strip()),
            model_task_queue=model_task_queue,
            model_calls_per_second=model_rate,
        )

    @property
    def outbox_url(self) -> str:
        """Where approval requests are posted."""
        return self.approvals_outbox_url or f"{self.demo_systems_url}/approvals/outbox"

    def run_url(self, workflow_id: str, run_id: str | None = None) -> str:
        """The Web UI page of a run (its id escaped as one path segment, as the Web UI's own links
        do: a sub-agent's, `root/researcher-1`, holds a slash)."""
        url = f"{self.ui_url}/namespaces/{self.namespace}/workflows/{quote(workflow_id, safe='')}"
        return f"{url}/{run_id}/history" if run_id else url


async def connect(settings: Settings | None = None, runtime: Runtime | None = None) -> Client:
    """Connect to Temporal with the pydantic data converter.

    Address, namespace, API key and TLS come from `temporalio.envconfig` (environment
    variables or a config profile), so the same code reaches the embedded dev server, a
    self-hosted cluster or Temporal Cloud.
    """
    settings = settings or Settings.from_env()
    config = ClientConfig.load_client_connect_config()
    config.setdefault("target_host", settings.temporal_address)
    config.setdefault("namespace", settings.namespace)
    return await Client.connect(**config, data_converter=DATA_CONVERTER, runtime=runtime)


def run_program(main: Coroutine[Any, Any, int | None]) -> NoReturn:
    """Run a program's `main()` coroutine, as `asyncio.run` does, then end the process with
    `exit_process`: its return value is the exit code (None is 0), an uncaught error prints its
    traceback and exits 1, Ctrl-C exits 130.

    A program that uses a Temporal client (a `WaitstateClient`) should end this way rather than
    by returning from `asyncio.run`: the interpreter's teardown can otherwise abort a run that
    did all its work (temporalio/sdk-python#300).

        async def main() -> None:
            client = await WaitstateClient.connect()
            ...

        run_program(main())
    """
    try:
        code = asyncio.run(main) or 0
    except KeyboardInterrupt:
        code = 130
    except Exception:  # a program's own error: its traceback, as Python prints it
        traceback.print_exc()
        code = 1
    exit_process(code)


def exit_process(code: int) -> NoReturn:
    """End a process that used a Temporal client, skipping interpreter teardown.

    The SDK's Rust threads can outlive the event loop and abort the interpreter during
    finalization (temporalio/sdk-python#300), turning a clean exit into 134 or a SIGSEGV.
    Logs and standard streams are flushed first, so nothing written is lost.
    """
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
