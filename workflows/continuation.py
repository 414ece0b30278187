"""Continue-as-new: when a run hands over to a new run, what it carries, and how a turn whose
calls all wait is handed over mid-way."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import datetime
from typing import NoReturn

from temporalio import workflow

from waitstate.schemas import RunState
from waitstate.schemas.run import CarriedTurn, RunCarry

from . import ledger
from .memory import Memory
from .plan import Plan

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

    def __init__(self, plan: Plan, state: RunState, memory: Memory):
        self._plan = plan
        input = plan.input
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
        limit = self._plan.input.continue_as_new_after_events
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
        The caller has waited for its handlers and cancels, and had each part trim what it
        writes (what is carried is bounded: recent steps and lines, every open item, a few
        closed ones)."""
        ledger.trim(self._state, KEEP_STEPS)
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
            self._plan.input.model_copy(update={"carry": carry}),
            initial_versioning_behavior=UPGRADE_ON_CONTINUE,
        )
