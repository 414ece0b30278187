"""Wrong: an agent's budget degrades to a model nobody provides, and another's dollar budget
degrades to a model it has no price for."""

from __future__ import annotations

from waitstate import Agent, App
from waitstate.schemas.budgets import Budget, ModelPrice

PRICE = ModelPrice(input=1.0, output=2.0)

unknown = App(
    agents=[
        Agent(
            "saver",
            model="scripted:demo",
            budget=Budget(tokens=1_000, on_exceed="degrade", degrade_to="delphi:pythia-1"),
        )
    ]
)
unpriced = App(
    agents=[
        Agent(
            "spender",
            model="scripted:demo",
            budget=Budget(
                usd=1.0,
                prices={"scripted:demo": PRICE},
                on_exceed="degrade",
                degrade_to="scripted:echo",
            ),
        )
    ]
)
