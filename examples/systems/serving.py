"""Serving an ASGI app with uvicorn in the running event loop, on a socket bound here."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import uvicorn


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
    sock = _listen(host, port)
    server = uvicorn.Server(uvicorn.Config(app, host=host, log_level=log_level))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            sock.close()
            await task
            raise RuntimeError("the server stopped while starting")
        await asyncio.sleep(0.01)
    return server, task, f"http://{host}:{sock.getsockname()[1]}"


def _listen(host: str, port: int) -> socket.socket:
    # Bound here rather than by uvicorn: a busy port is an OSError to the caller (uvicorn would
    # call sys.exit inside the task), and port 0 tells us which port it got. The protocol comes
    # from getaddrinfo, as when asyncio binds: asyncio sets TCP_NODELAY only on sockets whose
    # `proto` says TCP, and without it every answer waits ~40 ms for a delayed ACK.
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock
