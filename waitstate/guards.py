"""What the HTTP doors of the MCP and A2A servers refuse before a request reaches their
protocol: a browser's request from an origin it does not trust (the MCP server's), and a body
over its bound (both).

Each answers once, with a plain HTTP status and a JSON body saying why, and the request never
reaches the app under it: nothing is parsed, nothing is logged as a failure.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from urllib.parse import urlsplit

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from waitstate.outbound import is_loopback

# What is read and dropped of a body refused in mid-flight, so that a client still sending it
# reads the refusal rather than a reset connection; past either bound the connection is closed.
DRAIN_BYTES = 8 * 1_048_576
DRAIN_SECONDS = 5.0
MAX_ORIGIN_CHARS = 2_048


class OriginGuard:
    """Refuses with 403 a request whose `Origin` is neither a loopback origin nor one of
    `allowed`: a browser's page on another site (or one whose name an attacker points at this
    host: DNS rebinding) never reaches the server. A request without `Origin` (not from a
    browser: an SDK, an IDE, another server) goes on; the bearer is what admits it."""

    def __init__(self, app: ASGIApp, allowed: Iterable[str] = ()) -> None:
        self._app = app
        self._allowed = frozenset(allowed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            origin = dict(scope.get("headers") or []).get(b"origin")
            if origin is not None and not self._trusted(origin):
                await refuse(
                    send,
                    403,
                    "origin_refused",
                    "requests from this origin are refused: the server's operator lists the "
                    "origins it serves (WAITSTATE_MCP_ALLOWED_ORIGINS)",
                )
                return
        await self._app(scope, receive, send)

    def _trusted(self, origin: bytes) -> bool:
        try:
            normal = normal_origin(origin.decode("ascii"))
        except (UnicodeDecodeError, ValueError):
            return False
        return is_loopback(urlsplit(normal).hostname or "") or normal in self._allowed


def parse_origins(text: str) -> frozenset[str]:
    """The origins of `WAITSTATE_MCP_ALLOWED_ORIGINS` (`scheme://host[:port]`, comma-separated),
    as `OriginGuard` compares them.

    Raises:
        ValueError: an entry is not an origin.
    """
    return frozenset(normal_origin(part.strip()) for part in text.split(",") if part.strip())


def normal_origin(origin: str) -> str:
    """`origin` as `scheme://host:port` (the scheme and host in lower case, the port always
    said), so that equal origins compare equal.

    Raises:
        ValueError: it is not an `http` or `https` origin (`null`, a path, credentials...).
    """
    if len(origin) > MAX_ORIGIN_CHARS:
        raise ValueError("an origin of over 2,048 characters")
    parts = urlsplit(origin)
    scheme = parts.scheme.lower()
    port = parts.port  # raises ValueError for a port out of range
    extra = parts.path or parts.query or parts.fragment or parts.username or parts.password
    if scheme not in ("http", "https") or not parts.hostname or extra:
        raise ValueError(f"{origin!r} is not an origin (scheme://host[:port])")
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{port or (443 if scheme == 'https' else 80)}"


class BoundedBody:
    """Refuses a request whose body is over `limit` bytes with 413: by its `Content-Length`
    before any of it is read, or, sent in chunks, once what arrived passes the limit.

    The body is read whole (at most `limit` bytes are held) before the app is called, so the
    app never meets a body cut short, and a refused one never reaches it."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self._app, self._limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self._limit):
            await refuse(send, 413, "body_too_large", f"the body is over {self._limit} bytes")
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client left before its body was whole: nobody to answer
            body += message.get("body", b"")
            if len(body) > self._limit:
                await refuse(send, 413, "body_too_large", f"the body is over {self._limit} bytes")
                await _drain(receive)
                return
            if not message.get("more_body", False):
                break
        whole: list[Message] = [{"type": "http.request", "body": bytes(body), "more_body": False}]

        async def replay() -> Message:
            return whole.pop() if whole else await receive()

        await self._app(scope, replay, send)


async def _drain(receive: Receive) -> None:
    """Read and drop the rest of a refused body, within `DRAIN_BYTES` and `DRAIN_SECONDS`."""
    dropped = 0
    with anyio.move_on_after(DRAIN_SECONDS):
        while dropped <= DRAIN_BYTES:
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                return
            dropped += len(message.get("body", b""))


async def refuse(send: Send, status: int, error: str, message: str) -> None:
    """Answer `status` with `{"error": error, "message": message}`."""
    body = json.dumps({"error": error, "message": message}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
