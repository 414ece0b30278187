"""MCP servers as tool sources: which servers a worker may call, and one session per call.

An operator declares servers by name, in `WAITSTATE_MCP_SERVERS` or in an app
(`App(mcp_servers=[McpServer(...)])`); a run may use only those. Their tools reach the model as
`SERVER__TOOL`; a run is granted one (`reports__render_report`) or all of a server's
(`reports__*`). Headers (credentials) are read from the worker's environment when a call is
made: they are never part of a run's input or history.
"""

from __future__ import annotations

import fnmatch
import os
import shlex
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcp import Client

from waitstate.schemas.builtin import MCP_SEPARATOR as SEPARATOR
from waitstate.schemas.questions import InputPolicy


class McpConfigError(ValueError):
    """A server declaration or a tool grant that cannot be served; one line."""


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
        task_timeout: How long a run waits for a task of this server (the server's own TTL
            and the run's `operation_timeout` may make it shorter); past it the task is
            cancelled and the operation expires.
        input: Who answers the questions its tasks ask (`input_required`), and what happens
            when nobody does; by default a person, within an hour, else the task is told no.
        reach_within: How long a call keeps trying to reach the server (a restart, a deploy)
            before it tells the model the server could not be reached and the call was not
            made.
    """

    name: str
    url: str | None = None
    command: str | None = None
    headers_from_env: Mapping[str, str] = field(default_factory=dict)
    requires_approval_if_destructive: bool = True
    task_timeout: timedelta = timedelta(hours=1)
    input: InputPolicy = field(default_factory=InputPolicy)
    reach_within: timedelta = timedelta(seconds=30)

    def __post_init__(self) -> None:
        if not self.name or SEPARATOR in self.name or not _is_name(self.name):
            raise McpConfigError(
                f"MCP server name {self.name!r}: use letters, digits and single '-' or '_'"
            )
        if (self.url is None) == (self.command is None):
            raise McpConfigError(f"MCP server {self.name!r}: give a url or a command, not both")

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
        """A session with the server (streamable HTTP or stdio), closed on exit, offering the
        client `extensions` (the tasks extension)."""
        import httpx2
        from mcp import Client, StdioServerParameters
        from mcp.client.streamable_http import streamable_http_client

        if self.command is not None:
            command, *args = shlex.split(self.command)
            parameters = StdioServerParameters(command=command, args=args)
            async with Client(
                parameters, read_timeout_seconds=read_timeout, cache=None, extensions=extensions
            ) as client:
                yield client
            return
        assert self.url is not None
        # The SDK's own defaults: a server may hold a response stream open for minutes.
        timeout = httpx2.Timeout(30.0, read=300.0)
        async with httpx2.AsyncClient(headers=self.headers(), timeout=timeout) as http:
            transport = streamable_http_client(self.url, http_client=http)
            async with Client(
                transport, read_timeout_seconds=read_timeout, cache=None, extensions=extensions
            ) as client:
                yield client


def _is_name(text: str) -> bool:
    return all(c.isalnum() or c in "-_" for c in text)


def parse_servers(value: str | None) -> list[McpServer]:
    """`WAITSTATE_MCP_SERVERS`: `name=URL` or `name=stdio:COMMAND`, comma-separated; a
    server's headers come from `WAITSTATE_MCP_HEADERS_<NAME>` (`Header=VARIABLE;...`, NAME in
    upper case with `-` as `_`).

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
        variable = f"WAITSTATE_MCP_HEADERS_{name.upper().replace('-', '_')}"
        headers = dict(
            (h.strip(), v.strip())
            for h, _, v in (
                pair.partition("=") for pair in os.environ.get(variable, "").split(";") if pair
            )
        )
        if target.startswith("stdio:"):
            servers.append(McpServer(name, command=target.removeprefix("stdio:").strip()))
        else:
            servers.append(McpServer(name, url=target, headers_from_env=headers))
    return servers


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
