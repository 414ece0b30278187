"""Wrong next to greetings: declares another agent named `greeter`."""

from __future__ import annotations

from waitstate import Agent, App

app = App(agents=[Agent("greeter")])
