"""waitstate in a Temporal worker of your own: `WaitstatePlugin`, a `temporalio.plugin`
`SimplePlugin`, as the SDK's contrib integrations ship theirs.

    plugin = WaitstatePlugin(["reports.app:app"])
    client = await Client.connect("localhost:7233", plugins=[plugin])
    worker = Worker(client, task_queue="agents", workflows=[MyWorkflow], activities=[my_step])
    await worker.run()

Given to the client, it sets waitstate's data converter (so the client can start and read
runs, and the worker record them); its worker then also serves the agent runs of the apps
named (and of WAITSTATE_APPS): their workflows, every activity a run calls, and the runner
runs need (`waitstate.activation_order`), which leaves the worker's other workflows as the
SDK's sandbox runs them. Start runs on that worker's queue:
`WaitstateClient(client, task_queue="agents")`.

The rest comes from the environment as for `waitstate-worker` (`Settings.from_env`): models,
blobs, tokens, the gateway. What the plugin leaves to the worker it is given is the worker's:
its task queue, cache size, versioning and shutdown. A separate model queue
(WAITSTATE_MODEL_TASK_QUEUE) needs workers of its own: run `waitstate-worker` for it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence

import httpx
from temporalio.converter import DataConverter
from temporalio.plugin import SimplePlugin
from temporalio.worker import WorkerConfig, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from waitstate.activation_order import HandlersLast, workflow_runner
from waitstate.apps import app_refs
from waitstate.converter import DATA_CONVERTER, CompactPayloadConverter
from waitstate.settings import Settings
from waitstate.tracing import SERVICE_WORKER, Tracing
from waitstate.worker import WORKFLOWS, build_providers, build_tokens, load, run_parts

# The approval notices' connection pool, as `waitstate-worker`'s.
HTTP_TIMEOUT = httpx.Timeout(30.0)


class WaitstatePlugin(SimplePlugin):
    """waitstate's agent runs served by the worker the plugin is given (see the module).

    Args:
        apps: The apps to serve (`module:attr`), besides those of WAITSTATE_APPS; the demo app
            when neither names one (from a checkout).
        settings: The settings (default: `Settings.from_env()`).

    Raises:
        AppError: an app cannot be served (one line saying what to fix).
        ValueError: the settings ask for a model queue, or a variable is malformed.
    """

    def __init__(self, apps: Sequence[str] = (), *, settings: Settings | None = None) -> None:
        self.settings = settings or Settings.from_env()
        if self.settings.model_task_queue is not None:
            raise ValueError(
                "WaitstatePlugin serves the runs' queue only: unset WAITSTATE_MODEL_TASK_QUEUE, "
                "or run waitstate-worker for the model queue"
            )
        self.tokens = build_tokens(self.settings)
        self.apps = load(app_refs(apps, self.settings.apps), self.settings, self.tokens)
        self.providers = build_providers(self.settings, self.apps.providers, self.apps.scripts)
        self.tracing = Tracing.from_settings(self.settings, SERVICE_WORKER)
        self.http = httpx.AsyncClient(timeout=HTTP_TIMEOUT)
        super().__init__(
            "waitstate.WaitstatePlugin",
            data_converter=_data_converter,
            workflows=list(WORKFLOWS),
            workflow_runner=_workflow_runner,
            interceptors=[self.tracing.interceptor] if self.tracing is not None else None,
            run_context=self._serving,
        )

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        """The worker's own configuration, with the runs' workflows, activities and runner."""
        config = super().configure_worker(config)
        parts = run_parts(
            config["client"],
            self.settings,
            self.providers,
            self.apps.tools,
            self.http,
            tokens=self.tokens,
            agents=self.apps.agents,
            tool_deps=self.apps.tool_deps,
            mcp=self.apps.mcp,
            tracing=self.tracing,
            scorers=self.apps.scorers,
        )
        config["activities"] = [*config.get("activities", []), *parts.activities]
        return config

    @contextlib.asynccontextmanager
    async def _serving(self) -> AsyncIterator[None]:
        """While the worker runs; then the providers', apps' and notices' connections close."""
        try:
            yield
        finally:
            await self.providers.aclose()
            await self.apps.aclose()
            await self.http.aclose()
            if self.tracing is not None:
                self.tracing.shutdown()


def _data_converter(given: DataConverter | None) -> DataConverter:
    """waitstate's converter in place of the SDK's default; one with waitstate's payload
    converter (and a codec of the user's, say) is kept; another is refused: runs record their
    inputs and results with this one (`waitstate.converter`)."""
    if given is None or given is DataConverter.default:
        return DATA_CONVERTER
    if given.payload_converter_class is CompactPayloadConverter:
        return given
    raise ValueError(
        "WaitstatePlugin needs waitstate's data converter (waitstate.converter.DATA_CONVERTER); "
        "the client was given another"
    )


def _workflow_runner(given: WorkflowRunner | None) -> WorkflowRunner:
    """The worker's runner, wrapped so that agent runs get handlers after resolutions (the
    worker's own workflows run as before), and, if it is the sandbox, passing waitstate's
    modules through it (loaded once per worker, not once per run); waitstate's own when none
    was given."""
    if given is None:
        return workflow_runner()
    if isinstance(given, SandboxedWorkflowRunner):
        restrictions = given.restrictions.with_passthrough_modules("waitstate")
        given = SandboxedWorkflowRunner(restrictions=restrictions, runner_class=given.runner_class)
    return HandlersLast(given)
