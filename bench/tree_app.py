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
from waitstate.schemas.tree import SUB_AGENT_PREFIX

LEAD = "bench-lead"
LEAF = "bench-leaf"
# Figure 12's: a lead over children that each wait for a person's approval.
WAITING_LEAD = "bench-waiting-lead"
WAITER = "bench-waiter"


def _task(messages: Sequence[Message]) -> str:
    return next((m.content for m in messages if m.role == "user"), "")


def lead(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Fans out to its sub-agent once, `fan=N` calls in one turn, then answers."""
    task = _task(messages)
    results = [m for m in messages if m.role == "tool"]
    if not results:
        child = next(t.name for t in tools if t.name.startswith(SUB_AGENT_PREFIX))
        calls = [
            ToolCall(
                id=f"call_{i}",
                name=child,
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


def waiter(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Asks a person's approval, then answers with the decision."""
    results = [m for m in messages if m.role == "tool"]
    if results:
        return Message(role="assistant", content=results[-1].content)
    action = json.dumps({"action": "publish", "reason": _task(messages)})
    call = ToolCall(id="call_ask", name="request_approval", arguments=action)
    return Message(role="assistant", tool_calls=[call])


app = App(
    agents=[
        Agent(LEAD, model="scripted:bench-lead", sub_agents=[LEAF], max_children=100),
        Agent(LEAF, model="scripted:bench-leaf", description="Takes notes on one part."),
        Agent(WAITING_LEAD, model="scripted:bench-lead", sub_agents=[WAITER], max_children=100),
        Agent(
            WAITER,
            model="scripted:bench-waiter",
            tools=["request_approval"],
            description="Asks a person first.",
        ),
    ],
    scripts={"bench-lead": lead, "bench-leaf": leaf, "bench-waiter": waiter},
)
