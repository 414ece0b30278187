"""waitstate as an A2A server: the fleet's agents, each with an agent card and a JSON-RPC
endpoint of the A2A protocol (v1.0, on the official `a2a-sdk`), where a task is a run.

    WAITSTATE_A2A_CALLER_KEYS=partner:$(openssl rand -hex 32) \\
        python -m waitstate.a2a --app reports.app:app --port 8793

An agent `NAME` is served at `/agents/NAME` (its card at `/agents/NAME/.well-known/agent-card.json`).
A client's message starts a run of it (`server.RunTaskHandler`); the run's approvals and its
tools' questions for a person are the task's `input-required`, answered by the client's next
message on the task; `CancelTask` cancels the run. This process keeps nothing of a task: killed
and started again, it serves every task it created from Temporal.

Every request but a card's carries a bearer token, one of the caller keys
(`WAITSTATE_A2A_CALLER_KEYS`, `caller:secret`; `door.CallerAuth`). A task is its caller's alone.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Mapping, Sequence

from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from starlette.applications import Starlette
from starlette.routing import BaseRoute
from starlette.types import ASGIApp

from waitstate.a2a import shapes
from waitstate.a2a.door import CARD_SUFFIX, CallerAuth
from waitstate.a2a.server import Connect, RunTaskHandler
from waitstate.a2a.watching import Watches
from waitstate.agents import Agent
from waitstate.auth.operators import OperatorKeys
from waitstate.guards import BoundedBody
from waitstate.outbound import Network

DEFAULT_MAX_BODY_BYTES = 1_048_576

__all__ = ["a2a_app", "agent_path"]


def agent_path(name: str) -> str:
    """Where the agent `name` is served (its JSON-RPC endpoint, under which its card is)."""
    return f"/agents/{name}"


def a2a_app(
    agents: Mapping[str, Agent],
    *,
    connect: Connect,
    keys: Mapping[str, str],
    base_url: str,
    root: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    push_networks: Sequence[Network] = (),
) -> ASGIApp:
    """The A2A server of `agents`, each at `agent_path(name)`, for the callers of `keys`
    (caller -> secret).

    Args:
        connect: Returns the client runs are started and read with (awaited on first use).
        base_url: Where clients reach this server (`http://host:port`): the cards' URLs.
        root: The agent whose card is also the host's, at `/.well-known/agent-card.json`, where
            a client that knows only the host looks (default: the only agent served, if one).
        max_body_bytes: A request's body over this is refused with 413 before it is parsed.
        push_networks: The networks a push config's URL may name by address, besides public
            ones (WAITSTATE_A2A_PUSH_NETWORKS; the worker checks again what a name resolves to).
    """
    version = importlib.metadata.version("waitstate")
    routes: list[BaseRoute] = []
    watches = Watches()  # one bound for every agent's streams and waits
    served = dict(agents)
    if root is not None and root not in served:
        raise ValueError(f"no agent {root!r} is served: the host's card is one of theirs")
    for agent in served.values():
        path = agent_path(agent.name)
        card = shapes.card(agent, f"{base_url.rstrip('/')}{path}", version)
        handler = RunTaskHandler(agent, served, connect, watches, push_networks)
        routes += create_agent_card_routes(card, card_url=f"{path}{CARD_SUFFIX}")
        routes += create_jsonrpc_routes(handler, path)
        if agent.name == (root or (next(iter(served)) if len(served) == 1 else None)):
            routes += create_agent_card_routes(card, card_url=CARD_SUFFIX)
    app = Starlette(routes=routes)
    return BoundedBody(CallerAuth(app, OperatorKeys(keys)), max_body_bytes)
