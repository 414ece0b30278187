"""A run's plan: its input as resolved once. It starts as what the run was started with; its
opening (`Opening`, its one writer) fills in what the run's agent defines and what its MCP
tools are; continue-as-new carries it as the next run's input, resolved already, so it is not
resolved again. Every part reads it (`plan.input`); none changes it, and a resolution makes a
new input rather than change the one the parts were given."""

from __future__ import annotations

from typing import Any

from waitstate.schemas import RunInput


class Plan:
    """The run's input, as resolved so far (see the module's docstring)."""

    def __init__(self, input: RunInput) -> None:
        self._input = input

    @property
    def input(self) -> RunInput:
        return self._input

    def resolve(self, **fields: Any) -> None:
        """Set `fields` of the input (`Opening`'s alone, before the run's first turn)."""
        self._input = self._input.model_copy(update=fields)
