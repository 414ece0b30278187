"""A worker process for one side of the bench, so its CPU and memory are its own.

    python -m bench.worker ours    # worker.py's wiring (build_workers, AgentRunWorkflow) plus
                                   # the bench's `chunk` tool (bench/tools.py)
    python -m bench.worker floor   # the raw-Temporal floor (bench/floor.py)

Both read TEMPORAL_ADDRESS, WAITSTATE_TASK_QUEUE, OPENAI_BASE_URL, DEMO_SYSTEMS_URL and
WAITSTATE_MAX_CACHED_WORKFLOWS (ours reads the rest of worker.py's settings too, the model queue
and its rate included: it polls that queue too, as worker.py does; and WAITSTATE_APPS, the
apps whose agents it serves besides the demo's tools), print
"bench worker ready" once polling, and stop on SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys

import httpx
from temporalio.client import Client
from temporalio.worker import Worker

from bench.tools import chunk_tool
from waitstate.settings import Settings, connect, exit_process

READY = "bench worker ready"


async def _serve(*workers: Worker) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with contextlib.AsyncExitStack() as running:
        for worker in workers:
            await running.enter_async_context(worker)
        print(READY, flush=True)
        await stop.wait()


async def main(side: str) -> None:
    """Run one side's worker until SIGTERM."""
    settings = Settings.from_env()
    client: Client = await connect(settings)
    # Each side imports only its own code, so neither's memory holds the other's modules.
    if side == "floor":
        from bench.floor import build_floor_worker

        await _serve(build_floor_worker(client, settings.task_queue, settings.max_cached_workflows))
        return
    from examples.demo.catalog import all_tools
    from waitstate.apps import app_refs, load_apps
    from waitstate.worker import build_providers, build_tokens, build_workers, warm_up

    # The apps a figure names (WAITSTATE_APPS, figure 11's agents), loaded as worker.py loads
    # them; none for the other figures, whose runs name their model and tools themselves.
    apps = load_apps(app_refs(env=settings.apps))
    providers = build_providers(settings, apps.providers, apps.scripts)
    warm_up(providers, settings)  # as worker.py does: no first call pays for the SDK's import
    http = httpx.AsyncClient(timeout=httpx.Timeout(30.0))
    tools = [*all_tools(http, settings.demo_systems_url), chunk_tool(), *apps.tools]
    workers = build_workers(
        client, settings, providers, tools, http, tokens=build_tokens(settings),
        agents=apps.agents, tool_deps=apps.tool_deps, mcp=apps.mcp,
    )  # fmt: skip
    await _serve(*workers)
    await providers.aclose()
    await apps.aclose()
    await http.aclose()


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in ("ours", "floor"):
        sys.exit("usage: python -m bench.worker ours|floor")
    asyncio.run(main(sys.argv[1]))
    exit_process(0)
