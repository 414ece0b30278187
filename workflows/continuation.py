"""Continue-as-new: when a run hands over to a new run, what it carries, and how a turn whose
calls all wait is handed over mid-way."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import datetime
from typing import NoReturn

from temporalio import workflow

from waitstate.schemas import RunInput, RunState
from waitstate.schemas.run import CarriedTurn, RunCarry

from .memory import Memory

# On a versioned worker, a run stays on the version that started it, and the run it continues as
# new starts on the deployment's current version: between turns is where a run moves up, its
# new history starting on the new code. Unversioned workers' runs are not affected, and a replay
# does not compare the field: histories recorded without it replay (tests/workflows/test_replay.py).
UPGRADE_ON_CONTINUE = workflow.ContinueAsNewVersioningBehavior.AUTO_UPGRADE
# What continue-as-new carries beyond the open items.
KEEP_STEPS = 100
KEEP_CLOSED = 20


class Continuation:
    """Decides when the run continues as new, and carries it over."""

    def __init__(self, input: RunInput, state: RunState, memory: Memory):
        self._input = input
        self._state = state
        self._memory = memory
        # Set when the run continues as new while it waits between turns: the wait's start.
        self.waiting_since: datetime | None = input.carry.waiting_since if input.carry else None
        # The tool calls of the turn in progress still running, and those of them parked in a
        # wait the next run can take over (see `parked`).
        self._turn_open: set[str] = set()
        self._parked: set[str] = set()

    def due(self) -> bool:
        """Temporal suggests it, or the history passed `continue_as_new_after_events`."""
        info = workflow.info()
        limit = self._input.continue_as_new_after_events
        return info.is_continue_as_new_suggested() or (
            limit is not None and info.get_current_history_length() >= limit
        )

    def due_while_waiting(self) -> bool:
        """Whether a wait should end to continue as new (a chatty job's progress reports grow
        the history while the run waits)."""
        return self.due()

    def call_began(self, call_id: str) -> None:
        self._turn_open.add(call_id)

    def call_ended(self, call_id: str) -> None:
        self._turn_open.discard(call_id)

    @contextlib.contextmanager
    def parked(self, call_id: str) -> Iterator[None]:
        """While the block runs, the call `call_id` of the turn waits in a wait the next run can
        take over. The caller waits for its own end or `turn_must_continue()`: when every
        unfinished call of the turn is parked and the history is due to be handed over, they
        all see it together, and the turn continues in a new run."""
        self._parked.add(call_id)
        try:
            yield
        finally:
            self._parked.discard(call_id)

    def turn_must_continue(self) -> bool:
        """Whether every unfinished call of the turn waits parked and the run is due to
        continue as new."""
        return self._turn_open == self._parked and self.due_while_waiting()

    def continue_as_new(
        self, answer: str | None = None, turn: CarriedTurn | None = None
    ) -> NoReturn:
        """Hand the ledger, the conversation reference, pending operations and an unfinished
        turn to a new run (same workflow id: completions and decisions sent later reach it).
        The caller has waited for its handlers and cancels."""
        keep = {
            i for parked in (turn.parked.values() if turn else []) for i in parked.operation_ids
        }
        self._trim(keep)
        self._state.continued_as_new += 1
        carry = RunCarry(
            state=self._state,
            transcript_ref=self._memory.transcript_ref,
            unsent=self._memory.unsent,
            answer=answer,
            turn=turn,
            waiting_since=self.waiting_since,
        )
        workflow.continue_as_new(
            self._input.model_copy(update={"carry": carry}),
            initial_versioning_behavior=UPGRADE_ON_CONTINUE,
        )

    def _trim(self, keep: set[str]) -> None:
        """Bound what is carried: recent steps and lines, every open item, a few closed ones,
        and the operations an unfinished turn waits on (`keep`)."""
        state = self._state
        state.steps = state.steps[-KEEP_STEPS:]
        state.completed = state.completed[-KEEP_STEPS:]
        closed = [k for k, op in state.operations.items() if op.terminal and k not in keep]
        closed = closed[:-KEEP_CLOSED]
        decided = [k for k, r in state.approvals.items() if not r.open][:-KEEP_CLOSED]
        for key in closed:
            del state.operations[key]
        for key in decided:
            del state.approvals[key]
