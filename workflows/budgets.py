"""The run's budget: what it may spend on its model calls (`RunInput.budget`, or its agent's),
checked before each call from what it has already spent, and its declared `on_exceed`.

A run without a budget does nothing here, so every run recorded before budgets replays as it
ran.

A tree's root with a budget keeps it for the whole tree: each model call of a node below it
reserves from the root first (`reserve_tree_budget`, an Update to the root that also tells it
what the node spent since its last one), and the root grants it while the tree is under its
budget, by the same rules as its own calls (`grant`). So the tree spends past its budget by at
most the one call in flight of each node.
"""

from __future__ import annotations

import asyncio
import json

from temporalio import workflow

from waitstate.schemas import RunState, RunStatus, ToolCall, Usage
from waitstate.schemas.budgets import RAISE_BUDGET, Budget, BudgetState
from waitstate.schemas.tree import (
    RESERVE_TREE_BUDGET,
    BudgetAnswer,
    BudgetAsk,
    TreeBudget,
    TreeReserve,
)

from . import ledger, metrics
from .activity_calls import Failed, call
from .approvals import ApprovalDesk
from .plan import Plan
from .policies import TREE_BUDGET_CALL


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
        # A root's grants and its own checks, one at a time: a raise asks a person once.
        self._turns = asyncio.Lock()

    def model(self) -> str:
        """The model the next call asks: the run's, or the cheaper one it degraded to."""
        spent = self._state.budget
        if spent and spent.degraded_to:
            return spent.degraded_to
        tree = self._state.tree_budget
        if tree is not None and tree.degraded_to:
            return tree.degraded_to
        return self._plan.input.model

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
        link = self._plan.input.tree
        if link is not None and link.budget:
            return await self._reserve()
        budget = self._plan.input.budget
        if budget is None:
            return self._plan.input.model
        async with self._turns:
            spent = self._started(budget)
            self.charge(self.model())
            await self._keep(budget, spent)
            if budget.usd is not None and self.model() not in budget.prices:
                spent.exceeded = True
                raise BudgetExceeded(
                    f"no price for {self.model()} in the budget's table: its dollar budget could "
                    "not be kept"
                )
            return self.model()

    def _started(self, budget: Budget) -> BudgetState:
        if self._state.budget is None:  # the first call: the limits as declared
            self._state.budget = BudgetState(tokens=budget.tokens, usd=budget.usd)
        return self._state.budget

    async def _keep(self, budget: Budget, spent: BudgetState) -> None:
        """Degrade, ask for more, or stop, as the budget declares, from what is spent."""
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

    async def grant(self, ask: BudgetAsk) -> BudgetAnswer:
        """A node's reservation, at the root: count what it spent, and grant its next call
        while the tree is under the budget (degrading it, or asking a person to raise the
        budget, as declared)."""
        budget = self._plan.input.budget
        if budget is None:
            return BudgetAnswer(granted=True)
        async with self._turns:
            spent = self._started(budget)
            tree = self._state.tree_budget = self._state.tree_budget or TreeBudget()
            tree.spent[ask.node] = tree.spent.get(ask.node, Usage()) + ask.spent
            if (price := budget.prices.get(ask.model)) is not None:
                spent.spent_usd += price.cost(ask.spent)
            self.charge(self.model())
            if ask.final:
                return BudgetAnswer(granted=False, spent=spent.line())
            try:
                await self._keep(budget, spent)
            except BudgetExceeded:
                return BudgetAnswer(granted=False, spent=spent.line())
            model = spent.degraded_to or ask.model
            if budget.usd is not None and model not in budget.prices:
                return BudgetAnswer(granted=False, spent=f"no price for {model}: {spent.line()}")
            return BudgetAnswer(granted=True, model=spent.degraded_to, spent=spent.line())

    async def _reserve(self, final: bool = False) -> str:
        """A node's reservation of its next call from its root (with what it spent since its
        last): the model the call asks.

        Raises:
            BudgetExceeded: the root refused it (the tree spent its budget), or could not be
                asked.
        """
        link = self._plan.input.tree
        assert link is not None
        tree = self._state.tree_budget = self._state.tree_budget or TreeBudget()
        tree.asks += 1
        ask = BudgetAsk(
            node=link.line(),
            model=self.model(),
            spent=self._state.usage - tree.reported,
            final=final,
        )
        reserve = TreeReserve(
            root=link.root,
            update_id=f"{workflow.info().workflow_id}/budget-{tree.asks}",
            ask=ask,
        )
        answer = await call(
            RESERVE_TREE_BUDGET,
            reserve,
            result_type=BudgetAnswer,
            summary=f"tree budget: {'final report' if final else 'reserve'}",
            **TREE_BUDGET_CALL,
        )
        if isinstance(answer, Failed):
            raise BudgetExceeded(f"the tree's budget could not be reserved: {answer.message}")
        tree.reported = self._state.usage
        if answer.model is not None and tree.degraded_to is None:
            tree.degraded_to = answer.model
            ledger.step(self._state, "event", "budget", f"the tree goes on with {answer.model}")
        if not answer.granted and not final:
            ledger.step(self._state, "event", "budget", f"the tree's budget: {answer.spent}")
            raise BudgetExceeded(f"the tree's budget is spent: {answer.spent}")
        return self.model()

    async def report_final(self) -> None:
        """A node under its root's budget, as it ends: what its last calls spent."""
        link = self._plan.input.tree
        tree = self._state.tree_budget
        spent = self._state.usage - (tree.reported if tree is not None else Usage())
        if link is None or not link.budget or not (spent.input_tokens or spent.output_tokens):
            return
        try:
            await self._reserve(final=True)
        except BudgetExceeded as err:
            ledger.step(self._state, "event", "budget", str(err))

    def charge(self, model: str) -> None:
        """Count what the run's model calls spent since the last count against the budget:
        every call (its turns, its checkpoints, an MCP server's sampling), its tokens at
        `model`'s price (the model the run asks now)."""
        budget, spent = self._plan.input.budget, self._state.budget
        if budget is None or spent is None:
            return
        usage = self._state.usage
        tree = self._state.tree_budget
        below = tree.descendants() if tree is not None else Usage()
        spent.spent_tokens = usage.input_tokens + usage.output_tokens
        spent.spent_tokens += below.input_tokens + below.output_tokens
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
