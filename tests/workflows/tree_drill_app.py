"""The agent tree of `tests/workflows/test_tree_drill.py`: a lead over teams over researchers,
whose leaves wait for a webhook (an export), a poll (an enrichment) or a person's approval,
over the demo systems at TREE_DRILL_SYSTEMS_URL.

The leads are the scripted `tree-lead` of `tests/workflows/tree_app.py` (fan-out from the task's
`fan=N`, round robin over their sub-agents); each leaf makes its one call, then answers with
what it got.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import httpx

from examples.demo.app import DemoDeps
from examples.demo.catalog import all_tools
from tests.mcp.mcp_app import one_call
from tests.workflows.tree_app import lead
from waitstate import Agent, App, Message, ToolDefinition
from waitstate.tools import ToolSpec

LEAVES = ["drill-exporter", "drill-enricher", "drill-asker", "drill-noter"]


def _deps() -> DemoDeps:
    return DemoDeps(httpx.AsyncClient(timeout=10), os.environ["TREE_DRILL_SYSTEMS_URL"])


def _tools(deps: DemoDeps) -> Sequence[ToolSpec]:
    return all_tools(deps.http, deps.systems_url)


def _noter(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    return Message(role="assistant", content="noted")


app = App(
    agents=[
        Agent("drill-lead", model="scripted:drill-lead", sub_agents=["drill-team"]),
        Agent("drill-team", model="scripted:drill-lead", sub_agents=LEAVES),
        Agent("drill-exporter", model="scripted:drill-export", tools=["start_export"]),
        Agent("drill-enricher", model="scripted:drill-enrich", tools=["enrich_dataset"]),
        Agent("drill-asker", model="scripted:drill-ask", tools=["request_approval"]),
        Agent("drill-noter", model="scripted:drill-note"),
        # 50 children at once, each waiting (a webhook that never comes, or a person).
        Agent(
            "drill-waiters",
            model="scripted:drill-lead",
            sub_agents=["drill-exporter", "drill-asker"],
            max_children=50,
        ),
    ],
    tools=_tools,
    deps=_deps,
    scripts={
        "drill-lead": lead,
        "drill-export": one_call("start_export", {"dataset": "transactions", "period": "2025-Q3"}),
        "drill-enrich": one_call("enrich_dataset", {"dataset": "transactions"}),
        "drill-ask": one_call("request_approval", {"action": "publish", "reason": "a drill"}),
        "drill-note": _noter,
    },
)
