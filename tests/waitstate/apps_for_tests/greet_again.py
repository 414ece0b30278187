"""Wrong next to greetings: declares another tool named `greet`."""

from __future__ import annotations

from waitstate import App, tool


@tool
async def greet(person: str) -> str:
    """Greet a person, again."""
    return f"Hi {person}"


app = App(tools=[greet])
