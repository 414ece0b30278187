"""Loading apps by reference (`module:attribute`, as uvicorn loads `module:app`), and checking
them together before a worker serves a single run."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib
import inspect
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from waitstate.agents import Agent, App
from waitstate.mcp import (
    McpConfigError,
    McpServer,
    McpServers,
    is_mcp_name,
    parse_servers,
    split_name,
)
from waitstate.providers.base import Provider, parse_model_spec
from waitstate.providers.scripted import SCRIPTS, Script
from waitstate.schemas.builtin import BUILTIN_TOOLS, READ_REF, REQUEST_APPROVAL
from waitstate.schemas.evals import Scorer
from waitstate.schemas.run import check_tenant
from waitstate.schemas.tree import (
    MAX_CHILDREN_LIMIT,
    MAX_DEPTH_LIMIT,
    SubAgentTask,
    sub_agent_tool,
    tool_name_ok,
)
from waitstate.settings import Settings
from waitstate.tools.spec import ToolSpec

# The providers every worker has (worker.build_providers); apps may add more.
BUILT_IN_PROVIDERS = ("openai", "openai-responses", "anthropic", "scripted")
# The tools every worker has, whatever apps it loads.
WORKER_TOOLS = (*BUILTIN_TOOLS, REQUEST_APPROVAL, READ_REF)


class AppError(Exception):
    """An app that cannot be served as it is; the message is one line naming what to fix."""


def app_refs(cli: Sequence[str] = (), env: str | None = None) -> list[str]:
    """The references to load: `--app` values, then those of `WAITSTATE_APPS`
    (comma-separated), each once."""
    refs = [*cli, *(part.strip() for part in (env or "").split(","))]
    return list(dict.fromkeys(ref for ref in refs if ref))


def load_app(ref: str) -> App:
    """Import `module:attribute` and return the `App` it names.

    Raises:
        AppError: the reference is malformed, the module does not import, the attribute is
            missing, or it is not an `App`.
    """
    module_name, sep, attribute = ref.partition(":")
    if not sep or not module_name or not attribute:
        raise AppError(f"app {ref!r} is not module:attribute (e.g. reports.app:app)")
    # Apps load by reference from the working directory, as uvicorn loads `module:app`: run as
    # an installed command (`waitstate-worker`, `waitstate`), the interpreter put the script's
    # directory first instead.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # an app's own import error, whatever it is, fails the load
        raise AppError(f"app {ref!r} does not import: {_one_line(err)}") from err
    value: Any = module
    for part in attribute.split("."):
        if not hasattr(value, part):
            raise AppError(f"app {ref!r}: module {module_name!r} has no attribute {attribute!r}")
        value = getattr(value, part)
    if not isinstance(value, App):
        raise AppError(f"app {ref!r} is a {type(value).__name__}, not a waitstate.App")
    return value


@dataclass
class Apps:
    """Loaded apps, merged: what a worker serves and the CLI checks names against."""

    refs: list[str] = field(default_factory=list)
    agents: dict[str, Agent] = field(default_factory=dict)
    tools: list[ToolSpec] = field(default_factory=list)
    # What each tool's handlers get as `RunContext.deps`, by tool name.
    tool_deps: dict[str, Any] = field(default_factory=dict)
    providers: dict[str, Callable[[], Provider]] = field(default_factory=dict)
    scripts: dict[str, Script] = field(default_factory=dict)
    mcp: McpServers = field(default_factory=McpServers)
    scorers: dict[str, Scorer] = field(default_factory=dict)
    _deps: list[Any] = field(default_factory=list)

    def tool_names(self) -> list[str]:
        """Every tool the apps declare, and the built-ins, sorted."""
        return sorted({*(spec.name for spec in self.tools), *WORKER_TOOLS})

    def provider_names(self) -> list[str]:
        """Every provider a model spec may name."""
        return sorted({*BUILT_IN_PROVIDERS, *self.providers})

    def script_names(self) -> list[str]:
        """Every script the `scripted` provider can play."""
        return sorted({*SCRIPTS, *self.scripts})

    def check_model(self, spec: str) -> None:
        """Raises AppError if `spec` names no provider (or no script) these apps know."""
        try:
            provider, model = parse_model_spec(spec)
        except ValueError as err:
            raise AppError(str(err)) from None
        if provider not in self.provider_names():
            raise AppError(
                f"model {spec!r}: unknown provider {provider!r}; known: "
                f"{', '.join(self.provider_names())}"
            )
        if provider == "scripted" and model not in self.script_names():
            raise AppError(
                f"model {spec!r}: no script named {model!r}; scripts: "
                f"{', '.join(self.script_names())}"
            )

    def check_tools(self, names: Iterable[str]) -> None:
        """Raises AppError naming the tools no app declares, or the MCP grants whose server
        is not declared (which tools a server has, the run's listing finds out)."""
        names = list(names)
        for name in names:
            if is_mcp_name(name) and split_name(name)[0] not in self.mcp:
                declared = ", ".join(self.mcp.names()) or "none"
                raise AppError(
                    f"{name}: no MCP server {split_name(name)[0]!r} is declared "
                    f"(WAITSTATE_MCP_SERVERS or an app's mcp_servers); declared: {declared}"
                )
        known = self.tool_names()
        unknown = [name for name in names if name not in known and not is_mcp_name(name)]
        if unknown:
            raise AppError(f"unknown tools: {', '.join(unknown)}; known: {', '.join(known)}")

    def agent(self, name: str) -> Agent:
        """The agent of that name. Raises AppError naming the known ones."""
        found = self.agents.get(name)
        if found is None:
            known = ", ".join(sorted(self.agents)) or "none (no app is loaded)"
            raise AppError(f"unknown agent {name!r}; known: {known}")
        return found

    async def aclose(self) -> None:
        """Close what the apps' `deps` opened, and end the processes of stdio MCP servers."""
        await self.mcp.aclose()
        deps, self._deps = self._deps, []
        for value in deps:
            close = getattr(value, "aclose", None)
            if close is not None:
                result = close()
                if inspect.isawaitable(result):
                    await result


def load_apps(
    refs: Sequence[str],
    *,
    callbacks_configured: bool = True,
    mcp_servers: Sequence[McpServer] = (),
) -> Apps:
    """Load and check the apps `refs` name, in order.

    Args:
        callbacks_configured: The worker has resume-token keys and a gateway URL; without
            them a long tool completed by `callback` could never start.
        mcp_servers: MCP servers declared besides the apps' (WAITSTATE_MCP_SERVERS).

    Raises:
        AppError: one line, for the first problem: an app that does not load, a tool or agent
            name used twice, a tool without a description, an agent whose tools, model, budget's
            degrade_to or output type no app provides, a
            callback tool on a worker without token keys or gateway URL.
    """
    apps = Apps(refs=list(refs))
    try:
        for server in mcp_servers:
            apps.mcp.add(server)
    except McpConfigError as err:
        raise AppError(str(err)) from None
    owner = {name: "the worker's built-ins" for name in WORKER_TOOLS}
    for ref in refs:
        _add(apps, ref, load_app(ref), owner)
    _add_sub_agent_tools(apps, owner)
    for agent in apps.agents.values():
        _check_agent(apps, agent)
    if not callbacks_configured:
        for spec in apps.tools:
            if spec.long is not None and spec.long.completion == "callback":
                raise AppError(
                    f"tool {spec.name!r} ({owner[spec.name]}) completes by callback: the "
                    "worker needs WAITSTATE_TOKEN_KEYS and GATEWAY_URL"
                )
    return apps


def _add(apps: Apps, ref: str, app: App, owner: dict[str, str]) -> None:
    try:
        deps = app.deps() if app.deps is not None else None
        if deps is not None:
            apps._deps.append(deps)
        declared = app.tools(deps) if callable(app.tools) else app.tools
    except Exception as err:  # the app's own code: whatever it raises fails the load
        raise AppError(
            f"app {ref!r}: its deps or tools could not be made: {_one_line(err)}"
        ) from err
    for agent in app.agents:
        for item in agent.tools:
            if not isinstance(item, ToolSpec | str):
                raise AppError(
                    f"app {ref!r}: agent {agent.name!r} lists {item!r}, which is neither a tool "
                    "(use @tool or ToolSpec) nor a tool's name"
                )
    specs: dict[str, ToolSpec] = {}
    for spec in [*declared, *(t for a in app.agents for t in a.tools if isinstance(t, ToolSpec))]:
        if not isinstance(spec, ToolSpec):
            raise AppError(f"app {ref!r}: {spec!r} is not a tool (use @tool or ToolSpec)")
        if specs.get(spec.name) is spec:
            continue  # listed by the app and by one of its agents: the same tool
        if not spec.description.strip():
            raise AppError(
                f"app {ref!r}: tool {spec.name!r} has no description, and the model would see "
                "only its name: say what it does (ToolSpec(description=...), or a docstring)"
            )
        if is_mcp_name(spec.name):
            raise AppError(
                f"app {ref!r}: tool {spec.name!r}: '__' is kept for MCP tools (server__tool)"
            )
        if spec.name in specs or spec.name in owner:
            where = "this app" if spec.name in specs else owner[spec.name]
            raise AppError(f"app {ref!r}: tool {spec.name!r} is already declared by {where}")
        specs[spec.name] = spec
    for spec in specs.values():
        owner[spec.name] = f"app {ref}"
        apps.tools.append(spec)
        apps.tool_deps[spec.name] = deps
    for agent in app.agents:
        if agent.name in apps.agents:
            raise AppError(f"app {ref!r}: agent {agent.name!r} is declared twice")
        if agent.tenant is None and app.tenant is not None:
            agent = dataclasses.replace(agent, tenant=app.tenant)
        try:
            check_tenant(agent.tenant)
        except ValueError as err:
            raise AppError(f"app {ref!r}: agent {agent.name!r}: {err}") from None
        apps.agents[agent.name] = agent
    for name, factory in app.providers.items():
        if name in apps.providers or name in BUILT_IN_PROVIDERS:
            raise AppError(f"app {ref!r}: provider {name!r} is already declared")
        apps.providers[name] = factory
    for server in app.mcp_servers:
        try:
            apps.mcp.add(server)
        except McpConfigError as err:
            raise AppError(f"app {ref!r}: {err}") from None
    for name, script in app.scripts.items():
        if name in apps.scripts or name in SCRIPTS:
            raise AppError(f"app {ref!r}: script {name!r} is already declared")
        apps.scripts[name] = script
    for name, scorer in app.scorers.items():
        if name in apps.scorers or not callable(scorer):
            why = "is already declared" if name in apps.scorers else "is not a function"
            raise AppError(f"app {ref!r}: scorer {name!r} {why}")
        apps.scorers[name] = scorer


def _add_sub_agent_tools(apps: Apps, owner: dict[str, str]) -> None:
    """Register the tool by which runs start each agent some agent lists as a sub-agent
    (answered by the run itself: it starts the child run), checking the names."""
    for agent in apps.agents.values():
        if not 1 <= agent.max_children <= MAX_CHILDREN_LIMIT:
            raise AppError(
                f"agent {agent.name!r}: max_children must be 1 to {MAX_CHILDREN_LIMIT}, "
                f"got {agent.max_children}"
            )
        if not 1 <= agent.max_depth <= MAX_DEPTH_LIMIT:
            raise AppError(
                f"agent {agent.name!r}: max_depth must be 1 to {MAX_DEPTH_LIMIT}, "
                f"got {agent.max_depth}"
            )
        for name in agent.sub_agents:
            sub = apps.agents.get(name)
            if sub is None:
                known = ", ".join(sorted(apps.agents))
                raise AppError(
                    f"agent {agent.name!r}: sub-agent {name!r} is no loaded app's agent; "
                    f"known: {known}"
                )
            tool = sub_agent_tool(name)
            if not tool_name_ok(name):
                raise AppError(
                    f"agent {agent.name!r}: sub-agent {name!r}: its tool {tool!r} must be at "
                    "most 64 letters, digits, '_' and '-', as providers take tool names"
                )
            if tool in owner:
                if owner[tool] != "sub-agents":
                    raise AppError(f"tool {tool!r} ({owner[tool]}) is kept for sub-agent {name!r}")
                continue
            owner[tool] = "sub-agents"
            apps.tools.append(
                ToolSpec(
                    name=tool,
                    description=sub_agent_description(sub),
                    args=SubAgentTask,
                    builtin=True,
                )
            )


def sub_agent_description(agent: Agent) -> str:
    """What a parent's model reads of sub-agent `agent`: its description, else its
    instructions' first line."""
    about = agent.description.strip() or agent.instructions.strip().split("\n")[0]
    return (
        f"Start the agent {agent.name!r} on a task and get its answer: {about} It runs on its "
        "own; call it several times in one turn to run several at once."
    )


def _check_agent(apps: Apps, agent: Agent) -> None:
    try:
        apps.check_tools(agent.tool_names())
        if agent.model is not None:
            apps.check_model(agent.model)
    except AppError as err:
        raise AppError(f"agent {agent.name!r}: {err}") from None
    budget = agent.budget
    if budget is not None and budget.degrade_to is not None:
        try:
            apps.check_model(budget.degrade_to)
        except AppError as err:
            raise AppError(f"agent {agent.name!r}: its budget's degrade_to: {err}") from None
        if budget.degrades_unpriced():
            raise AppError(
                f"agent {agent.name!r}: its budget's degrade_to {budget.degrade_to!r} has no "
                "price in the budget's table, and a dollar budget calls no model it cannot price"
            )
    output = agent.output_type
    if output is not None and not (isinstance(output, type) and issubclass(output, BaseModel)):
        raise AppError(f"agent {agent.name!r}: output_type must be a pydantic model class")


def _one_line(err: BaseException, limit: int = 300) -> str:
    """`Type: message` on one line, cut to `limit` characters."""
    text = " ".join(f"{type(err).__name__}: {err}".split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def server_parser(prog: str, description: str, port: int) -> argparse.ArgumentParser:
    """The command line of a server of the apps' agents (A2A, MCP): `--app`, `--host`, `--port`."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--app", action="append", default=[], help="module:attribute of an App")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=port)
    return parser


def served_apps(
    cli: Sequence[str], settings: Settings, keys: dict[str, str], keys_variable: str
) -> Apps:
    """The apps a server of agents serves (`--app`, or WAITSTATE_APPS), checked and closed
    again: the server only reads their agents, the workers run them.

    Raises:
        AppError: no app is named, no caller has a key (`keys`, read from `keys_variable`), an
            app does not load, or the apps declare no agent.
        McpConfigError: WAITSTATE_MCP_SERVERS is malformed.
    """
    refs = app_refs(cli, settings.apps)
    if not refs:
        raise AppError("name the apps whose agents to serve: --app or WAITSTATE_APPS")
    if not keys:
        raise AppError(
            f"no caller may call: set {keys_variable} (caller:secret, 32+ characters each)"
        )
    apps = load_apps(refs, mcp_servers=parse_servers(settings.mcp_servers))
    asyncio.run(apps.aclose())
    if not apps.agents:
        raise AppError(f"the apps {', '.join(refs)} declare no agent")
    return apps
