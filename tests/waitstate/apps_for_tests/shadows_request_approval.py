"""Wrong: a tool named like the worker's built-in `request_approval`."""

from __future__ import annotations

from waitstate import App, tool


@tool(name="request_approval")
async def my_approval(action: str) -> str:
    """Ask for approval my way."""
    return action


app = App(tools=[my_approval])
