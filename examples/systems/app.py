"""The demo systems as one ASGI app: each service's routes over one `DemoSystems`."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from fastapi import FastAPI, Request, Response

from examples.systems import (
    approvals_outbox,
    exports,
    folders,
    hooks,
    notifications,
    pipeline,
    purges,
    refunds,
)
from examples.systems.state import DemoSystems
from examples.systems.webhooks import WebhookRetry


def create_app(
    *,
    export_seconds: float = 2.0,
    pipeline_seconds: float = 3.0,
    webhook_retry: WebhookRetry | None = None,
) -> FastAPI:
    """The demo systems as one ASGI app; its state is `app.state.systems` (a `DemoSystems`).

    Args:
        export_seconds: How long an export runs before it succeeds and calls back; also how
            long a purge takes to ask for confirmation, and to purge once confirmed.
        pipeline_seconds: How long an enrichment job runs.
        webhook_retry: How webhooks that were not taken are sent again (`WebhookRetry()`:
            from half a second, capped at 30 s, for 10 minutes).
    """
    systems = DemoSystems(
        export_seconds=export_seconds,
        pipeline_seconds=pipeline_seconds,
        webhook_retry=webhook_retry,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with systems:
            yield

    app = FastAPI(title="waitstate demo systems", lifespan=lifespan)
    app.state.systems = systems

    @app.middleware("http")
    async def count(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        # Every call a system received (the test hooks' aside), so a test can prove none came.
        if not request.url.path.startswith("/_test/"):
            systems.requests[f"{request.method} {request.url.path}"] += 1
        return await call_next(request)

    for routes in (
        exports.router(systems.export_service),
        pipeline.router(systems.pipeline_service),
        purges.router(systems.purge_service),
        folders.router(systems.folder_service),
        notifications.router(systems.notification_service),
        refunds.router(systems.refund_service),
        approvals_outbox.router(systems.outbox_service),
        hooks.router(systems),
    ):
        app.include_router(routes)
    return app
