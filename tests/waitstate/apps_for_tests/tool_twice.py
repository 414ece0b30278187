"""Wrong: two different tools named `lookup` in one app."""

from __future__ import annotations

from waitstate import Agent, App, tool


@tool(name="lookup")
async def lookup_customer(customer_id: str) -> str:
    """Look a customer up."""
    return customer_id


@tool(name="lookup")
async def lookup_order(order_id: str) -> str:
    """Look an order up."""
    return order_id


app = App(agents=[Agent("clerk", tools=[lookup_customer])], tools=[lookup_order])
