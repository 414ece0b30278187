"""Agent trees for `tests/workflows/test_tree.py`: a lead that starts its sub-agents, a team
lead that starts its own, and leaves that answer or wait for a person.

The scripted lead reads its fan-out from its task (`fan=N`, 2 if none): it calls its sub-agent
tools N times in one turn (round robin), each with its task and the part's number, then answers
with what each child said.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from tests.script_steps import call, tool_results
from waitstate import Agent, App, Message, ToolDefinition, tool
from waitstate.providers.scripted import SCRIPTED_BANNER
from waitstate.schemas.budgets import Budget
from waitstate.schemas.tree import SUB_AGENT_PREFIX
from waitstate.testing.trees import fan_out


def _task(messages: Sequence[Message]) -> str:
    return next((m.content for m in messages if m.role == "user"), "")


def lead(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Fans out to its sub-agents once, then answers with what each said."""
    task = _task(messages)
    agents = [t.name for t in tools if t.name.startswith(SUB_AGENT_PREFIX)]
    results = tool_results(messages)
    if not results and agents:
        found = re.search(r"fan=(\d+)", task)
        return fan_out(task, agents, int(found.group(1)) if found else 2)
    said = []
    for result in results:
        outcome = json.loads(result.content) if result.content.startswith("{") else {}
        said.append(str(outcome.get("answer") or outcome.get("status") or result.content))
    return Message(role="assistant", content=f"{SCRIPTED_BANNER} combined {len(said)}: {said}")


def leaf(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Answers at once with its task's last part."""
    return Message(role="assistant", content=f"notes on {_task(messages).split(' > ')[-1]}")


def long_leaf(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Answers at once, at length (3 KB)."""
    return Message(role="assistant", content="long notes " + "x" * 3_000)


def asking_leaf(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Asks a person's approval first, then answers with the decision."""
    results = tool_results(messages)
    if not results:
        return call(0, "request_approval", {"action": "publish", "reason": "a test"})
    return Message(role="assistant", content=f"decided: {results[-1].content}")


@tool
async def tick(n: int) -> int:
    """Count one more."""
    return n + 1


def spender(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Never answers: calls `tick` every turn (for max_turns), spending more each turn."""
    return call(len(tool_results(messages)), "tick", {"n": len(messages)})


# A tree of 10 spenders under a root budget of 6,000 tokens: spent long before max_turns.
TREE_BUDGET_TOKENS = 6_000

app = App(
    agents=[
        Agent("lead", model="scripted:tree-lead", sub_agents=["researcher"]),
        Agent("deep-lead", model="scripted:tree-lead", sub_agents=["team"], max_depth=2),
        Agent("team", model="scripted:tree-lead", sub_agents=["researcher"]),
        Agent("too-deep", model="scripted:tree-lead", sub_agents=["team"], max_depth=1),
        Agent("narrow-lead", model="scripted:tree-lead", sub_agents=["researcher"], max_children=2),
        Agent("researcher", model="scripted:tree-leaf", description="Finds notes on a topic."),
        Agent("long-lead", model="scripted:tree-lead", sub_agents=["long-researcher"]),
        Agent("long-researcher", model="scripted:tree-long-leaf"),
        Agent("asking-lead", model="scripted:tree-lead", sub_agents=["asker"]),
        Agent("asker", model="scripted:tree-asking-leaf", tools=["request_approval"]),
        Agent(
            "budget-lead",
            model="scripted:tree-lead",
            sub_agents=["spender"],
            budget=Budget(tokens=TREE_BUDGET_TOKENS),
        ),
        Agent("spender", model="scripted:tree-spender", tools=[tick], max_turns=40),
    ],
    scripts={
        "tree-lead": lead,
        "tree-leaf": leaf,
        "tree-long-leaf": long_leaf,
        "tree-asking-leaf": asking_leaf,
        "tree-spender": spender,
    },
)
