"""Wrong: two agents named `twin` in one app."""

from __future__ import annotations

from waitstate import Agent, App

app = App(agents=[Agent("twin"), Agent("twin", instructions="The other one.")])
