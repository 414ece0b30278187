"""Figure 11's agents (`WAITSTATE_APPS=bench.tree_app:app` in our side's worker): a lead that
fans out to its sub-agent in one turn and a leaf that answers at once, both scripted (offline,
no model server).

The lead reads its fan-out from its task (`fan=N`): it calls `agent_bench-leaf` N times in its
first turn, each with its task and the part's number, then answers with what each child said.
The floor's tree (bench/floor_tree.py) moves the same strings (bench/tree_text.py).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from bench.tree_text import combined, fan_of, leaf_answer, part_task
from waitstate import Agent, App, Message, ToolCall, ToolDefinition
from waitstate.schemas.tree import sub_agent_tool

LEAD = "bench-lead"
LEAF = "bench-leaf"


def _task(messages: Sequence[Message]) -> str:
    return next((m.content for m in messages if m.role == "user"), "")


def lead(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Fans out to its sub-agent once, `fan=N` calls in one turn, then answers."""
    task = _task(messages)
    results = [m for m in messages if m.role == "tool"]
    if not results:
        calls = [
            ToolCall(
                id=f"call_{i}",
                name=sub_agent_tool(LEAF),
                arguments=json.dumps({"task": part_task(task, i + 1)}),
            )
            for i in range(fan_of(task))
        ]
        return Message(role="assistant", tool_calls=calls)
    answers = [str(json.loads(r.content).get("answer") or r.content) for r in results]
    return Message(role="assistant", content=combined(answers))


def leaf(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Answers at once with its task's part."""
    return Message(role="assistant", content=leaf_answer(_task(messages)))


app = App(
    agents=[
        Agent(LEAD, model="scripted:bench-lead", sub_agents=[LEAF], max_children=100),
        Agent(LEAF, model="scripted:bench-leaf", description="Takes notes on one part."),
    ],
    scripts={"bench-lead": lead, "bench-leaf": leaf},
)
