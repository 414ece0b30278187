"""Wrong: an agent's model names a provider nobody provides."""

from __future__ import annotations

from waitstate import Agent, App

app = App(agents=[Agent("oracle", model="delphi:pythia-1")])
