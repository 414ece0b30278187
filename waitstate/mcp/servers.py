"""MCP servers as tool sources: which servers a worker may call, and which of their tools a run
is granted.

An operator declares servers by name, in `WAITSTATE_MCP_SERVERS` or in an app
(`App(mcp_servers=[McpServer(...)])`); a run may use only those. Their tools reach the model as
`SERVER__TOOL`; a run is granted one (`reports__render_report`) or all of a server's
(`reports__*`). Headers (credentials) are read from the worker's environment when a call is
made: they are never part of a run's input or history.

The sessions with them (`McpServer.connect`) are `waitstate.mcp.sessions`'s, on the `mcp` SDK:
this module loads none of it, so the CLI and an app's module can declare servers cheaply."""

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

    from waitstate.mcp.sessions import StdioSession

from waitstate.schemas.approvals import ApprovalPolicy
from waitstate.schemas.builtin import MCP_SEPARATOR as SEPARATOR
from waitstate.schemas.questions import QuestionPolicy


@dataclass
class StdioSlot:
    """Where a worker keeps its one session with a stdio server's process, once it started it
    (`waitstate.mcp.sessions`): the worker's, not part of the declaration (neither compared nor
    shown)."""

    session: StdioSession | None = None


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
    input: QuestionPolicy = field(default_factory=QuestionPolicy)
    reach_within: timedelta = timedelta(seconds=30)
    roots: Sequence[str] = ()
    sampling: SamplingPolicy | None = None
    _stdio: StdioSlot = field(default_factory=StdioSlot, init=False, repr=False, compare=False)

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
        # Frozen: set once here.
        object.__setattr__(self, "require_approval", patterns)
        object.__setattr__(self, "roots", tuple(self.roots))

    def roots_listed(self) -> dict[str, Any]:
        """What a `roots/list` request is answered (a `ListRootsResult`, as JSON)."""
        return {"roots": [{"uri": root} for root in self.roots]}

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
        # optional: the mcp SDK (~0.9 s to load), loaded by a process's first session, never by
        # the CLI or an app's module, which only declare servers.
        from waitstate.mcp.sessions import open_session

        async with open_session(self, self._stdio, read_timeout, extensions) as client:
            yield client

    async def aclose(self) -> None:
        """End the process of a stdio server, if the worker started one (a no-op for HTTP)."""
        if self._stdio.session is not None:
            await self._stdio.session.aclose()


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
