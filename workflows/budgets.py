"""The run's budget: what it may spend on its model calls (`RunInput.budget`, or its agent's),
checked before each call from what it has already spent, and its declared `on_exceed`.

A run without a budget does nothing here, so every run recorded before budgets replays as it
ran.
"""

from __future__ import annotations

import json

from waitstate.schemas import RunState, RunStatus, ToolCall
from waitstate.schemas.budgets import RAISE_BUDGET, BudgetState

from . import ledger, metrics
from .approvals import ApprovalDesk
from .plan import Plan


class BudgetExceeded(Exception):
    """The run spent its budget: it ends `budget_exceeded` (a thread's message fails), saying
    what it spent."""

    status: RunStatus = "budget_exceeded"


class Budgets:
    """Keeps the run within its budget."""

    def __init__(self, plan: Plan, state: RunState, desk: ApprovalDesk) -> None:
        self._plan = plan
        self._state = state
        self._desk = desk

    def model(self) -> str:
        """The model the next call asks: the run's, or the cheaper one it degraded to."""
        spent = self._state.budget
        return spent.degraded_to if spent and spent.degraded_to else self._plan.input.model

    def later(self) -> list[str]:
        """The models the run may go on with later: its budget's `degrade_to`, until it
        switched to it (checked with each call before, so a worker that cannot call it fails
        the run at once, not when the budget is nearly spent)."""
        budget, spent = self._plan.input.budget, self._state.budget
        if budget is None or budget.on_exceed != "degrade" or budget.degrade_to is None:
            return []
        return [] if spent is not None and spent.degraded_to else [budget.degrade_to]

    async def check(self) -> str:
        """Before a model call: degrade, ask for more, or stop, as the budget declares; the
        model the call asks (`model`).

        Raises:
            BudgetExceeded: the run spent its budget and may not spend more (or would call a
                model its dollar budget has no price for).
            ApprovalExpired: a request to raise it expired under on_timeout `fail`.
        """
        budget = self._plan.input.budget
        if budget is None:
            return self._plan.input.model
        if self._state.budget is None:  # the first call: the limits as declared
            self._state.budget = BudgetState(tokens=budget.tokens, usd=budget.usd)
        spent = self._state.budget
        self.charge(self.model())
        if (
            budget.on_exceed == "degrade"
            and spent.degraded_to is None
            and spent.share() >= budget.degrade_at
        ):
            spent.degraded_to = budget.degrade_to
            metrics.budget_reached(budget.on_exceed, "degraded")
            ledger.step(
                self._state,
                "event",
                "budget",
                f"spent {spent.line()}: goes on with {spent.degraded_to}",
            )
        while spent.share() >= 1:
            if budget.on_exceed != "approve" or not await self._raised(spent):
                spent.exceeded = True
                metrics.budget_reached(budget.on_exceed, "stopped")
                ledger.step(self._state, "event", "budget", f"exceeded: spent {spent.line()}")
                raise BudgetExceeded(f"budget exceeded: spent {spent.line()}")
        if budget.usd is not None and self.model() not in budget.prices:
            spent.exceeded = True
            raise BudgetExceeded(
                f"no price for {self.model()} in the budget's table: its dollar budget could "
                "not be kept"
            )
        return self.model()

    def charge(self, model: str) -> None:
        """Count what the run's model calls spent since the last count against the budget:
        every call (its turns, its checkpoints, an MCP server's sampling), its tokens at
        `model`'s price (the model the run asks now)."""
        budget, spent = self._plan.input.budget, self._state.budget
        if budget is None or spent is None:
            return
        usage = self._state.usage
        spent.spent_tokens = usage.input_tokens + usage.output_tokens
        if (price := budget.prices.get(model)) is not None:
            spent.spent_usd += price.cost(usage - spent.priced)
        spent.priced = usage

    async def _raised(self, spent: BudgetState) -> bool:
        """Ask a person to raise the budget by as much again (the approval desk, under the
        budget's approval policy); whether they did."""
        budget = self._plan.input.budget
        assert budget is not None
        raise_by = {"tokens": budget.tokens, "usd": budget.usd}
        call = ToolCall(
            id=f"budget-{spent.raised + 1}",
            name=RAISE_BUDGET,
            arguments=json.dumps({k: v for k, v in raise_by.items() if v is not None}),
        )
        reason = f"the run spent {spent.line()}: raise its budget by as much again?"
        # No checkpoint before the wait: it would be a model call past the budget.
        request = await self._desk.ask(call, reason, budget.approval, checkpoint=False)
        if request.status != "approved":
            return False
        spent.raised += 1
        metrics.budget_reached(budget.on_exceed, "raised")
        if budget.tokens is not None and spent.tokens is not None:
            spent.tokens += budget.tokens
        if budget.usd is not None and spent.usd is not None:
            spent.usd += budget.usd
        return True
