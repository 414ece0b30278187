"""Wrong: a tool whose function has no docstring, so the model would see only its name."""

from __future__ import annotations

from waitstate import App, tool


@tool
async def ping(host: str) -> str:
    return host


app = App(tools=[ping])
