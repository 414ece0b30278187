"""What a run may spend on its model calls, and what happens when it has: a budget in tokens, in
money, or both, with a declared `on_exceed` (as an approval declares its `on_timeout`).

The run checks its budget before each model call, from what it has already spent: a call starts
only while the run is under its budget, so a run spends past it by at most the one call that
crossed it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from waitstate.schemas.approvals import ApprovalPolicy
from waitstate.schemas.messages import Usage

OnExceed = Literal["stop", "approve", "degrade"]
# The name a budget's approval request goes by (its "tool"), in notices, pages and the CLI.
RAISE_BUDGET = "raise_budget"
# The finest an amount of dollars is shown: a millionth of a cent.
MAX_PLACES = 8


class ModelPrice(BaseModel):
    """What a model's tokens cost, in US dollars per million tokens: input a prompt cache did
    not serve, input it served (`cached_input`) and input written to it (`cache_write`), both
    at `input` unless given; output."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cached_input: float | None = Field(default=None, ge=0)
    cache_write: float | None = Field(default=None, ge=0)

    def cost(self, usage: Usage) -> float:
        """What `usage` cost, in dollars."""
        uncached = usage.input_tokens - usage.cached_input_tokens - usage.cache_write_input_tokens
        cached = self.input if self.cached_input is None else self.cached_input
        write = self.input if self.cache_write is None else self.cache_write
        per_million = (
            uncached * self.input
            + usage.cached_input_tokens * cached
            + usage.cache_write_input_tokens * write
            + usage.output_tokens * self.output
        )
        return per_million / 1_000_000


class Budget(BaseModel):
    """What a run may spend on its model calls.

    Attributes:
        tokens: Input and output tokens of its model calls, all counted.
        usd: Dollars, by `prices` (a model the table does not price cannot be called under a
            dollar budget: the run stops before the call, saying so).
        prices: The price of each model the run may call, by model spec (`openai:gpt-4.1`).
        on_exceed: `stop` (the run ends `budget_exceeded`, with what it spent), `approve` (a
            person is asked to raise it by as much again, under `approval`; a refusal or a
            request that times out without one stops the run), or `degrade` (at `degrade_at`
            of the budget the run goes on with the cheaper `degrade_to`; at the budget it
            stops).
    """

    tokens: int | None = Field(default=None, ge=1)
    usd: float | None = Field(default=None, gt=0)
    prices: dict[str, ModelPrice] = Field(default_factory=dict)
    on_exceed: OnExceed = "stop"
    degrade_to: str | None = Field(
        default=None, description="With `degrade`: the cheaper model spec the run goes on with."
    )
    degrade_at: float = Field(
        default=0.8, gt=0, le=1, description="With `degrade`: the share of the budget spent."
    )
    approval: ApprovalPolicy = Field(
        default_factory=lambda: ApprovalPolicy(on_timeout="default", default_decision="reject"),
        description="With `approve`: who is asked, how long they have, and what their silence "
        "means (by default: no raise, and the run stops).",
    )

    @model_validator(mode="after")
    def _consistent(self) -> Budget:
        if self.tokens is None and self.usd is None:
            raise ValueError("a budget is in tokens, in usd, or both")
        if self.on_exceed == "degrade" and not self.degrade_to:
            raise ValueError("on_exceed 'degrade' needs degrade_to: the cheaper model spec")
        return self

    def degrades_unpriced(self) -> bool:
        """Whether it would go on with a model its dollar limit has no price for: the run
        would then stop when it degrades, not go on."""
        return (
            self.usd is not None
            and self.on_exceed == "degrade"
            and self.degrade_to is not None
            and self.degrade_to not in self.prices
        )


class BudgetState(BaseModel):
    """Where a run stands against its budget (in its state: `status`, `--json`)."""

    tokens: int | None = Field(default=None, description="Its limit now (raised by approvals).")
    usd: float | None = None
    spent_tokens: int = 0
    spent_usd: float = 0.0
    raised: int = Field(default=0, description="Times a person raised it.")
    degraded_to: str | None = Field(default=None, description="The model it went on with.")
    exceeded: bool = False
    priced: Usage = Field(default_factory=Usage, description="The usage `spent_usd` counts.")

    def share(self) -> float:
        """The largest share of a limit spent (0 with no limit)."""
        shares = [0.0]
        if self.tokens:
            shares.append(self.spent_tokens / self.tokens)
        if self.usd:
            shares.append(self.spent_usd / self.usd)
        return max(shares)

    def line(self) -> str:
        """What it spent of what, in words: `1,204 of 5,000 tokens; $0.0123 of $1.00`."""
        parts = []
        if self.tokens is not None:
            parts.append(f"{self.spent_tokens:,} of {self.tokens:,} tokens")
        if self.usd is not None:
            spent, limit = dollars(self.spent_usd, self.usd)
            parts.append(f"{spent} of {limit}")
        return "; ".join(parts)


def dollars(spent: float, limit: float) -> tuple[str, str]:
    """`spent` and `limit` in dollars: the limit as it was given, to the cent at least (`$1.00`,
    `$0.005`); what was spent to a hundredth of a cent at least, and finer where that is needed
    for the two to compare as the amounts do (spent past the limit never reads as under it)."""
    given = _given_places(limit)
    places = max(4, given)
    while places < MAX_PLACES and (round(spent, places) >= round(limit, places)) != (
        spent >= limit
    ):
        places += 1
    return f"${spent:.{places}f}", f"${limit:.{max(2, given)}f}"


def _given_places(amount: float) -> int:
    """The decimal places `amount` was given with (0.005: 3), at most MAX_PLACES."""
    for places in range(MAX_PLACES):
        if round(amount, places) == amount:
            return places
    return MAX_PLACES
