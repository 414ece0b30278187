"""Serving an ASGI app with uvicorn in the running event loop, on a socket bound here."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import uvicorn

from waitstate.gateway.listening import listen


@contextlib.asynccontextmanager
async def serving(app: Any, *, host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[str]:
    """Serve an ASGI app with uvicorn in the running event loop, for tests and embedding.

    Args:
        app: The ASGI app; its lifespan runs on entry and exit.
        host: The address to listen on.
        port: The port; 0 picks a free one.

    Yields:
        The server's root URL, e.g. `http://127.0.0.1:41234`.
    """
    server, task, url = await start_server(app, host, port, log_level="warning")
    try:
        yield url
    finally:
        server.should_exit = True
        await task


async def start_server(
    app: Any, host: str, port: int, *, log_level: str
) -> tuple[uvicorn.Server, asyncio.Task[None], str]:
    """Start serving `app` in a task; returns the server, the task and the root URL, once it
    has started.

    Raises:
        OSError: the port could not be bound.
        RuntimeError: the server stopped while starting.
    """
    sock = listen(host, port)
    server = uvicorn.Server(uvicorn.Config(app, host=host, log_level=log_level))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            sock.close()
            await task
            raise RuntimeError("the server stopped while starting")
        await asyncio.sleep(0.01)
    return server, task, f"http://{host}:{sock.getsockname()[1]}"
