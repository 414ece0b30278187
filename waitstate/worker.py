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
import logging
import math
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, NoReturn, TypedDict, Unpack

import httpx
from temporalio.client import Client
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.worker import Worker

from waitstate.activation_order import workflow_runner
from waitstate.activities import (
    AgentActivities,
    ApprovalActivities,
    BackgroundActivities,
    CleanupActivities,
    EvalActivities,
    McpActivities,
    ModelActivities,
    OperationActivities,
    PushActivities,
    ToolActivities,
    TreeActivities,
)
from waitstate.activities.deltas import DeltaTarget
from waitstate.agents import Agent
from waitstate.apps import AppError, Apps, app_refs, load_apps
from waitstate.auth.tokens import ResumeTokens
from waitstate.blobs import BlobStore, open_blob_store
from waitstate.client import WaitstateClient
from waitstate.deployment import BuildIdError, deployment_config
from waitstate.mcp import McpConfigError, McpServers, parse_servers
from waitstate.providers import Providers
from waitstate.providers.configured import build_providers, warm_up
from waitstate.schemas.evals import Scorer
from waitstate.settings import Settings, connect, exit_process
from waitstate.tools import ToolRegistry, ToolSpec, builtin_tools
from waitstate.tools.read_ref import read_ref_tool
from waitstate.tracing import SERVICE_WORKER, Tracing
from waitstate.workflows.served import WORKFLOWS

__all__ = [
    "DEMO_APP",
    "WORKFLOWS",
    "ModelCallPace",
    "RunParts",
    "build_providers",
    "build_tokens",
    "build_worker",
    "build_workers",
    "load",
    "main",
    "run_parts",
    "serve",
    "warm_up",
]

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


# On SIGTERM, in-flight model and tool calls get this long to finish before they are cancelled
# (and retried by another worker); `scripts/services.py down` waits longer than this.
GRACEFUL_SHUTDOWN = timedelta(seconds=10)

# What a worker serves when no app is named: the demo, run from a checkout.
DEMO_APP = "examples.demo.app:app"


def build_tokens(settings: Settings) -> ResumeTokens | None:
    """Resume-token keys, if configured (callback tools need them)."""
    if not settings.token_keys or settings.token_signing_key is None:
        log.warning("WAITSTATE_TOKEN_KEYS is not set: tools completed by callback cannot start")
        return None
    return ResumeTokens(settings.token_keys, settings.token_signing_key)


class ActivityParts(TypedDict, total=False):
    """What the activities are wired to besides the settings (absent or None: none).

    Attributes:
        tokens: The resume-token keys (callback tools, approval links, publish tokens).
        agents: The agents runs may name, by name.
        tool_deps: What each tool's handlers get as `RunContext.deps`, by tool name.
        mcp: The MCP servers runs may be granted tools of.
        tracing: Spans of workflows, activities, model and tool calls.
        scorers: What evaluations score forks with, by name (the apps' `scorers`).
    """

    tokens: ResumeTokens | None
    agents: Mapping[str, Agent] | None
    tool_deps: Mapping[str, Any] | None
    mcp: McpServers | None
    tracing: Tracing | None
    scorers: Mapping[str, Scorer] | None


class WorkerParts(ActivityParts, total=False):
    """What `build_worker` passes on to `build_workers` as it is (see there)."""

    task_queue: str | None
    workflows: Sequence[type] | None


def build_worker(
    client: Client,
    settings: Settings,
    providers: Providers,
    tools: Sequence[ToolSpec],
    http: httpx.AsyncClient,
    **parts: Unpack[WorkerParts],
) -> Worker:
    """The worker of the runs' task queue alone (see `build_workers`): for tests and drills
    whose runs call the model on their own queue."""
    # Not built at all, the model queue's worker: one built and never run still holds its queue.
    alone = dataclasses.replace(settings, model_task_queue=None, model_calls_per_second=None)
    return build_workers(client, alone, providers, tools, http, **parts)[0]


def build_workers(
    client: Client,
    settings: Settings,
    providers: Providers,
    tools: Sequence[ToolSpec],
    http: httpx.AsyncClient,
    *,
    task_queue: str | None = None,
    workflows: Sequence[type] | None = None,
    **parts: Unpack[ActivityParts],
) -> list[Worker]:
    """The workers of a worker process: the runs' task queue's, with every workflow and
    activity registered (tests pass their own parts); then, with WAITSTATE_MODEL_TASK_QUEUE,
    the model queue's, with the model activity alone, held to WAITSTATE_MODEL_CALLS_PER_SECOND.

    Args:
        task_queue: The runs' queue, if not the settings'.
        workflows: The workflow classes, if not `WORKFLOWS` (a deploy drill serves a later one).
        parts: What the activities are wired to (`ActivityParts`).
    """
    tracing = parts.get("tracing")
    wired = run_parts(client, settings, providers, tools, http, **parts)
    # Both workers poll as one version (its build id is read from git once).
    deployment = deployment_config(settings)
    runs = Worker(
        client,
        task_queue=task_queue or settings.task_queue,
        workflows=WORKFLOWS if workflows is None else workflows,
        activities=wired.activities,
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
        wired.registry,
        wired.blobs,
        parts.get("agents"),
        tracing=tracing,
        deltas=wired.deltas,
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
    **parts: Unpack[ActivityParts],
) -> RunParts:
    """Every activity the agent runs call, wired to `settings`, `providers`, `tools` and
    `parts` (the worker's and `WaitstatePlugin`'s)."""
    tokens, agents, tracing = parts.get("tokens"), parts.get("agents"), parts.get("tracing")
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
    servers = McpActivities(parts.get("mcp") or McpServers(), blobs)
    tool = ToolActivities(
        registry,
        blobs,
        tokens,
        settings.gateway_url,
        parts.get("tool_deps"),
        servers,
        tracing=tracing,
    )
    agent = AgentActivities(agents or {}, settings.default_model, blobs)
    operations = OperationActivities(registry, parts.get("mcp"), blobs, providers)
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
    runs = WaitstateClient(client, task_queue=settings.task_queue)
    trees = TreeActivities(runs)
    # An A2A task's pushes to its client's webhooks (workflows/pushes.py).
    pushes = PushActivities(http, settings.a2a_push_key, agents, settings.a2a_push_networks)
    evals = EvalActivities(runs, parts.get("scorers") or {})
    return RunParts(
        registry,
        blobs,
        deltas,
        [
            agent.resolve_agent,
            agent.store_answer,
            trees.reserve_tree_budget,
            pushes.post_push,
            evals.prepare_fork,
            evals.read_recording,
            evals.score_fork,
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
            scorers=apps.scorers,
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
