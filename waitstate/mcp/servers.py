"""MCP servers as tool sources: which servers a worker may call, and its sessions with them.

An operator declares servers by name, in `WAITSTATE_MCP_SERVERS` or in an app
(`App(mcp_servers=[McpServer(...)])`); a run may use only those. Their tools reach the model as
`SERVER__TOOL`; a run is granted one (`reports__render_report`) or all of a server's
(`reports__*`). Headers (credentials) are read from the worker's environment when a call is
made: they are never part of a run's input or history.

A server over streamable HTTP gets a session per call (its tasks are reachable by id from any
session). A server over stdio is a process of the worker, and its tasks live in it: the worker
keeps one process per stdio server, shared by every call, poll, answer and cancel, started on
first use, started again if it ends, and closed with the worker (`McpServers.aclose`).
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import logging
import os
import shlex
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcp import Client, StdioServerParameters

from waitstate.schemas.approvals import ApprovalPolicy
from waitstate.schemas.builtin import MCP_SEPARATOR as SEPARATOR
from waitstate.schemas.questions import InputPolicy

# The package's logger (notices.py logs under it too), as when the servers were waitstate/mcp.py.
log = logging.getLogger("waitstate.mcp")
# How long a stdio server's process has to answer once started.
STDIO_START_WITHIN = timedelta(seconds=30)
# MCP's JSON-RPC code for a connection that closed (mcp_types.CONNECTION_CLOSED).
CONNECTION_CLOSED = -32000


class McpConfigError(ValueError):
    """A server declaration or a tool grant that cannot be served; one line."""


@dataclass(frozen=True)
class SamplingPolicy:
    """A server's sampling requests (`sampling/createMessage`, in a task's or a call's input
    requests) answered by the model of the run that called it: what the operator allows.

    The server sees only what it sent: its own messages are the whole prompt, never the run's
    conversation (`includeContext` is not honoured). What the answers cost is counted in the
    run's usage.

    Attributes:
        max_tokens: The most an answer may take (a request asking for more gets this many).
        max_requests: Answers one poll of a call gives; past it, requests are left open.
        max_prompt_chars: The longest prompt (its messages and system prompt) answered.
        approval: A person lets the model answer each request first: a question of the call,
            showing the prompt, routed as the server's other questions are (`McpServer.input`).
            A request they refuse is left open.
    """

    max_tokens: int = 1024
    max_requests: int = 8
    max_prompt_chars: int = 32_000
    approval: bool = False

    def __post_init__(self) -> None:
        if min(self.max_tokens, self.max_requests, self.max_prompt_chars) < 1:
            raise McpConfigError(
                "sampling: max_tokens, max_requests and max_prompt_chars are each at least 1"
            )


@dataclass(frozen=True)
class McpServer:
    """An MCP server runs may use, by name.

    Attributes:
        name: What its tools are prefixed with (`name__tool`): letters, digits, `-`; no `__`.
        url: Its streamable HTTP endpoint, e.g. `http://127.0.0.1:9000/mcp`.
        command: Or a command that serves it over stdio, e.g. `python -m reports_server`.
        headers_from_env: HTTP headers, each read from an environment variable of the worker
            when a call is made, e.g. `{"Authorization": "REPORTS_MCP_AUTH"}`.
        requires_approval_if_destructive: Tools annotated `destructiveHint` run only once a
            person approved the call (the default; False trusts the server).
        require_approval: The server's own names of tools that run only once a person
            approved the call, whatever the server annotates: glob patterns matched without
            regard to case, e.g. `["delete_*", "drop_table"]`.
        approval: How long such a call (destructive or named) waits for a person, who is
            asked, and what happens when nobody answers.
        task_timeout: How long a run waits for a task of this server (the server's own TTL
            and the run's `operation_timeout` may make it shorter); past it the task is
            cancelled and the operation expires.
        input: Who answers the questions its tasks ask (`input_required`), and what happens
            when nobody does; by default a person, within an hour, else the task is told no.
        reach_within: How long a call keeps trying to reach the server (a restart, a deploy)
            before it tells the model the server could not be reached and the call was not
            made.
        roots: What the server is told when it asks for the client's roots (`roots/list`,
            directly or as a task's input request): `file://` URIs, e.g.
            `["file:///srv/reports"]`. None by default: the server is told there are none.
        sampling: Its sampling requests are answered by the calling run's model, within this
            policy. None by default: they are left unanswered (the call waits until it
            expires).
    """

    name: str
    url: str | None = None
    command: str | None = None
    headers_from_env: Mapping[str, str] = field(default_factory=dict)
    requires_approval_if_destructive: bool = True
    require_approval: Sequence[str] = ()
    approval: ApprovalPolicy = field(default_factory=ApprovalPolicy)
    task_timeout: timedelta = timedelta(hours=1)
    input: InputPolicy = field(default_factory=InputPolicy)
    reach_within: timedelta = timedelta(seconds=30)
    roots: Sequence[str] = ()
    sampling: SamplingPolicy | None = None
    _stdio: _StdioSession | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.name or SEPARATOR in self.name or not _is_name(self.name):
            raise McpConfigError(
                f"MCP server name {self.name!r}: use letters, digits and single '-' or '_'"
            )
        if (self.url is None) == (self.command is None):
            raise McpConfigError(f"MCP server {self.name!r}: give a url or a command, not both")
        if self.command is not None and not _words(self.command):
            raise McpConfigError(
                f"MCP server {self.name!r}: command {self.command!r} is not a command line"
            )
        if isinstance(self.require_approval, str):
            raise McpConfigError(
                f"MCP server {self.name!r}: require_approval is a list of tool name patterns, "
                f"e.g. [{self.require_approval!r}]"
            )
        patterns = tuple(self.require_approval)
        if not all(isinstance(p, str) and p.strip() for p in patterns):
            raise McpConfigError(
                f"MCP server {self.name!r}: require_approval has an empty or non-text pattern"
            )
        if isinstance(self.roots, str) or not all(
            isinstance(root, str) and root.startswith("file://") for root in self.roots
        ):
            raise McpConfigError(
                f"MCP server {self.name!r}: roots is a list of file:// URIs, e.g. "
                '["file:///srv/reports"]'
            )
        # Frozen: set once here. The process of a stdio server is the worker's, not part of the
        # declaration (it is neither compared nor shown).
        object.__setattr__(self, "require_approval", patterns)
        object.__setattr__(self, "roots", tuple(self.roots))
        object.__setattr__(
            self,
            "_stdio",
            _StdioSession(self.name, self.command, self.list_roots) if self.command else None,
        )

    def roots_listed(self) -> dict[str, Any]:
        """What a `roots/list` request is answered (a `ListRootsResult`, as JSON)."""
        return {"roots": [{"uri": root} for root in self.roots]}

    async def list_roots(self, context: Any) -> Any:
        """The session's answer to the server's `roots/list`: `roots`."""
        from mcp_types import ListRootsResult

        return ListRootsResult.model_validate(self.roots_listed())

    def approval_pattern(self, tool: str) -> str | None:
        """The first of `require_approval` that `tool` (the server's own name) matches."""
        return next(
            (p for p in self.require_approval if fnmatch.fnmatchcase(tool.lower(), p.lower())),
            None,
        )

    @property
    def over_stdio(self) -> bool:
        """Whether the server is a process of the worker (its tasks end with it)."""
        return self.command is not None

    def headers(self) -> dict[str, str]:
        """Its headers, from the environment now.

        Raises:
            McpConfigError: a variable it names is not set.
        """
        values = {}
        for header, variable in self.headers_from_env.items():
            value = os.environ.get(variable)
            if value is None:
                raise McpConfigError(
                    f"MCP server {self.name!r}: header {header} needs ${variable}, which is not set"
                )
            values[header] = value
        return values

    @asynccontextmanager
    async def connect(
        self, read_timeout: float | None = None, extensions: Sequence[Any] = ()
    ) -> AsyncIterator[Client]:
        """A session with the server offering the client `extensions` (the tasks extension):
        over streamable HTTP a new one, closed on exit; over stdio the worker's one session
        with the server's process, which stays open (it always offers the tasks extension).

        Raises:
            ConnectionError: the stdio server's process could not be started, or gave no
                session.
        """
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        if self._stdio is not None:
            yield await self._stdio.client()
            return
        assert self.url is not None
        # The SDK's own defaults: a server may hold a response stream open for minutes.
        timeout = httpx2.Timeout(30.0, read=300.0)
        async with httpx2.AsyncClient(headers=self.headers(), timeout=timeout) as http:
            transport = streamable_http_client(self.url, http_client=http)
            async with Client(
                transport,
                read_timeout_seconds=read_timeout,
                cache=None,
                extensions=extensions,
                list_roots_callback=self.list_roots,
            ) as client:
                yield client

    async def aclose(self) -> None:
        """End the process of a stdio server, if the worker started one (a no-op for HTTP)."""
        if self._stdio is not None:
            await self._stdio.aclose()


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


class _StdioSession:
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
        from mcp import Client

        from waitstate.mcp.extension import Tasks

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
        # The SDK bounds a process's shutdown (stdin closed, then SIGTERM, then SIGKILL).
        for owner in owners:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await owner


def _parameters(command: str, args: list[str]) -> StdioServerParameters:
    from mcp import StdioServerParameters

    return StdioServerParameters(command=command, args=args)


@asynccontextmanager
async def _watched(parameters: StdioServerParameters, ended: asyncio.Event) -> AsyncIterator[Any]:
    """The stdio transport, with `ended` set once the server's stdout closes (its process is
    gone), so that the next use starts another instead of failing on a dead one."""
    import anyio
    from mcp.client.stdio import stdio_client
    from mcp.shared.message import SessionMessage

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


def _words(command: str) -> list[str]:
    """A command line's words (none if it is empty or its quotes do not close)."""
    try:
        return shlex.split(command)
    except ValueError:
        return []


def _is_name(text: str) -> bool:
    return all(c.isalnum() or c in "-_" for c in text)


def parse_servers(value: str | None) -> list[McpServer]:
    """`WAITSTATE_MCP_SERVERS`: `name=URL` or `name=stdio:COMMAND`, comma-separated; a
    server's headers come from `WAITSTATE_MCP_HEADERS_<NAME>` (`Header=VARIABLE;...`), and the
    tools that need a person's approval from `WAITSTATE_MCP_REQUIRE_APPROVAL_<NAME>` (name
    patterns, comma-separated: `delete_*,drop_table`), and whether the run's model answers its
    sampling requests from `WAITSTATE_MCP_SAMPLING_<NAME>` (the most tokens an answer may
    take); NAME in upper case with `-` as `_`.

    Raises:
        McpConfigError: an entry is not `name=URL` or `name=stdio:COMMAND`.
    """
    servers = []
    for entry in (part.strip() for part in (value or "").split(",")):
        if not entry:
            continue
        name, sep, target = (piece.strip() for piece in entry.partition("="))
        if not sep or not target:
            raise McpConfigError(
                f"WAITSTATE_MCP_SERVERS entry {entry!r} is not name=URL or name=stdio:COMMAND"
            )
        suffix = name.upper().replace("-", "_")
        headers = dict(
            (h.strip(), v.strip())
            for h, _, v in (
                pair.partition("=")
                for pair in os.environ.get(f"WAITSTATE_MCP_HEADERS_{suffix}", "").split(";")
                if pair
            )
        )
        patterns = os.environ.get(f"WAITSTATE_MCP_REQUIRE_APPROVAL_{suffix}", "").split(",")
        approval = tuple(p.strip() for p in patterns if p.strip())
        sampling = _sampling(suffix)
        if target.startswith("stdio:"):
            command = target.removeprefix("stdio:").strip()
            servers.append(
                McpServer(name, command=command, require_approval=approval, sampling=sampling)
            )
        else:
            servers.append(
                McpServer(
                    name,
                    url=target,
                    headers_from_env=headers,
                    require_approval=approval,
                    sampling=sampling,
                )
            )
    return servers


def _sampling(suffix: str) -> SamplingPolicy | None:
    """`WAITSTATE_MCP_SAMPLING_<NAME>`: the most tokens an answer to the server's sampling
    requests may take (unset: they are not answered)."""
    variable = f"WAITSTATE_MCP_SAMPLING_{suffix}"
    value = os.environ.get(variable, "").strip()
    if not value:
        return None
    if not value.isdigit() or not 0 < int(value) <= 100_000:
        raise McpConfigError(f"{variable}={value!r}: the most tokens an answer may take, 1-100000")
    return SamplingPolicy(max_tokens=int(value))


def is_mcp_name(name: str) -> bool:
    """Whether a tool name (or grant) is an MCP server's: `server__tool`, `server__*`."""
    return SEPARATOR in name


def split_name(name: str) -> tuple[str, str]:
    """`server__tool` -> (`server`, `tool`)."""
    server, _, tool = name.partition(SEPARATOR)
    return server, tool


def grants_by_server(grants: Iterable[str]) -> dict[str, list[str]]:
    """MCP grants (`server__tool`, `server__*`) by server, in order."""
    found: dict[str, list[str]] = {}
    for grant in grants:
        if is_mcp_name(grant):
            server, pattern = split_name(grant)
            found.setdefault(server, []).append(pattern)
    return found


def granted(tool: str, patterns: Iterable[str]) -> bool:
    """Whether `tool` (a server's own name for it) matches one of the grants' patterns."""
    return any(fnmatch.fnmatchcase(tool, pattern) for pattern in patterns)


class McpServers:
    """The servers a worker (or the CLI) knows, by name."""

    def __init__(self, servers: Iterable[McpServer] = ()) -> None:
        self._servers: dict[str, McpServer] = {}
        for server in servers:
            self.add(server)

    def add(self, server: McpServer) -> None:
        """Declare `server`. Raises McpConfigError if its name is taken."""
        if server.name in self._servers:
            raise McpConfigError(f"MCP server {server.name!r} is declared twice")
        self._servers[server.name] = server

    def names(self) -> list[str]:
        """The declared servers' names, sorted."""
        return sorted(self._servers)

    def get(self, name: str) -> McpServer:
        """The server of that name. Raises McpConfigError naming the declared ones."""
        server = self._servers.get(name)
        if server is None:
            known = ", ".join(self.names()) or "none"
            raise McpConfigError(f"unknown MCP server {name!r}; declared: {known}")
        return server

    def __contains__(self, name: object) -> bool:
        return name in self._servers

    async def aclose(self) -> None:
        """End the processes the worker started for its stdio servers."""
        for server in self._servers.values():
            await server.aclose()
