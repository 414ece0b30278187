"""The cheaper models a budget degrades to in `tests/workflows/test_budgets.py`: the same loop
as `scripted:forever`, under a name of its own, so its calls can be told apart; and one whose
every call is refused, as a provider refuses a request it will never take."""

from __future__ import annotations

from collections.abc import Sequence

from waitstate import App, Message, ToolDefinition
from waitstate.providers import ProviderError
from waitstate.providers.scripted import forever


def refusing(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Every call refused, as a 400 is: not retried."""
    raise ProviderError("scripted", "this model takes no request", status=400)


app = App(scripts={"forever-cheap": forever, "refusing-cheap": refusing})
