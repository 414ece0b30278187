"""`python -m waitstate.mcp_server`: serve the agents of the apps named (`--app`, or
WAITSTATE_APPS) over MCP, to the callers of WAITSTATE_MCP_CALLER_KEYS. See `waitstate.mcp_server`.
"""

from __future__ import annotations

import logging
import sys

import uvicorn

from waitstate.apps import AppError, served_apps, server_parser
from waitstate.client import WaitstateClient
from waitstate.guards import parse_origins
from waitstate.mcp import McpConfigError
from waitstate.mcp_server import CallerKeys, agent_server, http_app
from waitstate.settings import Settings


def main(argv: list[str] | None = None) -> int:
    parser = server_parser(
        "python -m waitstate.mcp_server",
        "Serve the fleet's agents over MCP, each a tool that runs as a task.",
        port=8792,
    )
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
        apps = served_apps(
            args.app, settings, settings.mcp_caller_keys, "WAITSTATE_MCP_CALLER_KEYS"
        )
        origins = parse_origins(settings.mcp_allowed_origins)
    except (AppError, McpConfigError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
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
