"""Wrong: an agent lists `send_fax`, which no app declares."""

from __future__ import annotations

from waitstate import Agent, App, tool


@tool
async def send_email(to: str) -> str:
    """Send an email."""
    return to


app = App(agents=[Agent("secretary", tools=[send_email, "send_fax"])])
