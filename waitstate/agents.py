"""Agents and apps: what a user's module declares, and a worker and the CLI load by reference.

# reports/app.py
from waitstate import Agent, App, tool

@tool
async def word_count(text: str) -> int:
    '''Count the words of a text.'''
    return len(text.split())

app = App(agents=[Agent("report-builder", instructions="...", tools=[word_count])])

# python worker.py --app reports.app:app      (or WAITSTATE_APPS=reports.app:app)
# python starter.py run --agent report-builder "Count the words of 'a b c'" --wait
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from pydantic import BaseModel

from waitstate.mcp import McpServer
from waitstate.providers.base import Provider
from waitstate.providers.scripted import Script
from waitstate.schemas.approvals import ApprovalPolicy
from waitstate.schemas.budgets import Budget
from waitstate.schemas.evals import Scorer
from waitstate.schemas.run import DEFAULT_SYSTEM_PROMPT
from waitstate.schemas.threads import ThreadSettings
from waitstate.schemas.tree import DEFAULT_MAX_CHILDREN, DEFAULT_MAX_DEPTH, sub_agent_tool
from waitstate.tools.spec import ToolSpec


@dataclass(frozen=True)
class Agent:
    """A named agent: how a run of it starts, unless the run says otherwise.

    Attributes:
        name: What runs are started by (`starter.py run --agent NAME`); shown in `list`,
            `status` and the Web UI (search attribute `AgentName`).
        instructions: The system prompt.
        model: `provider:model` (None: the starter's default, `WAITSTATE_MODEL`).
        tools: The tools a run may use: tools of this app (a `ToolSpec`, e.g. from `@tool`,
            is registered with the app), names of tools any loaded app declares (including
            the built-in `request_approval`), or MCP grants: `server__tool`, `server__*`.
        approval: Timeout and on-timeout behaviour of the model's own `request_approval`
            calls (a tool's own approvals follow the tool's policy).
        max_turns: Model calls before the run stops.
        operation_timeout: No operation of a run waits longer than this, whatever its tool
            declares.
        constraints: Rules every run keeps; repeated in a context rebuilt after a long wait.
        output_type: A pydantic model the final answer must validate against (returned as
            JSON); an answer that does not goes back to the model with the errors.
        temperature, max_tokens: Model settings, for the providers that take them.
        thinking_tokens: Turns Anthropic's extended thinking on, with this budget of tokens
            (at least 1,024; `max_tokens`, if set, must be larger: it counts the thinking).
            Other providers ignore it.
        thread: How its threads take messages (busy policy, idle time before closing); a
            thread started with settings of its own keeps those. Tasks ignore it.
        description: What it does, for those who call it from outside: the description of
            its tool when waitstate serves it over MCP (`python -m waitstate.mcp_server`).
        budget: What a run of it may spend on model calls, in tokens or dollars, and what
            happens when it has (`stop`, `approve`, `degrade`); a run's starter may set its own.
        tenant: Whose agent it is (None: its app's `tenant`): its runs' model calls carry it as
            their fairness key on the model queue (docs/deploy.md#rate-limits-and-fairness);
            a run's starter may set its own. At most 64 bytes.
        sub_agents: Agents (of any loaded app, by name) a run of it may start, each a run of
            its own that it waits for holding no worker: its model calls `agent_<name>` with
            the sub-agent's task, several at once to run them in parallel (docs/trees.md).
        max_children: Sub-agents one run of it may have running at once (at most 1,000).
        max_depth: For a tree whose root is a run of it: the levels of sub-agents below the
            root (at most 10); a call that would go deeper is refused to the model.
    """

    name: str
    instructions: str = DEFAULT_SYSTEM_PROMPT
    model: str | None = None
    tools: Sequence[ToolSpec | str] = ()
    approval: ApprovalPolicy = field(default_factory=ApprovalPolicy)
    max_turns: int = 12
    operation_timeout: timedelta | None = None
    constraints: Sequence[str] = ()
    output_type: type[BaseModel] | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    thinking_tokens: int | None = None
    thread: ThreadSettings | None = None
    description: str = ""
    budget: Budget | None = None
    tenant: str | None = None
    sub_agents: Sequence[str] = ()
    max_children: int = DEFAULT_MAX_CHILDREN
    max_depth: int = DEFAULT_MAX_DEPTH

    def tool_names(self) -> list[str]:
        """The names of its tools, in order."""
        return [t if isinstance(t, str) else t.name for t in self.tools]

    def sub_agent_tools(self) -> list[str]:
        """The tools by which its runs start their sub-agents, in order."""
        return [sub_agent_tool(name) for name in self.sub_agents]


@dataclass(frozen=True)
class App:
    """What a user's module exports for a worker to serve.

    Attributes:
        agents: The agents runs can be started by.
        tools: Tools besides those the agents list (runs may name them in `--tools`); or a
            function of the app's `deps` returning them, for tools built over a client the
            app provides.
        deps: Called once when a worker starts; what it returns reaches every handler of the
            app's tools as `RunContext.deps`, and is closed (`aclose()`, if it has one) when
            the worker stops. The CLI calls it too, to read the app's tool names, and closes
            it at once: keep it cheap (clients that connect on first use, like httpx's).
        providers: Model providers by name (`name:model` specs resolve to them), as factories
            called on first use.
        scripts: Scripts for the deterministic `scripted:` model, by name: for tests of the
            app's agents without a language model.
        mcp_servers: MCP servers whose tools runs may be granted (`name__tool`, `name__*`).
        tenant: Whose app it is: the tenant of each of its agents that names none.
        scorers: What `waitstate eval` scores each fork with, by name: functions of an
            `EvalCase` (the original run and its fork) saying pass or fail (docs/forks.md).
    """

    agents: Sequence[Agent] = ()
    tools: Sequence[ToolSpec] | Callable[[Any], Sequence[ToolSpec]] = ()
    deps: Callable[[], Any] | None = None
    providers: Mapping[str, Callable[[], Provider]] = field(default_factory=dict)
    scripts: Mapping[str, Script] = field(default_factory=dict)
    mcp_servers: Sequence[McpServer] = ()
    tenant: str | None = None
    scorers: Mapping[str, Scorer] = field(default_factory=dict)
