"""The worker: loads apps, wires their agents, tools and providers into activities, runs.

waitstate-worker --app reports.app:app   # or WAITSTATE_APPS=reports.app:app (comma-separated)
waitstate-worker                         # the demo app (examples/demo/app.py)

It connects per the TEMPORAL_* variables and polls WAITSTATE_TASK_QUEUE, as one version of a
worker deployment with WAITSTATE_VERSIONING=1 (docs/deploy.md). What stops it at start (an app
that cannot be served: it does not import, a name is taken twice, a tool has no description...;
Temporal out of reach; a metrics port taken) is said in one line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import hashlib
import importlib.metadata
import logging
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn, TypedDict

import httpx
from temporalio.client import Client
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.worker import Worker, WorkerDeploymentConfig

from waitstate.activation_order import workflow_runner
from waitstate.activities import (
    AgentActivities,
    ApprovalActivities,
    BackgroundActivities,
    CleanupActivities,
    McpActivities,
    ModelActivities,
    OperationActivities,
    ToolActivities,
)
from waitstate.activities.deltas import DeltaTarget
from waitstate.agents import Agent
from waitstate.apps import AppError, Apps, app_refs, load_apps
from waitstate.auth.tokens import ResumeTokens
from waitstate.blobs import BlobStore, open_blob_store
from waitstate.mcp import McpConfigError, McpServers, parse_servers
from waitstate.providers import Provider, Providers, UnknownModelError
from waitstate.providers.scripted import Script, ScriptedProvider
from waitstate.settings import Settings, connect, exit_process
from waitstate.tools import ToolRegistry, ToolSpec, builtin_tools
from waitstate.tools.read_ref import read_ref_tool
from waitstate.tracing import SERVICE_WORKER, Tracing
from waitstate.workflows.agent_run import AgentRunWorkflow
from waitstate.workflows.blob_cleanup import BlobCleanupWorkflow

log = logging.getLogger("waitstate.worker")
# Waits last seconds to days: their histograms get buckets from 1 s to a week (ms), where the
# SDK's default ones stop at 10 s.
WAIT_HISTOGRAMS = (
    "waitstate_operation_duration",
    "waitstate_approval_wait",
    "waitstate_question_wait",
)
WAIT_BUCKETS_MS = [
    1_000, 5_000, 15_000, 60_000, 300_000, 900_000, 1_800_000, 3_600_000, 10_800_000,
    21_600_000, 43_200_000, 86_400_000, 172_800_000, 604_800_000,
]  # fmt: skip

# What the worker runs; `starter.py replay-check` replays histories on the same classes.
WORKFLOWS: list[type] = [AgentRunWorkflow, BlobCleanupWorkflow]

# On SIGTERM, in-flight model and tool calls get this long to finish before they are cancelled
# (and retried by another worker); `scripts/services.py down` waits longer than this.
GRACEFUL_SHUTDOWN = timedelta(seconds=10)

# What a versioned worker's runs do when a new version becomes current: each stays on the version
# that started it (its history replays on that code alone) and moves to the current one when it
# continues as new (`workflows/continuation.py`). Set here, not in `@workflow.defn`: the SDK sends
# a workflow's own behaviour from unversioned workers too, and the server refuses their tasks.
RUNS_STAY_ON = VersioningBehavior.PINNED

# OpenAI-compatible servers (vLLM, Ollama) usually ignore the key, but the SDK insists on one.
_PLACEHOLDER_KEY = "not-needed"
# What a worker serves when no app is named: the demo, run from a checkout.
DEMO_APP = "examples.demo.app:app"
# The checkout the worker runs from, whose commit (and uncommitted changes) name its build id;
# installed from a wheel, the site-packages directory, which has no `.git` of its own.
CHECKOUT = Path(__file__).resolve().parents[1]
# Each git command the build id asks (a hung one fails the worker's start, not its polls).
GIT_TIMEOUT = timedelta(seconds=10)
CHUNK = 1 << 20


def build_providers(
    settings: Settings,
    extra: Mapping[str, Callable[[], Provider]] | None = None,
    scripts: Mapping[str, Script] | None = None,
) -> Providers:
    """Providers per the settings, and the apps' own (`extra`, and `scripts` for the scripted
    model); SDK clients never retry (Temporal's retry policy does)."""

    def make_openai() -> Provider:
        options = _sdk_options("openai", settings.openai_api_key, settings.openai_base_url)
        # Each SDK is imported on first use: Anthropic's alone holds ~45 MB of a worker's
        # memory and takes seconds to load, for workers that may never call it.
        import openai

        from waitstate.providers.openai import OpenAIProvider

        return OpenAIProvider(openai.AsyncOpenAI(**options))

    def make_openai_responses() -> Provider:
        # The same key and server as `openai:`, over the Responses API (`/v1/responses`).
        options = _sdk_options("openai", settings.openai_api_key, settings.openai_base_url)
        import openai

        from waitstate.providers.openai_responses import OpenAIResponsesProvider

        return OpenAIResponsesProvider(openai.AsyncOpenAI(**options))

    def make_anthropic() -> Provider:
        options = _sdk_options("anthropic", settings.anthropic_api_key, settings.anthropic_base_url)
        import anthropic

        from waitstate.providers.anthropic import AnthropicProvider

        return AnthropicProvider(anthropic.AsyncAnthropic(**options))

    return Providers(
        {
            "openai": make_openai,
            "openai-responses": make_openai_responses,
            "anthropic": make_anthropic,
            "scripted": lambda: ScriptedProvider(scripts),
            **(extra or {}),
        }
    )


def warm_up(providers: Providers, settings: Settings) -> None:
    """Load the SDK of each provider the worker is configured for, and build its client, now
    rather than in its first call: a first call as slow as the next (the model queue's pace
    counts calls from their start, a provider from their arrival)."""
    for name, configured in (
        ("openai", settings.openai_api_key or settings.openai_base_url),
        ("anthropic", settings.anthropic_api_key or settings.anthropic_base_url),
    ):
        if configured:
            providers.resolve(f"{name}:warm-up")


class _SdkOptions(TypedDict):
    """The options both SDK clients are built with."""

    api_key: str
    base_url: str | None
    max_retries: int


def _sdk_options(name: str, api_key: str | None, base_url: str | None) -> _SdkOptions:
    """The client options of provider `name`'s SDK: its key (`<NAME>_API_KEY`), or a base URL
    whose server may take none; no retries of the SDK's own.

    Raises:
        UnknownModelError: neither the key nor a base URL is set.
    """
    if not (api_key or base_url):
        raise UnknownModelError(f"{name}: {name.upper()}_API_KEY is not set on the worker")
    return _SdkOptions(api_key=api_key or _PLACEHOLDER_KEY, base_url=base_url, max_retries=0)


def build_tokens(settings: Settings) -> ResumeTokens | None:
    """Resume-token keys, if configured (callback tools need them)."""
    if not settings.token_keys or settings.token_signing_key is None:
        log.warning("WAITSTATE_TOKEN_KEYS is not set: tools completed by callback cannot start")
        return None
    return ResumeTokens(settings.token_keys, settings.token_signing_key)


def build_id(settings: Settings, checkout: Path = CHECKOUT) -> str:
    """The worker's build id: WAITSTATE_BUILD_ID, else the package's version and the commit of
    the checkout it runs from (`0.1.0+dd29af14cb4a`), else the version alone (installed from a
    wheel, or an image without its `.git`: set WAITSTATE_BUILD_ID there, or two builds of one
    version share an id).

    A checkout with uncommitted changes (tracked files changed, or files git does not ignore
    added) is not the commit's code: its id also names a digest of what differs
    (`0.1.0+dd29af14cb4a.dirty-3f2a9c1b7e4d`), so an edited tree never polls as the version
    of its commit and is never handed that version's runs. The same changes give the same id.

    Raises:
        BuildIdError: git names the commit but cannot say what differs from it.
    """
    if settings.build_id:
        return settings.build_id
    version = importlib.metadata.version("waitstate")
    commit = ""
    # Only the checkout's own repository names the build (not one an installed wheel's
    # site-packages happens to sit in).
    if (checkout / ".git").exists():
        try:
            commit = _git_bytes(checkout, "rev-parse", "--short=12", "HEAD").decode().strip()
        except (OSError, subprocess.SubprocessError, UnicodeDecodeError):
            commit = ""
    if not commit:
        log.warning("no git commit found: build id %s is the version alone", version)
        return version
    changes = _uncommitted_digest(checkout)
    if changes is None:
        return f"{version}+{commit}"
    # Not logged: the worker logs the version it polls as, and the CLI says which it checks.
    return f"{version}+{commit}.dirty-{changes}"


class BuildIdError(RuntimeError):
    """The checkout's build id cannot be told (set WAITSTATE_BUILD_ID)."""


def _uncommitted_digest(checkout: Path) -> str | None:
    """A digest of the files the checkout holds otherwise than its commit (None: none): those
    changed, added or deleted since HEAD, staged or not, and those git neither tracks nor
    ignores, each by path and content (read in chunks: a large file costs time, not memory).
    Only what the tree holds counts, not how it got there (staged or not, by which steps).

    Raises:
        BuildIdError: git did not answer.
    """
    try:
        changed = _git_bytes(checkout, "diff", "HEAD", "--name-only", "--no-renames", "-z")
        untracked = _git_bytes(checkout, "ls-files", "--others", "--exclude-standard", "-z")
    except (OSError, subprocess.SubprocessError) as err:
        raise BuildIdError(
            f"cannot tell whether {checkout} has uncommitted changes ({type(err).__name__}): "
            "set WAITSTATE_BUILD_ID"
        ) from err
    names = sorted(set(filter(None, (changed + untracked).split(b"\0"))))
    if not names:
        return None
    digest = hashlib.sha256()
    for name in names:
        digest.update(b"\0path\0" + name + b"\0")
        try:
            with (checkout / os.fsdecode(name)).open("rb") as file:
                while chunk := file.read(CHUNK):
                    digest.update(chunk)
        except FileNotFoundError:
            digest.update(b"\0deleted")
        except OSError:  # unreadable (a directory a submodule left, a socket): named only
            digest.update(b"\0unreadable")
    return digest.hexdigest()[:12]


def _git_bytes(checkout: Path, *args: str) -> bytes:
    """What a git command prints in `checkout` (names: short).

    Raises:
        OSError, subprocess.SubprocessError: git is missing, fails or hangs.
    """
    return subprocess.run(
        ["git", "--no-optional-locks", *args],
        cwd=checkout,
        capture_output=True,
        timeout=GIT_TIMEOUT.total_seconds(),
        check=True,
    ).stdout


def deployment_config(settings: Settings) -> WorkerDeploymentConfig | None:
    """The worker deployment version the worker joins (None: versioning is off)."""
    if not settings.versioning:
        return None
    return WorkerDeploymentConfig(
        version=WorkerDeploymentVersion(settings.deployment, build_id(settings)),
        use_worker_versioning=True,
        default_versioning_behavior=RUNS_STAY_ON,
    )


def build_worker(
    client: Client,
    settings: Settings,
    providers: Providers,
    tools: Sequence[ToolSpec],
    http: httpx.AsyncClient,
    *,
    tokens: ResumeTokens | None = None,
    task_queue: str | None = None,
    agents: Mapping[str, Agent] | None = None,
    tool_deps: Mapping[str, Any] | None = None,
    mcp: McpServers | None = None,
    tracing: Tracing | None = None,
    workflows: Sequence[type] | None = None,
) -> Worker:
    """The worker of the runs' task queue alone (see `build_workers`): for tests and drills
    whose runs call the model on their own queue."""
    # Not built at all, the model queue's worker: one built and never run still holds its queue.
    alone = dataclasses.replace(settings, model_task_queue=None, model_calls_per_second=None)
    return build_workers(
        client,
        alone,
        providers,
        tools,
        http,
        tokens=tokens,
        task_queue=task_queue,
        agents=agents,
        tool_deps=tool_deps,
        mcp=mcp,
        tracing=tracing,
        workflows=workflows,
    )[0]


def build_workers(
    client: Client,
    settings: Settings,
    providers: Providers,
    tools: Sequence[ToolSpec],
    http: httpx.AsyncClient,
    *,
    tokens: ResumeTokens | None = None,
    task_queue: str | None = None,
    agents: Mapping[str, Agent] | None = None,
    tool_deps: Mapping[str, Any] | None = None,
    mcp: McpServers | None = None,
    tracing: Tracing | None = None,
    workflows: Sequence[type] | None = None,
) -> list[Worker]:
    """The workers of a worker process: the runs' task queue's, with every workflow and
    activity registered (tests pass their own parts); then, with WAITSTATE_MODEL_TASK_QUEUE,
    the model queue's, with the model activity alone, held to WAITSTATE_MODEL_CALLS_PER_SECOND.

    Args:
        agents: The agents runs may name, by name.
        tool_deps: What each tool's handlers get as `RunContext.deps`, by tool name.
        mcp: The MCP servers runs may be granted tools of.
        tracing: Spans of workflows, activities, model and tool calls (None: none).
        workflows: The workflow classes, if not `WORKFLOWS` (a deploy drill serves a later one).
    """
    parts = run_parts(
        client,
        settings,
        providers,
        tools,
        http,
        tokens=tokens,
        agents=agents,
        tool_deps=tool_deps,
        mcp=mcp,
        tracing=tracing,
    )
    # Both workers poll as one version (its build id is read from git once).
    deployment = deployment_config(settings)
    runs = Worker(
        client,
        task_queue=task_queue or settings.task_queue,
        workflows=WORKFLOWS if workflows is None else workflows,
        activities=parts.activities,
        # Waiting runs are evicted and rebuilt from history on wake: a bounded cache keeps
        # the worker's memory flat however many runs are suspended.
        max_cached_workflows=settings.max_cached_workflows,
        graceful_shutdown_timeout=GRACEFUL_SHUTDOWN,
        deployment_config=deployment,
        # The trace a run's start carries goes on through its workflow and activities.
        interceptors=[tracing.interceptor] if tracing is not None else [],
        # The sandbox would import the workflow's modules afresh for every run it builds
        # (compiling them from source where no bytecode is kept): they are loaded once per
        # worker instead. They hold no state of their own and call only `workflow.*` for time,
        # randomness and waiting, which tests/workflows/test_determinism.py keeps true. Runs
        # get their handlers after their resolutions (waitstate/activation_order.py).
        workflow_runner=workflow_runner(),
    )
    if settings.model_task_queue is None:
        return [runs]
    # Every worker polls the model queue too: the server holds the queue to its rate however many
    # poll it, and no process of another kind must be deployed for runs' model calls to be taken.
    # The runs' queue keeps the model activity for runs started without the model queue.
    # The server holds the fleet to the rate on average, but lets a second's worth through at
    # once after an idle spell: each process also paces its own requests (ModelCallPace).
    limit = settings.model_calls_per_second
    pace = ModelCallPace(limit) if limit is not None else None
    paced = ModelActivities(
        providers,
        parts.registry,
        parts.blobs,
        agents,
        tracing=tracing,
        deltas=parts.deltas,
        pace=None if pace is None else pace.turn,
    )
    model_calls = Worker(
        client,
        task_queue=settings.model_task_queue,
        activities=[paced.call_model],
        max_task_queue_activities_per_second=None if pace is None else pace.per_second,
        graceful_shutdown_timeout=GRACEFUL_SHUTDOWN,
        deployment_config=deployment,
        interceptors=[tracing.interceptor] if tracing is not None else [],
    )
    return [runs, model_calls]


@dataclasses.dataclass(frozen=True)
class RunParts:
    """What the runs' activities are built of, and the activities: the tools' registry, the blob
    store, where model deltas go (None: nowhere), and every activity a run calls."""

    registry: ToolRegistry
    blobs: BlobStore
    deltas: DeltaTarget | None
    activities: list[Callable[..., Any]]


def run_parts(
    client: Client,
    settings: Settings,
    providers: Providers,
    tools: Sequence[ToolSpec],
    http: httpx.AsyncClient,
    *,
    tokens: ResumeTokens | None = None,
    agents: Mapping[str, Agent] | None = None,
    tool_deps: Mapping[str, Any] | None = None,
    mcp: McpServers | None = None,
    tracing: Tracing | None = None,
) -> RunParts:
    """Every activity the agent runs call, wired to `settings`, `providers` and `tools` (the
    worker's and `WaitstatePlugin`'s; arguments as `build_workers`')."""
    blobs = open_blob_store(settings)
    registry = ToolRegistry([*tools, *builtin_tools(), read_ref_tool(blobs)])
    # Asked for (WAITSTATE_MODEL_DELTAS), with a gateway and the keys to mint publish tokens:
    # model calls stream, and their text goes to the gateway for the runs' readers.
    deltas = (
        DeltaTarget(http, tokens, settings.gateway_url)
        if settings.model_deltas and tokens is not None and settings.gateway_url
        else None
    )
    model = ModelActivities(providers, registry, blobs, agents, tracing=tracing, deltas=deltas)
    # The waits for the replies models give in the background (`?background`), and their cancels.
    background = BackgroundActivities(model, providers)
    servers = McpActivities(mcp or McpServers(), blobs)
    tool = ToolActivities(
        registry, blobs, tokens, settings.gateway_url, tool_deps, servers, tracing=tracing
    )
    agent = AgentActivities(agents or {}, settings.default_model)
    operations = OperationActivities(registry, mcp, blobs, providers)
    # Each approver group's notices go where WAITSTATE_NOTICE_ROUTES says (the outbox if unset).
    approvals = ApprovalActivities(
        http,
        settings.outbox_url,
        tokens,
        settings.gateway_url,
        routes=settings.notice_routes,
        smtp=settings.smtp,
    )
    # The blob cleanup runs on the fleet's workers: they are the ones that reach its store.
    cleanup = CleanupActivities(client, blobs)
    return RunParts(
        registry,
        blobs,
        deltas,
        [
            agent.resolve_agent,
            servers.list_mcp_tools,
            model.call_model,
            background.await_model_response,
            background.cancel_model_response,
            tool.call_tool,
            operations.poll_operation,
            operations.cancel_operation,
            operations.answer_operation,
            approvals.notify_approval,
            approvals.notify_input,
            cleanup.namespace_retention,
            cleanup.clean_blobs,
        ],
    )


class ModelCallPace:
    """The requests to providers of one worker process's model calls, at most `limit` in any
    one second: each sent at least `interval` after the one before, never in a burst.

    Temporal's limit of the model queue (`max_task_queue_activities_per_second`) holds the fleet
    to a rate on average, but it is a token bucket: after an idle spell it hands out about a
    second's worth of calls at once (so does the SDK's per-worker limit), which a provider
    counting calls per second sees as twice its limit. Calls the server hands this process
    faster wait here, in order, a second or so at most: the server, told the same rate (the
    activities' `per_second`), hands out no more than this process sends once the burst is
    spent. The wait is taken just before the request, after the call's input is read from the
    blob store, where a busy process would hold some calls back more than others.

    `SLACK` is for what still varies between the wait and the request reaching the provider:
    the request built and written, and now and then a connection opened first (after an idle
    spell, when the pool's has expired) or an SDK client's first request (its platform headers
    worked out: 80-90 ms more than the next, measured against the local stand-in). It keeps the
    call after `limit` of them out of the first's second, as the provider counts them, at the
    cost of a rate `limit / 1.1`.
    """

    SLACK = timedelta(milliseconds=100)

    def __init__(self, limit: float) -> None:
        self.interval = (1.0 + self.SLACK.total_seconds()) / limit
        self.per_second = 1.0 / self.interval
        self._last = -math.inf  # time.monotonic() of the last request's turn
        self._turns = asyncio.Lock()  # waiters are let in first come, first served

    async def turn(self) -> None:
        """Wait for this request's turn: `interval` after the previous one's (as it came, not
        as it was planned: a late wake-up moves the turns after it)."""
        async with self._turns:
            wait = self._last + self.interval - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            self._last = time.monotonic()


def load(refs: Sequence[str], settings: Settings, tokens: ResumeTokens | None) -> Apps:
    """The apps `refs` name (the demo app when none), checked for this worker.

    Raises:
        AppError: one line saying what to fix.
    """
    callbacks = tokens is not None and bool(settings.gateway_url)
    try:
        servers = parse_servers(settings.mcp_servers)
    except McpConfigError as err:
        raise AppError(str(err)) from None
    if refs:
        return load_apps(refs, callbacks_configured=callbacks, mcp_servers=servers)
    log.info("no app named (--app, WAITSTATE_APPS): serving the demo, %s", DEMO_APP)
    try:
        return load_apps([DEMO_APP], callbacks_configured=callbacks, mcp_servers=servers)
    except AppError as err:
        raise AppError(f"no app named (--app MODULE:ATTR or WAITSTATE_APPS), and {err}") from err


async def serve(argv: Sequence[str] | None = None) -> None:
    """Run a worker until SIGINT or SIGTERM, then finish in-flight tasks and exit."""
    parser = argparse.ArgumentParser(description="Serve the agents of one or more apps.")
    parser.add_argument(
        "--app",
        action="append",
        default=[],
        metavar="MODULE:ATTR",
        help="an app to serve (repeatable; added to those of WAITSTATE_APPS)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        settings = Settings.from_env()
    except ValueError as err:  # a malformed variable: one line, exit 1, as for a bad app
        sys.exit(f"worker: {err}")
    tokens = build_tokens(settings)
    try:
        apps = load(app_refs(args.app, settings.apps), settings, tokens)
    except AppError as err:
        sys.exit(f"worker: {err}")
    log.info("serving %s: agents %s", ", ".join(apps.refs), ", ".join(sorted(apps.agents)) or "-")
    runtime = None
    if settings.worker_metrics_address:
        # The SDK's metrics (task latencies, slots, polls) and ours, on one /metrics.
        metrics = PrometheusConfig(
            bind_address=settings.worker_metrics_address,
            histogram_bucket_overrides=dict.fromkeys(WAIT_HISTOGRAMS, WAIT_BUCKETS_MS),
        )
        try:
            runtime = Runtime(telemetry=TelemetryConfig(metrics=metrics))
        except ValueError as err:  # "Failed starting Prometheus exporter: Address already in use"
            _stop_at_start(f"WAITSTATE_WORKER_METRICS {settings.worker_metrics_address}: {err}")
        log.info("metrics on http://%s/metrics", settings.worker_metrics_address)
    try:
        client = await connect(settings, runtime)
    except RuntimeError as err:  # temporalio's "Failed client connect: ..."
        _stop_at_start(f"cannot reach Temporal at {settings.temporal_address}: {_first_line(err)}")
    tracing = Tracing.from_settings(settings, SERVICE_WORKER)
    if tracing is not None:
        log.info("traces to %s", settings.otlp_endpoint)
    providers = build_providers(settings, apps.providers, apps.scripts)
    warm_up(providers, settings)
    # The approval notices' connection pool (the apps' tools bring their own, in their deps).
    http = httpx.AsyncClient(timeout=httpx.Timeout(30.0))
    try:
        worker, *others = build_workers(
            client,
            settings,
            providers,
            apps.tools,
            http,
            tokens=tokens,
            agents=apps.agents,
            tool_deps=apps.tool_deps,
            mcp=apps.mcp,
            tracing=tracing,
        )
    except BuildIdError as err:
        _stop_at_start(str(err))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    deployment = worker.config().get("deployment_config")
    async with contextlib.AsyncExitStack() as running:
        for each in (worker, *others):
            await running.enter_async_context(each)
        log.info(
            "worker polling %r on %s (namespace %s)%s",
            settings.task_queue,
            settings.temporal_address,
            settings.namespace,
            f" as version {deployment.version.to_canonical_string()}" if deployment else "",
        )
        if settings.model_task_queue is not None:
            rate = settings.model_calls_per_second
            log.info(
                "and the model queue %r (%s)",
                settings.model_task_queue,
                f"at most {rate:g} calls/s, fleet-wide" if rate is not None else "no rate limit",
            )
        await stop.wait()
        log.info("shutting down")
    await providers.aclose()
    await apps.aclose()
    await http.aclose()
    if tracing is not None:
        tracing.shutdown()
    log.info("stopped")


def _stop_at_start(reason: str) -> NoReturn:
    """Say why the worker cannot start, in one line, and exit 1 (the SDK's runtime may be up:
    `exit_process`, not `sys.exit`)."""
    print(f"worker: {reason}", file=sys.stderr)
    exit_process(1)


def _first_line(err: BaseException) -> str:
    return (str(err).strip() or type(err).__name__).splitlines()[0]


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Entry point of `waitstate-worker` (and of `worker.py` in a checkout)."""
    asyncio.run(serve(argv))
    exit_process(0)


if __name__ == "__main__":
    main()
