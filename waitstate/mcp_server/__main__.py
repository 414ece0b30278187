"""`python -m waitstate.mcp_server`: serve the agents of the apps named (`--app`, or
WAITSTATE_APPS) over MCP, to the callers of WAITSTATE_MCP_CALLER_KEYS. See `waitstate.mcp_server`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

import uvicorn

from waitstate.apps import AppError, app_refs, load_apps
from waitstate.client import WaitstateClient
from waitstate.guards import parse_origins
from waitstate.mcp import McpConfigError, parse_servers
from waitstate.mcp_server import CallerKeys, agent_server, http_app
from waitstate.settings import Settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m waitstate.mcp_server",
        description="Serve the fleet's agents over MCP, each a tool that runs as a task.",
    )
    parser.add_argument("--app", action="append", default=[], help="module:attribute of an App")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8792)
    parser.add_argument(
        "--operator-approvals",
        action="store_true",
        help="leave the runs' approvals to the operator's reviewers (default: the caller "
        "decides them with tasks/update)",
    )
    parser.add_argument(
        "--no-notifications",
        action="store_true",
        help="serve no subscriptions/listen: callers learn of their tasks' changes only by "
        "polling tasks/get",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        settings = Settings.from_env()
        refs = app_refs(args.app, settings.apps)
        if not refs:
            raise AppError("name the apps whose agents to serve: --app or WAITSTATE_APPS")
        if not settings.mcp_caller_keys:
            raise AppError(
                "no caller may call: set WAITSTATE_MCP_CALLER_KEYS (caller:secret, 32+ "
                "characters each)"
            )
        origins = parse_origins(settings.mcp_allowed_origins)
        apps = load_apps(refs, mcp_servers=parse_servers(settings.mcp_servers))
    except (AppError, McpConfigError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    asyncio.run(apps.aclose())
    if not apps.agents:
        print(f"error: the apps {', '.join(refs)} declare no agent", file=sys.stderr)
        return 2
    server = agent_server(
        apps.agents,
        connect=lambda: WaitstateClient.connect(settings),
        auth=CallerKeys(settings.mcp_caller_keys),
        approvals=not args.operator_approvals,
        notify=not args.no_notifications,
    )
    names = ", ".join(sorted(apps.agents))
    print(f"serving {names} at http://{args.host}:{args.port}/mcp", flush=True)
    app = http_app(server, allowed_origins=origins)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
