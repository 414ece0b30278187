"""The worker: wires providers and tools into activities, registers the workflow, runs.

python worker.py            # connects per TEMPORAL_* variables, polls WAITSTATE_TASK_QUEUE
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Sequence
from datetime import timedelta

import httpx
from temporalio.client import Client
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from activities import ApprovalActivities, ModelActivities, OperationActivities, ToolActivities
from examples.demo.catalog import all_tools
from waitstate.blobs import LocalBlobStore
from waitstate.gateway.tokens import ResumeTokens
from waitstate.providers import Provider, Providers, UnknownModelError
from waitstate.providers.scripted import ScriptedProvider
from waitstate.settings import Settings, connect, exit_process
from waitstate.tools import ToolRegistry, ToolSpec, builtin_tools
from waitstate.tools.read_ref import read_ref_tool
from workflows.agent_run import AgentRunWorkflow

log = logging.getLogger("waitstate.worker")

# On SIGTERM, in-flight model and tool calls get this long to finish before they are cancelled
# (and retried by another worker); `scripts/services.py down` waits longer than this.
GRACEFUL_SHUTDOWN = timedelta(seconds=10)

# OpenAI-compatible servers (vLLM, Ollama) usually ignore the key, but the SDK insists on one.
_PLACEHOLDER_KEY = "not-needed"


def build_providers(settings: Settings) -> Providers:
    """Providers per the settings; SDK clients never retry (Temporal's retry policy does)."""

    def make_openai() -> Provider:
        if not (settings.openai_api_key or settings.openai_base_url):
            raise UnknownModelError("openai: OPENAI_API_KEY is not set on the worker")
        # Each SDK is imported on first use: Anthropic's alone holds ~45 MB of a worker's
        # memory and takes seconds to load, for workers that may never call it.
        import openai

        from waitstate.providers.openai import OpenAIProvider

        client = openai.AsyncOpenAI(
            api_key=settings.openai_api_key or _PLACEHOLDER_KEY,
            base_url=settings.openai_base_url,
            max_retries=0,
        )
        return OpenAIProvider(client)

    def make_anthropic() -> Provider:
        if not (settings.anthropic_api_key or settings.anthropic_base_url):
            raise UnknownModelError("anthropic: ANTHROPIC_API_KEY is not set on the worker")
        import anthropic

        from waitstate.providers.anthropic import AnthropicProvider

        client = anthropic.AsyncAnthropic(
            api_key=settings.anthropic_api_key or _PLACEHOLDER_KEY,
            base_url=settings.anthropic_base_url,
            max_retries=0,
        )
        return AnthropicProvider(client)

    return Providers(
        {"openai": make_openai, "anthropic": make_anthropic, "scripted": ScriptedProvider}
    )


def build_tokens(settings: Settings) -> ResumeTokens | None:
    """Resume-token keys, if configured (callback tools need them)."""
    if not settings.token_keys or settings.token_signing_key is None:
        log.warning("WAITSTATE_TOKEN_KEYS is not set: tools completed by callback cannot start")
        return None
    return ResumeTokens(settings.token_keys, settings.token_signing_key)


def build_worker(
    client: Client,
    settings: Settings,
    providers: Providers,
    tools: Sequence[ToolSpec],
    http: httpx.AsyncClient,
    *,
    tokens: ResumeTokens | None = None,
    task_queue: str | None = None,
) -> Worker:
    """A worker with every workflow and activity registered (tests pass their own parts)."""
    blobs = LocalBlobStore(settings.blob_dir)
    registry = ToolRegistry([*tools, *builtin_tools(), read_ref_tool(blobs)])
    model = ModelActivities(providers, registry, blobs)
    tool = ToolActivities(registry, blobs, tokens, settings.gateway_url)
    operations = OperationActivities(registry)
    approvals = ApprovalActivities(http, settings.outbox_url, tokens, settings.gateway_url)
    return Worker(
        client,
        task_queue=task_queue or settings.task_queue,
        workflows=[AgentRunWorkflow],
        activities=[
            model.call_model,
            tool.call_tool,
            operations.poll_operation,
            operations.cancel_operation,
            approvals.notify_approval,
        ],
        # Waiting runs are evicted and rebuilt from history on wake: a bounded cache keeps
        # the worker's memory flat however many runs are suspended.
        max_cached_workflows=settings.max_cached_workflows,
        graceful_shutdown_timeout=GRACEFUL_SHUTDOWN,
        # The sandbox would import the workflow's modules afresh for every run it builds
        # (compiling them from source where no bytecode is kept): they are loaded once per
        # worker instead. They hold no state of their own and call only `workflow.*` for time,
        # randomness and waiting, which tests/workflows/test_determinism.py keeps true.
        workflow_runner=SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules("workflows")
        ),
    )


async def main() -> None:
    """Run a worker until SIGINT or SIGTERM, then finish in-flight tasks and exit."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    settings = Settings.from_env()
    runtime = None
    if settings.worker_metrics_address:
        # The SDK's metrics (task latencies, slots, polls) and ours, on one /metrics.
        metrics = PrometheusConfig(bind_address=settings.worker_metrics_address)
        runtime = Runtime(telemetry=TelemetryConfig(metrics=metrics))
        log.info("metrics on http://%s/metrics", settings.worker_metrics_address)
    client = await connect(settings, runtime)
    providers = build_providers(settings)
    # Load the SDK of each provider this worker is configured for now, not in its first call.
    for name, configured in (
        ("openai", settings.openai_api_key or settings.openai_base_url),
        ("anthropic", settings.anthropic_api_key or settings.anthropic_base_url),
    ):
        if configured:
            providers.resolve(f"{name}:warm-up")
    # One connection pool for every tool that calls an external system.
    http = httpx.AsyncClient(timeout=httpx.Timeout(30.0))
    worker = build_worker(
        client, settings, providers, all_tools(http, settings), http, tokens=build_tokens(settings)
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with worker:
        log.info(
            "worker polling %r on %s (namespace %s)",
            settings.task_queue,
            settings.temporal_address,
            settings.namespace,
        )
        await stop.wait()
        log.info("shutting down")
    await providers.aclose()
    await http.aclose()
    log.info("stopped")


if __name__ == "__main__":
    asyncio.run(main())
    exit_process(0)
