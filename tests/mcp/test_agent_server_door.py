"""The door of waitstate's MCP server (`waitstate.mcp_server`), as a raw JSON-RPC client
written from the 2026-07-28 spec meets it (`chaos/mcp_wire.py`): what it refuses before a run
could start, and what it says of itself. No Temporal: the server's client is a stand-in that
records what it was asked, so "nothing started" is read from it."""

from __future__ import annotations

import importlib.metadata
import logging
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from fastmcp.utilities.tasks import TASKS_EXTENSION_ID
from mcp_types import INVALID_PARAMS, SERVER_INFO_META_KEY

from chaos import mcp_wire as wire
from examples.systems.serving import serving
from tests.mcp.agents_app import APP
from tests.mcp.runs import agents_server
from waitstate import guards
from waitstate.mcp_server import http_app, shapes
from waitstate.mcp_server.__main__ import main

ALICE = "a" * 40
IDE = "https://ide.example.com"


@dataclass
class StandIn:
    """The server's client: records every call, and answers none (nothing may be started)."""

    calls: list[str] = field(default_factory=list)

    def __getattr__(self, name: str) -> Any:
        async def record(*args: Any, **kwargs: Any) -> None:
            self.calls.append(name)
            raise AssertionError(f"the door let a call reach the client: {name}")

        return record


@dataclass
class Door:
    url: str
    client: StandIn


@pytest.fixture
async def door() -> AsyncIterator[Door]:
    """The agents of `tests/mcp/agents_app.py`, served to alice, over a stand-in client."""
    client = StandIn()
    server = agents_server(client, {"alice": ALICE})
    origins = guards.parse_origins(f"{IDE}, http://10.0.0.7:8080")
    async with serving(http_app(server, allowed_origins=origins)) as root:
        yield Door(f"{root}/mcp", client)


@pytest.fixture
def server_errors() -> Iterator[list[logging.LogRecord]]:
    """What uvicorn logs as errors while the test runs (an exception in the app, with its
    traceback, is one)."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep(level=logging.ERROR)
    logger = logging.getLogger("uvicorn.error")
    logger.addHandler(handler)
    try:
        yield records
    finally:
        logger.removeHandler(handler)


async def test_a_chunked_body_over_the_bound_is_refused_without_an_error(
    door: Door, server_errors: list[logging.LogRecord]
) -> None:
    """No `Content-Length`: the body is counted as it arrives, refused with 413 once past
    1 MiB, and never reaches MCP (which would fail on a body cut short, a traceback in the
    log); a body under the bound, sent the same way, is served."""

    async def chunks(count: int) -> AsyncIterator[bytes]:
        for _ in range(count):
            yield b" " * 65_536

    request = wire.body("tools/list")
    async with httpx.AsyncClient() as http:
        refused = await http.post(
            door.url, content=chunks(40), headers=wire.headers(request, ALICE)
        )

        async def padded() -> AsyncIterator[bytes]:
            async for chunk in chunks(4):  # JSON allows whitespace before the value
                yield chunk
            yield httpx.Request("POST", door.url, json=request).content

        served = await http.post(door.url, content=padded(), headers=wire.headers(request, ALICE))

    assert refused.status_code == 413
    assert refused.json()["error"] == "body_too_large"
    assert served.status_code == 200, served.text
    assert [r.getMessage() for r in server_errors] == []
    assert door.client.calls == []


@pytest.mark.parametrize(
    "origin",
    [
        "http://evil.example.com",
        "http://evil.example.com:8080",
        "https://ide.example.com.evil.example",
        "http://ide.example.com",  # the allowed origin is https
        "http://10.0.0.7",  # the allowed one is on port 8080
        "null",
        "file://",
        "http://localhost/path",
        "http://user@localhost",
        "http://localhost:99999",
    ],
)
async def test_a_request_from_a_foreign_origin_is_refused(door: Door, origin: str) -> None:
    """A browser's request from a page of another site (or one whose name resolves to this
    host: DNS rebinding) is refused with 403 before it is read, the bearer notwithstanding."""
    request = wire.body("tools/list")
    async with httpx.AsyncClient() as http:
        answer = await wire.send(http, door.url, request, ALICE, Origin=origin)

    assert answer.status == 403
    assert door.client.calls == []


@pytest.mark.parametrize(
    "origin",
    [
        None,  # not a browser
        "http://localhost:3000",
        "http://LOCALHOST",
        "https://127.0.0.1:8443",
        "http://127.0.0.2",
        "http://[::1]:5173",
        IDE,
        f"{IDE}:443",
        "http://10.0.0.7:8080",
    ],
)
async def test_a_request_from_a_loopback_or_listed_origin_is_served(
    door: Door, origin: str | None
) -> None:
    request = wire.body("tools/list")
    extra = {} if origin is None else {"Origin": origin}
    async with httpx.AsyncClient() as http:
        answer = await wire.send(http, door.url, request, ALICE, **extra)

    assert answer.status == 200
    assert {tool["name"] for tool in answer.result["tools"]} >= {"approver", "echo"}


@pytest.mark.parametrize(
    "value", ["ide.example.com", "https://ide.example.com/", "null", "ftp://x"]
)
def test_an_allowed_origin_that_is_not_one_stops_the_server_before_it_starts(
    value: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("WAITSTATE_MCP_CALLER_KEYS", f"alice:{ALICE}")
    monkeypatch.setenv("WAITSTATE_MCP_ALLOWED_ORIGINS", f"http://localhost:3000,{value}")

    assert main(["--app", APP]) == 2
    assert "is not an origin" in capsys.readouterr().err


@pytest.mark.parametrize("tasks", [True, False])
async def test_a_call_of_a_tool_the_server_does_not_have_is_refused_as_unknown(
    door: Door, tasks: bool
) -> None:
    request = wire.body("tools/call", {"name": "nope", "arguments": {"task": "x"}}, tasks=tasks)
    async with httpx.AsyncClient() as http:
        answer = await wire.send(http, door.url, request, ALICE)

    assert answer.error["code"] == INVALID_PARAMS
    assert "unknown tool 'nope'" in answer.error["message"]
    assert door.client.calls == []


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({"task": "hello", "Thread": "plans"}, "unknown arguments 'Thread'"),
        ({"task": "hello", "thread": "plans", "priority": 1}, "unknown arguments 'priority'"),
        ({"task": "hello", "b": 1, "a": 2}, "unknown arguments 'a', 'b'"),
        ({}, "'task' is the agent's task"),
        ({"task": ""}, "'task' is the agent's task"),
        ({"task": 12}, "'task' is the agent's task"),
        ({"task": "x" * 20_001}, "'task' is the agent's task"),
        ({"task": "hello", "thread": "no spaces"}, "'thread' names a conversation"),
        ({"task": "hello", "thread": ["plans"]}, "'thread' names a conversation"),
    ],
)
async def test_arguments_outside_the_tools_input_schema_are_refused_and_start_nothing(
    door: Door, arguments: dict[str, Any], says: str
) -> None:
    """The schema says `additionalProperties: false`: a misspelled `Thread` is refused, not
    taken for a fresh run without its conversation."""
    request = wire.call("listener", arguments)
    async with httpx.AsyncClient() as http:
        answer = await wire.send(http, door.url, request, ALICE)
        listed = await wire.send(http, door.url, wire.body("tools/list"), ALICE)

    assert answer.error["code"] == INVALID_PARAMS
    assert says in answer.error["message"]
    assert door.client.calls == []
    [schema] = [t["inputSchema"] for t in listed.result["tools"] if t["name"] == "listener"]
    assert schema["additionalProperties"] is False


async def test_the_server_names_its_own_version_and_advertises_only_what_it_serves(
    door: Door,
) -> None:
    async with httpx.AsyncClient() as http:
        discovered = await wire.send(http, door.url, wire.body("server/discover"), ALICE)

    info = discovered.result["_meta"][SERVER_INFO_META_KEY]
    assert info == {"name": "waitstate", "version": importlib.metadata.version("waitstate")}
    capabilities = discovered.result["capabilities"]
    assert set(capabilities["extensions"]) == {TASKS_EXTENSION_ID}
    assert "subscribe" not in capabilities.get("resources", {})
    assert capabilities["tools"]["listChanged"] is True  # served by subscriptions/listen


@pytest.mark.parametrize("key", ["", "k" * 129, "has space", "é", "a/b", 12, ["k"], {"k": 1}])
async def test_an_idempotency_key_that_is_not_one_is_refused_and_starts_nothing(
    door: Door, key: Any
) -> None:
    request = wire.call("echo", {"task": "hello"}, key=key)
    async with httpx.AsyncClient() as http:
        answer = await wire.send(http, door.url, request, ALICE)

    assert answer.error["code"] == INVALID_PARAMS
    assert shapes.IDEMPOTENCY_KEY in answer.error["message"]
    assert door.client.calls == []
