"""What every part of a run is over: the run's plan (its input, resolved once), its state, the
model's memory of it and its status board, made once by `AgentRunWorkflow` and handed to each
part as one."""

from __future__ import annotations

from dataclasses import dataclass

from waitstate.schemas import RunInput, RunState

from .board import StatusBoard
from .memory import Memory
from .plan import Plan


@dataclass(frozen=True)
class RunParts:
    """The run's plan, state, memory and board, which its parts share."""

    plan: Plan
    state: RunState
    memory: Memory
    board: StatusBoard


class Part:
    """A part of the run (a desk, the operations book, the conversation...), over `RunParts`."""

    def __init__(self, run: RunParts) -> None:
        self._plan = run.plan
        self._state = run.state
        self._memory = run.memory
        self._board = run.board

    @property
    def _input(self) -> RunInput:
        """The run's input, as resolved (read it here each time: its opening resolves it)."""
        return self._plan.input
