"""The agent trees of the chaos suite's tree rows (chaos.trees), served by the suite's workers
with the rest of chaos.app.

A lead fans out to sub-agents in one turn (`fan=N` in its task, round robin over its sub-agents),
then answers with one line per result it saw (`<node>: <status>`), so the suite can tell from its
answer alone whether each child's result reached the lead's model once. Its sub-agents are the
demo's scripted leaves: one answers at once, one waits for two exports' webhooks, one polls an
enrichment, one waits for a person's approval. A three-level tree (top, teams, leaves) is what
the cancel row cancels while its leaves wait.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from waitstate import SCRIPTED_BANNER, Agent, Message, ToolDefinition
from waitstate.schemas.budgets import Budget
from waitstate.schemas.tree import SUB_AGENT_PREFIX
from waitstate.testing.trees import fan_out

LEAD_SCRIPT = "chaos-tree-lead"
# The leaves, by what they do until they answer.
QUICK = "chaos-tree-quick"  # answers at once
EXPORTER = "chaos-tree-export"  # two exports (webhooks)
ENRICHER = "chaos-tree-enrich"  # an enrichment (polled)
ASKER = "chaos-tree-asker"  # a person's approval
LEAD = "chaos-tree-lead"  # fans out to every leaf
TOP = "chaos-tree-top"  # fans out to teams, each to an exporter and an asker
TEAM = "chaos-tree-team"
# The budget row's: a lead under a tree budget, whose spenders call the model until it is spent.
BUDGET_LEAD = "chaos-tree-budget-lead"
SPENDER = "chaos-tree-spender"
TREE_BUDGET_TOKENS = 2_500
# The line the lead's answer opens with: `combined N`, then one line per result.
COMBINED = "combined"
_FAN = re.compile(r"fan=(\d+)")


def _task(messages: Sequence[Message]) -> str:
    return next((m.content for m in messages if m.role == "user"), "")


def _said(content: str) -> tuple[str, str]:
    """A sub-agent call's result as (node, status): its JSON's `agent` and `status`, or the
    whole result for a refusal (which names no node)."""
    try:
        outcome = json.loads(content)
    except ValueError:
        return "refused", content.replace("\n", " ")[:120]
    if not isinstance(outcome, dict):
        return "unreadable", content[:120]
    return str(outcome.get("agent", "unknown")), str(outcome.get("status", "unknown"))


def lead_script(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Calls its sub-agent tools `fan=N` times in one turn (round robin), each with its task and
    the part's number; then answers `combined K` and one line `<node>: <status>` per result it
    was given (a result given twice is two lines)."""
    task = _task(messages)
    agents = [t.name for t in tools if t.name.startswith(SUB_AGENT_PREFIX)]
    results = [m for m in messages if m.role == "tool"]
    rebuilt = any(m.role == "user" and m.content.startswith("Task: ") for m in messages[1:])
    if not results and not rebuilt and agents:
        return fan_out(task, agents, fan_of(task))
    lines = [": ".join(_said(r.content)) for r in results]
    if rebuilt:  # a context rebuilt after a long wait: the results are lines of its message
        lines.append("(context rebuilt: results not listed)")
    body = "\n".join([f"{SCRIPTED_BANNER} {COMBINED} {len(results)}", *lines])
    return Message(role="assistant", content=body)


def fan_of(task: str) -> int:
    """The fan-out a lead's task asks for (`fan=N`; 2 if it says none)."""
    found = _FAN.search(task)
    return int(found.group(1)) if found else 2


def listed(answer: str) -> tuple[int | None, list[tuple[str, str]]]:
    """What a lead's answer says: the count it opens with, and its (node, status) lines."""
    lines = answer.splitlines()
    head = lines[0] if lines else ""
    count = re.search(rf"{COMBINED} (\d+)$", head)
    said = [tuple(line.split(": ", 1)) for line in lines[1:] if ": " in line]
    return (int(count.group(1)) if count else None), [(n, s) for n, s in said]


AGENTS = [
    Agent(QUICK, model="scripted:echo"),
    Agent(EXPORTER, model="scripted:two-exports", tools=["start_export"]),
    Agent(ENRICHER, model="scripted:enrich", tools=["enrich_dataset"]),
    Agent(ASKER, model="scripted:ask-first", tools=["request_approval"]),
    Agent(LEAD, model=f"scripted:{LEAD_SCRIPT}", sub_agents=[QUICK, EXPORTER, ENRICHER, ASKER]),
    Agent(TOP, model=f"scripted:{LEAD_SCRIPT}", sub_agents=[TEAM]),
    Agent(TEAM, model=f"scripted:{LEAD_SCRIPT}", sub_agents=[EXPORTER, ASKER]),
    Agent(SPENDER, model="scripted:forever", tools=["calculate"], max_turns=60),
    Agent(
        BUDGET_LEAD,
        model=f"scripted:{LEAD_SCRIPT}",
        sub_agents=[SPENDER],
        budget=Budget(tokens=TREE_BUDGET_TOKENS),
    ),
]
SCRIPTS = {LEAD_SCRIPT: lead_script}
