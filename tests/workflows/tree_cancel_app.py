"""A lead whose two sub-agents end their cancels at different speeds, for
`tests/workflows/test_tree_cancel_waits.py`: an asker (tests/workflows/tree_app.py's) is cancelled
at once; an enricher waits for a job of the demo systems (at the URL in `SYSTEMS_URL_ENV`) whose
cancel takes `SLOW_CANCEL_SECONDS`, as a slow job system's does."""

from __future__ import annotations

import asyncio
import os

import httpx

from examples.demo.pipeline import EnrichmentPipeline, enrich_tool
from waitstate import Agent, App, ToolSpec

SYSTEMS_URL_ENV = "TREE_CANCEL_SYSTEMS_URL"
SLOW_CANCEL_SECONDS = 3.0


class SlowCancelPipeline(EnrichmentPipeline):
    """The demo's enrichment pipeline, whose cancels take a few seconds to be answered."""

    async def cancel(self, job_id: str) -> None:
        await asyncio.sleep(SLOW_CANCEL_SECONDS)
        await super().cancel(job_id)


def _deps() -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=10)


def _tools(http: httpx.AsyncClient) -> list[ToolSpec]:
    url = os.environ.get(SYSTEMS_URL_ENV, "http://127.0.0.1:9")
    return [enrich_tool(SlowCancelPipeline(http, url))]


app = App(
    agents=[
        Agent("slow-cancel-lead", model="scripted:tree-lead", sub_agents=["asker", "enricher"]),
        Agent("enricher", model="scripted:enrich", tools=["enrich_dataset"]),
    ],
    tools=_tools,
    deps=_deps,
)
