"""The demo systems as one ASGI app: each service's routes over one `DemoSystems`."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

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

    app.add_middleware(_Counted, systems=systems)

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


class _Counted:
    """Counts every call the systems receive (the test hooks' aside) in `systems.requests`, so
    a test can prove none came: plain ASGI, around the app as it is."""

    def __init__(self, app: ASGIApp, systems: DemoSystems) -> None:
        self._app = app
        self._systems = systems

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not scope["path"].startswith("/_test/"):
            self._systems.requests[f"{scope['method']} {scope['path']}"] += 1
        await self._app(scope, receive, send)
