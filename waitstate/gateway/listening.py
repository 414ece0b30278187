"""Binding the socket an HTTP server of ours serves on (the gateway, and the demo's systems),
and saying in one line why it could not be bound."""

from __future__ import annotations

import errno
import os
import socket


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to `host`:`port`, for uvicorn to serve on, bound here rather than by
    uvicorn: a port another process holds is then an OSError to say in one line (uvicorn
    would log it and stop with `Application shutdown complete.`, or `sys.exit` inside the
    task that serves), and port 0 tells which port it got. The protocol comes from
    getaddrinfo, as when asyncio binds: asyncio sets TCP_NODELAY only on sockets whose
    `proto` says TCP, and without it every answer waits ~40 ms for a delayed ACK.

    Raises:
        OSError: the address cannot be bound.
    """
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


def cannot_listen(host: str, port: int, err: OSError) -> str:
    """Why the gateway cannot listen on `host`:`port`, and the variable that moves it."""
    if err.errno == errno.EADDRINUSE:
        why = "another process listens there"
    else:
        why = os.strerror(err.errno) if err.errno else str(err)
    return f"cannot listen on {host}:{port}: {why}; set GATEWAY_PORT to a free port"
