"""The agent the AG-UI tests serve: the demo's refunds (a refund over the threshold waits for a
person's approval), played by the scripted demo model; its tools are the stack's."""

from __future__ import annotations

from waitstate import Agent

REFUNDER = Agent(
    "refunder",
    instructions="You refund valid claims.",
    model="scripted:demo",
    tools=["check_claim", "issue_refund"],
)
