"""Sessions with MCP servers, on the `mcp` SDK: a new one per call over streamable HTTP, and
the one a worker keeps with a stdio server's process.

A server over stdio is a process of the worker, and its tasks live in it: the worker keeps one
process per stdio server, shared by every call, poll, answer and cancel, started on first use,
started again if it ends, and closed with the worker (`McpServers.aclose`).

`McpServer.connect` opens them; the declarations (`waitstate.mcp.servers`) load none of this,
so a process that only declares servers (the CLI, an app's module) never loads the SDK.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shlex
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any, Protocol

import anyio
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage
from mcp_types import CONNECTION_CLOSED, ListRootsResult

from waitstate.cancelling import ended
from waitstate.mcp.extension import Tasks

# The package's logger, as when the servers were waitstate/mcp.py.
log = logging.getLogger("waitstate.mcp")
# How long a stdio server's process has to answer once started.
STDIO_START_WITHIN = timedelta(seconds=30)


class Server(Protocol):
    """What a session needs of a server's declaration (`McpServer`, which calls this module:
    this module imports none of it)."""

    @property
    def name(self) -> str: ...
    @property
    def url(self) -> str | None: ...
    @property
    def command(self) -> str | None: ...
    def headers(self) -> dict[str, str]: ...
    def roots_listed(self) -> dict[str, Any]: ...


class Slot(Protocol):
    """Where the worker keeps a stdio server's one session (`McpServer`'s)."""

    session: StdioSession | None


@asynccontextmanager
async def open_session(
    server: Server,
    stdio: Slot,
    read_timeout: float | None = None,
    extensions: Sequence[Any] = (),
) -> AsyncIterator[Client]:
    """A session with `server` offering the client `extensions` (the tasks extension): over
    streamable HTTP a new one, closed on exit; over stdio the worker's one session with the
    server's process (kept in `stdio`), which stays open (it always offers the tasks extension).

    Raises:
        ConnectionError: the stdio server's process could not be started, or gave no session.
    """
    if server.command is not None:
        if stdio.session is None:
            stdio.session = StdioSession(server.name, server.command, partial(list_roots, server))
        yield await stdio.session.client()
        return
    assert server.url is not None
    # The SDK's own defaults: a server may hold a response stream open for minutes.
    timeout = httpx2.Timeout(30.0, read=300.0)
    async with httpx2.AsyncClient(headers=server.headers(), timeout=timeout) as http:
        transport = streamable_http_client(server.url, http_client=http)
        async with Client(
            transport,
            read_timeout_seconds=read_timeout,
            cache=None,
            extensions=extensions,
            list_roots_callback=partial(list_roots, server),
        ) as client:
            yield client


async def list_roots(server: Server, context: Any) -> ListRootsResult:
    """The session's answer to the server's `roots/list`: its declared `roots`."""
    return ListRootsResult.model_validate(server.roots_listed())


@dataclass
class _Life:
    """One process of a stdio server, and the task that holds its session open."""

    ready: asyncio.Future[Client]
    stop: asyncio.Event
    ended: asyncio.Event  # its stdout closed: the process is gone
    owner: asyncio.Task[None]

    def over(self) -> bool:
        if self.ended.is_set() or self.owner.done():
            return True
        return self.ready.done() and (self.ready.cancelled() or self.ready.exception() is not None)


class StdioSession:
    """The one session a worker process keeps with a stdio server.

    A stdio server's tasks live in its process: a `tasks/get` sent to another process of the
    same command finds nothing. So every activity of the worker shares one process, started on
    first use, started again once it ended (the next use finds `ended` set), and closed by
    `aclose()`. The session is entered and left by a task of its own (the SDK's session must
    be left by the task that entered it); activities send their requests on it concurrently.
    """

    def __init__(self, name: str, command: str, list_roots: Any) -> None:
        self._name = name
        self._command = command
        self._list_roots = list_roots
        self._life: _Life | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ending: set[asyncio.Task[None]] = set()

    async def client(self) -> Client:
        """The session, its process started if none runs.

        Raises:
            ConnectionError: the process could not be started, or gave no session.
        """
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # a new event loop: the old one's session cannot serve it
            self._loop, self._life, self._ending = loop, None, set()
        life = self._life
        if life is None or life.over():
            if life is not None:
                life.stop.set()
                self._ending.add(life.owner)
                life.owner.add_done_callback(self._ending.discard)
            life = self._life = self._start(loop)
        # Shielded: a caller cancelled while the process starts leaves it starting for others.
        return await asyncio.shield(life.ready)

    def _start(self, loop: asyncio.AbstractEventLoop) -> _Life:
        ready: asyncio.Future[Client] = loop.create_future()
        # Read here too: a start whose callers were all cancelled fails unread, not unheard.
        ready.add_done_callback(lambda done: done.cancelled() or done.exception())
        stop, ended = asyncio.Event(), asyncio.Event()
        owner = loop.create_task(self._own(ready, stop, ended), name=f"mcp stdio {self._name}")
        return _Life(ready, stop, ended, owner)

    async def _own(
        self, ready: asyncio.Future[Client], stop: asyncio.Event, ended: asyncio.Event
    ) -> None:
        command, *args = shlex.split(self._command)
        transport = _watched(_parameters(command, args), ended)
        try:
            async with contextlib.AsyncExitStack() as session:
                try:
                    # A process that never answers must not hold every caller.
                    async with asyncio.timeout(STDIO_START_WITHIN.total_seconds()):
                        client = await session.enter_async_context(
                            Client(
                                transport,
                                cache=None,
                                extensions=[Tasks()],
                                list_roots_callback=self._list_roots,
                            )
                        )
                except Exception as err:
                    raise self._not_started(err) from None
                ready.set_result(client)
                log.info("MCP server %r: started %s", self._name, self._command)
                waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(ended.wait())]
                try:
                    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for wait in waits:
                        wait.cancel()
                if ended.is_set() and not stop.is_set():
                    log.warning(
                        "MCP server %r (stdio) ended; its tasks ended with it. The next call "
                        "starts it again",
                        self._name,
                    )
        except Exception as err:
            if not ready.done():
                ready.set_exception(err)
            else:
                log.warning("MCP server %r (stdio): its session ended: %s", self._name, err)
        finally:
            ended.set()
            if not ready.done():
                ready.cancel()

    def _not_started(self, err: Exception) -> ConnectionError:
        """Why the process gave no session, in one line (the SDK wraps its errors in groups)."""
        while isinstance(err, ExceptionGroup) and len(err.exceptions) == 1:
            err = err.exceptions[0]
        if isinstance(err, TimeoutError):
            why = f"did not answer within {STDIO_START_WITHIN.total_seconds():g} s"
        elif getattr(getattr(err, "error", None), "code", None) == CONNECTION_CLOSED:
            why = "ended before it answered"
        else:
            why = f"could not be started: {err or type(err).__name__}"
        return ConnectionError(f"MCP server {self._name!r} over stdio ({self._command}) {why}")

    async def aclose(self) -> None:
        """Close the session and end the process (its tasks end with it)."""
        if self._loop is not asyncio.get_running_loop():
            return
        life, self._life = self._life, None
        owners = set(self._ending)
        if life is not None:
            life.stop.set()
            owners.add(life.owner)
        # The SDK bounds a process's shutdown (stdin closed, then SIGTERM, then SIGKILL). An
        # owner's end is awaited, not its outcome (it logged its failure); a cancellation of
        # the caller meanwhile is the caller's, and leaves the processes ending.
        for owner in owners:
            await ended(owner)


def _parameters(command: str, args: list[str]) -> StdioServerParameters:
    return StdioServerParameters(command=command, args=args)


@asynccontextmanager
async def _watched(parameters: StdioServerParameters, ended: asyncio.Event) -> AsyncIterator[Any]:
    """The stdio transport, with `ended` set once the server's stdout closes (its process is
    gone), so that the next use starts another instead of failing on a dead one."""
    async with stdio_client(parameters) as (read, write):
        forward, receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)

        async def pump() -> None:
            try:
                async with forward:
                    async for message in read:
                        await forward.send(message)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                pass
            finally:
                ended.set()

        async with anyio.create_task_group() as group:
            group.start_soon(pump)
            try:
                yield receive, write
            finally:
                group.cancel_scope.cancel()
