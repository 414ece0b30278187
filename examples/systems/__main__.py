"""`python -m examples.systems`: the demo systems on a port, until SIGINT or SIGTERM.

Usage::

    python -m examples.systems --port 8790 [--export-seconds 2] [--pipeline-seconds 3]
        [--webhook-give-up-seconds 600] [--webhook-max-backoff-seconds 30]
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import logging
import os
import signal
import sys
from types import FrameType

from fastapi import FastAPI

from examples.systems.app import create_app
from examples.systems.serving import start_server
from examples.systems.webhooks import WebhookRetry

logger = logging.getLogger(__name__)

DEFAULT_PORT = 8790


def _already_stopping(signum: int, frame: FrameType | None) -> None:
    """Ignore a signal: uvicorn re-raises the one that stopped it once shutdown is done."""


async def _serve(app: FastAPI, host: str, port: int) -> None:
    # uvicorn handles SIGINT/SIGTERM with a graceful shutdown (the lifespan cancels every job),
    # then raises the signal again under the previous handler so the default action still
    # happens. The shutdown is complete by then, so the process exits 0 instead of dying.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _already_stopping)
    _, task, url = await start_server(app, host, port, log_level="warning")
    logger.info("demo systems listening on %s", url)
    await task
    logger.info("demo systems stopped")


def main(argv: list[str] | None = None) -> None:
    """Entry point: `python -m examples.systems`."""
    parser = argparse.ArgumentParser(
        prog="python -m examples.systems",
        description="The demo's external systems (one HTTP app).",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="0 picks a free port")
    parser.add_argument("--export-seconds", type=float, default=2.0)
    parser.add_argument("--pipeline-seconds", type=float, default=3.0)
    parser.add_argument(
        "--webhook-give-up-seconds",
        type=float,
        default=WebhookRetry.give_up_after,
        help="how long a webhook that was not taken is sent again (default 600)",
    )
    parser.add_argument(
        "--webhook-max-backoff-seconds",
        type=float,
        default=WebhookRetry.cap,
        help="the longest wait between two attempts of a webhook (default 30)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    retry = WebhookRetry(
        cap=args.webhook_max_backoff_seconds, give_up_after=args.webhook_give_up_seconds
    )
    app = create_app(
        export_seconds=args.export_seconds,
        pipeline_seconds=args.pipeline_seconds,
        webhook_retry=retry,
    )
    try:
        asyncio.run(_serve(app, args.host, args.port))
    except OSError as err:  # the port could not be bound: say which, and what moves it
        if err.errno == errno.EADDRINUSE:
            why = "another process listens there"
        else:
            why = os.strerror(err.errno) if err.errno else str(err)
        sys.exit(
            f"demo systems: cannot listen on {args.host}:{args.port}: {why}; set "
            "DEMO_SYSTEMS_URL to a free port (`make up` starts them on its port)"
        )


if __name__ == "__main__":
    main()
