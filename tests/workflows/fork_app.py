"""A shop for `tests/workflows/test_forks.py`: an agent that looks a customer up, charges them
and says what it did, a second script that charges another amount (a changed model), and a lead
that sends two of them to work (a tree). Every real call of a tool is counted in `CALLED`, so a
test sees whether a fork reached the "external system"."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncIterator, Sequence

from temporalio.testing import WorkflowEnvironment

from tests.helpers import make_worker
from tests.script_steps import call, tool_results
from waitstate import Agent, App, EvalCase, Message, ToolDefinition, tool
from waitstate.apps import load_apps
from waitstate.client import WaitstateClient
from waitstate.providers.scripted import SCRIPTED_BANNER
from waitstate.schemas.tree import SUB_AGENT_PREFIX
from waitstate.testing.trees import fan_out

APP = "tests.workflows.fork_app:app"
# Every real call of the shop's tools: (tool, arguments).
CALLED: list[tuple[str, str]] = []


@tool
async def lookup(customer: str) -> dict[str, object]:
    """Look a customer up: their balance."""
    CALLED.append(("lookup", customer))
    return {"customer": customer, "balance": 100 + len(customer)}


def _charge_stub(args: object) -> dict[str, object]:
    return {"charged": getattr(args, "amount", None), "stub": True}


@tool(stub=_charge_stub)
async def charge(customer: str, amount: int) -> dict[str, object]:
    """Charge a customer an amount."""
    CALLED.append(("charge", f"{customer} {amount}"))
    return {"customer": customer, "charged": amount, "receipt": f"r-{customer}-{amount}"}


def _customer(messages: Sequence[Message]) -> str:
    task = next((m.content for m in messages if m.role == "user"), "")
    found = re.search(r"customer=(\w+)", task)
    return found.group(1) if found else "nobody"


def _shop(amount: int) -> object:
    def script(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
        """Looks the customer up, charges them `amount`, then says what became of it."""
        customer = _customer(messages)
        results = tool_results(messages)
        if not results:
            return call(0, "lookup", {"customer": customer})
        if len(results) == 1:
            return call(1, "charge", {"customer": customer, "amount": amount})
        said = json.loads(results[-1].content) if results[-1].content.startswith("{") else {}
        outcome = said.get("receipt") or said.get("charged") or results[-1].content
        return Message(role="assistant", content=f"{SCRIPTED_BANNER} {customer}: {outcome}")

    return script


def lead(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Sends two shoppers to work at once, then answers with what each said."""
    task = next((m.content for m in messages if m.role == "user"), "")
    agents = [t.name for t in tools if t.name.startswith(SUB_AGENT_PREFIX)]
    results = tool_results(messages)
    if not results:
        return fan_out(task, agents, 2)
    said = [json.loads(r.content).get("answer", r.content) for r in results]
    return Message(role="assistant", content=f"{SCRIPTED_BANNER} both: {said}")


def _chatter(prefix: str) -> object:
    def script(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
        """A thread's: a message naming `customer=X` gets X looked up, then the balance told;
        any other, an echo."""
        last = messages[-1]
        if last.role == "tool":
            return Message(role="assistant", content=f"{prefix}balance {last.content}")
        found = re.search(r"customer=(\w+)", last.content)
        if found:
            return call(len(messages), "lookup", {"customer": found.group(1)})
        return Message(role="assistant", content=f"{prefix}re: {last.content}")

    return script


def charged_ten(case: EvalCase) -> tuple[bool, str]:
    """The fork charged what the original did: 10."""
    answer = case.new_answer or ""
    return answer.endswith("-10"), answer[-40:]


app = App(
    agents=[
        Agent("shop", model="scripted:shop", tools=[lookup, charge]),
        Agent("shop-lead", model="scripted:shop-lead", sub_agents=["shop"]),
        Agent("desk", model="scripted:chatter", tools=[lookup]),
    ],
    scripts={  # type: ignore[arg-type]
        "shop": _shop(10),
        "shop-more": _shop(20),
        "shop-lead": lead,
        "chatter": _chatter(""),
        "chatter-v2": _chatter("v2 "),
    },
    scorers={"charged_ten": charged_ten},
)


@contextlib.asynccontextmanager
async def serving(env: WorkflowEnvironment, task_queue: str) -> AsyncIterator[WaitstateClient]:
    """A client of `env`, while a worker serves the shop on `task_queue`."""
    async with make_worker(env.client, task_queue, apps=load_apps([APP])):
        yield WaitstateClient(env.client, task_queue=task_queue)
