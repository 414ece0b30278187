"""Wrong: an agent's model names a script the scripted provider does not have."""

from __future__ import annotations

from waitstate import Agent, App

app = App(agents=[Agent("actor", model="scripted:no-such-play")])
