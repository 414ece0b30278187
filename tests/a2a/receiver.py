"""A client's webhook for A2A pushes, in the test's own event loop (a thread would not do: see
gh-106905): a bare HTTP/1.1 server that records each push and answers with the status the test
scripts (`answers`, one per request, then `200`)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from waitstate.outbound import NETWORKS_VARIABLE, parse_networks

MAX_BODY = 1 << 20
# The receivers listen on loopback, which a worker pushes to only when its operator allows it
# (WAITSTATE_A2A_PUSH_NETWORKS): the pushing tests' workers and A2A servers do.
LOOPBACK_TEXT = "127.0.0.0/8,::1"
LOOPBACK = parse_networks(LOOPBACK_TEXT)
PUSH_ENV = {NETWORKS_VARIABLE: LOOPBACK_TEXT}


@dataclass(frozen=True)
class Push:
    """One request the receiver got, and what it answered."""

    headers: dict[str, str]
    body: bytes
    answered: int

    @property
    def task(self) -> dict[str, Any]:
        task: dict[str, Any] = json.loads(self.body)["task"]
        return task

    @property
    def state(self) -> str:
        return str(self.task["status"]["state"])

    @property
    def key(self) -> str:
        return self.headers.get("idempotency-key", "")

    def signed_with(self, key: str) -> bool:
        """Whether its `X-Waitstate-Signature` is that of its body under `key`."""
        fields = dict(
            part.split("=", 1) for part in self.headers["x-waitstate-signature"].split(",")
        )
        signed = f"{fields['t']}.".encode() + self.body
        expected = hmac.new(key.encode(), signed, hashlib.sha256).hexdigest()
        return hmac.compare_digest(expected, fields["v1"])


@dataclass
class Receiver:
    port: int = 0
    answers: list[int] = field(default_factory=list)
    pushes: list[Push] = field(default_factory=list)
    tls: bool = False

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}/hook"

    def taken(self) -> list[Push]:
        """The pushes it answered 2xx, in the order they came."""
        return [p for p in self.pushes if 200 <= p.answered < 300]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")[1:]
            headers = {
                name.strip().lower(): value.strip()
                for name, _, value in (line.partition(":") for line in lines if line)
            }
            length = min(int(headers.get("content-length", "0")), MAX_BODY)
            body = await reader.readexactly(length)
            answered = self.answers.pop(0) if self.answers else 200
            self.pushes.append(Push(headers, body, answered))
            writer.write(
                f"HTTP/1.1 {answered} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".encode()
            )
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@asynccontextmanager
async def receiving(
    answers: list[int] | None = None, tls: ssl.SSLContext | None = None
) -> AsyncIterator[Receiver]:
    """A receiver listening on a free loopback port until the block ends (over TLS with
    `tls`, a server context)."""
    receiver = Receiver(answers=list(answers or []), tls=tls is not None)
    server = await asyncio.start_server(receiver._serve, "127.0.0.1", 0, ssl=tls)
    receiver.port = server.sockets[0].getsockname()[1]
    try:
        yield receiver
    finally:
        server.close()
        await server.wait_closed()
