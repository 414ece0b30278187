"""Wrong: an agent lists a function that was not declared with `@tool`."""

from __future__ import annotations

from waitstate import Agent, App


async def word_count(text: str) -> int:
    return len(text.split())


app = App(agents=[Agent("counter", tools=[word_count])])  # type: ignore[list-item]
