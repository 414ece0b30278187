"""The agents the AG-UI tests serve: the demo's refunds (a refund over the threshold waits for a
person's approval), played by the scripted demo model, its tools the stack's; and one whose
model holds its answer to a `slow` message until the test lets it go (tests/workflows/
threads_app.py's `held`)."""

from __future__ import annotations

from waitstate import Agent

REFUNDER = Agent(
    "refunder",
    instructions="You refund valid claims.",
    model="scripted:demo",
    tools=["check_claim", "issue_refund"],
)

HOLDER = Agent("holder", instructions="You answer.", model="held:any")
