"""`python -m waitstate.a2a`: serve the agents of the apps named (`--app`, or WAITSTATE_APPS)
over A2A, to the callers of WAITSTATE_A2A_CALLER_KEYS. See `waitstate.a2a`."""

from __future__ import annotations

import logging
import sys

import uvicorn

from waitstate.a2a import a2a_app, agent_path
from waitstate.apps import AppError, served_apps, server_parser
from waitstate.client import WaitstateClient
from waitstate.mcp import McpConfigError
from waitstate.settings import Settings


def main(argv: list[str] | None = None) -> int:
    parser = server_parser(
        "python -m waitstate.a2a",
        "Serve the fleet's agents over A2A, each task a durable run.",
        port=8793,
    )
    parser.add_argument(
        "--public-url",
        default=None,
        help="where clients reach this server, for the agent cards (default: http://HOST:PORT)",
    )
    parser.add_argument(
        "--root-agent",
        default=None,
        help="the agent whose card is also the host's (/.well-known/agent-card.json); default: "
        "the only agent served, if there is one",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        settings = Settings.from_env()
        apps = served_apps(
            args.app, settings, settings.a2a_caller_keys, "WAITSTATE_A2A_CALLER_KEYS"
        )
    except (AppError, McpConfigError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    base_url = args.public_url or f"http://{args.host}:{args.port}"
    try:
        app = a2a_app(
            apps.agents,
            connect=lambda: WaitstateClient.connect(settings),
            keys=settings.a2a_caller_keys,
            base_url=base_url,
            root=args.root_agent,
            push_networks=settings.a2a_push_networks,
        )
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for name in sorted(apps.agents):
        print(f"serving {name} at {base_url}{agent_path(name)}", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
