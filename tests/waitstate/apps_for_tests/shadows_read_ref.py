"""Wrong: an agent's tool named like the worker's built-in `read_ref`."""

from __future__ import annotations

from waitstate import Agent, App, tool


@tool
async def read_ref(ref: str) -> str:
    """Read a reference my way."""
    return ref


app = App(agents=[Agent("reader", tools=[read_ref])])
