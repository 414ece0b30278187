"""Scripts that call the MCP test server's tools, as an app registers them, and a look at
what the server's tasks did."""

from __future__ import annotations

import json
from collections.abc import Sequence

from tests.script_steps import answer_then_wait, call, tool_results
from waitstate import App, McpServer, Message, Script, ToolCall, ToolDefinition
from waitstate.mcp.results import tool_result_text


def add_numbers(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Adds 2 and 3 on the reports server, then answers with what it saw."""
    results = tool_results(messages)
    if not results:
        return call(0, "reports__add", {"a": 2, "b": 3})
    offered = ",".join(sorted(t.name for t in tools))
    return Message(role="assistant", content=f"sum={results[0].content} offered={offered}")


def tour(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Calls a failing tool, one with structured output and a read-only one with a large
    result, one a turn, then answers with each result (and whether it was an error)."""
    plan: list[tuple[str, dict[str, object]]] = [
        ("reports__explode", {"reason": "disk full"}),
        ("reports__summarize", {"region": "emea"}),
        ("reports__big_table", {"rows": 600}),
    ]
    results = tool_results(messages)
    if len(results) < len(plan):
        name, arguments = plan[len(results)]
        return call(len(results), name, arguments)
    lines = [f"{m.name} error={m.is_error}: {' '.join(m.content.split())[:80]}" for m in results]
    return Message(role="assistant", content="\n".join(lines))


def delete(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Deletes a dataset (a destructive tool), then answers with the result."""
    results = tool_results(messages)
    if not results:
        return call(0, "reports__delete_dataset", {"name": "q3-drafts"})
    return Message(role="assistant", content=f"result: {results[0].content}")


def one_call(name: str, arguments: dict[str, object]) -> Script:
    """A script that calls `name` once, then answers with the result it got."""

    def script(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
        results = tool_results(messages)
        if not results:
            return call(0, name, arguments)
        return Message(role="assistant", content=f"got: {results[-1].content}")

    return script


def two_counts(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Counts to 240 and to 120 at once (two tasks polled side by side), then answers with
    both results."""
    results = tool_results(messages)
    if not results:
        calls = [
            ToolCall(id=f"call_{to}", name="reports__count", arguments=json.dumps({"to": to}))
            for to in (240, 120)
        ]
        return Message(role="assistant", tool_calls=calls)
    return Message(role="assistant", content="\n".join(m.content for m in results))


def on_table(tool: str) -> Script:
    """A script that calls `tool` once on the table its task names, then answers with the
    result it got."""

    def script(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
        results = tool_results(messages)
        if not results:
            table = next(m.content for m in messages if m.role == "user")
            return call(0, tool, {"name" if tool.endswith("drop_table") else "table": table})
        return Message(role="assistant", content=f"got: {results[-1].content}")

    return script


def publish_answering(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Publishes a report; answers the task's question itself (`answer_question`, when the
    server's policy gives questions to the model) with the channel `email`; then waits for
    the operation and answers with every result it saw."""
    results = tool_results(messages)
    if not results:
        return call(0, "reports__publish_report", {"region": "emea"})
    answering = answer_then_wait(results, "reports__publish_report", {"channel": "email"})
    if answering is not None:
        return answering
    updates = [m.content for m in messages if m.role == "user" and "Operation update" in m.content]
    lines = [f"{m.name}: {m.content}" for m in results] + updates
    return Message(role="assistant", content="\n".join(lines))


def summary_by_model(tool: str) -> Script:
    """A script that calls `tool` once on `q3`, then answers with the result it got; asked
    with no tools offered (an MCP server's sampling request, answered by the run's model), it
    writes the summary it is asked for."""

    def script(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
        if not tools:  # the server's prompt, not the run's conversation
            asked = messages[-1].content
            return Message(role="assistant", content=f"{asked} in one line ({len(messages)})")
        return one_call(tool, {"topic": "q3"})(messages, tools)

    return script


async def calls_made(url: str) -> list[str]:
    """Every call the plain server was sent (its `calls` tool)."""
    server = McpServer("tables", url=url)
    async with server.connect() as client:
        result = await client.call_tool("calls", {})
    return list(json.loads(tool_result_text(result)))


async def task_events(url: str) -> dict[str, int]:
    """What the server's tasks did (its `events` tool)."""
    server = McpServer("reports", url=url)
    async with server.connect() as client:
        result = await client.call_tool("events", {})
    return dict(json.loads(tool_result_text(result)))


async def task_events_since(url: str, before: dict[str, int]) -> dict[str, int]:
    """What the server's tasks did since `task_events` answered `before`: each event's new
    count, for the events that had any."""
    after = await task_events(url)
    return {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


app = App(
    scripts={
        "mcp-add": add_numbers,
        "mcp-tour": tour,
        "mcp-delete": delete,
        "mcp-render": one_call("reports__render_report", {"region": "emea", "seconds": 2}),
        "mcp-render-slow": one_call("reports__render_report", {"region": "emea", "seconds": 8}),
        "mcp-export": one_call("reports__slow_export", {"region": "amer"}),
        "mcp-broken": one_call("reports__broken_job", {"region": "apac"}),
        "mcp-shout": one_call("local__shout", {"text": "quiet please"}),
        # Two minutes of `step k/240`: long enough to be watched on a loaded machine.
        "mcp-count-long": one_call("reports__count", {"to": 240, "seconds": 0.5}),
        "mcp-two-counts": two_counts,
        "mcp-drop-table": on_table("tables__drop_table"),
        "mcp-delete-rows": on_table("tables__delete_rows"),
        "mcp-count-rows": on_table("tables__count_rows"),
        "mcp-local-count": one_call("local__count", {"to": 3, "seconds": 0.5}),
        # Ten minutes: a worker is restarted meanwhile.
        "mcp-local-count-long": one_call("local__count", {"to": 600, "seconds": 1.0}),
        "mcp-publish": one_call("reports__publish_report", {"region": "emea"}),
        "mcp-publish-answering": publish_answering,
        "mcp-summary-rounds": summary_by_model("reports__summary_by_model"),
        "mcp-summary-task": summary_by_model("reports__summary_task"),
        # A plain call (no task) that asks in rounds: two questions, or roots for ever.
        "mcp-budget": one_call("reports__approve_budget", {"team": "data"}),
        "mcp-roots-forever": one_call("reports__list_roots_forever", {}),
    }
)
