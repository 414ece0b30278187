"""The demo as an app, declared only through waitstate's public API: what a worker serves when
no app is named (`python worker.py --app examples.demo.app:app` says so explicitly)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import httpx

from examples.demo.catalog import TOOL_NAMES, all_tools
from waitstate import Agent, App


@dataclass
class DemoDeps:
    """One connection pool for every demo tool, and where the demo systems are."""

    http: httpx.AsyncClient
    systems_url: str

    async def aclose(self) -> None:
        await self.http.aclose()


def _deps() -> DemoDeps:
    url = os.environ.get("DEMO_SYSTEMS_URL", "http://127.0.0.1:8790")
    return DemoDeps(httpx.AsyncClient(timeout=httpx.Timeout(30.0)), url.rstrip("/"))


app = App(
    agents=[
        Agent(
            "demo",
            instructions=(
                "You are a careful operations assistant. Use the tools you are given when they "
                "help; when a tool returns an error, read it and correct your call. Answer the "
                "task plainly when you are done."
            ),
            tools=list(TOOL_NAMES),
        )
    ],
    tools=lambda deps: all_tools(deps.http, deps.systems_url),
    deps=_deps,
)
