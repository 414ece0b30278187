"""Jobs that ask hostile questions, and the scripts that start them: an MCP task that asks in
whatever schema its run's task names (tests/mcp/reports_server.py's `ask_with_schema`), and a
run that exports while another's question is attacked.

Served in the test's process (`make_worker`), or by `python worker.py` in a process of its own
(`WAITSTATE_APPS=tests.workflows.hostile_app:app`, with `DEMO_SYSTEMS_URL` for the export).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from examples.demo.exports import ExportService, export_tool
from waitstate import (
    App,
    Message,
    ToolCall,
    ToolDefinition,
    ToolSpec,
)


def _call(turn: int, name: str, arguments: dict[str, object]) -> Message:
    call = ToolCall(id=f"call_{turn}", name=name, arguments=json.dumps(arguments))
    return Message(role="assistant", tool_calls=[call])


def _task(messages: Sequence[Message]) -> str:
    return next((m.content for m in messages if m.role == "user"), "")


def ask_in_the_tasks_schema(
    messages: Sequence[Message], tools: Sequence[ToolDefinition]
) -> Message:
    """Calls the MCP server's `ask_with_schema` with the run's task as the schema; answers with
    the result it got."""
    results = [m for m in messages if m.role == "tool"]
    if not results:
        return _call(0, "reports__ask_with_schema", {"schema": _task(messages)})
    return Message(role="assistant", content=f"got: {results[-1].content}")


def export_once(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Exports Q3's transactions (a job that completes by webhook); answers with the result."""
    results = [m for m in messages if m.role == "tool"]
    if not results:
        return _call(0, "start_export", {"dataset": "transactions", "period": "2025-Q3"})
    return Message(role="assistant", content=f"got: {results[-1].content}")


@dataclass
class _Deps:
    http: httpx.AsyncClient

    async def aclose(self) -> None:
        await self.http.aclose()


def _export(deps: _Deps) -> list[ToolSpec]:
    url = os.environ.get("DEMO_SYSTEMS_URL", "http://127.0.0.1:8790").rstrip("/")
    return [export_tool(ExportService(deps.http, url))]


app = App(
    scripts={
        "ask-schema": ask_in_the_tasks_schema,
        "export-once": export_once,
    },
    tools=_export,
    deps=lambda: _Deps(httpx.AsyncClient(timeout=httpx.Timeout(30.0))),
)
