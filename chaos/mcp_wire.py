"""A raw JSON-RPC client of the MCP 2026-07-28 wire (streamable HTTP, stateless), written from
the spec rather than an SDK: what a request carries (`_meta`, the routing headers, the bearer),
and how an answer is read (a JSON body, or one event of an SSE stream). The tests of
waitstate's MCP server use it where an SDK would hide what is sent, or retry on its own, and
the suite's class 18 (`chaos.mcp_doors`) to send a call again as a client that retries does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
from mcp.shared.inbound import MCP_METHOD_HEADER, MCP_NAME_HEADER, MCP_PROTOCOL_VERSION_HEADER
from mcp_types import (
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO_META_KEY,
    PROTOCOL_VERSION_META_KEY,
)

from waitstate.mcp_server.shapes import IDEMPOTENCY_KEY

VERSION = "2026-07-28"
TASKS = "io.modelcontextprotocol/tasks"


@dataclass(frozen=True)
class Answer:
    """What the server answered: the HTTP status, and the JSON-RPC message (None if none)."""

    status: int
    message: dict[str, Any] | None

    @property
    def result(self) -> dict[str, Any]:
        assert self.message is not None and "result" in self.message, self
        result: dict[str, Any] = self.message["result"]
        return result

    @property
    def error(self) -> dict[str, Any]:
        assert self.message is not None and "error" in self.message, self
        error: dict[str, Any] = self.message["error"]
        return error


def body(
    method: str,
    params: dict[str, Any] | None = None,
    *,
    id: int | str = 1,  # noqa: A002 - the JSON-RPC member's name
    tasks: bool = True,
    key: Any = None,
) -> dict[str, Any]:
    """A request: `params` with the `_meta` every 2026-07-28 request carries (declaring the
    tasks extension unless `tasks` is False), and the idempotency key `key` if given."""
    capabilities: dict[str, Any] = {"extensions": {TASKS: {}}} if tasks else {}
    meta: dict[str, Any] = {
        PROTOCOL_VERSION_META_KEY: VERSION,
        CLIENT_INFO_META_KEY: {"name": "raw-test-client", "version": "1"},
        CLIENT_CAPABILITIES_META_KEY: capabilities,
    }
    if key is not None:
        meta[IDEMPOTENCY_KEY] = key
    return {
        "jsonrpc": "2.0",
        "id": id,
        "method": method,
        "params": {**(params or {}), "_meta": meta},
    }


def call(
    tool: str,
    arguments: dict[str, Any],
    *,
    key: Any = None,
    id: int | str = 1,  # noqa: A002
) -> dict[str, Any]:
    """A `tools/call` of `tool`, with the idempotency key `key` if given."""
    return body("tools/call", {"name": tool, "arguments": arguments}, id=id, key=key)


def headers(request: dict[str, Any], secret: str | None) -> dict[str, str]:
    """The headers `request` travels with: the routing headers, and the bearer `secret`."""
    sent = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        MCP_PROTOCOL_VERSION_HEADER: VERSION,
        MCP_METHOD_HEADER: request["method"],
    }
    params = request.get("params") or {}
    if "name" in params:
        sent[MCP_NAME_HEADER] = params["name"]
    elif "taskId" in params:
        sent[MCP_NAME_HEADER] = params["taskId"]
    if secret is not None:
        sent["Authorization"] = f"Bearer {secret}"
    return sent


async def send(
    http: httpx.AsyncClient,
    url: str,
    request: dict[str, Any],
    secret: str | None,
    **extra_headers: str,
) -> Answer:
    """Post `request` and read its answer."""
    response = await http.post(
        url, json=request, headers={**headers(request, secret), **extra_headers}
    )
    return Answer(response.status_code, message(response))


@asynccontextmanager
async def unread(url: str, request: dict[str, Any], secret: str) -> AsyncIterator[None]:
    """Post `request` over a socket of its own, and read nothing: the connection is dropped when
    the block ends, the answer unread (an answer lost on the way)."""
    where = urlsplit(url)
    assert where.hostname is not None and where.port is not None
    _, writer = await asyncio.open_connection(where.hostname, where.port)
    try:
        payload = json.dumps(request).encode()
        lines = [
            f"POST {where.path} HTTP/1.1",
            f"Host: {where.hostname}:{where.port}",
            f"Content-Length: {len(payload)}",
            *(f"{name}: {value}" for name, value in headers(request, secret).items()),
        ]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + payload)
        await writer.drain()
        yield
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


def message(response: httpx.Response) -> dict[str, Any] | None:
    """The JSON-RPC message of an answer: its JSON body, or the first `message` event of its
    SSE stream that carries one."""
    kind = response.headers.get("content-type", "")
    if kind.startswith("application/json"):
        found: dict[str, Any] = response.json()
        return found if "jsonrpc" in found else None
    if kind.startswith("text/event-stream"):
        for line in response.text.splitlines():
            if line.startswith("data:") and line[5:].strip():
                event: dict[str, Any] = json.loads(line[5:])
                if "result" in event or "error" in event:
                    return event
    return None
