"""A valid app without deps whose tools come from a function of them, with a long tool completed
by polling, and an agent naming a tool of another app (greetings) and a model of its provider."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from tests.waitstate.apps_for_tests.backends import ExportArgs, IdleBackend
from waitstate import Agent, App, LongSpec, ToolSpec, tool

# What the app's tools function was called with, each time.
TOOLS_CALLED_WITH: list[Any] = []


@tool
async def forecast(city: str, days: int = 3) -> str:
    """The weather of the next days."""
    return f"sunny in {city} for {days} days"


radar = ToolSpec(
    name="fetch_radar",
    description="Fetch the radar images of a region.",
    args=ExportArgs,
    long=LongSpec(backend=IdleBackend(), completion="poll", poll_interval=timedelta(seconds=1)),
)


def tools(deps: Any) -> Sequence[ToolSpec]:
    TOOLS_CALLED_WITH.append(deps)
    return [forecast, radar]


app = App(
    agents=[
        Agent(
            "forecaster",
            model="local:tiny",
            tools=["forecast", "fetch_radar", "greet", "wait_for_operations"],
        )
    ],
    tools=tools,
)
