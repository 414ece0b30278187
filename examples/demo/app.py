"""The demo as an app, declared only through waitstate's public API: what a worker serves when
no app is named (`python worker.py --app examples.demo.app:app` says so explicitly)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

import httpx

from examples.demo.catalog import TOOL_NAMES, all_tools
from examples.demo.purges import PurgeService, purge_tool
from examples.demo.research import RESEARCH_AGENTS, payment_history_tool
from examples.demo.triage import TRIAGE, triage_script, triage_valid
from waitstate import (
    SCRIPTED_BANNER,
    Agent,
    App,
    InputPolicy,
    McpServer,
    Message,
    ToolCall,
    ToolDefinition,
)


@dataclass
class DemoDeps:
    """One connection pool for every demo tool, and where the demo systems are."""

    http: httpx.AsyncClient
    systems_url: str

    async def aclose(self) -> None:
        await self.http.aclose()


def _deps() -> DemoDeps:
    url = os.environ.get("DEMO_SYSTEMS_URL", "http://127.0.0.1:8790")
    return DemoDeps(httpx.AsyncClient(timeout=httpx.Timeout(30.0)), url.rstrip("/"))


def report_script(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """The reporter, scripted: builds the report (an MCP task), deletes the draft dataset (a
    destructive MCP tool: a person approves the call first, and the task asks them to confirm
    while it runs), then answers."""
    done = {m.name: m.content for m in messages if m.role == "tool"}
    task = next((m.content for m in messages if m.role == "user"), "")
    region = "amer" if "amer" in task.lower() else "emea"
    steps = [
        ("reports__build_report", {"region": region}),
        ("reports__delete_dataset", {"name": f"{region}-draft"}),
    ]
    for name, arguments in steps:
        if name not in done:
            call = ToolCall(id=f"call_{name}", name=name, arguments=json.dumps(arguments))
            return Message(role="assistant", tool_calls=[call])
    summary = "; ".join(f"{name}: {content}" for name, content in done.items())
    return Message(role="assistant", content=f"{SCRIPTED_BANNER} {summary}")


def build_script(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Builds the report for the region the task ends with (an MCP task), then answers with
    what became of it."""
    done = [m for m in messages if m.role == "tool"]
    if done:
        return Message(role="assistant", content=f"{SCRIPTED_BANNER} {done[-1].content}")
    task = next((m.content for m in messages if m.role == "user"), "")
    region = task.split()[-1] if task.split() else "emea"
    arguments = json.dumps({"region": region})
    call = ToolCall(id="call_build", name="reports__build_report", arguments=arguments)
    return Message(role="assistant", tool_calls=[call])


app = App(
    agents=[
        Agent(
            "demo",
            instructions=(
                "You are a careful operations assistant. Use the tools you are given when they "
                "help; when a tool returns an error, read it and correct your call. Answer the "
                "task plainly when you are done."
            ),
            tools=list(TOOL_NAMES),
        ),
        Agent(
            "reporter",
            instructions="You build sales reports with the reports server's tools.",
            model="scripted:mcp-report",
            tools=["reports__build_report", "reports__delete_dataset"],
        ),
        # `make tree-demo`: a lead and its researchers (examples/demo/research.py).
        *RESEARCH_AGENTS,
        # A claim's triage, answered as JSON (examples/demo/triage.py).
        TRIAGE,
    ],
    # The demo's MCP server (examples/mcp_server.py), which `make mcp-demo` starts. Its
    # questions go to a person; unanswered for a minute (`DEMO_MCP_ANSWER_SECONDS`), the task
    # is told no (the deletion then keeps the dataset).
    mcp_servers=[
        McpServer(
            "reports",
            url=os.environ.get("DEMO_MCP_URL", "http://127.0.0.1:8791/mcp"),
            input=InputPolicy(
                timeout=timedelta(seconds=float(os.environ.get("DEMO_MCP_ANSWER_SECONDS", "60"))),
                on_timeout="decline",
            ),
        )
    ],
    scripts={"mcp-report": report_script, "mcp-build": build_script, "triage": triage_script},
    # What `waitstate eval` scores forks of the demo's runs by.
    scorers={"triage_valid": triage_valid},
    tools=lambda deps: [
        *all_tools(deps.http, deps.systems_url),
        # In no agent's list: runs of the demo agent never purge; other runs name it.
        purge_tool(PurgeService(deps.http, deps.systems_url)),
        # The payments researcher's (a person approves each read).
        payment_history_tool(deps.http, deps.systems_url),
    ],
    deps=_deps,
)
