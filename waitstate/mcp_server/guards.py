"""What the MCP server's HTTP door refuses before a request reaches MCP: a body over its bound.

Each answers once, with a plain HTTP status and a JSON body saying why, and the request never
reaches the app under it: nothing is parsed, nothing is logged as a failure.
"""

from __future__ import annotations

import json

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# What is read and dropped of a body refused in mid-flight, so that a client still sending it
# reads the refusal rather than a reset connection; past either bound the connection is closed.
DRAIN_BYTES = 8 * 1_048_576
DRAIN_SECONDS = 5.0


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
