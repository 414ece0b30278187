"""Serve the webhook gateway until SIGINT or SIGTERM.

    python -m waitstate.gateway

Reads the process settings (GATEWAY_HOST, GATEWAY_PORT, WAITSTATE_TOKEN_KEYS,
WAITSTATE_TOKEN_SIGNING_KEY, the TEMPORAL_* connection variables, and for threads
WAITSTATE_OPERATOR_KEYS, WAITSTATE_THREAD_TOKEN_DAYS, WAITSTATE_TASK_QUEUE and WAITSTATE_MODEL).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import sys

import uvicorn
from prometheus_client import CollectorRegistry

from waitstate.auth.tokens import ResumeTokens
from waitstate.gateway.app import create_app
from waitstate.gateway.delivery import TemporalDeliverer
from waitstate.gateway.fleet import RunCounts
from waitstate.gateway.listening import cannot_listen, listen
from waitstate.gateway.redaction import RedactTokens
from waitstate.gateway.streams import EventDesk
from waitstate.gateway.threads import ThreadDesk
from waitstate.settings import Settings, connect, exit_process
from waitstate.tracing import SERVICE_GATEWAY, Tracing

log = logging.getLogger("waitstate.gateway")


class _Server(uvicorn.Server):
    """uvicorn's server, announcing itself once its socket is bound (scripts wait for it), and
    ending its event streams when it stops (uvicorn waits for open responses to end)."""

    def __init__(self, config: uvicorn.Config, events: EventDesk) -> None:
        super().__init__(config)
        self._events = events

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._events.closing.set()
        await super().shutdown(sockets)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            host = self.config.host
            port = self.servers[0].sockets[0].getsockname()[1]
            log.info("gateway listening on http://%s:%d", host, port)


async def serve(settings: Settings, tokens: ResumeTokens, sock: socket.socket | None = None) -> int:
    """Connect to Temporal, then serve the gateway until SIGINT or SIGTERM, on `sock` (bound
    by `listen`; None: uvicorn binds GATEWAY_HOST:GATEWAY_PORT itself).

    Returns:
        The process exit status: 0 after a clean stop, 1 if Temporal cannot be reached.
    """
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        # uvicorn takes these signals over while it serves, shuts down gracefully, then raises
        # the signal again for the handler it found: this one, so the process exits 0.
        loop.add_signal_handler(sig, stopping.set)
    try:
        client = await connect(settings)
    except RuntimeError as err:
        # temporalio's "Failed client connect: ..." when the server cannot be reached.
        log.error("gateway: cannot connect to Temporal: %s", err)
        return 1
    if stopping.is_set():
        return 0
    # Deliveries are Updates (or signals) whose spans the run's trace links to.
    tracing = Tracing.from_settings(settings, SERVICE_GATEWAY)
    if tracing is not None:
        client = tracing.client(client)
    registry = CollectorRegistry()
    threads = ThreadDesk.from_settings(client, settings)
    if not settings.operator_keys:
        log.info("no operator key (WAITSTATE_OPERATOR_KEYS): the gateway starts no threads")
    events = EventDesk.from_settings(client, tokens, settings)
    app = create_app(
        TemporalDeliverer(client), tokens, threads=threads, events=events, registry=registry
    )
    config = uvicorn.Config(
        app, host=settings.gateway_host, port=settings.gateway_port, log_level="info"
    )
    # After the Config, which sets uvicorn's loggers up: its access log prints query strings,
    # where a sender may have put a token (`?token=`), refused or not.
    for name in ("uvicorn.access", "uvicorn.error"):
        logging.getLogger(name).addFilter(RedactTokens())
    counting = None
    if settings.run_counts_seconds > 0:
        counting = asyncio.create_task(RunCounts(client, registry).run(settings.run_counts_seconds))
    try:
        await _Server(config, events).serve(sockets=[sock] if sock is not None else None)
    finally:
        if counting is not None:
            counting.cancel()
    if tracing is not None:
        tracing.shutdown()
    log.info("stopped")
    return 0


def main() -> None:
    """The `python -m waitstate.gateway` entry point: exits 1 with one line on stderr if misconfigured."""
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        settings = Settings.from_env(worker=False)  # what only a worker reads is not its to refuse
    except ValueError as err:
        sys.exit(f"gateway: {err}")
    if not settings.token_keys:
        sys.exit(
            "gateway: WAITSTATE_TOKEN_KEYS is not set: give it kid:secret (32+ characters), "
            "the key the workers sign resume tokens with"
        )
    try:
        tokens = ResumeTokens.from_settings(settings)
    except ValueError as err:
        sys.exit(f"gateway: {err}")  # e.g. a signing key that is not among the keys
    try:
        sock = listen(settings.gateway_host, settings.gateway_port)
    except OSError as err:
        sys.exit(f"gateway: {cannot_listen(settings.gateway_host, settings.gateway_port, err)}")
    exit_process(asyncio.run(serve(settings, tokens, sock)))


if __name__ == "__main__":
    main()
