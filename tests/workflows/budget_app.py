"""The cheaper model a budget degrades to in `tests/workflows/test_budgets.py`: the same loop
as `scripted:forever`, under a name of its own, so its calls can be told apart."""

from __future__ import annotations

from waitstate import App
from waitstate.providers.scripted import forever

app = App(scripts={"forever-cheap": forever})
