"""What the A2A tests share: the server as a process of the test's (`python -m waitstate.a2a`
over the test agents app), its callers' keys, and the official SDK's client of one agent."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from uuid import uuid4

import httpx
from a2a.client import Client, ClientConfig, create_client
from a2a.helpers.proto_helpers import new_data_part, new_text_part
from a2a.types import Message, Part, Role, SendMessageRequest, StreamResponse

from tests.rigs import ServerProcess, free_port

APP = "tests.mcp.agents_app:app"
ALICE = "a" * 40
BOB = "b" * 40
CAROL = "c" * 40  # a caller with no task but the listing test's (the dev server is shared)
CALLER_KEYS = f"alice:{ALICE},bob:{BOB},carol:{CAROL}"


def a2a_process(
    env: dict[str, str], log: Path, port: int | None = None, app: str = APP
) -> ServerProcess:
    """`python -m waitstate.a2a` serving `app` (the test agents app) on `port` (a free one)."""
    port = port or free_port()
    args = ["-m", "waitstate.a2a", "--app", app, "--port", str(port)]
    return ServerProcess(args, port, log, {**env, "WAITSTATE_A2A_CALLER_KEYS": CALLER_KEYS})


def agent_url(server: ServerProcess, agent: str) -> str:
    return f"http://127.0.0.1:{server.port}/agents/{agent}"


@asynccontextmanager
async def sdk_client(url: str, key: str, *, streaming: bool = False) -> AsyncIterator[Client]:
    """The official SDK's client of the agent at `url` (its card fetched from there), sending
    `key` as its bearer token."""
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(headers=headers, timeout=90) as http:
        config = ClientConfig(httpx_client=http, streaming=streaming)
        client = await create_client(url, client_config=config)
        try:
            yield client
        finally:
            await client.close()


def message(
    text: str | None = None,
    *,
    data: object = None,
    task_id: str = "",
    context_id: str = "",
    message_id: str | None = None,
) -> Message:
    parts: list[Part] = []
    if text is not None:
        parts.append(new_text_part(text))
    if data is not None:
        parts.append(new_data_part(data))
    return Message(
        message_id=message_id or str(uuid4()),
        role=Role.ROLE_USER,
        parts=parts,
        task_id=task_id,
        context_id=context_id,
    )


async def send(client: Client, sent: Message) -> list[StreamResponse]:
    """Everything the agent answers `sent` with (one task, or a stream's events)."""
    return [event async for event in client.send_message(SendMessageRequest(message=sent))]
